"""The one training loop: a step of any optimizer, and full-batch SGD on a binary task.

:func:`train_step` is the step every experiment trains with, in the seed's and every PyTorch
tutorial's order: ``zero_grad``, forward, loss, backward, step. The loss of a step is measured
before its update. :func:`train` takes those steps with full-batch SGD, as the seed notebook
trains. The experiments' scripts include these functions as they are, so the losses normlab
reports are the ones this loop prints in a notebook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[..., torch.Tensor] = F.binary_cross_entropy_with_logits,
) -> float:
    """One optimizer step on the batch ``(x, y)``; returns the batch's loss before the update.

    The order: ``zero_grad`` (``backward`` adds to ``.grad``, so last step's gradients go
    first), forward, ``loss_fn(model(x), y)``, ``backward`` (the gradient of that loss at the
    current weights), ``step`` (the update). The gradients stay in ``.grad`` until the next
    ``zero_grad``, so a caller may read them after the step.

    Args:
        model: the network; ``model(x)`` is what ``loss_fn`` compares with ``y``.
        optimizer: steps ``model``'s parameters (any rule: SGD, momentum, Adam, per-layer rates).
        x: a batch of inputs.  y: its targets.
        loss_fn: ``loss_fn(output, y)``, a scalar; binary cross-entropy on ``(N, 1)`` logits
            and ``(N, 1)`` targets in {0, 1} by default.
    """
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)  # a scalar: the batch's mean loss
    loss.backward()
    optimizer.step()
    return loss.item()


def train(
    net: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float, steps: int
) -> Iterator[float]:
    """Train ``net`` with full-batch SGD for ``steps`` steps, yielding each step's loss as it goes.

    A generator, so that a caller sees the curve grow (``for loss in train(...)``) or takes it
    whole (``list(train(...))``); the steps are taken as the losses are asked for.

    Args:
        net: maps ``(N, D)`` inputs to ``(N, 1)`` logits; put in training mode here.
        x: ``(N, D)`` inputs.  y: ``(N, 1)`` targets in {0, 1}.
        lr: the learning rate.  steps: the number of updates.

    Yields:
        ``steps`` losses (``inf`` or ``nan`` where training diverged).
    """
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(steps):
        yield train_step(net, opt, x, y)  # (N, 1) logits vs (N, 1) targets
