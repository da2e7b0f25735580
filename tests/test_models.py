"""``normlab.models``: the stacks draw torch's default init from their own generator only."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab import models
from normlab import nn as nlnn


def test_mlp_equals_torch_default_init_bit_for_bit() -> None:
    torch.manual_seed(4)
    ref = [nn.Linear(2, 16), nn.Linear(16, 16), nn.Linear(16, 1)]
    net = models.mlp(2, 16, 2, out_dim=1, generator=torch.Generator().manual_seed(4))
    ours = models.hidden_linears(net)
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref, strict=True):
        assert type(a) is nn.Linear
        assert torch.equal(a.weight, b.weight)
        assert torch.equal(a.bias, b.bias)


def test_building_leaves_the_global_rng_alone() -> None:
    torch.manual_seed(0)
    state = torch.get_rng_state()
    models.mlp(2, 8, 3, out_dim=1, norm="batch", generator=torch.Generator().manual_seed(1))
    models.linear(3, 4, bias=False, generator=torch.Generator().manual_seed(2))
    assert torch.equal(torch.get_rng_state(), state)


def test_blocks_and_refusals() -> None:
    net = models.mlp(3, 8, 2, norm="rms", act="tanh")
    assert [type(m) for m in net[0]] == [nn.Linear, nlnn.RMSNorm, nn.Tanh]
    assert models.linear(3, 4, bias=False).bias is None
    with pytest.raises(ValueError, match="depth must be at least 1, got 0"):
        models.mlp(2, 8, 0)
    with pytest.raises(ValueError, match=r"norm 'group' not supported, use one of"):
        models.mlp(2, 8, 1, norm="group")
    with pytest.raises(ValueError, match=r"activation 'gelu' not supported, use one of"):
        models.mlp(2, 8, 1, act="gelu")
