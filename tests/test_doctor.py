"""normlab.doctor on the zoo and on models built to sit either side of each threshold; the fixes;
the ``doctor`` experiment through the registry."""

from __future__ import annotations

import dataclasses
import json
import math
from functools import cache
from typing import Any

import pytest
import torch
from torch import nn

from normlab import doctor, zoo
from normlab.doctor import kinds
from normlab.doctor.measure import _relative_gradients, weight_layers
from normlab.experiments import ParameterError, get_experiment, run_experiment

BATCH = 64
STEPS = 2


def batches(name: str, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(zoo.input_shape(name, BATCH), generator=g) for _ in range(STEPS)]


@cache
def diagnosis(name: str) -> doctor.Diagnosis:
    return doctor.diagnose(zoo.build(name), batches(name), generator=torch.Generator())


def names(d: doctor.Diagnosis) -> list[str]:
    return [layer.name for layer in d.layers]


# -- the zoo -----------------------------------------------------------------------------------


def test_resnet_is_healthy_everywhere() -> None:
    d = diagnosis("resnet")
    assert len(d.layers) == 20 and {layer.kind for layer in d.layers} >= {"Conv2d", "BatchNorm2d"}
    assert all(layer.labels == ["ok"] for layer in d.layers), d.labels()
    assert d.problems == [] and d.healthy and d.verdict.startswith("healthy")


def test_tanh_with_small_weights_vanishes_from_the_first_layer_on() -> None:
    d = diagnosis("vanishing-tanh")
    assert d.problems == ["vanishing"]
    # layer 1 shrinks the scale to ~0.06 (above 1e-2), but it is the cause: every layer of
    # the segment keeps ~0.08 of its input's RMS, which compounds past 1e-2 by layer 2
    assert d.with_label("vanishing") == names(d)
    first = d.layers[0]
    assert first.scale > doctor.VANISHING and first.segment == "vanishing"
    assert first.gain == pytest.approx(first.predicted_gain, rel=0.3)  # the variance argument
    assert "vanishing from model[0][0]" in d.verdict
    text = " ".join(d.suggestions)
    assert "30 weight layer(s) followed by tanh" in text and "Xavier" in text
    assert "BatchNorm1d" in text  # no normalization in this model
    grads = [layer.grad_std for layer in d.layers]
    assert grads[0] < 1e-6 * grads[-1]  # the gradient vanishes on the way back too


def test_relu_with_unit_weights_explodes_and_stays_exploded() -> None:
    d = diagnosis("exploding-relu")
    assert d.problems[0] == "exploding" and "vanishing" not in d.problems
    hit = d.with_label("exploding")
    first = names(d).index(hit[0])
    assert hit == names(d)[first:] and hit[-1] == "20"  # from the onset to the output
    assert first <= 4  # 5.7x per layer passes 100x within the first three blocks
    assert d.layers[-1].scale > 1e12
    text = " ".join(d.suggestions)
    assert "20 weight layer(s) followed by relu" in text and "He (init.kaiming_normal_" in text


def test_dead_layer_is_labelled_dead_there_and_nowhere_else() -> None:
    d = diagnosis("dead-relu")
    dead_relu = f"{zoo.DEAD_LAYER - 1}.1"  # the ReLU of hidden layer DEAD_LAYER
    assert d.with_label("dead") == [dead_relu]
    layer = next(layer for layer in d.layers if layer.name == dead_relu)
    assert layer.dead_frac >= zoo.DEAD_UNITS / zoo.MLP_WIDTH
    assert all(labels == ["ok"] for name, labels in d.labels().items() if name != dead_relu)
    assert d.problems == ["dead"]
    assert any(f"fed by model[{zoo.DEAD_LAYER - 1}][0]" in s and "bias" in s for s in d.suggestions)


def test_constant_weights_make_every_layer_symmetric() -> None:
    d = diagnosis("symmetric")
    assert all(layer.labels == ["symmetric"] for layer in d.layers), d.labels()
    assert all(layer.unit_spread <= doctor.SYMMETRIC_SPREAD for layer in d.layers)
    assert d.problems == ["symmetric"] and "identical units" in d.verdict


def test_sigmoid_stack_keeps_its_scale_while_its_gradient_vanishes_on_the_way_back() -> None:
    d = diagnosis("vanishing-sigmoid")
    assert d.problems == ["vanishing"]
    # forward, every layer is within the scale bounds: the pooled std alone says healthy
    assert all(doctor.VANISHING <= layer.scale <= doctor.EXPLODING for layer in d.layers)
    weights = [layer for layer in d.layers if layer.kind == "Linear"]
    assert len(weights) == 21 and weights[-1].grad_ratio == 1.0
    assert all(
        layer.grad_ratio != layer.grad_ratio for layer in d.layers if layer.kind == "Sigmoid"
    )
    # about 1/sqrt(3) (torch's default weight scale) times sigmoid's slope, <= 1/4, per layer
    assert weights[0].grad_ratio < 1e-15
    ratios = [layer.grad_ratio for layer in weights]
    assert ratios == sorted(ratios)  # it shrinks at every layer on the way back
    hit = d.with_label("vanishing")
    assert hit == [layer.name for layer in weights[: len(hit)]] and 10 <= len(hit) <= 19
    assert "the gradient is vanishing on its way back" in d.verdict and "model[20]" in d.verdict
    assert "the scale is" not in d.verdict
    text = " ".join(d.suggestions)
    assert "feed a sigmoid" in text and "BatchNorm" in text
    assert "--fix lsuv" not in text and "use Xavier" not in text  # no re-init can cure it


@pytest.mark.parametrize("method", doctor.FIX_METHODS)
def test_no_initializer_cures_the_sigmoid_stack(method: str) -> None:
    net = zoo.build("vanishing-sigmoid")
    xs = batches("vanishing-sigmoid")
    doctor.fix(net, method, xs[0], generator=torch.Generator().manual_seed(0))
    after = doctor.diagnose(net, xs)
    assert after.problems == ["vanishing"] and "the gradient is vanishing" in after.verdict
    assert min(layer.grad_ratio for layer in after.layers if layer.kind == "Linear") < 1e-6


def test_batch_norm_cures_the_sigmoid_stack_and_layer_norm_does_not() -> None:
    xs = batches("vanishing-sigmoid")
    bn = doctor.diagnose(zoo.build("vanishing-sigmoid", norm="batch"), xs)
    assert bn.healthy, bn.labels()
    assert min(layer.grad_ratio for layer in bn.layers if layer.kind == "Linear") > 0.05
    ln = doctor.diagnose(zoo.build("vanishing-sigmoid", norm="layer"), xs)
    assert ln.problems == ["vanishing"] and "the gradient is vanishing" in ln.verdict


@pytest.mark.parametrize("name", ["transformer", "lstm"])
def test_sequence_models_get_sensible_labels(name: str) -> None:
    d = diagnosis(name)
    kinds = {layer.kind for layer in d.layers}
    if name == "lstm":
        assert kinds == {"LSTM", "Linear"}  # the LSTM's tuple output is measured (its first part)
    else:
        assert {"MultiheadAttention", "LayerNorm", "ReLU"} <= kinds
    for layer in d.layers:
        assert "vanishing" not in layer.labels and "exploding" not in layer.labels, layer
    assert d.healthy, d.labels()


# -- fixes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", doctor.FIX_METHODS)
@pytest.mark.parametrize("name", ["vanishing-tanh", "exploding-relu"])
def test_fix_cures_vanishing_and_exploding(name: str, method: str) -> None:
    net = zoo.build(name)
    xs = batches(name)
    assert not diagnosis(name).healthy
    report = doctor.fix(net, method, xs[0], generator=torch.Generator().manual_seed(0))
    after = doctor.diagnose(net, xs)
    assert all(layer.labels == ["ok"] for layer in after.layers), after.labels()
    assert report.method == method
    assert len(report.layers) == (31 if name == "vanishing-tanh" else 21)
    json.dumps(report.to_dict(), allow_nan=False)


@pytest.mark.parametrize("name", ["dead-relu", "symmetric"])
def test_he_fix_revives_dead_units_and_breaks_symmetry(name: str) -> None:
    net = zoo.build(name)
    xs = batches(name)
    doctor.fix(net, "he", xs[0], generator=torch.Generator().manual_seed(0))
    assert doctor.diagnose(net, xs).healthy


def test_fix_reads_the_activation_after_each_layer_through_norms_and_dropout() -> None:
    x = batches("resnet")[0]
    report = doctor.fix(zoo.build("resnet"), "he", x)
    assert report.follows == ["relu"] * 6 + ["linear"]  # conv -> BN -> ReLU; head: nothing
    assert report.gains[0] == pytest.approx(2**0.5)
    t = doctor.fix(zoo.build("transformer"), "xavier", batches("transformer")[0])
    follows = dict(zip(t.layers, t.follows, strict=True))
    assert follows["encoder.layers.0.linear1"] == "relu"
    assert follows["encoder.layers.0.linear2"] == "linear" and follows["head"] == "linear"


def test_he_draws_the_std_its_formula_gives() -> None:
    net = nn.Sequential(nn.Linear(400, 300), nn.LeakyReLU(0.2), nn.Linear(300, 200), nn.Tanh())
    doctor.fix(net, "he", torch.randn(8, 400), generator=torch.Generator().manual_seed(0))
    assert isinstance(net[0], nn.Linear) and isinstance(net[2], nn.Linear)
    leaky = (2 / (1 + 0.2**2)) ** 0.5 / 400**0.5
    assert net[0].weight.std().item() == pytest.approx(leaky, rel=0.02)
    assert net[2].weight.std().item() == pytest.approx((5 / 3) / 300**0.5, rel=0.02)
    assert torch.count_nonzero(net[0].bias) == 0


def test_fix_refuses_unknown_methods_and_models_without_weights() -> None:
    with pytest.raises(ValueError, match=r"method 'kaiming' not supported, use one of"):
        doctor.fix(zoo.build("lstm"), "kaiming", batches("lstm")[0])
    with pytest.raises(ValueError, match="no Linear or Conv1d/2d/3d layer"):
        doctor.fix(nn.Sequential(nn.Tanh()), "he", torch.randn(4, 3))


# -- thresholds, on models whose numbers are known exactly -------------------------------------


def scaled_identity(gain: float) -> nn.Sequential:
    layer = nn.Linear(8, 8)
    with torch.no_grad():
        layer.weight.copy_(gain * torch.eye(8))
        layer.bias.zero_()
    return nn.Sequential(layer)


@pytest.mark.parametrize(
    ("gain", "labels"),
    [
        (0.5 * doctor.VANISHING, ["vanishing"]),
        (2.0 * doctor.VANISHING, ["ok"]),
        (0.5 * doctor.EXPLODING, ["ok"]),
        (2.0 * doctor.EXPLODING, ["exploding"]),
    ],
)
def test_scale_thresholds(gain: float, labels: list[str]) -> None:
    x = 3.0 * torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
    d = doctor.diagnose(scaled_identity(gain), x)
    assert d.input_std == pytest.approx(3.0, rel=0.1)  # the scale is relative to the input's
    assert d.layers[0].scale == pytest.approx(gain, rel=1e-3)
    assert d.layers[0].labels == labels


def two_scaled_identities(a: float, b: float) -> nn.Sequential:
    """``x -> b (a x)``: two bias-free Linear layers whose weights are ``a I`` and ``b I``."""
    layers = [nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False)]
    with torch.no_grad():
        for layer, gain in zip(layers, (a, b), strict=True):
            layer.weight.copy_(gain * torch.eye(8))
    return nn.Sequential(*layers)


@pytest.mark.parametrize(
    "rho",
    [
        0.5 * doctor.GRAD_VANISHING,
        2.0 * doctor.GRAD_VANISHING,
        0.5 * doctor.GRAD_EXPLODING,
        2.0 * doctor.GRAD_EXPLODING,
    ],
)
def test_one_layer_s_gradient_ratio_past_a_bound_is_no_label_without_a_depth_trend(
    rho: float,
) -> None:
    # With readout gradient R: dL/dW_2 = a R^T x and dL/dW_1 = b R^T x, |W_1| = a sqrt(8) and
    # |W_2| = b sqrt(8), so rho_1 = (b / a)^2. The forward scale stays within its bounds. A
    # ratio is set by the layer's role as much as by depth (an attention's query at init, a
    # convolution's few shared weights): the vanishing gradient the theory describes is a fall
    # along the depth (the sigmoid stack's, above), and two layers make no trend.
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
    d = doctor.diagnose(two_scaled_identities(1.0, rho**0.5), x)
    first, last = d.layers
    assert first.grad_ratio == pytest.approx(rho, rel=1e-4) and last.grad_ratio == 1.0
    assert doctor.VANISHING < last.scale < doctor.EXPLODING
    assert d.trend is None and first.labels == ["ok"] and last.labels == ["ok"]


def test_gradient_ratio_is_the_relative_weight_gradient_over_the_last_layer_s() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3))
    xs = [torch.randn(32, 6, generator=torch.Generator().manual_seed(k)) for k in range(2)]
    d = doctor.diagnose(net, xs, generator=torch.Generator().manual_seed(7))
    readout_gen = torch.Generator().manual_seed(7)
    readout = torch.randn(32, 3, generator=readout_gen)  # the doctor draws it once, first
    steps = []
    for x in xs:
        net.zero_grad()
        ((net(x) * readout).sum() / 32).backward()
        steps.append([float(m.weight.grad.norm() / m.weight.detach().norm()) for m in net[::2]])
    want = [sum(s[j] for s in steps) / 2 for j in range(3)]  # averaged over the steps
    got = {layer.name: layer.grad_ratio for layer in d.layers}
    assert got["0"] == pytest.approx(want[0] / want[2], rel=1e-5)
    assert got["2"] == pytest.approx(want[1] / want[2], rel=1e-5)
    assert got["4"] == 1.0
    assert all(got[name] != got[name] for name in ("1", "3"))  # no weights: nan


def test_the_relative_gradients_come_to_the_host_in_one_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One copy for all layers, not one per layer (each would wait for a GPU): shown on the
    meta device, with a layer whose weights got no gradient among them."""
    net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)).to("meta")
    for m in (net[0], net[2]):
        m.weight.grad = torch.empty_like(m.weight)
    read: list[str] = []
    for name in ("item", "tolist", "numpy", "__bool__", "__float__"):
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _n=name, **k: read.append(_n))
    monkeypatch.setattr(torch.Tensor, "cpu", lambda self: read.append("cpu") or self)
    assert _relative_gradients(weight_layers(net)).shape == (3,)
    assert read == ["cpu"]


def test_relative_gradients_are_the_weight_gradient_norm_over_the_weight_norm() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 3), nn.Linear(3, 2))
    net(torch.randn(8, 6))[:, :1].sum().backward()
    net[1].weight.grad = None  # no gradient: nan
    got = _relative_gradients(weight_layers(net))
    want = [float(m.weight.grad.norm() / m.weight.detach().norm()) for m in (net[0], net[2])]
    assert got.dtype == torch.float64 and got.device.type == "cpu" and got.shape == (3,)
    assert got[0].item() == pytest.approx(want[0], rel=1e-6) and math.isnan(got[1].item())
    assert got[2].item() == pytest.approx(want[1], rel=1e-6)


@pytest.mark.parametrize(("dead_units", "labelled"), [(4, False), (5, True)])
def test_dead_threshold(dead_units: int, labelled: bool) -> None:
    layer = nn.Linear(8, 8)
    with torch.no_grad():
        layer.bias.zero_()
        layer.bias[:dead_units] = -100.0
    net = nn.Sequential(layer, nn.ReLU())
    d = doctor.diagnose(net, torch.randn(64, 8, generator=torch.Generator().manual_seed(0)))
    relu = d.layers[1]
    assert relu.dead_frac == dead_units / 8
    assert ("dead" in relu.labels) is labelled  # 4/8 = 50% < 60% <= 5/8


def test_saturation_of_tanh_and_sigmoid() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Sigmoid())
    with torch.no_grad():
        for m in (net[0], net[2]):
            assert isinstance(m, nn.Linear)
            m.weight.normal_(0.0, 1.0)  # pre-activations with std ~8: pinned at the ends
    x = torch.randn(128, 64, generator=torch.Generator().manual_seed(0))
    d = doctor.diagnose(net, x)
    tanh, sigmoid = d.layers[1], d.layers[3]
    assert "saturated" in tanh.labels and "saturated" in sigmoid.labels
    y = net[:2](x)
    assert tanh.saturated_frac == pytest.approx((y.abs() >= 0.99).float().mean().item(), abs=0.02)
    assert d.layers[0].saturated_frac != d.layers[0].saturated_frac  # nan: not bounded
    net_small = nn.Sequential(nn.Linear(64, 64), nn.Tanh())  # torch's default init: no saturation
    assert doctor.diagnose(net_small, x).layers[1].labels == ["ok"]
    assert "saturated" in doctor.diagnose(net, x).problems


def test_the_doctor_counts_only_what_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole outputs get no zero count (dead units are judged per unit), and a saturation count
    only where the model has a tanh-like layer: each is a pass over every output."""
    import normlab.probe

    counted: list[str] = []
    real = normlab.probe._count

    def count(flag: Any, *args: Any) -> torch.Tensor:
        counted.append(flag.__name__)
        return real(flag, *args)

    monkeypatch.setattr(normlab.probe, "_count", count)
    x = torch.randn(32, 16, generator=torch.Generator().manual_seed(0))
    relu = doctor.diagnose(nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 2)), x)
    assert counted == [] and math.isnan(relu.layers[1].saturated_frac)
    tanh = doctor.diagnose(nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 2)), x)
    assert set(counted) == {"ge"} and tanh.layers[1].saturated_frac >= 0


def test_constant_relu_units_are_symmetric_where_one_item_is_all_zero() -> None:
    """Equal ReLU units are all 0 on an item whose pre-activation is negative (about half of
    them): the spread reads more than the first item, so the layer is still found symmetric."""
    net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 1))
    with torch.no_grad():
        for layer in (net[0], net[2]):
            layer.weight.fill_(0.5)
            layer.bias.zero_()
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    x[0] = -x[0].abs()  # the first item: every unit's pre-activation < 0, so the ReLU is 0
    assert net[:2](x[:1]).abs().max() == 0
    assert doctor.diagnose(net, x).layers[1].labels == ["symmetric"]


def test_symmetry_needs_every_unit_identical() -> None:
    layer = nn.Linear(4, 6)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(1, 4).expand(6, 4))
        layer.bias.zero_()
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    assert doctor.diagnose(nn.Sequential(layer), x).layers[0].labels == ["symmetric"]
    with torch.no_grad():
        layer.weight[5, 0] += 0.1  # one unit differs
    assert doctor.diagnose(nn.Sequential(layer), x).layers[0].labels == ["ok"]


def test_inf_and_nan_are_labelled_non_finite_alone_and_lead_the_verdict() -> None:
    """Weights of 1e25 overflow float32 at the second layer (1e25 * 1e25 * 8 > 3.4e38): from
    there on every output is inf or nan, and the gradient back to the first layer is nan too."""
    net = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8))
    with torch.no_grad():
        for layer in net:
            layer.weight.fill_(1e25)
    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(0))
    d = doctor.diagnose(net, x)
    assert [la.labels for la in d.layers] == [["non-finite"]] * 3
    assert math.isfinite(d.layers[0].act_std) and not math.isfinite(d.layers[1].act_mean)
    assert d.problems == ["non-finite"]
    assert d.verdict.startswith("inf or nan values in 3 layer(s), from model[0]; the forward pass ")
    assert "first overflows at model[1]" in d.verdict
    assert "clip_grad_norm_" in d.suggestions[0]
    assert d.layers[1].criteria() == ["non-finite: an activation or gradient element is inf or nan"]
    assert d.to_dict()["layers"][1]["finite"] is False


def test_a_nan_gradient_alone_is_non_finite() -> None:
    """A finite forward pass whose loss gradient is nan (0 * inf on the way back)."""

    class NanBack(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, y: torch.Tensor) -> torch.Tensor:
            return y.clone()

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return grad * math.nan

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(NanBack.apply(self.a(x)))

    x = torch.randn(32, 8, generator=torch.Generator().manual_seed(0))
    d = doctor.diagnose(Net(), x)
    assert [la.labels for la in d.layers] == [["non-finite"], ["ok"]]
    assert math.isfinite(d.layers[0].act_std)  # the forward pass was finite


def test_conv_units_are_channels() -> None:
    conv = nn.Conv2d(3, 4, 3, padding=1)
    with torch.no_grad():
        conv.weight.copy_(torch.randn(1, 3, 3, 3).expand(4, 3, 3, 3))  # every channel the same
        conv.bias.zero_()
    net = nn.Sequential(conv, nn.ReLU())
    x = torch.randn(8, 3, 6, 6, generator=torch.Generator().manual_seed(0))
    d = doctor.diagnose(net, x)
    assert d.layers[0].labels == ["symmetric"] and d.layers[1].labels == ["symmetric"]
    with torch.no_grad():
        conv.bias.copy_(torch.tensor([0.0, 0.0, -100.0, -100.0]))  # channels 2 and 3 die
    relu = doctor.diagnose(net, x).layers[1]
    assert relu.dead_frac == 0.5 and relu.unit_spread > 0.5


# -- running the model -------------------------------------------------------------------------


def test_diagnosing_changes_nothing_in_the_model() -> None:
    net = zoo.build("resnet")
    state = {k: v.clone() for k, v in net.state_dict().items()}
    doctor.diagnose(net, batches("resnet"))
    for k, v in net.state_dict().items():
        assert torch.equal(v, state[k]), k
    assert all(p.grad is None for p in net.parameters())


def test_to_dict_is_strict_json_with_the_documented_keys() -> None:
    d = diagnosis("vanishing-tanh").to_dict()
    text = json.dumps(d, allow_nan=False)
    back = json.loads(text)
    assert set(back) == {
        "layers",
        "verdict",
        "problems",
        "suggestions",
        "input_shape",
        "input_std",
        "steps",
        "notes",
        "trend",
        "stream",
    }
    assert back["stream"] is None  # no residual add
    assert back["notes"] == []  # a float input, an eager model: nothing read differently
    first = back["layers"][0]
    keys = {"name", "labels", "act_mean", "act_std", "dead_frac", "grad_std", "grad_ratio"}
    keys |= {"role", "anchor", "reference", "gain", "predicted_gain", "criteria"}
    assert keys <= set(first)
    linear, tanh = back["layers"][0], back["layers"][1]
    assert linear["saturated_frac"] is None and tanh["saturated_frac"] is not None  # nan -> null
    assert back["input_shape"] == [BATCH, zoo.MLP_IN]


class Count(nn.Module):
    def forward(self, x: torch.Tensor) -> int:
        return x.numel()


def test_the_model_s_own_errors_and_outputs() -> None:
    with pytest.raises(doctor.ModelInputError, match=r"input of shape \(4, 5\): RuntimeError: "):
        doctor.diagnose(zoo.build("exploding-relu"), torch.randn(4, 5))

    class Dict(nn.Module):
        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"y": x, "w": x}  # two fields, neither a default one: which is meant?

    with pytest.raises(doctor.ModelOutputError, match=r"tensor fields \['y', 'w'\]: name"):
        doctor.diagnose(Dict(), torch.randn(4, 5))
    with pytest.raises(doctor.ModelOutputError, match="returned int, use a model that returns"):
        doctor.diagnose(nn.Sequential(nn.Linear(5, 3), Count()), torch.randn(4, 5))

    class Pair(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(5, 3)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
            return self.lin(x), 7

    d = doctor.diagnose(Pair(), torch.randn(16, 5))
    assert names(d) == ["lin"] and d.layers[0].grad_std > 0
    with pytest.raises(ValueError, match="batches is empty"):
        doctor.diagnose(Pair(), [])


# -- the doctor experiment ---------------------------------------------------------------------


def test_doctor_experiment_is_registered_with_complete_declarations() -> None:
    e = get_experiment("doctor")
    params = {p.name: p for p in e.parameters}
    assert set(params) == {"model", "init", "norm", "steps", "batch", "seed", "device"}
    assert params["model"].choices == tuple(zoo.MODELS)
    assert params["init"].choices == ("default", "he", "xavier", "orthogonal", "lsuv")
    for p in e.parameters:
        assert p.help and p.validate(p.default) == p.default
        if p.kind == "int":
            assert p.min is not None and p.max is not None


def test_doctor_experiment_runs_and_records_its_params() -> None:
    r = run_experiment("doctor", model="exploding-relu", steps=2, batch=32, seed=3)
    d = r.to_dict()
    back = json.loads(json.dumps(d, allow_nan=False))
    assert back["experiment"] == "doctor" and back["params"]["seed"] == 3
    assert back["problems"][0] == "exploding" and back["fix"] is None
    assert back["layers"][-1]["labels"] == ["exploding"]
    tables = r.tables()
    assert [len(t.rows) for t in tables] == [len(r.layers), len(r.suggestions)]
    assert tables[0].columns[-1] == "labels" and tables[1].title.startswith("Verdict: ")
    same = run_experiment("doctor", model="exploding-relu", steps=2, batch=32, seed=3).to_dict()
    assert same == d


def test_doctor_experiment_init_and_norm_cure() -> None:
    fixed = run_experiment("doctor", model="vanishing-tanh", init="lsuv", steps=1, batch=32)
    assert fixed.problems == [] and fixed.fix is not None and fixed.fix.lsuv is not None
    normed = run_experiment("doctor", model="vanishing-tanh", norm="batch", steps=1, batch=32)
    assert normed.problems == [] and any(layer.kind == "BatchNorm1d" for layer in normed.layers)
    revived = run_experiment("doctor", model="dead-relu", norm="layer", steps=1, batch=32)
    assert "dead" not in revived.problems  # LayerNorm removes the far-negative bias


def test_doctor_experiment_refuses_a_norm_where_the_model_takes_none() -> None:
    with pytest.raises(ParameterError, match=r"'norm': 'batch' is not allowed for model 'resnet'"):
        run_experiment("doctor", model="resnet", norm="batch")
    with pytest.raises(ParameterError) as info:
        run_experiment("doctor", model="lstm", norm="layer")
    assert info.value.param == "norm"


def test_result_round_trips_through_dataclasses() -> None:
    r = run_experiment("doctor", model="symmetric", steps=1, batch=16)
    assert dataclasses.is_dataclass(r) and r.diagnosis.problems == ["symmetric"]


# -- examine: what `normlab doctor [--fix]` runs ---------------------------------------------------


def test_examine_is_diagnose_fix_diagnose_on_one_generator() -> None:
    xs = batches("vanishing-tanh")
    net = zoo.build("vanishing-tanh")
    # a short check (2 seeds of 30 steps), passed through to the trial: the defaults' own trial
    # is test_calibration's; Xavier's cure shows by 30 steps (log gain 0.81, spread 0.10)
    g = torch.Generator().manual_seed(3)
    exam = doctor.examine(net, xs, fix="xavier", generator=g, trial_steps=30, seeds=2)
    # the specification: the three calls in that order, drawing from one generator
    ref, g = zoo.build("vanishing-tanh"), torch.Generator().manual_seed(3)
    before = doctor.diagnose(ref, xs, generator=g)
    report = doctor.fix(ref, "xavier", xs[0], generator=g)
    given = zoo.build("vanishing-tanh")
    after = doctor.diagnose(ref, xs, generator=g)
    # then the training comparison, judged with both diagnoses
    redo, addresses = (before, after), doctor.REMEDIES["xavier"].addresses
    check = doctor.trial(
        given, ref, xs, steps=30, seeds=2, generator=g, diagnoses=redo, addresses=addresses
    )
    assert exam.to_dict() == {
        **before.to_dict(),
        "fix": {**report.to_dict(), "after": after.to_dict(), "trial": check.to_dict()},
    }
    assert exam.trial is not None and exam.trial.cured  # Xavier makes the 30 tanh layers learn
    assert exam.before.problems == ["vanishing"] and exam.after is not None and exam.after.healthy
    assert exam.fix is not None and exam.fix.follows == ["tanh"] * 30 + ["linear"]
    for (name, w), (_, w_ref) in zip(
        net.state_dict().items(), ref.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(w, w_ref, rtol=0, atol=0, msg=name)  # fixed in place, alike
    json.dumps(exam.to_dict(), allow_nan=False)


def test_examine_without_a_fix_only_diagnoses() -> None:
    net = zoo.build("exploding-relu")
    weights = [w.clone() for w in net.state_dict().values()]
    x = torch.randn(zoo.input_shape("exploding-relu", BATCH))
    exam = doctor.examine(net, x)  # one batch, no list
    assert (exam.fix, exam.after) == (None, None) and "fix" not in exam.to_dict()
    assert exam.before.problems[0] == "exploding"
    assert all(torch.equal(a, b) for a, b in zip(weights, net.state_dict().values(), strict=True))


def test_examine_refuses_an_unknown_method_before_it_runs() -> None:
    net = zoo.build("vanishing-tanh")
    with pytest.raises(ValueError, match=r"method 'kaiming' not supported, use one of \('he'"):
        doctor.examine(net, [], fix="kaiming")  # no batch: nothing ran


def test_layer_names_are_written_as_the_python_that_reaches_them() -> None:
    """A Sequential's "1.0" reads as a number; model[1][0] is a name a learner can type."""
    net = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.nn.ReLU())
    net.add_module("head", torch.nn.ModuleList([torch.nn.Linear(2, 1)]))
    model = net  # noqa: F841  (the name every path starts from)
    for name, module in net.named_modules():
        path = doctor.module_path(name)
        assert eval(path) is module, (name, path)
    assert doctor.module_path("head.0") == "model.head[0]"
    assert doctor.module_path("encoder.layer.11.attention") == "model.encoder.layer[11].attention"


@pytest.mark.parametrize("shape", [(16, 8), (3, 5, 7), (4, 6, 5, 5), (1, 10), (2, 3, 4, 5)])
def test_dead_fraction_counts_the_units_zero_on_every_element(shape: tuple[int, ...]) -> None:
    """The two-look dead-unit statistic against its definition, read off every element: units
    zeroed on the whole batch, units zero on the first item only (alive), nan (alive)."""
    from normlab.doctor.stats import _dead_frac

    g = torch.Generator().manual_seed(len(shape))
    for trial in range(50):
        y = torch.relu(torch.randn(shape, generator=g) - 3 * torch.rand((), generator=g))
        y[:, torch.rand(shape[1], generator=g) < 0.3] = 0.0  # dead along dim 1
        y[..., torch.rand(shape[-1], generator=g) < 0.3] = 0.0  # dead along the last dim
        y[:1, 0] = 0.0  # unit 0 looks dead on the first item
        if trial % 5 == 0:
            y.view(-1)[-1] = math.nan
        for dim in (1, -1):
            d = dim % y.dim()
            per_unit = y.movedim(d, 0).reshape(y.shape[d], -1)  # (units, elements)
            expected = (per_unit == 0).all(dim=1).double().mean().item()
            got = _dead_frac(dim)(y).item()
            if dim == -1 and y.dim() == 2:
                assert math.isnan(got)
            else:
                assert got == pytest.approx(expected, abs=1e-15), (trial, dim)


def test_unit_spread_reads_the_first_items_holding_32_values_of_each_unit() -> None:
    """A Linear output (N, F) is compared on its first 32 rows, a conv output (N, C, 8, 8) on
    its first image (64 values of each channel): what comes after does not move the spread."""
    from normlab.doctor.stats import _unit_spread

    g = torch.Generator().manual_seed(0)
    for shape, items in [((64, 5), 32), ((4, 3, 8, 8), 1), ((8, 6, 2, 3), 6)]:  # 32 / 6: 6
        y = torch.randn(shape, generator=g)
        y[: items + 1] = y[:1]  # units differ, and the first items repeat item 0
        same = y.clone()
        same[items:] = 100.0  # later items: far from all of it
        assert _unit_spread(1)(y).item() == _unit_spread(1)(same).item()
        moved = y.clone()
        moved[items - 1] = 0.0  # the last item the spread reads: unit 1 alone, and far out
        moved[items - 1, 1] = 1000.0
        read = moved[:items]  # the spec: unit 0 against every unit, over the spread round the mean
        want = (read - read[:, :1]).abs().max() / (read - read.mean()).abs().max()
        assert _unit_spread(1)(moved).item() == pytest.approx(want.item(), rel=1e-6)  # float32
        assert _unit_spread(1)(moved).item() != _unit_spread(1)(y).item()


def _descendants(base: type) -> set[type]:
    found = set()
    for sub in base.__subclasses__():
        found |= {sub, *_descendants(sub)}
    return found


@pytest.mark.parametrize(
    ("base", "public"),
    [
        (nn.modules.batchnorm._BatchNorm, kinds._BATCH_NORMS),
        (nn.modules.instancenorm._InstanceNorm, kinds._INSTANCE_NORMS),
        (nn.modules.conv._ConvNd, kinds._CONVS),
        (nn.modules.dropout._DropoutNd, kinds._DROPOUTS),
        (nn.modules.pooling._MaxPoolNd, kinds._POOLS),
        (nn.modules.pooling._AvgPoolNd, kinds._POOLS),
        (nn.modules.pooling._AdaptiveAvgPoolNd, kinds._POOLS),
        (nn.modules.pooling._AdaptiveMaxPoolNd, kinds._POOLS),
    ],
    ids=lambda x: getattr(x, "__name__", None),
)
def test_the_doctor_s_public_classes_cover_each_private_torch_base(
    base: type, public: tuple[type, ...]
) -> None:
    """The doctor names torch's public classes, not their private bases: every public torch.nn
    class of a base is one of them (the quantized ones are refused before a model runs)."""
    torch_nn = [
        c
        for c in _descendants(base)
        if c.__module__.startswith("torch.nn.") and not c.__name__.startswith("_")
    ]
    assert torch_nn
    assert [c for c in torch_nn if not issubclass(c, public)] == []


@pytest.mark.parametrize("shape", [(3, 5), (16, 3, 5, 5), (4, 2, 3), (2, 6, 1, 2, 3)])
def test_fans_are_torch_s(shape: tuple[int, ...]) -> None:
    w = torch.empty(shape)
    assert kinds.fans(w) == nn.init._calculate_fan_in_and_fan_out(w)


def test_fans_need_two_dimensions() -> None:
    with pytest.raises(ValueError, match="2\\+ dimensions"):
        kinds.fans(torch.empty(4))
