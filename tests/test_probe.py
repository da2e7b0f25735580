"""normlab.probe: every statistic against a direct computation on the same tensors.

The reference side records each module's outputs with its own forward hooks (or the gradients
with ``torch.autograd.grad``) and computes in float64 with plain torch/numpy. Tolerances:

- min, max, sample counts (zeros, saturated): exact;
- mean: ``|Δ| <= 1e-5 * rms`` of the values (the probe sums in float64, so this is loose);
- std, gradient std and norm: relative ``1e-5`` (no test tensor has a mean large against its
  std, where the one-pass formula would lose digits).
"""

from __future__ import annotations

import gc
import json
import math
import re
import tracemalloc
import weakref
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

import normlab.probe
from normlab.probe import (
    SAMPLE_SIZE,
    ActivationProbe,
    ActivationStats,
    GradientProbe,
    _sums,
    first_float_tensor,
    sample_indices,
    select_modules,
)

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
SATURATION = 0.99  # |tanh| at which the tests count a unit saturated (the probe's is opt-in)


# -- models and references -------------------------------------------------------------------------


def mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 48), nn.Tanh(), nn.Linear(48, 3)
    )


def cnn(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )


class Recorder:
    """Keeps a clone of each named module's measured output, per step, from its own hooks."""

    def __init__(self, model: nn.Module, names: list[str] | None = None) -> None:
        wanted = names if names is not None else [n for n, _ in select_modules(model)]
        self.steps: list[dict[str, list[Tensor]]] = [defaultdict(list)]
        self.handles = []
        for name, module in model.named_modules():
            if name in wanted:
                self.handles.append(module.register_forward_hook(self._hook(name)))

    def _hook(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            y = first_float_tensor(output)
            if y is not None:
                self.steps[-1][name].append(y.detach().clone())

        return hook

    def step(self) -> None:
        self.steps.append(defaultdict(list))

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def expected(
    outs: list[Tensor], sample_size: int | None, saturation: float = SATURATION
) -> dict[str, Any]:
    """The statistics of one layer at one step, computed directly (float64) on the elements
    :func:`sample_indices` names (all of them for ``sample_size=None`` or small outputs)."""
    picked = [o.reshape(-1)[sample_indices(o.numel(), sample_size)].double() for o in outs]
    sample = torch.cat(picked)
    values = sample.numpy()
    return {
        "mean": sample.mean().item(),
        "std": sample.std().item() if sample.numel() > 1 else math.nan,
        "min": sample.min().item(),
        "max": sample.max().item(),
        "rms": sample.pow(2).mean().sqrt().item(),
        "zero_frac": float(np.mean(values == 0)),
        "saturated_frac": float(np.mean(np.abs(values) >= saturation)),
        "numel": sum(o.numel() for o in outs),
        "sampled": sample.numel(),
        "calls": len(outs),
    }


def check_layer(stats: ActivationStats, step: int, name: str, want: dict[str, Any]) -> None:
    j = stats.layers.index(name)
    where = f"step {step} layer {name!r}"
    assert abs(stats.mean[step][j] - want["mean"]) <= 1e-5 * want["rms"], where
    assert stats.std[step][j] == pytest.approx(want["std"], rel=1e-5), where
    assert stats.min[step][j] == want["min"], where
    assert stats.max[step][j] == want["max"], where
    assert stats.zero_frac[step][j] == want["zero_frac"], where
    assert stats.saturated_frac[step][j] == want["saturated_frac"], where
    assert stats.numel[step][j] == want["numel"], where
    assert stats.sampled[step][j] == want["sampled"], where
    assert stats.calls[step][j] == want["calls"], where


def run_steps(
    model: nn.Module, inputs: list[Tensor], **probe_args: Any
) -> tuple[ActivationStats, Recorder]:
    recorder = Recorder(model, [n for n, _ in select_modules(model, probe_args.get("modules"))])
    with ActivationProbe(model, **{"saturation": SATURATION, **probe_args}) as probe:
        for x in inputs:
            model(x)
            probe.step()
            recorder.step()
    recorder.close()
    return probe.result(), recorder


def no_hooks(model: nn.Module) -> bool:
    return all(
        not m._forward_hooks and not m._forward_pre_hooks and not m._backward_hooks
        for m in model.modules()
    )


# -- activation statistics against a direct computation --------------------------------------------


@pytest.mark.parametrize("sample_size", [64, 1024, 4096, None])
def test_mlp_statistics_equal_direct(sample_size: int | None) -> None:
    model = mlp()
    g = torch.Generator().manual_seed(1)
    inputs = [torch.randn(40, 12, generator=g) * s for s in (1.0, 3.0, 0.3)]
    stats, rec = run_steps(model, inputs, sample_size=sample_size)
    assert stats.layers == ["0", "1", "2", "3", "4"]
    assert stats.kinds == ["Linear", "ReLU", "Linear", "Tanh", "Linear"]
    assert stats.steps == 3
    for step in range(3):
        for name in stats.layers:
            check_layer(stats, step, name, expected(rec.steps[step][name], sample_size))
    j = stats.layers.index("1")
    assert 0.2 < stats.zero_frac[0][j] < 0.8  # a ReLU: the zeros are really there
    if sample_size == 64:
        assert stats.sampled[0][j] == 64 < stats.numel[0][j] == 40 * 48


def test_cnn_statistics_equal_direct() -> None:
    model = cnn().train()
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randn(6, 3, 10, 10, generator=g) for _ in range(2)]
    stats, rec = run_steps(model, inputs, sample_size=500)
    assert stats.kinds == [
        "Conv2d",
        "BatchNorm2d",
        "ReLU",
        "Conv2d",
        "ReLU",
        "AdaptiveAvgPool2d",
        "Flatten",
        "Linear",
    ]
    for step in range(2):
        for name in stats.layers:
            check_layer(stats, step, name, expected(rec.steps[step][name], 500))
    every, _ = run_steps(cnn().train(), inputs[:1], sample_size=None)
    bn = every.layers.index("1")  # training-mode BatchNorm: mean 0, biased var 1 per channel
    assert abs(every.mean[0][bn]) < 1e-6
    assert every.std[0][bn] == pytest.approx(1.0, abs=0.01)
    assert every.sampled[0][bn] == every.numel[0][bn] == 6 * 8 * 10 * 10


def test_saturation_setting_and_outliers() -> None:
    x = torch.tensor([[-9.0, -1.0, -0.5, 0.0, 0.0, 0.25, 0.5, 1.0, 2.0, math.inf, math.nan]])
    model = nn.Identity()
    with ActivationProbe(model, saturation=0.5) as probe:
        model(x)
    stats = probe.result()
    assert stats.zero_frac[0][0] == 2 / 11  # nan is not 0
    assert stats.saturated_frac[0][0] == 7 / 11  # |x| >= 0.5: -9 -1 -0.5 0.5 1 2 inf
    assert math.isnan(stats.mean[0][0])
    assert stats.to_dict()["mean"] == [[None]]
    with ActivationProbe(model) as default:  # no saturation: not measured
        model(x)
    assert math.isnan(default.result().saturated_frac[0][0])


@pytest.mark.parametrize("sample_size", [16, None])
def test_zeros_off_leaves_zero_frac_nan_and_every_other_number_as_it_was(
    sample_size: int | None,
) -> None:
    """``zeros=False`` counts no zeros (``nan``) and changes nothing else: both probes watch the
    same passes, sampled and whole."""
    model = mlp()
    with (
        ActivationProbe(model, sample_size=sample_size, saturation=SATURATION) as counted,
        ActivationProbe(model, sample_size=sample_size, saturation=SATURATION, zeros=False) as not_,
    ):
        for _ in range(2):
            model(torch.randn(9, 12))
            counted.step()
            not_.step()
    got, want = not_.result().to_dict(), counted.result().to_dict()
    assert got.pop("zero_frac") == [[None] * 5] * 2
    assert any(f > 0 for f in want.pop("zero_frac")[0])  # the ReLU's zeros, when counted
    assert got == want


def test_several_forward_calls_in_one_step_pool() -> None:
    model = mlp()
    g = torch.Generator().manual_seed(3)
    rec = Recorder(model)
    calls = 70
    with ActivationProbe(model, saturation=SATURATION, sample_size=50) as probe:
        with torch.inference_mode():  # rows made in inference mode, stacked outside it
            for _ in range(calls):
                model(torch.randn(9, 12, generator=g))
        probe.step()
        model(torch.randn(9, 12, generator=g))
    rec.close()
    stats = probe.result()  # closes the pending second step
    assert stats.steps == 2 and stats.calls[0] == [calls] * 5
    for name in stats.layers:  # four layers sampled (432 elements), the last one whole (27)
        check_layer(stats, 0, name, expected(rec.steps[0][name][:calls], 50))
        check_layer(stats, 1, name, expected(rec.steps[0][name][calls:], 50))


def test_shared_layer_is_one_layer_with_pooled_calls() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(6, 6)
            self.act = nn.ReLU()

        def forward(self, x: Tensor) -> Tensor:
            return self.act(self.inner(self.act(self.inner(x))))

    torch.manual_seed(0)
    model = Twice()
    stats, rec = run_steps(model, [torch.randn(5, 6)])
    assert stats.layers == ["inner", "act"]
    assert stats.calls[0] == [2, 2]
    for name in stats.layers:
        check_layer(stats, 0, name, expected(rec.steps[0][name], 1024))


def test_user_statistics_are_averaged_over_calls() -> None:
    model = mlp()

    def abs_max(y: Tensor) -> Tensor:
        return y.abs().amax()

    stats_fns = {"abs_max": abs_max, "first": lambda y: y.reshape(-1)[0].double()}
    rec = Recorder(model)
    g = torch.Generator().manual_seed(4)
    with ActivationProbe(model, stats=stats_fns) as probe:
        model(torch.randn(7, 12, generator=g))
        model(torch.randn(7, 12, generator=g))
        probe.step()
    rec.close()
    stats = probe.result()
    assert list(stats.extra) == ["abs_max", "first"]
    for j, name in enumerate(stats.layers):
        outs = rec.steps[0][name]
        want = sum(o.abs().max().item() for o in outs) / 2
        assert stats.extra["abs_max"][0][j] == pytest.approx(want, rel=1e-6)
        first = sum(o.reshape(-1)[0].item() for o in outs) / 2
        assert stats.extra["first"][0][j] == pytest.approx(first, rel=1e-6)


@pytest.mark.parametrize("sample_size", [16, None])
def test_user_statistics_may_take_any_name(sample_size: int | None) -> None:
    """A user statistic named like a statistic of the probe's own (``mean``, ``numel``,
    ``extra``) is kept beside it, and changes none of the probe's numbers."""
    model, x = mlp(), torch.randn(9, 12)
    named = {"mean": lambda y: y.abs().amax(), "numel": lambda y: -y.abs().amax()}
    named["extra"] = lambda y: y.reshape(-1)[0]
    with (
        ActivationProbe(model, stats=named, sample_size=sample_size) as probe,
        ActivationProbe(model, sample_size=sample_size) as plain,
    ):
        model(x)
    stats, want = probe.result(), plain.result().to_dict()
    assert {k: v for k, v in stats.to_dict().items() if k != "extra"} == {
        k: v for k, v in want.items() if k != "extra"
    }
    assert list(stats.extra) == ["mean", "numel", "extra"]
    assert stats.extra["mean"][0] == [-v for v in stats.extra["numel"][0]]
    assert all(v > 0 for v in stats.extra["mean"][0]) and stats.numel == want["numel"]


@pytest.mark.parametrize(
    ("fn", "error", "words"),
    [
        (lambda y: 1.0, TypeError, "stats['bad'] must return a Tensor"),
        (lambda y: y.mean(0), ValueError, "stats['bad'] must return a Tensor with one element"),
    ],
)
def test_user_statistic_with_a_bad_result(fn: Any, error: type, words: str) -> None:
    model = mlp()
    with pytest.raises(error, match=re.escape(words)), ActivationProbe(model, stats={"bad": fn}):
        model(torch.randn(3, 12))
    assert no_hooks(model)


# -- which modules ---------------------------------------------------------------------------------


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear1 = nn.Linear(4, 4)
        self.act = nn.ReLU()
        self.linear2 = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.act(self.linear1(x)))


def blocks() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(Block(), Block())


@pytest.mark.parametrize(
    ("modules", "names"),
    [
        (None, ["0.linear1", "0.act", "0.linear2", "1.linear1", "1.act", "1.linear2"]),
        (nn.Linear, ["0.linear1", "0.linear2", "1.linear1", "1.linear2"]),
        ((nn.ReLU, Block), ["0", "0.act", "1", "1.act"]),
        ([nn.ReLU], ["0.act", "1.act"]),
        ("*.linear2", ["0.linear2", "1.linear2"]),
        ("1*", ["1", "1.linear1", "1.act", "1.linear2"]),
        (re.compile(r"\d\.linear\d"), ["0.linear1", "0.linear2", "1.linear1", "1.linear2"]),
        (["1.act", "0"], ["0", "1.act"]),
        ([""], [""]),
        (lambda name, m: name.endswith("1"), ["0.linear1", "1", "1.linear1"]),
    ],
)
def test_module_filters(modules: Any, names: list[str]) -> None:
    model = blocks()
    assert [n for n, _ in select_modules(model, modules)] == names
    with ActivationProbe(model, modules) as probe:
        model(torch.randn(2, 4))
    order = probe.result().layers  # forward order: a block starts before its children finish
    assert sorted(order) == sorted(names)


def test_layers_come_in_forward_order() -> None:
    class Backwards(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.last = nn.Linear(4, 2)
            self.first = nn.Linear(3, 4)
            self.unused = nn.Linear(2, 2)

        def forward(self, x: Tensor) -> Tensor:
            return self.last(self.first(x))

    model = Backwards()
    stats, _ = run_steps(model, [torch.randn(2, 3)])
    assert stats.layers == ["first", "last"]  # registration order differs; unused is left out


@pytest.mark.parametrize(
    ("modules", "error", "words"),
    [
        (["0.linear1", "nope", "2"], ValueError, "modules: ['nope', '2'] not in the model"),
        ("*.conv", ValueError, "modules: the model has no module whose name matches the glob"),
        (nn.Conv2d, ValueError, "modules: the model has no module of type Conv2d"),
        (lambda n, m: False, ValueError, "modules: the model has no module for which"),
        (int, TypeError, "modules: int is not a subclass of torch.nn.Module"),
        (3, TypeError, "modules: int not supported"),
        (["0", nn.Linear], TypeError, "modules: a list must hold only names"),
    ],
)
def test_bad_module_filters(modules: Any, error: type, words: str) -> None:
    model = blocks()
    for probe_type in (ActivationProbe, GradientProbe):
        with pytest.raises(error, match=re.escape(words)):
            probe_type(model, modules)


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        out, _weights = self.attn(x, x, x)
        return out


def test_default_selection_takes_attention_not_its_unused_projection() -> None:
    torch.manual_seed(0)
    model = SelfAttention()
    names = [n for n, _ in select_modules(model)]
    assert names == ["attn", "attn.out_proj"]  # attn holds in_proj_weight; out_proj is a leaf
    x = torch.randn(2, 5, 8)
    stats, rec = run_steps(model, [x], sample_size=None)
    assert stats.layers == ["attn"]  # out_proj's forward is never called
    check_layer(stats, 0, "attn", expected(rec.steps[0]["attn"], None))
    assert rec.steps[0]["attn"][0].shape == (2, 5, 8)  # the attention output, not the weights


# -- outputs of every shape ------------------------------------------------------------------------


class DictOut(nn.Module):
    def forward(self, x: Tensor) -> dict[str, Any]:
        return {"index": x.argmax(-1), "none": None, "value": x * 2.0}


class NoneOut(nn.Module):
    def forward(self, x: Tensor) -> None:
        return None


class UsesOddOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.dict_out = DictOut()
        self.none_out = NoneOut()
        self.ints = nn.Flatten()  # applied to an integer tensor below: nothing to measure

    def forward(self, x: Tensor) -> Tensor:
        seq, _ = self.lstm(x)  # (N, T, 6), then (h, c)
        self.none_out(seq)
        self.ints(x.long())
        return self.dict_out(seq)["value"]


def test_tuple_dict_none_and_integer_outputs() -> None:
    torch.manual_seed(0)
    model = UsesOddOutputs()
    x = torch.randn(3, 5, 4)
    stats, rec = run_steps(model, [x], sample_size=None)
    assert stats.layers == ["lstm", "dict_out"]  # none_out and ints output no float tensor
    seq, _ = model.lstm(x)
    assert rec.steps[0]["lstm"][0].shape == seq.shape  # the sequence output, not (h, c)
    for name in stats.layers:
        check_layer(stats, 0, name, expected(rec.steps[0][name], None))
    grads = GradientProbe(model)
    with grads:
        model(x).sum().backward()
    assert grads.result().layers == ["lstm", "dict_out"]


def test_transformer_encoder_layers() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).train()
    x = torch.randn(3, 4, 8)
    stats, rec = run_steps(model, [x], modules=nn.TransformerEncoderLayer, sample_size=None)
    assert stats.layers == ["layers.0", "layers.1"]
    for name in stats.layers:
        check_layer(stats, 0, name, expected(rec.steps[0][name], None))
    default, _ = run_steps(model, [x])
    assert "layers.0.self_attn" in default.layers and "layers.0.norm2" in default.layers
    assert "layers.0.self_attn.out_proj" not in default.layers


# -- hooks come and go -----------------------------------------------------------------------------


def test_hooks_are_removed_on_exit_and_on_exception() -> None:
    model = mlp()
    act = ActivationProbe(model)
    grads = GradientProbe(model)
    with act, grads:
        assert not no_hooks(model)
        model(torch.randn(2, 12)).sum().backward()
        act.step()
    assert no_hooks(model)

    with pytest.raises(ZeroDivisionError), act:
        model(torch.randn(2, 12))
        raise ZeroDivisionError
    assert no_hooks(model)
    stats = act.result()  # what ran before the exception is still there
    assert stats.calls == [[1] * 5, [1] * 5]

    model(torch.randn(2, 12))  # outside: nothing recorded
    assert act.result().steps == 2


def test_a_graph_built_inside_but_run_backward_outside_records_nothing() -> None:
    model = mlp()
    with GradientProbe(model) as probe:
        out = model(torch.randn(2, 12))
    out.sum().backward()
    assert probe.result().steps == 0


def test_entering_twice_is_refused() -> None:
    probe = ActivationProbe(mlp())
    with probe, pytest.raises(RuntimeError, match="already active"), probe:
        pass


# -- memory ----------------------------------------------------------------------------------------


def _tensors() -> int:
    return sum(1 for o in gc.get_objects() if issubclass(type(o), Tensor))  # type(): no __class__


def test_memory_per_step_is_a_small_row_per_layer() -> None:
    model = mlp()
    x = torch.randn(16, 12)
    with ActivationProbe(model, stats={"abs": lambda y: y.abs().mean()}) as probe:
        for _ in range(20):  # warm up: buffers allocated, caches filled
            model(x)
            probe.step()
        gc.collect()
        tensors = _tensors()
        tracemalloc.start()
        try:
            for _ in range(20):
                model(x)
                probe.step()
            early, _ = tracemalloc.get_traced_memory()
            for _ in range(200):
                model(x)
                probe.step()
            late, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        gc.collect()
        assert _tensors() == tensors  # no tensor kept per step
    layers, per_layer = 5, 6 + 1 + 3  # statistics, user stat, counters
    numbers = 8 * layers * per_layer  # float64 / int64 each
    assert (late - early) / 200 <= 2 * numbers + 1024
    assert probe.result().steps == 240


def test_the_last_keep_steps_are_kept_with_their_numbers() -> None:
    model = mlp()
    g = torch.Generator().manual_seed(7)
    inputs = [torch.randn(6, 12, generator=g) for _ in range(7)]
    stats, rec = run_steps(model, inputs, keep=3)  # keep + 4 steps: the first four dropped
    assert stats.steps == 3 and stats.step_numbers == [4, 5, 6]
    assert len(stats.calls) == len(stats.mean) == len(stats.numel) == 3
    for k in range(3):
        for name in stats.layers:
            check_layer(stats, k, name, expected(rec.steps[4 + k][name], SAMPLE_SIZE))
    assert run_steps(model, inputs)[0].step_numbers == list(range(7))

    with GradientProbe(model, keep=2) as grads, GradientProbe(model) as every:
        for x in inputs:
            model(x).pow(2).sum().backward()
            grads.step()
            every.step()
    kept, full = grads.result(), every.result()
    assert kept.step_numbers == [5, 6] and kept.grad_std == full.grad_std[5:]
    assert kept.grad_norm == full.grad_norm[5:] and kept.calls == full.calls[5:]


def test_memory_is_bounded_by_keep() -> None:
    model = mlp()
    x = torch.randn(16, 12)
    with ActivationProbe(model, keep=10) as probe:
        for _ in range(300):  # the ring full, torch's and Python's caches warm
            model(x)
            probe.step()
        tracemalloc.start()
        try:
            for _ in range(20):
                model(x)
                probe.step()
            early, _ = tracemalloc.get_traced_memory()
            for _ in range(300):
                model(x)
                probe.step()
            late, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    row = 8 * 5 * (6 + 3)  # the bytes of one kept step: 5 layers, float64
    assert (late - early) / 300 <= row / 16  # the oldest steps are dropped, not kept
    assert probe.result().step_numbers == list(range(610, 620))


def test_reset_empties_the_probe() -> None:
    model = mlp()
    g = torch.Generator().manual_seed(8)
    xs = [torch.randn(5, 12, generator=g) for _ in range(3)]
    act, grad = ActivationProbe(model, saturation=SATURATION), GradientProbe(model)
    with act, grad:
        model(xs[0]).sum().backward()
        act.step()
        grad.step()
        model(xs[1]).sum().backward()  # pending, then forgotten
        act.reset()
        grad.reset()
        assert act.result().steps == grad.result().steps == 0
        assert act.result().layers == grad.result().layers == []
        model(xs[2]).sum().backward()  # the hooks stay
    stats, grads = act.result(), grad.result()
    assert stats.step_numbers == grads.step_numbers == [0]
    assert stats.calls == grads.calls == [[1] * 5]
    _, rec = run_steps(model, xs[2:])
    for name in stats.layers:
        check_layer(stats, 0, name, expected(rec.steps[0][name], SAMPLE_SIZE))


def test_no_activation_is_retained() -> None:
    model = mlp()
    refs: dict[str, weakref.ref[Tensor]] = {}

    def remember(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, out: Tensor) -> None:
            refs[name] = weakref.ref(out)

        return hook

    with ActivationProbe(model, sample_size=16) as probe:  # sampled outputs, and a whole one
        for name, m in model.named_children():
            m.register_forward_hook(remember(name))
        with torch.no_grad():
            model(torch.randn(4, 12))
        probe.step()
        model(torch.randn(4, 12)).sum()  # with autograd too; the graph goes with the output
        gc.collect()
        assert len(refs) == 5 and all(ref() is None for ref in refs.values())


class ScaledInPlace(nn.Module):
    """Returns its child's output after doubling it in place: the same tensor, changed."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(12, 12)

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x).mul_(2)


def nested() -> nn.Sequential:
    """Containers whose output is their last child's (``0``, ``0.1``), one that changes it in
    place first (``1``), and an ``Identity`` (``3``), whose output is its input."""
    block = nn.Sequential(nn.Linear(12, 12), nn.Sequential(nn.Linear(12, 12), nn.Tanh()))
    return nn.Sequential(block, ScaledInPlace(), nn.ReLU(), nn.Identity(), nn.Linear(12, 3))


def test_an_output_measured_again_gives_its_own_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container's output that is its last child's tensor, unchanged, is reduced once and its
    row counted for both; the one changed in place since is reduced again. Every layer's
    statistics, activations and gradients, equal direct ones."""
    torch.manual_seed(0)
    model, x = nested(), torch.randn(64, 12)
    reduced: list[int] = []
    real = normlab.probe._sums
    monkeypatch.setattr(normlab.probe, "_sums", lambda t: reduced.append(t.numel()) or real(t))
    outputs: dict[str, Tensor] = {}  # each layer's output as its hook saw it, and gradient
    gradients: dict[str, Tensor] = {}

    def keep(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, y: Tensor) -> None:
            outputs[name] = y.detach().clone()
            y.register_hook(lambda g: gradients.__setitem__(name, g))

        return hook

    every = lambda name, module: name != ""  # noqa: E731  (containers too)
    names = [n for n, _ in select_modules(model, every)]
    for name, module in select_modules(model, every):
        module.register_forward_hook(keep(name))
    with (
        ActivationProbe(model, every, sample_size=None, saturation=SATURATION) as act,
        GradientProbe(model, every) as grads,
    ):
        model(x).pow(2).sum().backward()
    stats, grad_stats = act.result(), grads.result()
    assert len(names) == 10  # 0 is 0.1's output, which is 0.1.1's; 3 is 2's; 1 is 1.inner's
    assert len(reduced) == 2 * 7  # once per distinct tensor and version, forward and back
    assert torch.equal(outputs["1"], 2 * outputs["1.inner"])
    for name in names:
        check_layer(stats, 0, name, expected([outputs[name]], None))
        g, j = gradients[name], grad_stats.layers.index(name)
        assert grad_stats.grad_std[0][j] == pytest.approx(g.std().item(), rel=1e-5), name
        assert grad_stats.grad_norm[0][j] == pytest.approx(g.norm().item(), rel=1e-5), name


def test_one_host_transfer_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    model = mlp()
    x = torch.randn(8, 12)
    seen: list[str] = []

    def counting(name: str) -> Callable[..., Any]:
        original = getattr(torch.Tensor, name)

        def method(self: Tensor, *args: Any, **kwargs: Any) -> Any:
            if name != "item" or self.device.type != "cpu":  # a CPU item(): nothing waits
                seen.append(name)
            return original(self, *args, **kwargs)

        return method

    with (
        ActivationProbe(model, stats={"abs": lambda y: y.abs().mean()}) as act,
        GradientProbe(model) as grad,
    ):
        model(x).sum().backward()  # warm up: the sample indices
        act.step()
        grad.step()
        for name in ("cpu", "item", "tolist", "numpy", "__bool__", "__float__", "__int__"):
            monkeypatch.setattr(torch.Tensor, name, counting(name))
        for _ in range(3):
            model(x).sum().backward()
        assert seen == []  # nothing waited for the device during the passes
        act.step()
        assert seen == ["cpu", "numpy"]  # numpy() of a host tensor: no wait
        seen.clear()
        grad.step()
        assert seen == ["cpu", "numpy"]


def _two_pass(x: Tensor) -> tuple[float, float]:
    wide = x.double()
    return wide.sum().item(), (wide - wide.mean()).square().sum().item()


SCALES = [1e-30, 1e-20, 1e-12, 1e-3, 1.0, 1e3, 1e6, 1e18, 1e25]
IN_RANGE = [
    (dtype, scale)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64)
    for scale in SCALES
    if torch.finfo(dtype).tiny < scale < torch.finfo(dtype).max / 16
]


@pytest.mark.parametrize(("dtype", "scale"), IN_RANGE)
def test_sums_match_float64_at_every_scale(dtype: torch.dtype, scale: float) -> None:
    """Float32 sums where their squares fit, float64 where they would underflow (a vanishing
    gradient's 1e-20) or overflow (1e25): to 1e-6 of the float64 two-pass sums either way, for
    a flat tensor and a view that is not contiguous."""
    x = (torch.randn(100_000, dtype=torch.float64) * scale + 3 * scale).to(dtype)
    want_total, want_squares = _two_pass(x)
    for layout in (x, x.view(1000, 100).t()):  # flat, and a transposed view: not contiguous
        total, squares = _sums(layout).tolist()
        assert squares > 0 and squares == pytest.approx(want_squares, rel=1e-6)
        assert total == pytest.approx(want_total, rel=1e-6)


def test_a_constant_gradient_has_next_to_no_spread() -> None:
    """``out.mean()``'s gradient, 1/n on every element: the two-pass sums give a std of 0 to
    float32's rounding of the mean, where one pass would leave sqrt(eps) of it."""
    net = nn.Sequential(nn.Linear(64, 4096))
    with GradientProbe(net) as probe:
        net(torch.randn(128, 64)).mean().backward()
    got = probe.result()
    assert got.grad_std[0][0] < 1e-6 / (128 * 4096)
    assert got.grad_norm[0][0] == pytest.approx(1 / math.sqrt(128 * 4096), rel=1e-6)


def test_the_sums_off_the_cpu_read_nothing_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off the CPU, :func:`_sums` takes the float64 way without a look at the host (the CPU's
    float32 check reads one number, which waits for no device): shown on the meta device."""
    read: list[str] = []
    for name in ("cpu", "item", "tolist", "numpy", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _n=name, **k: read.append(_n))
    for dtype in (torch.float32, torch.float16, torch.float64):
        assert _sums(torch.empty(100, device="meta", dtype=dtype)).dtype == torch.float64
    assert read == []


# -- modes, dtypes, in-place -----------------------------------------------------------------------


def test_inference_mode_and_no_grad() -> None:
    model = mlp()
    x = torch.randn(5, 12)
    rec = Recorder(model)
    with ActivationProbe(model, saturation=SATURATION) as probe:
        with torch.inference_mode():
            model(x)
        probe.step()
        with torch.no_grad():
            model(x)
        probe.step()
        model(x)
    rec.close()
    stats = probe.result()
    for step in range(3):
        for name in stats.layers:
            check_layer(stats, step, name, expected(rec.steps[0][name][step : step + 1], 1024))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_other_dtypes(dtype: torch.dtype) -> None:
    model = mlp().to(dtype)
    x = torch.randn(20, 12, dtype=dtype)
    stats, rec = run_steps(model, [x], sample_size=100)
    for name in stats.layers:
        outs = rec.steps[0][name]
        want = expected(outs, 100)
        j = stats.layers.index(name)
        assert stats.min[0][j] == want["min"] and stats.max[0][j] == want["max"]
        assert stats.zero_frac[0][j] == want["zero_frac"]
        assert stats.std[0][j] == pytest.approx(want["std"], rel=1e-5)


def test_samples_of_one_length_in_several_dtypes_are_reduced_together() -> None:
    class Mixed(nn.Module):  # a bfloat16 layer, then a float64 one: both sampled to 16 elements
        def __init__(self) -> None:
            super().__init__()
            self.low = nn.Linear(6, 6).to(torch.bfloat16)
            self.high = nn.Linear(6, 6).double()

        def forward(self, x: Tensor) -> Tensor:
            return self.high(self.low(x.to(torch.bfloat16)).double())

    torch.manual_seed(0)
    model = Mixed()
    stats, rec = run_steps(model, [torch.randn(5, 6), torch.randn(3, 6)], sample_size=16)
    assert stats.sampled == [[16, 16], [16, 16]]
    for step in range(2):
        for name in stats.layers:
            check_layer(stats, step, name, expected(rec.steps[step][name], 16))


def test_inplace_relu_after_linear() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.ReLU(inplace=True), nn.Linear(7, 1))
    x = torch.randn(9, 5)
    pre = model[0](x).detach()  # the Linear output before the in-place ReLU touches it
    with ActivationProbe(model) as act, GradientProbe(model) as grad:
        model(x).sum().backward()
    stats = act.result()
    assert stats.min[0][0] == pre.min().item() < 0  # measured before the ReLU overwrote it
    # dL/d(linear output) = w2 masked by the ReLU, for every row
    g = (pre > 0).double() * model[2].weight.detach().double()  # (9, 7)
    grads = grad.result()
    assert grads.grad_norm[0][0] == pytest.approx(g.norm().item(), rel=1e-5)


# -- gradients -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("factory", "shape"), [(mlp, (11, 12)), (cnn, (4, 3, 8, 8))])
def test_gradient_statistics_equal_direct(
    factory: Callable[[], nn.Module], shape: tuple[int, ...]
) -> None:
    model = factory().train()
    g = torch.Generator().manual_seed(5)
    names = [n for n, _ in select_modules(model)]
    want_std: list[list[float]] = []
    want_norm: list[list[float]] = []

    def keep_grad(name: str, outs: dict[str, Tensor]) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, out: Tensor) -> None:
            out.retain_grad()
            outs[name] = out

        return hook

    with GradientProbe(model) as probe:
        for _ in range(3):
            outs: dict[str, Tensor] = {}
            handles = [
                model.get_submodule(n).register_forward_hook(keep_grad(n, outs)) for n in names
            ]
            model(torch.randn(shape, generator=g)).pow(2).mean().backward()
            for h in handles:
                h.remove()
            gs = [outs[n].grad for n in names]
            assert all(x is not None for x in gs)
            want_std.append([x.double().std().item() for x in gs if x is not None])
            want_norm.append([x.double().norm().item() for x in gs if x is not None])
            probe.step()
    got = probe.result()
    assert got.layers == names
    np.testing.assert_allclose(got.grad_std, want_std, rtol=1e-5)
    np.testing.assert_allclose(got.grad_norm, want_norm, rtol=1e-5)
    assert got.calls == [[1] * len(names)] * 3


def test_channels_last_outputs_equal_direct() -> None:
    """Outputs in channels-last layout (dense, not contiguous) are reduced as they are, with no
    flat copy; their statistics and gradients equal direct ones."""
    model = cnn().to(memory_format=torch.channels_last).train()
    x = torch.randn(4, 3, 8, 8).to(memory_format=torch.channels_last)
    outs: dict[str, Tensor] = {}

    def keep(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, out: Tensor) -> None:
            out.retain_grad()
            outs[name] = out

        return hook

    names = [n for n, _ in select_modules(model)]
    for n in names:
        model.get_submodule(n).register_forward_hook(keep(n))
    with (
        ActivationProbe(model, sample_size=None, saturation=SATURATION) as act,
        GradientProbe(model) as grad,
    ):
        model(x).pow(2).sum().backward()
    assert not outs["0"].is_contiguous()
    stats, grads = act.result(), grad.result()
    for name in names:
        y, g = outs[name].detach(), outs[name].grad
        check_layer(stats, 0, name, expected([y], None))
        assert g is not None
        j = grads.layers.index(name)
        assert grads.grad_std[0][j] == pytest.approx(g.double().std().item(), rel=1e-5), name
        assert grads.grad_norm[0][j] == pytest.approx(g.double().norm().item(), rel=1e-5), name


def test_gradient_probe_pools_backward_calls() -> None:
    model = mlp()
    x = torch.randn(4, 12)
    with GradientProbe(model) as probe:
        model(x).sum().backward()
        model(x * 2).sum().backward()  # gradient accumulation: one step, two backward calls
    got = probe.result()
    assert got.calls == [[2] * 5]
    assert got.numel[0][0] == 2 * 4 * 48
    g = model[4].weight.detach().double().sum(0)  # (48,): dL/d(Tanh output) of each row
    assert got.grad_norm[0][3] == pytest.approx(math.sqrt(2 * 4 * g.pow(2).sum().item()), rel=1e-5)


# -- results ---------------------------------------------------------------------------------------


def test_to_dict_is_json() -> None:
    model = mlp()
    stats, _ = run_steps(model, [torch.randn(3, 12), torch.randn(3, 12)])
    data = json.loads(json.dumps(stats.to_dict(), allow_nan=False))
    assert data["layers"] == stats.layers and data["std"] == stats.std
    assert len(data["mean"]) == 2 and len(data["mean"][1]) == 5

    with ActivationProbe(model) as empty:
        pass
    assert empty.result().steps == 0 and empty.result().to_dict()["mean"] == []


def test_empty_step_and_late_layers() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    with ActivationProbe(model) as probe:
        probe.step()  # nothing ran: a step of nan
        model[0](torch.randn(2, 3))
        probe.step()
        model(torch.randn(2, 3))
        probe.step()
    stats = probe.result()
    assert stats.layers == ["0", "1"]
    assert math.isnan(stats.mean[0][0]) and stats.calls[0] == [0, 0]
    assert math.isnan(stats.std[1][1]) and stats.calls[1] == [1, 0]  # "1" not called yet
    assert math.isnan(stats.min[1][1]) and stats.numel[1][1] == 0
    assert stats.calls[2] == [1, 1]
    assert json.dumps(stats.to_dict(), allow_nan=False)


def test_constant_output_has_std_exactly_zero() -> None:
    model = nn.Sequential(nn.Linear(4, 5))
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.fill_(0.1)
    stats, _ = run_steps(model, [torch.randn(7, 4)])
    assert stats.std[0][0] == 0.0 and stats.mean[0][0] == pytest.approx(0.1)
    one, _ = run_steps(nn.Identity(), [torch.tensor([2.0])])  # one element: min == max
    assert math.isnan(one.std[0][0]) and one.min[0][0] == one.max[0][0] == 2.0


@pytest.mark.parametrize("sample_size", [SAMPLE_SIZE, None])
def test_a_nearly_constant_output_keeps_its_std(sample_size: int | None) -> None:
    """A collapsed sigmoid's 0.5 +- 1e-9 (float64): the one-pass sum of squares would cancel
    (2.5e4 * eps ~ 5e-12 of error against a variance of 1e-18); two passes keep it, across calls
    of different means as well."""
    g = torch.Generator().manual_seed(0)
    outs = [
        0.5 + k * 1e-7 + 1e-9 * torch.randn(100, 500, dtype=torch.float64, generator=g)
        for k in range(3)
    ]
    with ActivationProbe(nn.Identity(), sample_size=sample_size) as probe:
        for y in outs:
            probe._layers[0][1](y)
        probe.step()
    picked = torch.cat([o.reshape(-1)[sample_indices(o.numel(), sample_size)] for o in outs])
    assert probe.result().std[0][0] == pytest.approx(picked.std().item(), rel=1e-6)


def test_counts_stay_exact_beyond_float32_integers() -> None:
    """Above 2**24 elements float32 cannot count 1s one by one: the zeros of a whole output of
    2**24 + 8 elements are counted in float64 (its 2**24 + 5 nonzero ones are no float32)."""
    y = torch.ones(2**24 + 8)
    y[:3] = 0.0
    with ActivationProbe(nn.Identity(), sample_size=None) as probe:
        probe._layers[0][1](y)
    assert probe.result().zero_frac[0][0] == 3 / (2**24 + 8)


def test_gradient_hooks_of_finished_graphs_are_dropped_at_each_step() -> None:
    model = mlp()
    with GradientProbe(model) as probe:
        for _ in range(50):
            model(torch.randn(3, 12)).sum().backward()
            probe.step()
        assert len(probe._handles) == 5  # the module hooks; the tensor hooks went with the graphs
    assert no_hooks(model) and probe.result().calls == [[1] * 5] * 50


# -- the sample ------------------------------------------------------------------------------------


@SETTINGS
@given(numel=st.integers(1, 5000), size=st.integers(1, 700))
def test_sample_indices_are_distinct_and_spread(numel: int, size: int) -> None:
    index = sample_indices(numel, size).tolist()
    assert len(set(index)) == len(index) == min(numel, size)
    assert all(0 <= i < numel for i in index)
    if numel <= size:
        assert index == list(range(numel))
    for item in (d for d in range(2, 64) if numel % d == 0):  # any item size dividing numel
        hits = np.bincount(np.array(index) % item, minlength=item)
        assert hits.max() - hits.min() <= 1, (item, hits)  # every position of an item alike


def test_sample_indices_none_is_everything() -> None:
    assert sample_indices(7, None).tolist() == list(range(7))


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"model": "net"}, TypeError, "model must be a torch.nn.Module, got str"),
        ({"sample_size": 2.5}, TypeError, "sample_size must be an integer"),
        ({"sample_size": True}, TypeError, "sample_size must be an integer"),
        ({"saturation": 0.0}, ValueError, "saturation must be a finite positive number or None"),
        ({"saturation": math.nan}, ValueError, "saturation must be a finite positive number"),
        ({"saturation": "0.9"}, TypeError, "saturation must be a finite number or None"),
        ({"saturation": True}, TypeError, "saturation must be a finite number or None"),
        ({"zeros": 0}, TypeError, "zeros must be True or False, got 0"),
        ({"zeros": None}, TypeError, "zeros must be True or False, got None"),
        ({"sample_size": 0}, ValueError, "sample_size must be an integer in [1, "),
        ({"keep": 0}, ValueError, "keep must be an integer in [1, "),
        ({"keep": True}, TypeError, "keep must be an integer in [1, "),
        ({"keep": 10.0}, TypeError, "keep must be an integer in [1, "),
        ({"stats": [len]}, TypeError, "stats must be a mapping"),
        ({"stats": {"x": 3}}, TypeError, "stats must map names (str) to functions, got 'x': 3"),
        ({"stats": {"": len}}, TypeError, "stats must map names (str) to functions, got ''"),
    ],
)
def test_activation_probe_bad_input(kwargs: dict[str, Any], error: type, words: str) -> None:
    args = {"model": mlp(), **kwargs}
    with pytest.raises(error, match=re.escape(words)):
        ActivationProbe(**args)


def test_gradient_probe_bad_input() -> None:
    with pytest.raises(TypeError, match=re.escape("model must be a torch.nn.Module, got list")):
        GradientProbe([nn.Linear(2, 2)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("keep must be an integer in [1, ")):
        GradientProbe(mlp(), keep=-1)


def test_select_modules_bad_model() -> None:
    with pytest.raises(TypeError, match=re.escape("model must be a torch.nn.Module")):
        select_modules(object())  # type: ignore[arg-type]


def test_outputs_changing_size_between_steps() -> None:
    model = mlp()[:2]
    g = torch.Generator().manual_seed(6)
    inputs = [torch.randn(b, 12, generator=g) for b in (40, 2, 40, 3, 1)]
    stats, rec = run_steps(model, inputs, sample_size=200)  # every row full, then every row short
    for step in range(len(inputs)):
        for name in stats.layers:
            check_layer(stats, step, name, expected(rec.steps[step][name], 200))


def test_the_default_sample_represents_the_whole_output() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.Tanh())
    x = torch.randn(256, 256)
    rec = Recorder(model)
    with ActivationProbe(model) as probe:  # 1024 of 65536 elements per output
        model(x)
    rec.close()
    stats = probe.result()
    assert stats.sampled[0] == [1024] * 4 and stats.numel[0] == [65536] * 4
    for j, name in enumerate(stats.layers):
        whole = expected(rec.steps[0][name], None)
        assert stats.std[0][j] == pytest.approx(whole["std"], rel=0.05), name
        assert abs(stats.mean[0][j] - whole["mean"]) < 0.1 * whole["std"], name
        assert abs(stats.zero_frac[0][j] - whole["zero_frac"]) < 0.05, name


def test_a_sample_size_above_the_output_takes_it_whole() -> None:
    model = mlp()
    stats, rec = run_steps(model, [torch.randn(5, 12)], sample_size=1 << 21)
    for name in stats.layers:
        check_layer(stats, 0, name, expected(rec.steps[0][name], None))
