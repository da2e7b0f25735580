r"""``init-train``: the initializer decides whether a deep ReLU classifier trains.

A ``hidden_layers``-deep ReLU MLP of width ``width`` learns two moons with full-batch SGD. Every
Linear weight is set by the chosen method (biases 0): ``zeros`` (symmetric and silent: variance 0,
the loss barely moves), ``small`` (std 0.02: the signal vanishes), ``large`` (std 0.30: at width
32, :math:`n\,\mathrm{Var}(w) = 2.9`, so the variance grows about 1.4x per ReLU layer and
explodes in a deeper stack), ``xavier`` (halves per ReLU layer) or ``he`` (the scale holds).
The result holds, at initialization, the forward variance of every hidden layer's output and the
backward variance of the loss gradient with respect to it, then the loss of every training step.

Training runs through :func:`normlab.train.train_mlp_fast` (hand-written forward and backward,
bit-for-bit what :func:`normlab.train.train_sgd` computes for this net), whose step 0 is the
forward and backward at initialization.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from normlab import data, init, models, train
from normlab.experiments.base import (
    Experiment,
    Progress,
    Result,
    Table,
    device_param,
    fmt,
    param,
    seed_param,
)

METHODS = ("zeros", "small", "large", "xavier", "he")


@dataclass(frozen=True)
class Params:
    method: str = param("he", "how every Linear weight starts", choices=METHODS)
    hidden_layers: int = param(5, "hidden ReLU layers", min=1, max=20, step=1)
    width: int = param(32, "units per hidden layer", min=2, max=256, step=1)
    lr: float = param(0.2, "SGD learning rate", min=0.001, max=5.0, step=0.001)
    steps: int = param(150, "training steps", min=1, max=2000, step=1)
    seed: int = seed_param()
    device: str = device_param()


@dataclass
class InitTrainResult(Result):
    method: str
    forward_variances: list[float]  # (hidden_layers,): Var of each hidden output at init
    backward_variances: list[float]  # (hidden_layers,): Var of dL/d(hidden output) at init
    losses: list[float]  # (steps,)

    def tables(self) -> list[Table]:
        rows = [
            (str(i + 1), f"{f:.4g}", f"{b:.4g}")
            for i, (f, b) in enumerate(
                zip(self.forward_variances, self.backward_variances, strict=True)
            )
        ]
        losses = self.losses
        marks = sorted(
            {0, len(losses) // 4, len(losses) // 2, 3 * len(losses) // 4, len(losses) - 1}
        )
        curve = [(str(t), fmt(losses[t])) for t in marks]  # steps count from 0, as in bn-lr
        return [
            Table(
                f"At initialization ({self.method})",
                ("hidden layer", "activation variance", "gradient variance"),
                rows,
            ),
            Table("Training loss (BCE)", ("step", "loss"), curve),
        ]


def apply_init(net: nn.Module, method: str, generator: torch.Generator) -> None:
    """Set every Linear weight of ``net`` by ``method`` (one of :data:`METHODS`), biases to 0."""
    for layer in models.hidden_linears(net):
        w = layer.weight
        if method == "zeros":
            init.zeros_(w)
        elif method == "small":
            init.normal_(w, 0.0, 0.02, generator=generator)
        elif method == "large":
            init.normal_(w, 0.0, 0.30, generator=generator)
        elif method == "xavier":
            init.xavier_uniform_(w, generator=generator)
        elif method == "he":
            init.kaiming_normal_(w, nonlinearity="relu", generator=generator)
        else:
            raise ValueError(f"method {method!r} not supported, use one of {METHODS}")
        if layer.bias is not None:
            init.zeros_(layer.bias)


def run(p: Params, progress: Progress | None = None) -> InitTrainResult:
    g = torch.Generator().manual_seed(p.seed)
    net = models.mlp(2, p.width, p.hidden_layers, out_dim=1, generator=g)
    apply_init(net, p.method, g)
    if p.device != "cpu":  # built on the CPU; .to() walks every module even when it stays
        net.to(p.device)
    x, y = data.two_moons(device=p.device)
    # Step 0 of training is the forward and backward at initialization: record it there.
    fit = train.train_mlp_fast(
        net, x, y, lr=p.lr, steps=p.steps, progress=progress, record_init=True
    )
    forward = [h.var(unbiased=False) for h in fit.init_outputs]  # L x (N, H) -> L x ()
    backward = [dh.var(unbiased=False) for dh in fit.init_grads]  # L x (N, H) -> L x ()
    return InitTrainResult(
        method=p.method,
        forward_variances=torch.stack(forward).tolist(),
        backward_variances=torch.stack(backward).tolist(),
        losses=fit.losses.tolist(),
    )


EXPERIMENT = Experiment(
    name="init-train",
    title="Initialization vs training",
    summary="per-layer variance at init and the training loss, for five initializers",
    params_type=Params,
    run=run,
    trains=True,
)
