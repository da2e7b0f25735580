"""The training view's settings, declared once: every face's flags, schema and widgets.

:class:`Setup` declares its fields with :func:`~normlab.experiments.base.param`, as an
experiment declares its ``Params``; :func:`make_setup` validates by those declarations (the
registry's own validator), so a bad value is refused in the same words everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from normlab.experiments.base import (
    Parameter,
    ParameterError,
    make_params,
    param,
    parameters_of,
    seed_param,
)
from normlab.models import NORMS

DATASETS = ("moons", "circles", "xor", "spiral", "blobs")
ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu", "linear")
INITS = ("zeros", "constant", "small", "large", "xavier", "he", "orthogonal", "lsuv", "default")
OPTIMIZERS = ("sgd", "momentum", "adam")


@dataclass(frozen=True)
class Setup:
    """One training run's settings: the data, the network, the training (see :data:`PARAMETERS`)."""

    dataset: str = param("moons", "the points to classify", choices=DATASETS)
    noise: float = param(
        0.2, "std of the Gaussian noise on every point (a blob's std is 0.3 plus it)", min=0.0,
        max=1.0, step=0.01,
    )  # fmt: skip
    points: int = param(200, "number of points, train and test", min=20, max=2000, step=10)
    test_frac: float = param(0.2, "fraction of the points held out", min=0.0, max=0.5, step=0.05)
    seed: int = seed_param()
    depth: int = param(3, "hidden blocks Linear -> [norm] -> activation", min=1, max=12, step=1)
    width: int = param(16, "units per hidden block", min=1, max=256, step=1)
    activation: str = param("relu", "the hidden blocks' nonlinearity", choices=ACTIVATIONS)
    init: str = param(
        "he", "how every Linear weight starts (biases 0; default: PyTorch's own)", choices=INITS
    )
    norm: str = param("none", "normalization before each activation", choices=NORMS)
    bias: bool = param(True, "give every Linear a bias")
    optimizer: str = param("sgd", "sgd, sgd with momentum 0.9, or Adam", choices=OPTIMIZERS)
    lr: float = param(0.3, "learning rate", min=1e-4, max=10.0, step=1e-4)
    batch_size: int = param(
        0, "points per step (0: the whole training set, as the seeds train)", min=0, max=2000,
        step=1,
    )  # fmt: skip

    @classmethod
    def from_params(cls, values: Mapping[str, object]) -> Setup:
        """The validated setup for ``values`` (missing ones take their default); see
        :func:`make_setup`."""
        return make_setup(values)


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
    normlab.experiments.base.ParameterError: parameter 'depth': 0 is not allowed, use an integer in [1, 12]
    """  # noqa: E501
    setup: Setup = make_params(Setup, values, "train")
    if setup.norm == "batch" and setup.batch_size == 1:
        raise ParameterError(
            "batch_size",
            "parameter 'batch_size': 1 is not allowed with norm 'batch' (BatchNorm needs 2+ "
            "values per unit in a batch), use 0 or an integer in [2, 2000]",
        )
    return setup


STEPS = Parameter(
    name="steps", kind="int", default=300, help="optimizer steps to train", min=1, max=100_000,
    step=1,
)  # fmt: skip
"""The number of steps of a finished run (``normlab train --steps``, :func:`script`)."""
