r"""``bn-regularization``: the noise of batch statistics, and the train/test gap.

In training mode a BatchNorm layer normalizes each example with the mean and variance of the
minibatch it happens to be in,

.. math::
    \hat{x}_i = \frac{x_i - \mu_B}{\sqrt{\sigma_B^2 + \epsilon}}, \qquad
    \mu_B = \frac{1}{|B|} \sum_{j \in B} x_j,

so the same example gives a slightly different output in every batch: noise that the network has
to be robust to, as with dropout (Ioffe and Szegedy, 2015, "Batch normalization: accelerating
deep network training by reducing internal covariate shift", section 3.4). This experiment
measures that noise and what it does to generalization on a toy task.

Two moons (``n_train`` training points, ``n_test`` held out, standardized with the training
statistics) train the ``bn-lr`` MLP with minibatch SGD, with and without BN, from the same
initial weights and through the same batch order. After every epoch both nets are evaluated in
eval mode (BN with its running statistics) on both splits. At the end, one held-out point is put
through the trained nets in training mode inside ``probes`` random training batches: the spread
of its logit is the batch noise (exactly 0 without BN).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab import figures as fig
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import MLP, block, fmt
from normlab.train import train_step

BATCH_MIN = 8
"""The smallest minibatch: the cost grows as the batches shrink (more steps per epoch)."""


@dataclass(frozen=True)
class Params:
    n_train: int = param(100, "training points", min=20, max=150, step=1)
    n_test: int = param(500, "held-out test points", min=20, max=2000, step=1)
    noise: float = param(0.3, "std of the noise added to the moons", min=0.0, max=1.0, step=0.01)
    hidden_layers: int = param(3, "hidden blocks", min=1, max=4, step=1)
    width: int = param(64, "units per hidden block", min=2, max=64, step=1)
    lr: float = param(0.1, "SGD learning rate", min=0.001, max=2.0, step=0.001)
    batch_size: int = param(
        16, "minibatch size", min=BATCH_MIN, max=150, step=1, follows=("<=", "n_train")
    )
    epochs: int = param(100, "passes over the training points", min=1, max=120, step=1)
    probes: int = param(32, "random batches the batch noise is measured in", min=2, max=256, step=1)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run bn-regularization --code` prints) --------------


def split_moons(
    n_train: int, n_test: int, noise: float, seed: int, device: str
) -> tuple[torch.Tensor, ...]:
    """Two moons split into training and test points, standardized with the training statistics.

    Returns ``(x_train, y_train, x_test, y_test)``, shapes ``(N, 2)`` and ``(N, 1)``.
    """
    from sklearn.datasets import make_moons  # see normlab.data

    x_np, y_np = make_moons(n_samples=n_train + n_test, noise=noise, random_state=seed)
    x = torch.tensor(x_np, dtype=torch.float32)  # (n_train + n_test, 2), already shuffled
    y = torch.tensor(y_np, dtype=torch.float32).unsqueeze(1)  # (n_train + n_test, 1)
    mean, std = x[:n_train].mean(0), x[:n_train].std(0, unbiased=False)  # (2,): training only
    x = (x - mean) / std
    parts = (x[:n_train], y[:n_train], x[n_train:], y[n_train:])
    return tuple(p.to(device) for p in parts)


def evaluate(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Loss and accuracy in eval mode (BatchNorm with its running statistics)."""
    net.eval()
    with torch.no_grad():
        logits = net(x)  # (N, 1)
    accuracy = ((logits > 0).float() == y).float().mean().item()
    return F.binary_cross_entropy_with_logits(logits, y).item(), accuracy


def batch_noise(
    net: nn.Module,
    x_train: torch.Tensor,
    point: torch.Tensor,
    probes: int,
    batch_size: int,
    g: torch.Generator,
) -> float:
    """Std of ``point``'s logit (shape ``(1, 2)``) over ``probes`` random training batches,
    each holding it and ``batch_size - 1`` training points, in training mode."""
    kept = {k: v.clone() for k, v in net.state_dict().items()}  # training mode moves the
    net.train()  # running statistics: they are put back below
    logits = []
    with torch.no_grad():
        for _ in range(probes):
            mates = torch.randperm(len(x_train), generator=g)[: batch_size - 1]
            batch = torch.cat([point, x_train[mates.to(x_train.device)]])  # (batch_size, 2)
            logits.append(net(batch)[0, 0].item())  # the point's own logit
    net.load_state_dict(kept)
    return torch.tensor(logits).std().item()


def train_minibatch(
    net: nn.Module,
    data: tuple[torch.Tensor, ...],
    lr: float,
    batch_size: int,
    epochs: int,
    g: torch.Generator,
) -> Iterator[dict[str, list[float]]]:
    """Minibatch SGD (a fresh shuffle from ``g`` every epoch, a last partial batch dropped), and
    the eval-mode loss and accuracy on both splits after every epoch: yields the curves so far
    after each one."""
    x_train, y_train, x_test, y_test = data
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    curves: dict[str, list[float]] = {k: [] for k in ("train", "test", "train_acc", "test_acc")}
    for _ in range(epochs):
        net.train()
        order = torch.randperm(len(x_train), generator=g).to(x_train.device)
        for i in range(0, len(x_train) - batch_size + 1, batch_size):
            idx = order[i : i + batch_size]  # (B,)
            train_step(net, opt, x_train[idx], y_train[idx])  # (B, 1) logits vs (B, 1) targets
        for split, (x, y) in (("train", (x_train, y_train)), ("test", (x_test, y_test))):
            loss_value, accuracy = evaluate(net, x, y)
            curves[split].append(loss_value)
            curves[f"{split}_acc"].append(accuracy)
        yield curves


def bn_regularization(
    n_train: int,
    n_test: int,
    noise: float,
    hidden_layers: int,
    width: int,
    lr: float,
    batch_size: int,
    epochs: int,
    probes: int,
    seed: int,
    device: str,
) -> Iterator[dict[str, Any]]:
    """Train the same net without and with BN on the training split; measure both splits.

    Yields the result so far after every epoch (the curves as they grow), and last the whole run.
    """
    data = split_moons(n_train, n_test, noise, seed, device)
    runs = []
    for bn in (False, True):
        torch.manual_seed(seed)  # the same Linear weights with and without BN
        net = MLP(width, hidden_layers, norm="batch" if bn else "none").to(device)
        g = torch.Generator().manual_seed(seed)  # the same batches in the same order
        run: dict[str, Any] = {"batch_norm": bn}
        runs.append(run)
        for curves in train_minibatch(net, data, lr, batch_size, epochs, g):
            run |= curves
            yield {"runs": runs}  # the curves so far
        run["noise"] = batch_noise(net, data[0], data[2][:1], probes, batch_size, g)
    yield {"runs": runs}


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The last epoch's loss and accuracy on both splits, the gap, and the batch noise."""
    rows = []
    for run in result["runs"]:
        train, test = run["train"][-1], run["test"][-1]
        gap = None if train is None or test is None else test - train  # None: a diverged run
        rows.append(
            [
                "with BN" if run["batch_norm"] else "without BN",
                fmt(train),
                fmt(test),
                fmt(gap),
                fmt(run["train_acc"][-1], 3),
                fmt(run["test_acc"][-1], 3),
                fmt(run["noise"]),
            ]
        )
    columns = ["", "train loss", "test loss", "gap", "train acc", "test acc", "batch noise"]
    note = "eval mode after the last epoch; batch noise: std of one test point's logit"
    return [
        {
            "title": "Train and test after training",
            "columns": columns,
            "rows": rows,
            "notes": [note],
        }
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class SplitRun:
    batch_norm: bool
    train: list[float]  # (epochs,): eval-mode loss on the training split after each epoch
    test: list[float]  # (epochs,): on the held-out split
    train_acc: list[float]  # (epochs,)
    test_acc: list[float]  # (epochs,)
    noise: float = math.nan  # std of one held-out point's training-mode logit over random
    # batches (measured once the run is trained: a streamed run's frames lack it)

    @property
    def gap(self) -> float:
        """Test loss minus training loss after the last epoch."""
        return self.test[-1] - self.train[-1]

    @property
    def accuracy_gap(self) -> float:
        return self.train_acc[-1] - self.test_acc[-1]


@dataclass
class BnRegularizationResult(Result):
    runs: list[SplitRun]  # without BN, then with BN

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        series = []
        for r in self.runs:
            name, color = _name(r), fig.BLUE if r.batch_norm else fig.RED
            epochs = fig.steps(len(r.train), start=1)
            series += [
                fig.Series(f"{name}: train", epochs, r.train, color=color, width=1.2),
                fig.Series(f"{name}: test", epochs, r.test, color=color, width=2.5, dash="dash"),
            ]
        curves = fig.Panel(
            fig.Axis("epoch"),
            fig.Axis("BCE loss (eval mode)"),
            series,
            title="training loss (thin) and held-out loss (dashed)",
        )
        names = [_name(r) for r in self.runs]
        gaps = fig.Panel(
            fig.Axis(""),
            fig.Axis("test loss - train loss"),
            [
                fig.Series(
                    "gap after the last epoch",
                    names,
                    [r.gap for r in self.runs],
                    kind="bars",
                    colors=[fig.BLUE if r.batch_norm else fig.RED for r in self.runs],
                    labels=[f"{r.gap:.3f}" for r in self.runs],
                )
            ],
            title="the train/test gap",
        )
        if len(self.runs) < 2 or math.isnan(self.runs[-1].noise):  # a streamed run's frame
            title = f"Training {names[-1]}: epoch {len(self.runs[-1].train)}"
        else:
            plain, bn = self.runs
            title = f"Train/test loss gap {plain.gap:.3f} without BN, {bn.gap:.3f} with BN"
        return [fig.Figure(title, [curves, gaps])]


def _name(r: SplitRun) -> str:
    return "with BN" if r.batch_norm else "without BN"


EXPERIMENT = Experiment(
    name="bn-regularization",
    title="BatchNorm as a regularizer",
    summary="train and held-out loss of one net trained with minibatches, with and without BN",
    params_type=Params,
    result_type=BnRegularizationResult,
    entry=bn_regularization,
    tables=tables,
    code=(
        split_moons,
        block,
        MLP,
        evaluate,
        train_step,
        train_minibatch,
        batch_noise,
        bn_regularization,
        fmt,
        tables,
    ),
    cost=Cost(12.0),
    heaviest={"batch_size": BATCH_MIN},  # the most steps per epoch
    total_steps=lambda p: 2 * p.epochs * (p.n_train // p.batch_size),
)
