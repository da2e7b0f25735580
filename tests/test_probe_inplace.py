"""normlab.probe and the doctor on models with in-place operations, against their out-of-place
twins: the same weights and input, ``nn.ReLU(inplace=True)`` -> ``nn.ReLU()``,
``nn.Dropout(inplace=True)`` -> ``nn.Dropout()``, ``x += f(x)`` -> ``x = x + f(x)``.

A hook sees a layer's output before any later in-place op changes it, and a tensor hook
registered then gets the gradient of that value (PyTorch, "Backward Hooks execution": hooks
registered before an in-place modification see the gradient w.r.t. the value before it). So the
twins' statistics must agree. Tolerance: both twins run the same float32 kernels on the same
values (an in-place ReLU writes what ``relu`` returns; ``h += g`` adds as ``h + g``), so they
should agree bit for bit; ``rtol=1e-6`` (a few float32 ulps, as of a sum reordered by another
kernel path) and ``atol=0`` leave room for no more. The probe also says which layers' outputs
were overwritten: ``overwritten``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from normlab import doctor
from normlab.doctor.running import _overwritten_notes
from normlab.probe import ActivationProbe, GradientProbe

RTOL = 1e-6  # see the module docstring


class Residual(nn.Module):
    """Linear, a residual add onto its output (in place or not), dropout, ReLU, head: every
    in-place op after its input's last use by an op that saved it (a valid in-place model)."""

    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.inplace = inplace
        self.lin1 = nn.Linear(12, 32)
        self.act1 = nn.ReLU()
        self.lin2 = nn.Linear(32, 32)
        self.drop = nn.Dropout(0.25, inplace=inplace)
        self.act2 = nn.ReLU(inplace=inplace)
        self.head = nn.Linear(32, 3)

    def forward(self, x: Tensor) -> Tensor:
        h = self.lin1(x)
        if self.inplace:
            h += self.lin2(self.act1(h))
        else:
            h = h + self.lin2(self.act1(h))
        return self.head(self.act2(self.drop(h)))


class Block(nn.Module):
    """torchvision's BasicBlock: conv, BN, ReLU, conv, BN, ``out += x``, ReLU (one module)."""

    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.inplace = inplace
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=inplace)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)

    def forward(self, x: Tensor) -> Tensor:
        out = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
        if self.inplace:
            out += x
        else:
            out = out + x
        return self.relu(out)


def mlp(inplace: bool) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(12, 48), nn.ReLU(inplace=inplace), nn.Linear(48, 48), nn.ReLU(inplace=inplace),
        nn.Linear(48, 3),
    )  # fmt: skip


def residual(inplace: bool) -> nn.Module:
    torch.manual_seed(0)
    return Residual(inplace)


def cnn(inplace: bool) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=inplace), Block(inplace), Block(inplace),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    )  # fmt: skip


TWINS: list[tuple[Callable[[bool], nn.Module], tuple[int, ...]]] = [
    (mlp, (64, 12)),
    (residual, (64, 12)),
    (cnn, (4, 3, 8, 8)),
]
IDS = ["relu-inplace-mlp", "residual-add-dropout", "basic-blocks"]


def probed(model: nn.Module, xs: list[Tensor], **settings: Any) -> tuple[Any, Any]:
    """Both probes over a forward and backward pass per batch, in training mode, the dropout
    masks drawn from one seed."""
    model.train()
    torch.manual_seed(1)
    with ActivationProbe(model, **settings) as act, GradientProbe(model) as grad:
        for x in xs:
            model(x).square().mean().backward()
            act.step()
            grad.step()
    return act.result(), grad.result()


def batches(shape: tuple[int, ...], steps: int = 2) -> list[Tensor]:
    g = torch.Generator().manual_seed(7)
    return [torch.randn(shape, generator=g) for _ in range(steps)]


ACTIVATIONS = ("mean", "std", "min", "max", "zero_frac", "saturated_frac")


@pytest.mark.parametrize("sample_size", [1024, 40, None])
@pytest.mark.parametrize(("make", "shape"), TWINS, ids=IDS)
def test_statistics_equal_the_out_of_place_twin(
    make: Callable[[bool], nn.Module], shape: tuple[int, ...], sample_size: int | None
) -> None:
    xs = batches(shape)
    settings = {"sample_size": sample_size, "saturation": 0.5, "stats": {"l1": _l1}}
    (act, grad), (act0, grad0) = (probed(make(i), xs, **settings) for i in (True, False))
    assert act.layers == act0.layers and grad.layers == grad0.layers
    assert act.sampled == act0.sampled and act.numel == act0.numel and act.calls == act0.calls
    for field in ACTIVATIONS:
        np.testing.assert_allclose(getattr(act, field), getattr(act0, field), rtol=RTOL, atol=0)
    np.testing.assert_allclose(act.extra["l1"], act0.extra["l1"], rtol=RTOL, atol=0)
    np.testing.assert_allclose(grad.grad_std, grad0.grad_std, rtol=RTOL, atol=0)
    np.testing.assert_allclose(grad.grad_norm, grad0.grad_norm, rtol=RTOL, atol=0)
    assert grad.calls == grad0.calls and all(c >= 1 for c in grad.calls[0])
    assert act0.overwritten == grad0.overwritten == {}
    assert act.overwritten == grad.overwritten != {}


def _l1(y: Tensor) -> Tensor:
    return y.abs().mean()


def test_the_measured_values_are_those_before_the_in_place_op() -> None:
    """The twin agreeing is not enough if both were wrong: the in-place MLP's first Linear
    output is measured with its negative values (before the ReLU wrote over them), and its
    gradient is that of the pre-ReLU value, as ``torch.autograd.grad`` gives it."""
    model, x = mlp(True), batches((64, 12), 1)[0]
    pre = model[0](x)  # (64, 48): the Linear's output, before any ReLU
    loss = model[4](torch.relu(model[2](torch.relu(pre)))).square().mean()
    (want,) = torch.autograd.grad(loss, pre)  # (64, 48)
    act, grad = probed(model, [x], sample_size=None)
    assert act.min[0][0] == pytest.approx(pre.min().item(), rel=1e-6) and act.min[0][0] < 0
    assert act.zero_frac[0][0] == 0 and act.zero_frac[0][1] > 0.2  # the ReLU's zeros, not 0's
    assert grad.grad_std[0][0] == pytest.approx(want.double().std().item(), rel=1e-5)
    assert grad.grad_norm[0][0] == pytest.approx(want.double().norm().item(), rel=1e-5)


def test_overwritten_names_the_in_place_layer_or_none() -> None:
    """An in-place layer that overwrote the output alone is named; two ops (``out += x`` then
    the in-place ReLU), or an op in a forward, give ``None``."""
    act, grad = probed(mlp(True), batches((64, 12), 1))
    assert act.overwritten == grad.overwritten == {"0": "1", "2": "3"}
    act, _ = probed(residual(True), batches((64, 12), 1))
    assert act.overwritten == {"lin1": None, "drop": "act2"}  # h += ..., then the dropout's
    act, _ = probed(cnn(True), batches((4, 3, 8, 8), 1))
    want = {"0": "1", "2.bn1": "2.relu", "2.bn2": None, "3.bn1": "3.relu", "3.bn2": None}
    assert act.overwritten == want
    assert act.to_dict()["overwritten"] == want


def test_nothing_overwritten_where_nothing_changed() -> None:
    """Dropout(inplace=True) changes its input in training mode only; a container whose output
    is its last child's (the same tensor, unchanged) is measured twice, not overwritten."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5, inplace=True), nn.Tanh())
    for train, want in ((False, {}), (True, {"0": "1"})):
        with ActivationProbe(model.train(train)) as probe:
            model(torch.randn(8, 4))
        assert probe.result().overwritten == want
    seq = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.Tanh()), nn.Linear(4, 2))
    with ActivationProbe(seq, ["0", "0.1", "1"]) as probe, GradientProbe(seq, ["0", "0.1"]) as g:
        seq(torch.randn(8, 4)).sum().backward()
    assert probe.result().overwritten == g.result().overwritten == {}


def test_a_change_after_the_forward_is_seen_at_the_gradient_and_at_step() -> None:
    """An output changed in place after the forward (no module reads it afterwards) is caught
    when its gradient arrives (GradientProbe) or at ``step()`` while it is alive."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    with ActivationProbe(model) as act, GradientProbe(model) as grad:
        out = model(torch.randn(16, 4))
        out.mul_(2.0)  # the Linear's output, changed after its hook
        out.sum().backward()
        act.step()
        grad.step()
    assert act.result().overwritten == grad.result().overwritten == {"2": None}
    assert grad.result().grad_std[0][2] == 0.0  # d(2 y).sum() / dy = 2 everywhere: exact
    assert grad.result().grad_norm[0][2] == pytest.approx(2 * math.sqrt(32), rel=1e-6)


def test_overwritten_is_kept_over_steps_until_reset() -> None:
    model = mlp(True)
    with ActivationProbe(model) as probe:
        model(torch.randn(4, 12))
        probe.step()
        probe.step()  # a step with no call
        assert probe.result().overwritten == {"0": "1", "2": "3"}
        probe.reset()
        assert probe.result().overwritten == {}


@pytest.mark.parametrize("sample_size", [1024, None])
def test_inference_mode_outputs_are_measured_and_not_watched(sample_size: int | None) -> None:
    """Inference tensors keep no version: measured (every element too), never overwritten."""
    model, x = mlp(True), torch.randn(16, 12)
    with ActivationProbe(model, sample_size=sample_size) as probe:
        with torch.inference_mode():
            model(x)
        probe.step()
        with torch.no_grad():
            model(x)
    stats = probe.result()
    assert stats.overwritten == {"0": "1", "2": "3"}  # from the no_grad step only
    np.testing.assert_allclose(stats.std[0], stats.std[1], rtol=RTOL, atol=0)
    np.testing.assert_allclose(stats.min[0], stats.min[1], rtol=RTOL, atol=0)


# -- the doctor -----------------------------------------------------------------------------------

NUMBERS = ("act_mean", "act_std", "scale", "dead_frac", "grad_std", "grad_ratio", "branch", "gain")


@pytest.mark.parametrize(("make", "shape"), TWINS, ids=IDS)
def test_the_doctor_s_numbers_equal_the_out_of_place_twin(
    make: Callable[[bool], nn.Module], shape: tuple[int, ...]
) -> None:
    xs = batches(shape, 2)
    runs = []
    for inplace in (True, False):
        torch.manual_seed(1)  # the dropout masks
        runs.append(doctor.diagnose(make(inplace), xs, generator=torch.Generator().manual_seed(0)))
    d, d0 = runs
    assert [la.name for la in d.layers] == [la.name for la in d0.layers]
    for field in NUMBERS:
        got = [getattr(la, field) for la in d.layers]
        want = [getattr(la, field) for la in d0.layers]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=0, err_msg=field)
    assert any(math.isfinite(la.grad_ratio) for la in d.layers)


def test_the_doctor_notes_the_layer_an_in_place_relu_overwrote() -> None:
    d = doctor.diagnose(mlp(True), torch.randn(64, 12))
    note = (
        "model[1] (ReLU, inplace=True) overwrote model[0]'s output: model[0]'s statistics are "
        "of its output before the change"
    )
    assert note in d.notes
    assert not [n for n in doctor.diagnose(mlp(False), torch.randn(64, 12)).notes if "place" in n]


def test_the_notes_name_three_layers_then_count_the_rest() -> None:
    model = cnn(True)
    found = {"0": "1", "2.bn1": "2.relu", "2.bn2": None, "3.bn1": "3.relu", "3.bn2": None}
    notes = _overwritten_notes(model, found)
    assert notes[0].startswith("model[1] (ReLU, inplace=True) overwrote model[0]'s output")
    assert notes[2].startswith("an in-place operation (such as x += f(x) in a forward) changed")
    assert "model[2].bn2's output" in notes[2]
    assert notes[3] == "and 2 more layers' outputs were changed in place after measuring"
    assert len(notes) == 4 and _overwritten_notes(model, {}) == []
