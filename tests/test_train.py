"""``normlab.train.train``: the one loop, as the seed notebook writes it, bit for bit."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normlab.data import two_moons
from normlab.train import train


def _net(batch_norm: bool, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    layers: list[nn.Module] = [nn.Linear(2, 16)]
    if batch_norm:
        layers.append(nn.BatchNorm1d(16))
    layers += [nn.ReLU(), nn.Linear(16, 1)]
    return nn.Sequential(*layers)


def _seed_loop(
    net: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float, steps: int
) -> list[float]:
    """The seed notebook's ``train_moons``: the reference."""
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("batch_norm", [False, True])
def test_train_is_the_seed_loop_bit_for_bit(batch_norm: bool) -> None:
    x, y = two_moons()
    ours, ref = _net(batch_norm), _net(batch_norm)
    ref.train()
    assert list(train(ours, x, y, lr=0.8, steps=40)) == _seed_loop(ref, x, y, lr=0.8, steps=40)
    for a, b in zip(ours.state_dict().values(), ref.state_dict().values(), strict=True):
        assert torch.equal(a, b)  # weights, running statistics, num_batches_tracked


def test_the_loss_of_a_step_is_measured_before_its_update() -> None:
    x, y = two_moons()
    net = _net(False)
    with torch.no_grad():
        before = F.binary_cross_entropy_with_logits(net(x), y).item()
    assert list(train(net, x, y, lr=0.5, steps=1)) == [before]


def test_a_diverging_run_keeps_its_non_finite_losses() -> None:
    x, y = two_moons()
    losses = list(train(_net(False), x * 1e6, y, lr=5e6, steps=30))
    assert len(losses) == 30 and not all(math.isfinite(v) for v in losses)


def test_train_puts_the_net_in_training_mode() -> None:
    x, y = two_moons()
    net = _net(True).eval()
    steps = train(net, x, y, lr=0.1, steps=1)
    assert not net.training  # a generator: nothing runs until a loss is asked for
    next(steps)
    assert net.training
