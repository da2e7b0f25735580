"""``drift``: activation scale through a deep stack with nothing to reset it.

A batch passes through ``depth`` blocks ``Linear -> [Norm] -> activation`` (torch's default
Linear init); the mean and std of each block's output show the scale shrink layer by layer.
With ``norm="batch"`` the same code is the ``bn-stack`` experiment (both run
:mod:`normlab.experiments.stack`).
"""

from __future__ import annotations

from normlab.experiments import stack
from normlab.experiments.base.registry import Cost, Experiment

EXPERIMENT = Experiment(
    name="drift",
    title="Drift through a plain deep stack",
    summary="per-layer mean and std of a batch through Linear -> activation blocks",
    params_type=stack.Params,
    result_type=stack.StackResult,
    entry=stack.drift,
    tables=stack.tables,
    code=stack.CODE,
    cost=Cost(6.0),
    heaviest={"activation": "sigmoid"},
    stages=lambda p: p.depth,  # a block at a time
    stage="layer",
)
