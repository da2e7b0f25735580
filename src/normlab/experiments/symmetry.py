"""``symmetry``: constant initialization never lets hidden units differ.

A one-hidden-layer ReLU net (2 -> hidden -> 1) trains on two moons with full-batch SGD. With
every weight set to one constant, all hidden units compute the same value, get the same gradient
and take the same step, so they stay identical forever (the max difference between unit 0 and
unit 1 is exactly 0.0). Random Gaussian weights break the symmetry. The result carries the
chosen run's weight and gradient history and, for contrast, the same numbers for the other init.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab import figures as fig
from normlab.data import two_moons
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import TinyMLP
from normlab.train import train_step


@dataclass(frozen=True)
class Params:
    random_init: bool = param(False, "draw weights from N(0, std^2) instead of a constant")
    const: float = param(
        0.1, "the constant every weight starts at (constant init)", min=0.01, max=1.0, step=0.01
    )
    std: float = param(0.5, "std of the random init", min=0.01, max=2.0, step=0.01)
    steps: int = param(30, "training steps", min=1, max=500, step=1)
    lr: float = param(0.5, "SGD learning rate", min=0.01, max=5.0, step=0.01)
    hidden: int = param(6, "hidden units", min=2, max=64, step=1)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run symmetry --code` prints) ------------------------


def init_net(net: nn.Module, random_init: bool, const: float, std: float, seed: int) -> None:
    """Every weight to ``const``, or drawn from N(0, std^2); every bias to 0."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "bias" in name:
                p.zero_()
            elif random_init:
                nn.init.normal_(p, mean=0.0, std=std)
            else:
                p.fill_(const)


def train_track(
    net: TinyMLP, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float
) -> Iterator[tuple[list[list[float]], list[list[float]], float]]:
    """Full-batch SGD; yield every step's incoming weights of each hidden unit (before the
    update), their gradient, and the loss.

    The weights are read before :func:`train_step`, the gradients after it: they stay in
    ``.grad`` until the next ``zero_grad``, and plain SGD's step leaves them as they are.
    """
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(steps):
        weights = net.fc1.weight.detach().cpu().tolist()  # (hidden, 2)
        loss = train_step(net, opt, x, y)  # (N, 1) logits vs (N, 1) targets
        grads = net.fc1.weight.grad.detach().cpu().tolist()  # (hidden, 2)
        yield weights, grads, loss


def distinct_units(w_hist: torch.Tensor, rtol: float = 1e-5) -> int:
    """How many hidden units have weight histories that differ beyond float rounding.

    Not ``torch.unique``: a matmul may sum one unit's terms in another order than its
    neighbour's, so units equal in exact arithmetic can differ in the last bit.
    """
    units = w_hist.transpose(0, 1).flatten(1)  # (steps, H, 2) -> (H, steps * 2)
    tol = rtol * units.abs().max().item()
    kept: list[torch.Tensor] = []
    for u in units:
        if all((u - k).abs().max().item() > tol for k in kept):
            kept.append(u)
    return len(kept)


def summarize(init: str, weights: list[Any], grads: list[Any]) -> dict[str, Any]:
    """How far units 0 and 1 ever got apart, and how many units are distinct, over a run."""
    w, g = torch.tensor(weights), torch.tensor(grads)  # (steps, hidden, 2) each
    return {
        "init": init,
        "max_weight_diff": (w[:, 0] - w[:, 1]).abs().max().item(),
        "max_grad_diff": (g[:, 0] - g[:, 1]).abs().max().item(),
        "distinct_units": distinct_units(w),
    }


def symmetry(
    random_init: bool,
    const: float,
    std: float,
    steps: int,
    lr: float,
    hidden: int,
    seed: int,
    device: str,
) -> Iterator[dict[str, Any]]:
    """Train the chosen init and, for contrast, the other one; compare units 0 and 1.

    Yields the result so far after every step of the chosen init's run (the weights as they
    move), and last the whole run, both summaries in it.
    """
    x, y = two_moons(device=device)
    result: dict[str, Any] = {
        "init": "random" if random_init else "constant",
        "weights": [],  # (steps, hidden, 2): the chosen run's
        "grads": [],
        "losses": [],
        "summary": None,  # both summaries come when their run ends
        "contrast": None,
    }
    for random, key in ((random_init, "summary"), (not random_init, "contrast")):
        net = TinyMLP(hidden).to(device)
        init_net(net, random, const, std, seed)
        run = result if key == "summary" else {"weights": [], "grads": [], "losses": []}
        for weights, grads, loss in train_track(net, x, y, steps, lr):
            run["weights"].append(weights)
            run["grads"].append(grads)
            run["losses"].append(loss)
            if run is result:
                yield result
        result[key] = summarize("random" if random else "constant", run["weights"], run["grads"])
    yield result


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """How far units 0 and 1 ever got apart for both inits (every digit: a constant init's 0.0
    is exact), then the chosen run's units 0 and 1 at a few steps."""
    summaries = [
        [s["init"], repr(s["max_weight_diff"]), repr(s["max_grad_diff"]), str(s["distinct_units"])]
        for s in (result["summary"], result["contrast"])
    ]
    weights = result["weights"]
    steps = sorted({0, len(weights) // 2, len(weights) - 1})
    trace = [[str(t), repr(weights[t][0]), repr(weights[t][1])] for t in steps]
    columns = ["init", "max |unit0 - unit1| weight", "max |grad0 - grad1|", "distinct units"]
    return [
        {
            "title": "Hidden units 0 and 1 over training",
            "columns": columns,
            "rows": summaries,
            "notes": [],
        },
        {
            "title": f"Incoming weights ({result['init']} init)",
            "columns": ["step", "unit 0", "unit 1"],
            "rows": trace,
            "notes": [],
        },
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class SymmetrySummary:
    init: str
    max_weight_diff: float
    max_grad_diff: float
    distinct_units: int


@dataclass
class SymmetryResult(Result):
    init: str
    weights: list[list[list[float]]]  # (steps, hidden, 2): incoming weights of each hidden unit
    grads: list[list[list[float]]]  # (steps, hidden, 2): their gradients
    losses: list[float]
    summary: SymmetrySummary | None  # None while the run is going (its partial results)
    contrast: SymmetrySummary | None

    def tables(self) -> list[Table]:
        assert self.summary is not None and self.contrast is not None, "the run has not ended"
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        steps = fig.steps(len(self.weights))
        hidden = len(self.weights[0])
        panels = []
        for history, label, title in (
            (self.weights, "weight W1[unit, 0]", "incoming weight of each hidden unit"),
            (self.grads, "gradient dL/dW1[unit, 0]", "its gradient"),
        ):
            lines = [
                fig.Series(
                    f"unit {j}",
                    steps,
                    [h[j][0] for h in history],
                    color=fig.PALETTE[j % len(fig.PALETTE)],
                    width=2.0,
                    legend=history is self.weights,
                )
                for j in range(hidden)
            ]
            panels.append(fig.Panel(fig.Axis("training step"), fig.Axis(label), lines, title))
        s = self.summary
        if s is None:
            note = f"training, step {len(self.weights)}"
        elif s.distinct_units == 1:
            note = f"all {hidden} lines lie on top of each other"
        else:
            note = f"{s.distinct_units} distinct units of {hidden}"

        return [fig.Figure(f"{self.init} init: {note}", panels)]


EXPERIMENT = Experiment(
    name="symmetry",
    title="The symmetry problem",
    summary="hidden-unit weights and gradients over training, constant vs random init",
    params_type=Params,
    result_type=SymmetryResult,
    entry=symmetry,
    tables=tables,
    code=(
        two_moons,
        TinyMLP,
        init_net,
        train_step,
        train_track,
        distinct_units,
        summarize,
        symmetry,
        tables,
    ),
    cost=Cost(10.0),
    total_steps=lambda p: 2 * p.steps,
)
