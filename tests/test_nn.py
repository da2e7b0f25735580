"""normlab.nn against torch.nn: same seed, same input, same parameters; compare everything.

Every comparison is ``torch.testing.assert_close`` at its defaults unless a line says otherwise
(float32: rtol 1.3e-6, atol 1e-5; float64: rtol 1e-7, atol 1e-7). Buffers are compared after each
training step and the eval output after the last; ``num_batches_tracked`` must be equal exactly.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as tF
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn as tnn

import normlab.functional
from normlab import nn

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = settings(max_examples=30, deadline=None, derandomize=True)


def _randomize(ours: torch.nn.Module, theirs: torch.nn.Module, seed: int = 1) -> None:
    """Give both modules the same non-trivial parameters (weight near 1, bias near 0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for (name, p), (name_t, q) in zip(
            ours.named_parameters(), theirs.named_parameters(), strict=True
        ):
            assert name == name_t
            value = torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5
            p.copy_(value + (1.0 if name == "weight" else 0.0))
            q.copy_(p)


def _compare_step(ours, theirs, x, dy) -> None:
    """One forward+backward through both: outputs, input and parameter gradients, buffers."""
    xo, xt = x.clone().requires_grad_(), x.clone().requires_grad_()
    yo, yt = ours(xo), theirs(xt)
    torch.testing.assert_close(yo, yt)
    po, pt = list(ours.parameters()), list(theirs.parameters())
    go = torch.autograd.grad(yo, [xo, *po], dy)
    gt = torch.autograd.grad(yt, [xt, *pt], dy)
    batch_stats = ours.training or not getattr(ours, "track_running_stats", True)
    if batch_stats and isinstance(ours, nn.BatchNorm1d | nn.BatchNorm2d):
        _close_input_grads(go[0], gt[0], x, dy)
        go, gt = go[1:], gt[1:]
    for a, b in zip(go, gt, strict=True):
        torch.testing.assert_close(a, b)
    _compare_buffers(ours, theirs)


def _close_input_grads(ours, theirs, x, dy) -> None:
    """BatchNorm's input gradient under batch statistics, at a tolerance derived per channel.

    dx = (dy - mean(dy) - x_hat * mean(dy * x_hat)) / sigma sums m = N*H*W terms per channel,
    each up to max|dy| / sigma, and x_hat = (x - mean) / sigma carries a relative rounding error
    of about eps * max|x| / sigma (x - mean cancels when a channel's spread is small beside its
    offset, as a batch of 2 or 3 often draws). Two correct computations differ by at most
    c * m * eps * max|dy| / sigma * max(1, max|x| / sigma): measured c <= 1.13 over 13,200 random
    1d/2d cases (float32 and float64, m <= 24); c = 4 here, and never below assert_close's default.
    """
    dims = [0, *range(2, x.dim())]  # every dimension but the channel's
    m = x.numel() // x.shape[1]
    sigma = x.var(dims, unbiased=False, keepdim=True).add(1e-5).sqrt()  # (1, C, 1...)
    size = dy.abs().amax(dims, keepdim=True) / sigma  # (1, C, 1...)
    cancel = (x.abs().amax(dims, keepdim=True) / sigma).clamp(min=1)  # (1, C, 1...)
    default_atol, rtol = (1e-5, 1.3e-6) if x.dtype == torch.float32 else (1e-7, 1e-7)
    atol = (4 * m * torch.finfo(x.dtype).eps * size * cancel).clamp(min=default_atol)
    gap = (ours - theirs).abs()
    assert (gap <= atol + rtol * theirs.abs()).all(), gap.max()


def _compare_buffers(ours, theirs) -> None:
    bo, bt = dict(ours.named_buffers()), dict(theirs.named_buffers())
    assert bo.keys() == bt.keys()
    for key, value in bo.items():
        if key == "num_batches_tracked":
            assert value.dtype == torch.long and torch.equal(value, bt[key])
        else:
            torch.testing.assert_close(value, bt[key])


def _batches(shape, dtype=torch.float32, steps=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    scale = torch.rand(shape[1], generator=g, dtype=dtype) * 5 + 0.5  # per-channel scale
    view = (1, -1) + (1,) * (len(shape) - 2)
    for _ in range(steps):
        x = torch.randn(shape, generator=g, dtype=dtype) * scale.view(view) + 3.0
        yield x, torch.randn(shape, generator=g, dtype=dtype)


# --- batch norm parity ----------------------------------------------------------------------

BN_CASES = [
    ("BatchNorm1d", (8, 5)),
    ("BatchNorm1d", (6, 5, 4)),
    ("BatchNorm2d", (4, 5, 3, 3)),
]


@pytest.mark.parametrize(("cls", "shape"), BN_CASES)
@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("track", [True, False])
def test_batch_norm_matches_torch(cls, shape, momentum, affine, track):
    kwargs = {"momentum": momentum, "affine": affine, "track_running_stats": track}
    ours, theirs = getattr(nn, cls)(shape[1], **kwargs), getattr(tnn, cls)(shape[1], **kwargs)
    _randomize(ours, theirs)
    batches = list(_batches(shape, steps=4))
    for x, dy in batches[:3]:  # training steps
        _compare_step(ours, theirs, x, dy)
    ours.eval(), theirs.eval()
    _compare_step(ours, theirs, *batches[3])  # eval: running stats (or batch stats untracked)
    _compare_buffers(ours, theirs)


def test_batch_norm_without_bias_matches_torch():
    ours, theirs = nn.BatchNorm1d(4, bias=False), tnn.BatchNorm1d(4, bias=False)
    assert ours.bias is None
    _randomize(ours, theirs)
    for x, dy in _batches((6, 4)):
        _compare_step(ours, theirs, x, dy)


def test_batch_norm_float64_matches_torch():
    ours = nn.BatchNorm2d(3, dtype=torch.float64)
    theirs = tnn.BatchNorm2d(3, dtype=torch.float64)
    assert ours.weight.dtype == torch.float64 and ours.num_batches_tracked.dtype == torch.long
    _randomize(ours, theirs)
    for x, dy in _batches((3, 3, 4, 4), torch.float64):
        _compare_step(ours, theirs, x, dy)


def test_momentum_none_is_cumulative_average():
    norm = nn.BatchNorm1d(3, momentum=None)
    means, variances = [], []
    for x, _ in _batches((10, 3), steps=5):
        norm(x)
        means.append(x.mean(0))
        variances.append(x.var(0))  # unbiased, as the running estimate uses
    # Batch k weighs 1/k: after k batches the buffer is the plain average of the k batch stats.
    torch.testing.assert_close(norm.running_mean, torch.stack(means).mean(0))
    torch.testing.assert_close(norm.running_var, torch.stack(variances).mean(0))
    assert norm.num_batches_tracked.item() == 5


def test_num_batches_tracked_counts_training_batches_only():
    norm = nn.BatchNorm1d(3)
    x = torch.randn(4, 3)
    norm(x), norm(x)
    norm.eval()
    norm(x)
    assert norm.num_batches_tracked.dtype == torch.long
    assert norm.num_batches_tracked.item() == 2


def test_untracked_batch_norm_uses_batch_stats_in_eval():
    norm = nn.BatchNorm1d(3, track_running_stats=False)
    assert norm.running_mean is None and norm.running_var is None
    assert norm.num_batches_tracked is None
    x = torch.randn(6, 3) * 4 + 1
    train_out = norm(x)
    norm.eval()
    torch.testing.assert_close(norm(x), train_out)
    assert set(norm.state_dict()) == {"weight", "bias"}


def test_reset_parameters_and_running_stats():
    ours, theirs = nn.BatchNorm1d(3), tnn.BatchNorm1d(3)
    _randomize(ours, theirs)
    for x, _ in _batches((5, 3)):
        ours(x)
    ours.reset_running_stats()
    assert torch.equal(ours.running_mean, torch.zeros(3))
    assert torch.equal(ours.running_var, torch.ones(3))
    assert ours.num_batches_tracked.item() == 0
    ours.reset_parameters()
    fresh = tnn.BatchNorm1d(3)
    for key, value in fresh.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key


# --- layer norm, group norm, RMSNorm parity -------------------------------------------------


@pytest.mark.parametrize(("normalized_shape", "shape"), [(5, (4, 5)), ((3, 4), (2, 5, 3, 4))])
@pytest.mark.parametrize(("affine", "bias"), [(True, True), (True, False), (False, True)])
def test_layer_norm_matches_torch(normalized_shape, shape, affine, bias):
    kwargs = {"elementwise_affine": affine, "bias": bias}
    ours = nn.LayerNorm(normalized_shape, **kwargs)
    theirs = tnn.LayerNorm(normalized_shape, **kwargs)
    _randomize(ours, theirs)
    for x, dy in _batches(shape, steps=2):
        _compare_step(ours, theirs, x, dy)
    ours.eval(), theirs.eval()
    _compare_step(ours, theirs, *next(_batches(shape, seed=5)))


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(4, 6, 5), (2, 6, 3, 3)])
def test_group_norm_matches_torch(groups, affine, shape):
    ours, theirs = nn.GroupNorm(groups, 6, affine=affine), tnn.GroupNorm(groups, 6, affine=affine)
    _randomize(ours, theirs)
    for x, dy in _batches(shape, steps=2):
        _compare_step(ours, theirs, x, dy)


@pytest.mark.parametrize(("normalized_shape", "shape"), [(5, (4, 5)), ((3, 4), (2, 3, 4))])
@pytest.mark.parametrize("eps", [None, 1e-3])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rms_norm_matches_torch(normalized_shape, shape, eps, affine, dtype):
    kwargs = {"eps": eps, "elementwise_affine": affine, "dtype": dtype}
    ours, theirs = nn.RMSNorm(normalized_shape, **kwargs), tnn.RMSNorm(normalized_shape, **kwargs)
    _randomize(ours, theirs)
    for x, dy in _batches(shape, dtype, steps=2):
        _compare_step(ours, theirs, x, dy)


# --- state_dict, repr -----------------------------------------------------------------------

MODULES = [
    ("BatchNorm1d", (3,), {}, (6, 3)),
    ("BatchNorm1d", (3,), {"momentum": None, "affine": False}, (6, 3, 2)),
    ("BatchNorm1d", (3,), {"track_running_stats": False}, (6, 3)),
    ("BatchNorm2d", (3,), {}, (2, 3, 4, 4)),
    ("LayerNorm", ((2, 4),), {"bias": False}, (3, 2, 4)),
    ("GroupNorm", (2, 4), {}, (3, 4, 5)),
    ("RMSNorm", (4,), {"eps": 1e-4}, (3, 4)),
]


def _train_a_little(module: torch.nn.Module, shape) -> None:
    _randomize(module, module)  # non-default parameters
    for x, _ in _batches(shape, steps=2):
        module(x)


@pytest.mark.parametrize(("cls", "args", "kwargs", "shape"), MODULES)
def test_state_dict_loads_into_torch_and_back(cls, args, kwargs, shape):
    ours, theirs = getattr(nn, cls)(*args, **kwargs), getattr(tnn, cls)(*args, **kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())  # same keys, same order
    x = next(_batches(shape, seed=9))[0]

    _train_a_little(ours, shape)
    theirs.load_state_dict(ours.state_dict(), strict=True)  # ours -> torch
    ours.eval(), theirs.eval()
    torch.testing.assert_close(theirs(x), ours(x))
    _compare_buffers(ours, theirs)

    theirs, ours = getattr(tnn, cls)(*args, **kwargs), getattr(nn, cls)(*args, **kwargs)
    _train_a_little(theirs, shape)
    ours.load_state_dict(theirs.state_dict(), strict=True)  # torch -> ours
    ours.eval(), theirs.eval()
    torch.testing.assert_close(ours(x), theirs(x))
    _compare_buffers(ours, theirs)


def test_state_dict_without_num_batches_tracked_loads():
    # A checkpoint from before num_batches_tracked existed (version 1): the count starts at 0.
    theirs = tnn.BatchNorm1d(3)
    state = theirs.state_dict()
    del state["num_batches_tracked"]
    state._metadata[""]["version"] = 1  # type: ignore[attr-defined]
    ours = nn.BatchNorm1d(3)
    ours.num_batches_tracked.fill_(7)
    ours.load_state_dict(state, strict=True)
    assert ours.num_batches_tracked.item() == 0


@pytest.mark.parametrize(("cls", "args", "kwargs", "shape"), MODULES)
def test_repr_matches_torch(cls, args, kwargs, shape):
    assert repr(getattr(nn, cls)(*args, **kwargs)) == repr(getattr(tnn, cls)(*args, **kwargs))


@pytest.mark.parametrize(("cls", "args", "kwargs", "shape"), MODULES)
def test_forward_calls_normlab_functional(cls, args, kwargs, shape, monkeypatch):
    # torch's normalization kernels are off limits: make every one of them raise.
    def forbidden(*a, **k):
        raise AssertionError("torch's normalization kernel was called")

    for name in ("batch_norm", "layer_norm", "group_norm", "rms_norm"):
        monkeypatch.setattr(tF, name, forbidden)
        monkeypatch.setattr(torch, name, forbidden)
    monkeypatch.setattr(torch, "native_batch_norm", forbidden)
    called = []
    fn_name = {"BatchNorm1d": "batch_norm", "BatchNorm2d": "batch_norm"}.get(
        cls, {"LayerNorm": "layer_norm", "GroupNorm": "group_norm", "RMSNorm": "rms_norm"}.get(cls)
    )
    real = getattr(normlab.functional, fn_name)
    monkeypatch.setattr(
        normlab.functional, fn_name, lambda *a, **k: called.append(1) or real(*a, **k)
    )
    module = getattr(nn, cls)(*args, **kwargs)
    x = next(_batches(shape))[0].requires_grad_()
    module(x).sum().backward()
    assert called


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "shape"),
    [
        (nn.BatchNorm1d(3), (1, 3)),
        (nn.BatchNorm1d(3), (1, 3, 1)),
        (nn.BatchNorm2d(3), (1, 3, 1, 1)),
    ],
)
def test_one_value_per_channel_in_training_is_refused(module, shape):
    message = f"Expected more than 1 value per channel when training, got input size {list(shape)}"
    with pytest.raises(ValueError, match=re.escape(message)):
        module(torch.randn(shape))


def test_eval_with_batch_of_one_works():
    ours, theirs = nn.BatchNorm1d(3), tnn.BatchNorm1d(3)
    for x, _ in _batches((5, 3)):
        ours(x), theirs(x)
    ours.eval(), theirs.eval()
    x = torch.randn(1, 3)
    torch.testing.assert_close(ours(x), theirs(x))


@pytest.mark.parametrize(
    ("module", "shape", "expected"),
    [
        (nn.BatchNorm1d(3), (3,), "expected 2D (N, C) or 3D (N, C, L) input, got 1D input"),
        (nn.BatchNorm1d(3), (2, 3, 4, 5), "expected 2D (N, C) or 3D (N, C, L) input, got 4D"),
        (nn.BatchNorm2d(3), (2, 3), "expected 4D (N, C, H, W) input, got 2D input"),
        (nn.BatchNorm2d(3), (2, 3, 4), "expected 4D (N, C, H, W) input, got 3D input"),
        (nn.BatchNorm1d(3), (4, 5), "BatchNorm1d(3) expected 3 channels in dim 1"),
    ],
)
def test_wrong_input_shape_is_refused(module, shape, expected):
    with pytest.raises(ValueError, match=re.escape(expected)):
        module(torch.randn(shape))


def test_group_norm_refuses_indivisible_channels():
    message = "num_channels (6) must be divisible by num_groups (4)"
    with pytest.raises(ValueError, match=re.escape(message)):
        nn.GroupNorm(4, 6)


# --- the seed figures -----------------------------------------------------------------------


def test_seed_figure_columns_come_out_standardized():
    torch.manual_seed(0)
    x = torch.randn(4, 3) * torch.tensor([1.0, 10.0, 100.0])
    y = nn.BatchNorm1d(3)(x)
    assert torch.equal(y.mean(0).round(decimals=4).abs(), torch.zeros(3))
    assert torch.equal(y.std(0, unbiased=False).round(decimals=4), torch.ones(3))


def test_seed_figure_running_stats_after_one_pass():
    torch.manual_seed(0)
    norm = nn.BatchNorm1d(3)
    x = torch.randn(4, 3) * 10
    norm(x)
    # Figures printed to 2 dp: compare the rounded buffers at 1e-6 (float32 noise of the rounding).
    expected_mean = torch.tensor([0.53, -0.28, -1.03])
    expected_var = torch.tensor([7.27, 7.56, 10.97])
    torch.testing.assert_close(
        norm.running_mean.round(decimals=2), expected_mean, atol=1e-6, rtol=0
    )
    torch.testing.assert_close(norm.running_var.round(decimals=2), expected_var, atol=1e-6, rtol=0)


# --- property tests -------------------------------------------------------------------------


@st.composite
def bn_configs(draw):
    kind = draw(st.sampled_from(["1d-2D", "1d-3D", "2d"]))
    n, c = draw(st.integers(2, 6)), draw(st.integers(1, 5))
    spatial = {
        "1d-2D": (),
        "1d-3D": (draw(st.integers(1, 5)),),
        "2d": (draw(st.integers(1, 4)), draw(st.integers(1, 4))),
    }[kind]
    momentum = draw(st.one_of(st.none(), st.floats(0.0, 1.0)))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    affine, track = draw(st.booleans()), draw(st.booleans())
    seed = draw(st.integers(0, 2**31 - 1))
    return kind, (n, c, *spatial), momentum, dtype, affine, track, seed


@SETTINGS
@given(bn_configs())
def test_batch_norm_property_matches_torch(config):
    kind, shape, momentum, dtype, affine, track, seed = config
    cls = "BatchNorm2d" if kind == "2d" else "BatchNorm1d"
    kwargs = {"momentum": momentum, "affine": affine, "track_running_stats": track, "dtype": dtype}
    ours, theirs = getattr(nn, cls)(shape[1], **kwargs), getattr(tnn, cls)(shape[1], **kwargs)
    _randomize(ours, theirs, seed)
    batches = list(_batches(shape, dtype, steps=3, seed=seed))
    for x, dy in batches[:2]:
        _compare_step(ours, theirs, x, dy)
    ours.eval(), theirs.eval()
    _compare_step(ours, theirs, *batches[2])


# --- the benchmark runs ---------------------------------------------------------------------


def test_benchmark_quick_runs():
    script = ROOT / "benchmarks" / "batchnorm.py"
    result = subprocess.run(
        [sys.executable, str(script), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    pattern = r"^ratio formula / ours \(>= 1\.0: no slower\)\s+\d+\.\d+\s+\d+\.\d+$"
    assert re.search(pattern, result.stdout, re.M), result.stdout
