r"""``init-train``: the initializer decides whether a deep ReLU classifier trains.

A ``hidden_layers``-deep ReLU MLP of width ``width`` learns two moons with full-batch SGD. Every
Linear weight is set by the chosen method (biases 0): ``zeros`` (symmetric and silent: variance 0,
the loss barely moves), ``small`` (std 0.02: the signal vanishes), ``large`` (std 0.30: at width
32, :math:`n\,\mathrm{Var}(w) = 2.9`, so the variance grows about 1.4x per ReLU layer and
explodes in a deeper stack), ``xavier`` (halves per ReLU layer) or ``he`` (the scale holds).
The result holds, at initialization, the forward variance of every hidden layer's output and the
backward variance of the loss gradient with respect to it, then the loss of every training step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from normlab import figures as fig
from normlab.data import two_moons
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import MLP, apply_init, block, fmt, fmt_as, he_normal, xavier_uniform
from normlab.train import train, train_step

METHODS = ("zeros", "small", "large", "xavier", "he")
LOG_FLOOR = 1e-12
"""A variance of 0 (zeros init) is drawn at this floor of the log axis, as the seed's ``max``."""


@dataclass(frozen=True)
class Params:
    method: str = param("he", "how every Linear weight starts", choices=METHODS)
    hidden_layers: int = param(5, "hidden ReLU layers", min=1, max=20, step=1)
    width: int = param(32, "units per hidden layer", min=2, max=64, step=1)
    lr: float = param(0.2, "SGD learning rate", min=0.001, max=5.0, step=0.001)
    steps: int = param(150, "training steps", min=1, max=500, step=1)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run init-train --code` prints) ----------------------


def variances_at_init(
    net: MLP, x: torch.Tensor, y: torch.Tensor
) -> tuple[list[float], list[float]]:
    """Var of every hidden output, and of the loss gradient with respect to it, before training."""
    *blocks, head = net  # the hidden blocks, then the Linear to the logit
    hidden: list[torch.Tensor] = []
    h = x
    for b in blocks:
        h = b(h)  # (N, d_in or width) -> (N, width)
        hidden.append(h)
    loss = F.binary_cross_entropy_with_logits(head(h), y)  # (N, width) -> (N, 1) logits
    grads = torch.autograd.grad(loss, hidden)  # dL/dh for every hidden output h: (N, width)
    forward = [h.var(unbiased=False).item() for h in hidden]
    backward = [g.var(unbiased=False).item() for g in grads]
    return forward, backward


def init_train(
    method: str,
    hidden_layers: int,
    width: int,
    lr: float,
    steps: int,
    seed: int,
    device: str,
) -> Iterator[dict[str, Any]]:
    """Initialize the net by ``method``, measure it, then train it on two moons.

    Yields the result so far after every step (the loss curve as it grows), and last the whole
    run.
    """
    x, y = two_moons(device=device)
    torch.manual_seed(seed)
    net = MLP(width, hidden_layers)  # blocks Linear -> ReLU, then a Linear to one logit
    apply_init(net, method)  # on the CPU, where the seed draws
    net.to(device)
    forward, backward = variances_at_init(net, x, y)
    result: dict[str, Any] = {
        "method": method,
        "forward_variances": forward,
        "backward_variances": backward,
        "losses": [],
    }
    for loss in train(net, x, y, lr, steps):
        result["losses"].append(loss)
        yield result
    yield result  # the whole run (also when no step ran)


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The variances at initialization, layer by layer, then the loss every few steps."""
    variances = zip(result["forward_variances"], result["backward_variances"], strict=True)
    layers = [
        [str(i + 1), fmt_as(forward, ".4g"), fmt_as(backward, ".4g")]
        for i, (forward, backward) in enumerate(variances)
    ]
    losses = result["losses"]
    marks = sorted({0, len(losses) // 4, len(losses) // 2, 3 * len(losses) // 4, len(losses) - 1})
    curve = [[str(t), fmt(losses[t])] for t in marks]  # steps count from 0, as in bn-lr
    return [
        {
            "title": f"At initialization ({result['method']})",
            "columns": ["hidden layer", "activation variance", "gradient variance"],
            "rows": layers,
            "notes": [],
        },
        {"title": "Training loss (BCE)", "columns": ["step", "loss"], "rows": curve, "notes": []},
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class InitTrainResult(Result):
    method: str
    forward_variances: list[float]  # (hidden_layers,): Var of each hidden output at init
    backward_variances: list[float]  # (hidden_layers,): Var of dL/d(hidden output) at init
    losses: list[float]  # (steps,)

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        layers = fig.steps(len(self.forward_variances), start=1)
        at_init = fig.Panel(
            fig.Axis("hidden layer"),
            fig.Axis("variance at initialization (log)", scale="log"),
            [
                fig.Series(
                    "activations (forward)",
                    layers,
                    fig.floored(self.forward_variances, LOG_FLOOR),
                    kind="line+markers",
                    color=fig.BLUE,
                ),
                fig.Series(
                    "gradients (backward)",
                    layers,
                    fig.floored(self.backward_variances, LOG_FLOOR),
                    kind="line+markers",
                    color=fig.ORANGE,
                    dash="dash",
                    marker="square",
                ),
            ],
            title="at initialization: forward and backward",
            lines=[fig.Line(1.0)],
        )
        finite = [v for v in self.losses if math.isfinite(v) and v > 0]
        log = bool(finite) and max(finite) / min(finite) > 100
        bad = next((t for t, v in enumerate(self.losses) if not math.isfinite(v)), None)
        loss = fig.Panel(
            fig.Axis("training step"),
            fig.Axis("BCE loss (log)" if log else "BCE loss", scale="log" if log else "linear"),
            [fig.Series("training loss", fig.steps(len(self.losses)), self.losses, color=fig.RED)],
            title="training loss",
            lines=[] if bad is None else [fig.Line(float(bad), axis="x", color="#000000")],
            note="" if bad is None else f"loss not finite from step {bad}",
        )
        title = f'Initialization "{self.method}": does the deep ReLU net train?'
        return [fig.Figure(title, [at_init, loss])]


EXPERIMENT = Experiment(
    name="init-train",
    title="Initialization vs training",
    summary="per-layer variance at init and the training loss, for five initializers",
    params_type=Params,
    result_type=InitTrainResult,
    entry=init_train,
    tables=tables,
    code=(
        two_moons,
        block,
        MLP,
        xavier_uniform,
        he_normal,
        apply_init,
        variances_at_init,
        train_step,
        train,
        init_train,
        fmt,
        fmt_as,
        tables,
    ),
    cost=Cost(10.0),
    total_steps=lambda p: p.steps,
)
