"""``bn-stack``: the ``drift`` stack with a BatchNorm1d after every Linear layer.

Same seed, same input and same Linear weights as ``drift``; the normalization pins each layer's
scale, so depth no longer decides it (after ReLU the std sits near 0.58, not 1, because ReLU
clips the negative half of a unit-variance input).
"""

from __future__ import annotations

from dataclasses import dataclass

from normlab.experiments import stack
from normlab.experiments.base.params import param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.models import NORMS


@dataclass(frozen=True)
class Params(stack.Params):
    norm: str = param("batch", "normalization after each Linear layer", choices=NORMS)


EXPERIMENT = Experiment(
    name="bn-stack",
    title="The deep stack with batch normalization",
    summary="per-layer mean and std of the drift stack with BatchNorm1d after each Linear",
    params_type=Params,
    result_type=stack.StackResult,
    entry=stack.drift,
    tables=stack.tables,
    code=stack.CODE,
    cost=Cost(6.0),
    heaviest={"activation": "sigmoid"},
    stages=lambda p: p.depth,  # a block at a time
    stage="layer",
)
