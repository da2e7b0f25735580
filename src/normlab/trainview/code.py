"""The training view's computation as plain code: torch, numpy and scikit-learn only.

These functions build the data, the net and its optimizer from the seed, and take one step;
the :class:`~normlab.trainview.Session` runs them, and :func:`~normlab.trainview.script`
renders their source, in :data:`CODE`'s order, as a script that needs no normlab.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import make_blobs, make_circles, make_moons
from torch import nn

from normlab.init import LSUV_CODE, lsuv_
from normlab.models import block


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


def make_model(depth: int, width: int, activation: str, norm: str, bias: bool) -> nn.Sequential:
    """``depth`` blocks Linear -> [norm] -> activation, then a Linear to one logit, in one flat
    ``Sequential`` (every layer has its own name: ``0``, ``1``, ... as the view labels them)."""
    dims = [2] + [width] * depth
    blocks = [block(dims[k], width, norm, activation, bias) for k in range(depth)]
    layers = [layer for b in blocks for layer in b]  # the blocks' layers, unpacked in order
    return nn.Sequential(*layers, nn.Linear(dims[-1], 1, bias=bias))


def init_weights(model: nn.Sequential, init: str, x: torch.Tensor) -> None:
    """Set every Linear weight by ``init`` and every bias to 0 (``default`` keeps PyTorch's
    own initialization); ``lsuv`` measures on the inputs ``x``. ``zeros`` makes every unit 0,
    ``constant`` (0.1, as the symmetry lesson) makes a layer's units equal."""
    if init == "lsuv":
        lsuv_(model, x)  # orthogonal, then each Linear rescaled to unit output variance on x
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
                layer.weight.normal_(0.0, 0.02)
            elif init == "large":
                layer.weight.normal_(0.0, 0.30)
            elif init == "xavier":
                nn.init.xavier_uniform_(layer.weight)
            elif init == "he":
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            else:
                nn.init.orthogonal_(layer.weight)
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
) -> tuple[tuple[torch.Tensor, ...], nn.Sequential, torch.optim.Optimizer, Iterator[Any]]:
    """Everything a run needs, from ``seed`` in a fixed order: the data, the net (PyTorch's
    default initialization, then ``init``), its optimizer and the stream of batches."""
    data = make_data(dataset, noise, points, test_frac, seed)
    torch.manual_seed(seed)
    model = make_model(depth, width, activation, norm, bias)
    init_weights(model, init, data[0])
    opt = make_optimizer(model, optimizer, lr)
    return data, model, opt, batches(data[0], data[1], batch_size, seed)


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor
) -> float:
    """One optimizer step on the batch ``(x, y)``; the batch's loss before the update."""
    optimizer.zero_grad()
    loss = F.binary_cross_entropy_with_logits(model(x), y)  # (B, 1) logits vs (B, 1) targets
    loss.backward()
    optimizer.step()
    return loss.item()


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


def train(steps: int, **setup: Any) -> None:
    """Build the run from its setup, then train ``steps`` steps, printing each step's training
    loss (before its update) and the test loss after it."""
    (_, _, x_test, y_test), model, optimizer, batch = build(**setup)
    for t in range(steps):
        x, y = next(batch)
        train_loss = train_step(model, optimizer, x, y)
        test_loss, _ = evaluate(model, x_test, y_test)
        print(f"step {t}: train loss {train_loss:.6f}, test loss {test_loss:.6f}")


CODE: tuple[Callable[..., Any], ...] = (
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
    train,
)
"""The plain code, in the order a script defines it; the session runs these same functions."""
