"""The training view's settings: the registry's declaration (``training``'s :class:`Setup`).

:func:`make_setup` validates by those declarations (the registry's own validator), so a bad
value is refused in the same words everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from normlab.experiments.base.params import Parameter, make_params, parameters_of
from normlab.experiments.training import Params, Setup

PARAMETERS: tuple[Parameter, ...] = parameters_of(Setup)
"""The declared parameters: what every face generates its flags, schema and widgets from."""
GROUPS: dict[str, tuple[str, ...]] = {
    "data": ("dataset", "noise", "points", "test_frac", "seed"),
    "network": ("depth", "width", "activation", "init", "norm", "bias"),
    "training": ("optimizer", "lr", "batch_size"),
}
"""The parameters by what they set, in :data:`PARAMETERS`' order; two runs compared side by
side share the ``data`` ones (the same points)."""
assert [n for g in GROUPS.values() for n in g] == [p.name for p in PARAMETERS]


def make_setup(values: Mapping[str, object]) -> Setup:
    """Validate ``values`` by their declarations and build the :class:`Setup`.

    Raises :class:`~normlab.experiments.ParameterError` (a value out of range, an unknown
    name, a batch of one under BatchNorm) or :class:`~normlab.experiments.ParameterTypeError`,
    naming the parameter.

    >>> make_setup({"depth": 5}).depth
    5
    >>> make_setup({"depth": 0})
    Traceback (most recent call last):
    ...
    normlab.experiments.base.params.ParameterError: parameter 'depth': 0 is not allowed, use an integer in [1, 12]
    """  # noqa: E501
    setup: Setup = make_params(Setup, values, "train")
    return setup


STEPS = dataclasses.replace(
    next(p for p in parameters_of(Params) if p.name == "steps"), default=300, max=100_000
)
"""The number of steps of a finished run on one's own machine (``normlab train --steps``) and
of the text of its code (:func:`script`): the registry's declaration of ``steps``, longer; a run
that the lab answers (the ``training`` experiment) stays within that experiment's bound and
cost."""
