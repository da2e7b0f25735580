"""normlab.functional against torch.nn.functional: same seed, same input, compare.

Tolerances: ``torch.testing.assert_close`` defaults unless a line says otherwise (float32: rtol
1.3e-6, atol 1e-5; float64: rtol 1e-7, atol 1e-7). ``gradcheck`` runs in float64 with its own
defaults (eps 1e-6, atol 1e-5, rtol 1e-3).
"""

import inspect
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as tF
from hypothesis import given, settings
from hypothesis import strategies as st

from normlab import functional as F

BN_SHAPES = [(6, 3), (4, 3, 5), (3, 3, 4, 2)]  # (N, C), (N, C, L), (N, C, H, W)


def _inputs(shape: tuple[int, ...], dtype: torch.dtype = torch.float64, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    c = shape[1]
    x = torch.randn(shape, generator=g, dtype=dtype) * 3 + 2
    w = torch.randn(c, generator=g, dtype=dtype)
    b = torch.randn(c, generator=g, dtype=dtype)
    dy = torch.randn(shape, generator=g, dtype=dtype)
    return x, w, b, dy


def _grads(fn, x, params, dy):
    x = x.clone().requires_grad_()
    params = [p.clone().requires_grad_() for p in params]
    out = fn(x, *params)
    return (out, *torch.autograd.grad(out, [x, *params], dy))


# --- batch_norm: gradcheck of the hand-written backward --------------------------------------


@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_gradcheck(shape, affine):
    x, w, b, _ = _inputs(shape)
    params = [w.requires_grad_(), b.requires_grad_()] if affine else []

    def fn(x, *p):
        return F.batch_norm(x, None, None, *p, training=True)

    assert torch.autograd.gradcheck(fn, (x.requires_grad_(), *params))


def test_batch_norm_gradcheck_weight_only():
    x, w, _, _ = _inputs((5, 4))
    fn = lambda x, w: F.batch_norm(x, None, None, w, None, training=True)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x.requires_grad_(), w.requires_grad_()))


def test_batch_norm_is_once_differentiable():
    x, w, b, _ = _inputs((6, 3))
    x.requires_grad_()
    (gx,) = torch.autograd.grad(
        F.batch_norm(x, None, None, w, b, True).pow(2).sum(), x, create_graph=True
    )
    with pytest.raises(RuntimeError, match=r"once_differentiable|double backward"):
        gx.sum().backward()


def test_batch_norm_skips_unneeded_grads():
    x, w, b, dy = _inputs((6, 3))
    w.requires_grad_()  # only weight needs a gradient
    out = F.batch_norm(x, None, None, w, b, True)
    (gw,) = torch.autograd.grad(out, w, dy)
    ref = tF.batch_norm(x, None, None, w, b, True)
    torch.testing.assert_close(gw, torch.autograd.grad(ref, w, dy)[0])


# --- batch_norm: parity with torch ----------------------------------------------------------


@pytest.mark.parametrize("shape", [*BN_SHAPES, (2, 3, 2, 2, 2), (1, 3, 4)])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_batch_norm_training_matches_torch(shape, affine, dtype):
    x, w, b, dy = _inputs(shape, dtype)
    params = [w, b] if affine else []
    ours_rm, ours_rv = torch.zeros(shape[1], dtype=dtype), torch.ones(shape[1], dtype=dtype)
    ref_rm, ref_rv = ours_rm.clone(), ours_rv.clone()
    ours = _grads(
        lambda x, *p: F.batch_norm(x, ours_rm, ours_rv, *p, training=True, momentum=0.3),
        x,
        params,
        dy,
    )
    ref = _grads(
        lambda x, *p: tF.batch_norm(x, ref_rm, ref_rv, *p, training=True, momentum=0.3),
        x,
        params,
        dy,
    )
    for a, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, r)
    torch.testing.assert_close(ours_rm, ref_rm)  # running mean: EMA of the batch mean
    torch.testing.assert_close(ours_rv, ref_rv)  # running var: EMA of the unbiased variance


@pytest.mark.parametrize("shape", BN_SHAPES)
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_eval_matches_torch(shape, affine):
    x, w, b, dy = _inputs(shape, torch.float32)
    rm = torch.randn(shape[1]).abs()
    rv = torch.rand(shape[1]) + 0.5
    params = [w, b] if affine else []
    ours = _grads(lambda x, *p: F.batch_norm(x, rm, rv, *p, training=False), x, params, dy)
    ref = _grads(lambda x, *p: tF.batch_norm(x, rm, rv, *p, training=False), x, params, dy)
    for a, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, r)


@pytest.mark.parametrize("shape", [(3000, 400), (600, 8, 200)])
def test_batch_norm_large_input_matches_torch(shape):
    # Thousands of values per channel, with a mean far from 0: the sums must still land on
    # torch's statistics.
    x, w, b, dy = _inputs(shape, torch.float64)
    x = x + 100.0  # a mean far from 0 exercises the centering
    ours_rm, ours_rv = torch.zeros(shape[1], dtype=x.dtype), torch.ones(shape[1], dtype=x.dtype)
    ref_rm, ref_rv = ours_rm.clone(), ours_rv.clone()
    ours = _grads(lambda x, *p: F.batch_norm(x, ours_rm, ours_rv, *p, training=True), x, [w, b], dy)
    ref = _grads(lambda x, *p: tF.batch_norm(x, ref_rm, ref_rv, *p, training=True), x, [w, b], dy)
    for a, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, r)
    torch.testing.assert_close(ours_rm, ref_rm)
    torch.testing.assert_close(ours_rv, ref_rv)


@pytest.mark.parametrize("offset", [30.0, 1000.0])
def test_batch_norm_float32_mean_far_from_zero(offset):
    # A channel whose mean is hundreds of stds from 0 is where float32 batch norm loses digits
    # (the closed-form gradient is sensitive to the rounding of the mean through invstd**3).
    # Measured against float64, ours must be no worse than torch's kernel (up to 1.5x + 1e-7).
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 4, generator=g) * torch.tensor([0.1, 1.0, 0.5, 2.0]) + offset
    w, b, dy = (
        torch.randn(4, generator=g),
        torch.randn(4, generator=g),
        torch.randn(64, 4, generator=g),
    )
    exact = _grads(
        lambda x, *p: tF.batch_norm(x, None, None, *p, True),
        x.double(),
        [w.double(), b.double()],
        dy.double(),
    )
    ours = _grads(lambda x, *p: F.batch_norm(x, None, None, *p, True), x, [w, b], dy)
    ref = _grads(lambda x, *p: tF.batch_norm(x, None, None, *p, True), x, [w, b], dy)
    for o, r, e in zip(ours, ref, exact, strict=True):
        ours_err = (o.double() - e).abs().max().item()
        torch_err = (r.double() - e).abs().max().item()
        assert ours_err <= 1.5 * torch_err + 1e-7, (ours_err, torch_err)


@pytest.mark.parametrize("shape", [(32768, 3), (16384, 2, 4)])
def test_batch_norm_float32_sorted_batch(shape):
    # A batch sorted by a feature: its first 512 rows sit 10^4 stds away from the rest, so a
    # variance taken as E[x^2] - E[x]^2 (or around a rough early mean) would lose every digit.
    # Measured against float64, output, input gradient and running variance must be no worse
    # than torch's kernel (up to 1.5x + 1e-7).
    g = torch.Generator().manual_seed(5)
    x = torch.randn(*shape, generator=g)
    x[:512] += 1e4
    w, b = torch.randn(shape[1], generator=g), torch.randn(shape[1], generator=g)
    dy = torch.randn(*shape, generator=g)

    def run(fn, dtype):
        rm, rv = torch.zeros(shape[1], dtype=dtype), torch.ones(shape[1], dtype=dtype)
        p = [w.to(dtype), b.to(dtype)]
        y, dx, *_ = _grads(lambda x, *p: fn(x, rm, rv, *p, True, 1.0), x.to(dtype), p, dy.to(dtype))
        return y, dx, rv

    exact = run(tF.batch_norm, torch.float64)
    ours, ref = run(F.batch_norm, torch.float32), run(tF.batch_norm, torch.float32)
    for o, r, e in zip(ours, ref, exact, strict=True):
        ours_err = (o.double() - e).abs().max().item()
        torch_err = (r.double() - e).abs().max().item()
        assert ours_err <= 1.5 * torch_err + 1e-7, (ours_err, torch_err)


@pytest.mark.parametrize("stds_from_zero", [0.0, 1.5, 2.5, 50.0])
def test_batch_norm_float32_means_near_and_far_from_zero(stds_from_zero):
    # Channel means from 0 to 50 stds away from 0: against float64, output, input gradient and
    # running variance no worse than torch's kernel (up to 1.5x + 1e-7).
    g = torch.Generator().manual_seed(11)
    x = torch.randn(1024, 8, generator=g) * 3.0 + 3.0 * stds_from_zero
    w, b = torch.randn(8, generator=g), torch.randn(8, generator=g)
    dy = torch.randn(1024, 8, generator=g)

    def run(fn, dtype):
        rm, rv = torch.zeros(8, dtype=dtype), torch.ones(8, dtype=dtype)
        p = [w.to(dtype), b.to(dtype)]
        out = _grads(lambda x, *p: fn(x, rm, rv, *p, True, 1.0), x.to(dtype), p, dy.to(dtype))
        return (*out, rv)

    exact = run(tF.batch_norm, torch.float64)
    ours, ref = run(F.batch_norm, torch.float32), run(tF.batch_norm, torch.float32)
    y, dx, dw, db, rv = range(5)
    for i in (y, dx, rv):
        ours_err = (ours[i].double() - exact[i]).abs().max().item()
        torch_err = (ref[i].double() - exact[i]).abs().max().item()
        assert ours_err <= 1.5 * torch_err + 1e-7, (i, ours_err, torch_err)
    # dgamma and dbeta are sums of N terms, where which of two float32 summation orders lands
    # closer is luck: hold them to the bound of recursive summation, (N - 1) u sum|terms|.
    xhat = (exact[y] - b.double()) / w.double()
    for i, terms in ((dw, dy.double() * xhat), (db, dy.double())):
        bound = (1024 - 1) * 2.0**-24 * terms.abs().sum(0)
        assert ((ours[i].double() - exact[i]).abs() <= bound).all(), i


def test_batch_norm_non_contiguous_and_expanded_grad():
    x, w, b, _ = _inputs((5, 3, 4), torch.float32)
    xt = x.transpose(0, 2).contiguous().transpose(0, 2)  # same values, permuted strides
    assert not xt.is_contiguous()
    ours = xt.clone().requires_grad_()
    ref = xt.clone().requires_grad_()
    F.batch_norm(ours, None, None, w, b, True).sum().backward()  # dy is an expanded tensor
    tF.batch_norm(ref, None, None, w, b, True).sum().backward()
    torch.testing.assert_close(ours.grad, ref.grad)


def test_batch_norm_channels_last():
    x, w, b, dy = _inputs((3, 4, 5, 6), torch.float32)
    x = x.to(memory_format=torch.channels_last)
    ours = _grads(lambda x, *p: F.batch_norm(x, None, None, *p, training=True), x, [w, b], dy)
    ref = _grads(lambda x, *p: tF.batch_norm(x, None, None, *p, training=True), x, [w, b], dy)
    for a, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, r)


def test_batch_norm_normalizes_columns():
    # Statistics are over N only: each column comes out with mean 0 and biased std 1.
    torch.manual_seed(0)
    x = torch.randn(64, 3) * torch.tensor([1.0, 10.0, 100.0]) + torch.tensor([0.0, 5.0, -50.0])
    y = F.batch_norm(x, None, None, training=True)
    torch.testing.assert_close(y.mean(0), torch.zeros(3), atol=1e-6, rtol=0)
    torch.testing.assert_close(y.var(0, unbiased=False), torch.ones(3), atol=1e-4, rtol=0)


def test_batch_norm_refusals():
    with pytest.raises(ValueError, match=r"Expected more than 1 value per channel when training"):
        F.batch_norm(torch.randn(1, 3), None, None, training=True)
    with pytest.raises(ValueError, match=r"got input size \[1, 3, 1, 1\]"):
        F.batch_norm(torch.randn(1, 3, 1, 1), None, None, training=True)
    with pytest.raises(ValueError, match="eps must be positive"):
        F.batch_norm(torch.randn(4, 3), None, None, training=True, eps=0.0)
    with pytest.raises(ValueError, match="running_mean and running_var"):
        F.batch_norm(torch.randn(4, 3), None, None, training=False)
    with pytest.raises(ValueError, match=r"expected input of shape \(N, C, \*\), got 1D"):
        F.batch_norm(torch.randn(4), None, None, training=True)
    # Eval mode with one sample is fine: the running statistics normalize.
    y = F.batch_norm(torch.randn(1, 3), torch.zeros(3), torch.ones(3), training=False)
    assert y.shape == (1, 3)


BN_SETTINGS = settings(max_examples=30, deadline=None, derandomize=True)


@BN_SETTINGS
@given(
    n=st.integers(2, 7),
    c=st.integers(1, 4),
    spatial=st.lists(st.integers(1, 3), max_size=2),
    momentum=st.floats(0.0, 1.0),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    affine=st.booleans(),
)
def test_batch_norm_property_matches_torch(n, c, spatial, momentum, dtype, affine):
    # Any (N, C, *) shape, momentum and dtype: outputs, gradients and both running buffers agree
    # with torch at assert_close's default tolerance for the dtype, over two training steps
    # (the second one starts from updated buffers) and then one eval step.
    shape = (n, c, *spatial)
    x, w, b, dy = _inputs(shape, dtype)
    params = [w, b] if affine else []
    ours_buffers = (torch.randn(c, dtype=dtype), torch.rand(c, dtype=dtype) + 0.5)
    ref_buffers = tuple(t.clone() for t in ours_buffers)

    def step(fn, buffers, training):
        def norm(x, *p):
            return fn(x, *buffers, *p, training=training, momentum=momentum)

        return _grads(norm, x, params, dy)

    for training in (True, True, False):
        ours = step(F.batch_norm, ours_buffers, training)
        ref = step(tF.batch_norm, ref_buffers, training)
        for a, r in zip(ours, ref, strict=True):
            torch.testing.assert_close(a, r)
        for a, r in zip(ours_buffers, ref_buffers, strict=True):
            torch.testing.assert_close(a, r)


# The check a standalone script runs: training steps with buffers, gradients, one eval step.
# It prints float64 numbers as JSON, which round-trips them exactly.
STANDALONE_CHECK = """
g = torch.Generator().manual_seed(7)
x = torch.randn(10, 3, 2, generator=g, dtype=torch.float64) * 4 + 1
w = torch.randn(3, generator=g, dtype=torch.float64).requires_grad_()
b = torch.randn(3, generator=g, dtype=torch.float64).requires_grad_()
dy = torch.randn(10, 3, 2, generator=g, dtype=torch.float64)
rm, rv = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
x.requires_grad_()
y = batch_norm(x, rm, rv, w, b, training=True, momentum=0.3)
dx, dw, db = torch.autograd.grad(y, [x, w, b], dy)
y = batch_norm(x.detach() * 2, rm, rv, w.detach(), b.detach(), training=True, momentum=0.3)
y_eval = batch_norm(x.detach(), rm, rv, w.detach(), b.detach(), training=False)
out = {"y": y, "dx": dx, "dw": dw, "db": db, "rm": rm, "rv": rv, "y_eval": y_eval}
print(json.dumps({k: v.tolist() for k, v in out.items()}))
"""


def test_batch_norm_code_runs_without_normlab(tmp_path: Path):
    # BATCH_NORM_CODE is what a script needs for batch_norm: pasted after torch's imports, it
    # must run in a fresh interpreter that cannot import normlab, and print what normlab does.
    header = "import math\nimport torch\nfrom torch import Tensor\n"
    code = "\n\n".join(inspect.getsource(o) for o in F.BATCH_NORM_CODE)
    script = tmp_path / "batch_norm_script.py"
    script.write_text(header + "import json\n\n" + code + "\n" + STANDALONE_CHECK)
    (tmp_path / "normlab").mkdir()
    (tmp_path / "normlab" / "__init__.py").write_text(
        'raise ImportError("normlab must not be imported")\n'
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    in_process: dict[str, object] = {"batch_norm": F.batch_norm, "torch": torch, "json": json}
    printed: list[str] = []
    in_process["print"] = printed.append
    exec(STANDALONE_CHECK, in_process)
    # Same code, same torch, same inputs: the numbers are equal, not merely close.
    assert json.loads(done.stdout) == json.loads(printed[0])


# --- layer_norm, group_norm, rms_norm -------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "normalized_shape"),
    [((4, 5), (5,)), ((2, 3, 4), (3, 4)), ((2, 3, 4, 5), (3, 4, 5)), ((2, 3, 4), (4,))],
)
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_matches_torch(shape, normalized_shape, affine):
    x, _, _, dy = _inputs(shape, torch.float32)
    g = torch.Generator().manual_seed(1)
    params = {
        "both": [
            torch.randn(normalized_shape, generator=g),
            torch.randn(normalized_shape, generator=g),
        ],
        "weight": [torch.randn(normalized_shape, generator=g)],
        "none": [],
    }[affine]
    ours = _grads(lambda x, *p: F.layer_norm(x, normalized_shape, *p), x, params, dy)
    ref = _grads(lambda x, *p: tF.layer_norm(x, normalized_shape, *p), x, params, dy)
    for a, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, r)


def test_layer_norm_refuses_mismatched_shape():
    with pytest.raises(ValueError, match=r"normalized_shape=\[4\].*got input of size \[2, 3\]"):
        F.layer_norm(torch.randn(2, 3), (4,))


GROUP_CASES = [
    ((4, 6), 1),
    ((4, 6), 2),
    ((4, 6), 3),
    ((4, 6), 6),
    ((2, 4, 5), 2),
    ((2, 6, 3, 3), 3),
]


# With 1 or 2 values per group the variance is ~0 and 1/sqrt(eps) ~ 316 amplifies float32 rounding
# in torch's gradient (off by up to 8e-5): those cases are compared in float64 only, and ours is
# checked against float64 in the next test.
GROUP_PARAMS = [
    (shape, groups, dtype)
    for shape, groups in GROUP_CASES
    for dtype in (torch.float32, torch.float64)
    if dtype == torch.float64 or shape[1] // groups * math.prod(shape[2:]) > 2
]


@pytest.mark.parametrize(("shape", "groups", "dtype"), GROUP_PARAMS)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_matches_torch(shape, groups, dtype, affine):
    x, w, b, dy = _inputs(shape, dtype)
    params = [w, b] if affine else []
    ours = _grads(lambda x, *p: F.group_norm(x, groups, *p), x, params, dy)
    ref = _grads(lambda x, *p: tF.group_norm(x, groups, *p), x, params, dy)
    for a, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, r)


@pytest.mark.parametrize("groups", [3, 6])  # 2 values per group, then 1
def test_group_norm_tiny_groups_float32_near_float64(groups):
    x, _, _, dy = _inputs((4, 6), torch.float32)
    ours = _grads(lambda x: F.group_norm(x, groups), x, [], dy)
    exact = _grads(lambda x: tF.group_norm(x, groups), x.double(), [], dy.double())
    for a, r in zip(ours, exact, strict=True):
        torch.testing.assert_close(a.double(), r, rtol=0, atol=1e-5)  # float32 rounding


def test_group_norm_refusals():
    with pytest.raises(
        ValueError, match=r"num_channels \(6\) must be divisible by num_groups \(4\)"
    ):
        F.group_norm(torch.randn(2, 6), 4)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        F.group_norm(torch.randn(1, 4), 4)  # one sample, one value per group


@pytest.mark.parametrize(("shape", "normalized_shape"), [((4, 5), (5,)), ((2, 3, 4), (3, 4))])
@pytest.mark.parametrize("eps", [None, 1e-3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_matches_torch(shape, normalized_shape, eps, dtype, affine):
    x, _, _, dy = _inputs(shape, dtype)
    g = torch.Generator().manual_seed(1)
    params = [torch.randn(normalized_shape, generator=g, dtype=dtype)] if affine else []
    ours = _grads(lambda x, *p: F.rms_norm(x, normalized_shape, *p, eps=eps), x, params, dy)
    ref = _grads(lambda x, *p: tF.rms_norm(x, normalized_shape, *p, eps=eps), x, params, dy)
    for a, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, r)


def test_rms_norm_default_eps_is_dtype_eps():
    # Tiny inputs make eps dominate the mean square, so the eps actually used shows in the output.
    x = torch.full((1, 4), 1e-4, dtype=torch.float64)
    for dtype in (torch.float32, torch.float64):
        xs = x.to(dtype)
        expected = xs / torch.sqrt((xs * xs).mean() + torch.finfo(dtype).eps)
        torch.testing.assert_close(F.rms_norm(xs, (4,)), expected)
        torch.testing.assert_close(F.rms_norm(xs, (4,)), tF.rms_norm(xs, (4,)))
