"""The one training loop: full-batch SGD on a binary task, as the seed notebook trains.

The order is the seed's and every PyTorch tutorial's: ``zero_grad``, forward, loss, backward,
step, record. The loss of step ``t`` is measured before step ``t``'s update. The training
experiments' scripts include :func:`train` as it is, so the losses normlab reports are the ones
this loop prints in a notebook.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn


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
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(net(x), y)  # (N, 1) logits vs (N, 1) targets
        loss.backward()
        opt.step()
        yield loss.item()
