"""normlab.init.lsuv_: every Linear/Conv output ends with unit variance on the batch (MLP, CNN)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
import torch
from torch import nn

from normlab import init, zoo

WEIGHTED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


def output_variances(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    """Biased variance over every element of each Linear/Conv output, measured by plain hooks."""
    out: dict[str, float] = {}
    handles = []
    for name, m in model.named_modules():
        if isinstance(m, WEIGHTED):

            def hook(_m: nn.Module, _i: Any, y: torch.Tensor, name: str = name) -> None:
                out[name] = y.var(unbiased=False).item()

            handles.append(m.register_forward_hook(hook))
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return out


def deep_mlp(act: type[nn.Module]) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(16, 64), act()]
    for _ in range(7):
        layers += [nn.Linear(64, 64), act()]
    layers.append(nn.Linear(64, 3))
    return nn.Sequential(*layers)


@pytest.mark.parametrize("act", [nn.ReLU, nn.Tanh])
def test_mlp_layers_end_at_unit_variance(act: type[nn.Module]) -> None:
    net = deep_mlp(act)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(256, 16, generator=g)
    before = output_variances(net, x)
    assert any(abs(v - 1) > 0.5 for v in before.values())  # torch's default init is far off
    result = init.lsuv_(net, x, tol=0.05, generator=g)
    after = output_variances(net, x)
    assert result.layers == list(after)  # every Linear, in forward order
    for name, v in after.items():
        assert abs(v - 1) < 0.05, (name, v)
    assert result.variances == pytest.approx([after[n] for n in result.layers], rel=1e-5)
    assert all(result.converged) and all(i >= 1 for i in result.iterations)
    for m in net.modules():
        if isinstance(m, nn.Linear):
            assert m.bias is not None and torch.count_nonzero(m.bias) == 0


def test_cnn_layers_end_at_unit_variance_and_batchnorm_buffers_are_restored() -> None:
    net = zoo.build("resnet")
    x = torch.randn(zoo.input_shape("resnet", 32), generator=torch.Generator().manual_seed(2))
    buffers = {k: v.clone() for k, v in net.state_dict().items() if "running" in k}
    result = init.lsuv_(net, x, tol=0.1, generator=torch.Generator().manual_seed(3))
    for k, v in buffers.items():  # LSUV's forward passes leave the running statistics alone
        assert torch.equal(net.state_dict()[k], v), k
    variances = output_variances(net, x)  # (a training-mode pass: moves the buffers itself)
    assert len(variances) == 7  # 6 convs (one a 1x1 shortcut) and the head
    assert set(result.layers) == set(variances)
    for name, v in variances.items():
        assert abs(v - 1) < 0.1, (name, v)


def test_layers_are_rescaled_in_call_order_not_registration_order() -> None:
    class HeadFirst(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(32, 2)  # registered first, called last
            self.body = nn.Linear(8, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.head(torch.tanh(self.body(x)))
            return out

    net = HeadFirst()
    x = torch.randn(128, 8, generator=torch.Generator().manual_seed(0))
    result = init.lsuv_(net, x)
    assert result.layers == ["body", "head"]
    # measured after the body was fixed: the head's unit variance holds for the final body
    assert abs(output_variances(net, x)["head"] - 1) < 0.1


def test_same_generator_same_weights_and_global_rng_untouched() -> None:
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    a, b = deep_mlp(nn.ReLU), deep_mlp(nn.ReLU)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    init.lsuv_(a, x, generator=torch.Generator().manual_seed(7))
    assert torch.equal(torch.rand(3), expected)
    init.lsuv_(b, x, generator=torch.Generator().manual_seed(7))
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_max_iter_caps_the_rescalings_and_result_is_json_ready() -> None:
    net = deep_mlp(nn.Tanh)
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    result = init.lsuv_(net, x, tol=1e-9, max_iter=2)  # a tolerance float32 cannot reach
    assert all(i <= 2 for i in result.iterations)
    d = json.loads(json.dumps(result.to_dict()))
    assert d["layers"] == result.layers and d["tol"] == 1e-9


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"tol": 0.0}, "tol 0.0 is not allowed, use a finite number > 0"),
        ({"tol": -0.1}, "tol -0.1"),
        ({"tol": math.nan}, "tol nan"),
        ({"tol": True}, "tol True"),
        ({"max_iter": 0}, "max_iter 0 is not allowed, use an integer >= 1"),
        ({"max_iter": 2.5}, "max_iter 2.5"),
        ({"max_iter": True}, "max_iter True"),
    ],
)
def test_bad_arguments_name_the_parameter(kwargs: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=re.escape(pattern)):
        init.lsuv_(deep_mlp(nn.ReLU), torch.randn(8, 16), **kwargs)


def test_a_model_without_linear_or_conv_is_refused() -> None:
    with pytest.raises(ValueError, match="model has no Linear or Conv1d/2d/3d layer"):
        init.lsuv_(nn.Sequential(nn.ReLU(), nn.Tanh()), torch.randn(4, 3))


def test_a_batch_that_gives_no_variance_is_refused() -> None:
    with pytest.raises(ValueError, match=r"batch: layer '0' puts out variance 0\.0"):
        init.lsuv_(deep_mlp(nn.ReLU), torch.zeros(16, 16))


def test_lsuv_layers_yields_what_lsuv_gives_a_layer_at_a_time() -> None:
    """``lsuv_`` is ``lsuv_layers`` run to its end: from the same generator the same layers,
    rescalings and variances, one yield per layer, and the same weights, bit for bit; between
    yields the caller's grad mode is its own (the rescaling's ``no_grad`` stays inside)."""
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(0))
    a, b = deep_mlp(nn.Tanh), deep_mlp(nn.Tanh)
    result = init.lsuv_(a, x, generator=torch.Generator().manual_seed(7))
    seen = []
    for step in init.lsuv_layers(b, x, generator=torch.Generator().manual_seed(7)):
        seen.append((step, torch.is_grad_enabled()))
    assert [step for step, _ in seen] == list(
        zip(result.layers, result.iterations, result.variances, strict=True)
    )
    assert all(grad for _, grad in seen)
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q), name


def test_lsuv_layers_stopped_after_one_layer_restores_the_buffers() -> None:
    """A caller that stops early (closes the generator) gets the BatchNorm running statistics
    back: the full forward pass that finds the call order moved them."""
    net = zoo.build("resnet")
    x = torch.randn(zoo.input_shape("resnet", 4), generator=torch.Generator().manual_seed(2))
    buffers = {k: v.clone() for k, v in net.state_dict().items() if "running" in k}
    steps = init.lsuv_layers(net, x)
    assert next(steps)[0] == "0"  # the first conv
    assert any(not torch.equal(net.state_dict()[k], v) for k, v in buffers.items())
    steps.close()
    for k, v in buffers.items():
        assert torch.equal(net.state_dict()[k], v), k
