r"""``training``: train a small classifier on a 2-D toy dataset, the training view's run.

The points (moons, circles, xor, spiral or blobs, standardized per feature, a fraction held out)
are classified by a ``torch.nn.Sequential`` of ``depth`` blocks ``Linear -> [norm] ->
activation`` (:func:`~normlab.models.block`, the norm before the activation, as the seeds place
BatchNorm), then a Linear to one logit; every class is 0 or 1, so the loss is binary
cross-entropy. Data, net and optimizer are built from ``seed`` in a fixed order, then ``steps``
optimizer steps are taken with :func:`normlab.train.train_step`, the visible loop (``zero_grad``,
forward, loss, backward, step). Each step records its batch's training loss (before its
update) and the test loss after it: the numbers :class:`normlab.trainview.Session` records step
for step, since it runs these same functions one step at a time (``normlab train``, the lab's
training page). LSUV is Mishkin & Matas (2015), "All you need is a good init"
(:func:`normlab.init.lsuv_`).

:class:`Setup` declares the view's settings (the data, the network, the training) once; this
experiment's :class:`Params` are those and the run's ``steps`` and ``device``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from normlab import figures as fig
from normlab.experiments.base.params import (
    ParameterError,
    device_param,
    make_params,
    param,
    seed_param,
)
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.init import LSUV_CODE, lsuv_
from normlab.models import NORMS, block, fmt
from normlab.train import train_step

DATASETS = ("moons", "circles", "xor", "spiral", "blobs")
ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu", "linear")
INITS = ("zeros", "constant", "small", "large", "xavier", "he", "orthogonal", "lsuv", "default")
OPTIMIZERS = ("sgd", "momentum", "adam")


@dataclass(frozen=True)
class Setup:
    """One training run's settings: the data, the network, the training (the training view's
    parameters, :data:`normlab.trainview.PARAMETERS`)."""

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
        0, "points per step (0: the whole training set, as the seeds train; not 1 with norm "
        "'batch')", min=0, max=2000, step=1,
    )  # fmt: skip

    @classmethod
    def from_params(cls, values: Mapping[str, object]) -> Self:
        """The validated settings for ``values`` (missing ones take their default)."""
        made: Self = make_params(cls, values, "train")
        return made

    def __post_init__(self) -> None:
        if self.norm == "batch" and self.batch_size == 1:
            raise ParameterError(
                "batch_size",
                "parameter 'batch_size': 1 is not allowed with norm 'batch' (BatchNorm needs 2+ "
                "values per unit in a batch), use 0 or an integer in [2, 2000]",
            )


@dataclass(frozen=True)
class Params(Setup):
    steps: int = param(50, "optimizer steps to train", min=1, max=60, step=1)
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run training --code` prints) -----------------------


def xor(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Points uniform in the square [-1, 1]^2, class 1 where x0 * x1 > 0, then jittered."""
    x = rng.uniform(-1.0, 1.0, size=(n, 2))  # (n, 2)
    y = (x[:, 0] * x[:, 1] > 0).astype(np.int64)  # (n,)
    return x + noise * rng.standard_normal((n, 2)), y


def spiral(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Two spiral arms of 1.5 turns, one per class, the second the first turned by pi."""
    y = np.arange(n) % 2  # (n,): the classes alternate
    t = np.linspace(0.05, 1.0, n)  # (n,): how far out along its arm each point lies
    angle = 3.0 * np.pi * t + np.pi * y
    x = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1)  # (n, 2)
    return x + noise * rng.standard_normal((n, 2)), y


def make_data(
    dataset: str, noise: float, points: int, test_frac: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The points, standardized per feature, split into training and test points.

    Returns ``(x_train, y_train, x_test, y_test)``: inputs ``(N, 2)``, targets ``(N, 1)`` in
    {0.0, 1.0}; each part keeps the generator's order.
    """
    from sklearn.datasets import make_blobs, make_circles, make_moons  # see normlab.data

    rng = np.random.default_rng(seed)
    if dataset == "moons":
        x, y = make_moons(n_samples=points, noise=noise, random_state=seed)
    elif dataset == "circles":
        x, y = make_circles(n_samples=points, noise=noise, factor=0.5, random_state=seed)
    elif dataset == "blobs":
        centers = [(-1.0, -1.0), (1.0, 1.0)]
        x, y = make_blobs(points, centers=centers, cluster_std=0.3 + noise, random_state=seed)
    elif dataset == "xor":
        x, y = xor(points, noise, rng)
    else:
        x, y = spiral(points, noise, rng)
    x = (x - x.mean(axis=0)) / x.std(axis=0)  # (N, 2): per-feature mean 0, std 1
    test = np.zeros(points, dtype=bool)
    test[rng.permutation(points)[: round(test_frac * points)]] = True  # (N,): held out
    x_t = torch.tensor(x, dtype=torch.float32)
    y_t = torch.tensor(y, dtype=torch.float32).unsqueeze(1)  # (N,) -> (N, 1)
    keep, held = torch.from_numpy(~test), torch.from_numpy(test)
    return x_t[keep], y_t[keep], x_t[held], y_t[held]


def make_model(
    depth: int,
    width: int,
    activation: str,
    norm: str,
    bias: bool,
    generator: torch.Generator | None = None,
) -> nn.Sequential:
    """``depth`` blocks Linear -> [norm] -> activation, then a Linear to one logit, in one flat
    ``Sequential`` (every layer has its own name: ``0``, ``1``, ... as the view labels them),
    with PyTorch's default initialization drawn from ``generator`` (torch's global one when
    ``None``): the layers are made on the meta device (shapes only, nothing drawn), then
    allocated and reset in order, which draws what ``nn.Linear(...)`` itself would."""
    dims = [2] + [width] * depth
    with torch.device("meta"):
        blocks = [block(dims[k], width, norm, activation, bias) for k in range(depth)]
        layers = [layer for b in blocks for layer in b]  # the blocks' layers, unpacked in order
        model = nn.Sequential(*layers, nn.Linear(dims[-1], 1, bias=bias))
    model.to_empty(device="cpu")
    for layer in model:
        if isinstance(layer, nn.Linear):  # nn.Linear.reset_parameters, from `generator`
            nn.init.kaiming_uniform_(layer.weight, a=math.sqrt(5), generator=generator)
            if layer.bias is not None:
                bound = 1 / math.sqrt(layer.in_features)
                nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
        elif hasattr(layer, "reset_parameters"):  # a norm: ones and zeros, nothing drawn
            layer.reset_parameters()
    return model


def init_weights(
    model: nn.Sequential, init: str, x: torch.Tensor, generator: torch.Generator | None = None
) -> None:
    """Set every Linear weight by ``init`` and every bias to 0 (``default`` keeps PyTorch's
    own initialization); ``lsuv`` measures on the inputs ``x``. ``zeros`` makes every unit 0,
    ``constant`` (0.1, as the symmetry lesson) makes a layer's units equal. The random ones
    draw from ``generator`` (torch's global one when ``None``)."""
    if init == "lsuv":
        # orthogonal, then each Linear rescaled to unit output variance on x
        lsuv_(model, x, generator=generator)
        return
    if init == "default":
        return
    with torch.no_grad():
        for layer in model:
            if not isinstance(layer, nn.Linear):
                continue
            if init == "zeros":
                layer.weight.zero_()
            elif init == "constant":
                layer.weight.fill_(0.1)  # every unit of a layer the same: they stay the same
            elif init == "small":
                layer.weight.normal_(0.0, 0.02, generator=generator)
            elif init == "large":
                layer.weight.normal_(0.0, 0.30, generator=generator)
            elif init == "xavier":
                nn.init.xavier_uniform_(layer.weight, generator=generator)
            elif init == "he":
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu", generator=generator)
            else:
                nn.init.orthogonal_(layer.weight, generator=generator)
            if layer.bias is not None:
                layer.bias.zero_()


def make_optimizer(model: nn.Module, optimizer: str, lr: float) -> torch.optim.Optimizer:
    if optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr)
    if optimizer == "momentum":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return torch.optim.Adam(model.parameters(), lr=lr)


def batches(
    x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The batches, one per step, without end: the whole set each step when ``batch_size`` is
    0 (or covers it), else a fresh shuffle every epoch, cut into full batches (the rest of the
    epoch is dropped, so that BatchNorm never sees a batch of one)."""
    if batch_size == 0 or batch_size >= len(x):
        while True:
            yield x, y
    order = torch.Generator().manual_seed(seed)  # its own stream: the weights' is left alone
    while True:
        perm = torch.randperm(len(x), generator=order)  # (N,)
        for i in range(0, len(x) - batch_size + 1, batch_size):
            idx = perm[i : i + batch_size]  # (B,)
            yield x[idx], y[idx]


def build(
    dataset: str,
    noise: float,
    points: int,
    test_frac: float,
    seed: int,
    depth: int,
    width: int,
    activation: str,
    init: str,
    norm: str,
    bias: bool,
    optimizer: str,
    lr: float,
    batch_size: int,
    device: str = "cpu",
) -> tuple[tuple[torch.Tensor, ...], nn.Sequential, torch.optim.Optimizer, Iterator[Any]]:
    """Everything a run needs, from ``seed`` in a fixed order: the data, the net (PyTorch's
    default initialization, then ``init``), its optimizer and the stream of batches; all drawn
    on the CPU, then moved to ``device``. The weights come from a generator of their own,
    seeded as ``torch.manual_seed(seed)`` seeds the global one (the same numbers), so a run
    leaves torch's global random state alone and runs beside others without taking turns."""
    data = make_data(dataset, noise, points, test_frac, seed)
    weights = torch.Generator().manual_seed(seed)  # the stream torch.manual_seed(seed) starts
    model = make_model(depth, width, activation, norm, bias, weights)
    init_weights(model, init, data[0], weights)
    model.to(device)
    x_train, y_train, x_test, y_test = (t.to(device) for t in data)
    opt = make_optimizer(model, optimizer, lr)
    batch = batches(x_train, y_train, batch_size, seed)
    return (x_train, y_train, x_test, y_test), model, opt, batch


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Loss and accuracy on ``(x, y)`` in eval mode (BatchNorm uses its running statistics);
    ``nan`` for no points."""
    model.eval()
    with torch.no_grad():
        logits = model(x)  # (N, 1)
        loss = F.binary_cross_entropy_with_logits(logits, y).item()
        accuracy = ((logits > 0).float() == y).float().mean().item()
    model.train()
    return loss, accuracy


def plane(
    x: torch.Tensor, size: int, pad: float
) -> tuple[dict[str, list[float]], tuple[list[float], list[float], torch.Tensor]]:
    """The plane around the points ``x`` (``(N, 2)``): its extent, ``pad`` of their range beyond
    them on every side, and the grid of ``size`` x ``size`` points over it: the ``x`` and ``y``
    coordinates and the ``(size * size, 2)`` points, row by row (``y`` fixed along a row)."""
    lo, hi = x.min(0).values, x.max(0).values  # (2,), (2,)
    margin = pad * (hi - lo)
    lo, hi = lo - margin, hi + margin
    xs = torch.linspace(float(lo[0]), float(hi[0]), size)  # (G,)
    ys = torch.linspace(float(lo[1]), float(hi[1]), size)  # (G,)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")  # (G, G) each: row i has y = ys[i]
    grid = torch.stack([gx.reshape(-1), gy.reshape(-1)], dim=1)  # (G*G, 2)
    extent = {"x": [float(lo[0]), float(hi[0])], "y": [float(lo[1]), float(hi[1])]}
    return extent, (xs.tolist(), ys.tolist(), grid)


def boundary(model: nn.Module, grid: torch.Tensor, size: int) -> list[list[float]]:
    """The probability of class 1 at every point of the grid, in eval mode, rounded to 4
    decimals: ``z[i][j]`` at ``(x[j], y[i])``."""
    model.eval()
    with torch.no_grad():
        p = torch.sigmoid(model(grid)).reshape(size, size)  # (G*G, 1) -> (G, G)
    model.train()
    return p.double().round(decimals=4).tolist()


def points_of(x: torch.Tensor, y: torch.Tensor) -> dict[str, list[Any]]:
    """The points ``(N, 2)`` as coordinate lists, with their class ``label`` 0 or 1."""
    labels = [int(v) for v in y[:, 0].tolist()]  # (N, 1) -> N ints
    return {"x": x[:, 0].tolist(), "y": x[:, 1].tolist(), "label": labels}


def training(steps: int, device: str, **setup: Any) -> Iterator[dict[str, Any]]:
    """Build the run from its setup and train ``steps`` steps: every step's training loss
    (before its update) and test loss (after it), the accuracies at the end, the points and the
    decision boundary on a 50 x 50 grid reaching 10% beyond them (the training view's).

    Yields the losses so far after every step, and last the whole run.
    """
    (x_train, y_train, x_test, y_test), model, optimizer, batch = build(**setup, device=device)
    train_losses, test_losses = [], []
    for _ in range(steps):
        x, y = next(batch)
        train_losses.append(train_step(model, optimizer, x, y))
        test_losses.append(evaluate(model, x_test, y_test)[0])
        yield {"train_losses": train_losses[:], "test_losses": test_losses[:]}  # copies: they grow
    extent, (xs, ys, grid) = plane(torch.cat([x_train, x_test]).cpu(), 50, 0.1)
    yield {
        "train_losses": train_losses,
        "test_losses": test_losses,
        "train_accuracy": evaluate(model, x_train, y_train)[1],
        "test_accuracy": evaluate(model, x_test, y_test)[1],
        "train_points": points_of(x_train.cpu(), y_train.cpu()),
        "test_points": points_of(x_test.cpu(), y_test.cpu()),
        "extent": extent,
        "boundary": {"x": xs, "y": ys, "z": boundary(model, grid.to(device), 50)},
    }


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every step's losses, as the training view records them, and how many points the net
    classifies right at the end."""
    losses = zip(result["train_losses"], result["test_losses"], strict=True)
    rows = [[str(t), fmt(train, 6), fmt(test, 6)] for t, (train, test) in enumerate(losses)]
    right = [
        [part, correct(result[f"{part}_accuracy"], len(result[f"{part}_points"]["label"]))]
        for part in ("train", "test")
    ]
    note = "train: the step's batch before its update; test: the held-out points after it"
    return [
        {
            "title": f"BCE loss at each of {len(rows)} steps",
            "columns": ["step", "train", "test"],
            "rows": rows,
            "notes": [note],
        },
        {
            "title": "Accuracy at the end",
            "columns": ["points", "classified right"],
            "rows": right,
            "notes": [],
        },
    ]


def correct(accuracy: float | None, n: int) -> str:
    """An accuracy as the points it gets right (``-`` for no points)."""
    if n == 0 or accuracy is None or not math.isfinite(accuracy):
        return "-"
    return f"{round(accuracy * n)} of {n}"


# -- the result ---------------------------------------------------------------------------------


def loss_curves(
    steps: Sequence[float | None],
    losses: tuple[Sequence[float | None], Sequence[float | None]],
) -> fig.Panel:
    """The training and test loss (``losses``) at ``steps``, on a log axis."""
    return fig.Panel(
        fig.Axis("training step"),
        fig.Axis("BCE loss (log)", scale="log"),
        [
            fig.Series("train", steps, losses[0], color=fig.BLUE),
            fig.Series("test", steps, losses[1], color=fig.ORANGE),
        ],
        title="loss",
    )


def loss_and_boundary(
    title: str,
    steps: Sequence[float | None],
    losses: tuple[Sequence[float | None], Sequence[float | None]],
    plane_: dict[str, Any],
    points: dict[str, dict[str, list[Any]]],
    step: int,
) -> fig.Figure:
    """The loss curves (``losses``: train, test at ``steps``) beside the decision boundary at
    ``step``: ``plane_`` holds the ``boundary`` (``x``, ``y``, ``z``) and its ``extent``,
    ``points`` the ``train`` and ``test`` points drawn on it (the test ones hollow)."""
    curves = loss_curves(steps, losses)
    marks = [
        fig.Series(
            f"{part} points",
            points[part]["x"],
            points[part]["y"],
            kind="markers",
            color="#000000",
            colors=[fig.RED if v else fig.BLUE for v in points[part]["label"]],
            hollow=part == "test",
            marker_size=4.0,
        )
        for part in ("train", "test")
    ]
    b, extent = plane_["boundary"], plane_["extent"]
    heat = fig.Series(
        "P(class 1)", b["x"], b["y"], kind="heatmap", z=b["z"], colorscale="RdBu_r", opacity=0.6
    )
    plane = fig.Panel(
        fig.Axis("x0 (standardized)", limits=tuple(extent["x"])),
        fig.Axis("x1 (standardized)", limits=tuple(extent["y"])),
        [heat, *marks],
        title=f"decision boundary at step {step}",
    )
    return fig.Figure(title, [curves, plane])


@dataclass
class TrainingResult(Result):
    train_losses: list[float]  # (steps,): each step's batch, before its update
    test_losses: list[float]  # (steps,): the held-out points, after the step's update
    # the rest once the run has ended (a streamed run's frames hold the losses so far alone)
    train_accuracy: float = math.nan  # at the end, in eval mode
    test_accuracy: float = math.nan
    train_points: dict[str, list[Any]] = field(default_factory=dict)  # x, y, label: (N_train,)
    test_points: dict[str, list[Any]] = field(default_factory=dict)  # (N_test,) each
    extent: dict[str, list[float]] = field(default_factory=dict)  # x, y: the plane's [lo, hi]
    boundary: dict[str, Any] = field(default_factory=dict)  # x (G,), y (G,), z (G, G): P(1)

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        n = len(self.train_losses)
        losses = (self.train_losses, self.test_losses)
        if not self.boundary:  # still training: the curves so far
            title = f"Training a small classifier: step {n}, the decision boundary at the end"
            return [fig.Figure(title, [loss_curves(fig.steps(n), losses)])]
        plane_ = {"boundary": self.boundary, "extent": self.extent}
        points = {"train": self.train_points, "test": self.test_points}
        title = f"Training a small classifier, {n} steps"
        return [loss_and_boundary(title, fig.steps(n), losses, plane_, points, n)]


EXPERIMENT = Experiment(
    name="training",
    title="Watch it train",
    summary="a small MLP learns a 2-D toy dataset: every step's training and test loss, the "
    "accuracy and the decision boundary at the end (the training view's run)",
    params_type=Params,
    result_type=TrainingResult,
    entry=training,
    tables=tables,
    code=(
        xor,
        spiral,
        make_data,
        block,
        make_model,
        *LSUV_CODE,
        init_weights,
        make_optimizer,
        batches,
        build,
        train_step,
        evaluate,
        plane,
        boundary,
        points_of,
        training,
        fmt,
        correct,
        tables,
    ),
    cost=Cost(14.0),  # 9.2 s and 0.2 GiB measured at maxima(), one thread (benchmarks/maxima.py)
    heaviest={"test_frac": 0.0, "activation": "gelu", "init": "lsuv", "norm": "batch"},
    total_steps=lambda p: p.steps,
)
