"""normlab.init against torch.nn.init: same generator state in, bit-identical tensor out.

Tolerance is zero throughout: tensors are compared with ``torch.equal``, floats with ``==``, and
the generator state after the call must match too (same number of draws).
"""

import inspect
import math
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from normlab import init

NONLINEARITIES = [
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "sigmoid",
    "tanh",
    "relu",
    "leaky_relu",
    "selu",
]
PUBLIC = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
]
PRIVATE = ["_calculate_fan_in_and_fan_out", "_calculate_correct_fan"]

shapes = st.lists(st.integers(1, 6), min_size=2, max_size=5).map(tuple)
dtypes = st.sampled_from([torch.float32, torch.float64])
seeds = st.integers(0, 2**32 - 1)
slopes = st.sampled_from([None, 0, 0.01, 0.1, 0.2, 1, 3.5, -0.3])
gains = st.sampled_from([1.0, 0.5, 5.0 / 3, math.sqrt(2.0), 1.15, 2])
modes = st.sampled_from(["fan_in", "fan_out"])
SETTINGS = settings(max_examples=60, deadline=None)


@contextmanager
def kept_global_rng() -> Iterator[None]:
    """Leave the global RNG as we found it, whatever the test draws."""
    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


def assert_same_draws(
    ours: Callable[..., torch.Tensor],
    theirs: Callable[..., torch.Tensor],
    shape: tuple[int, ...],
    dtype: torch.dtype,
    seed: int,
    **kwargs: Any,
) -> torch.Tensor:
    """Run both functions from the same seed, via an explicit generator and via the global RNG."""
    g_ours, g_theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    a = ours(torch.empty(shape, dtype=dtype), generator=g_ours, **kwargs)
    b = theirs(torch.empty(shape, dtype=dtype), generator=g_theirs, **kwargs)
    assert a.dtype == b.dtype == dtype
    assert torch.equal(a, b)
    assert torch.equal(g_ours.get_state(), g_theirs.get_state())

    with kept_global_rng():
        torch.manual_seed(seed)
        a = ours(torch.empty(shape, dtype=dtype), **kwargs)
        state_ours = torch.get_rng_state()
        torch.manual_seed(seed)
        b = theirs(torch.empty(shape, dtype=dtype), **kwargs)
        state_theirs = torch.get_rng_state()
    assert torch.equal(a, b)
    assert torch.equal(state_ours, state_theirs)
    return a


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """What a call did: its result or exception type, and the warning messages it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result: Any = fn(*args, **kwargs)
        except Exception as e:
            result = type(e)
    return result, [str(w.message) for w in caught]


# --- names and signatures --------------------------------------------------------------------


@pytest.mark.parametrize("name", PUBLIC + PRIVATE)
def test_signature_matches_torch(name: str) -> None:
    assert inspect.signature(getattr(init, name)) == inspect.signature(getattr(torch.nn.init, name))


def test_public_functions_have_docstring_with_math_and_example() -> None:
    for name in PUBLIC:
        doc = getattr(init, name).__doc__
        assert doc and ".. math::" in doc and "Args:" in doc and ">>>" in doc, name


# --- deterministic pieces: gain and fans ---------------------------------------------------


@pytest.mark.parametrize("nonlinearity", NONLINEARITIES)
def test_calculate_gain_equals_torch(nonlinearity: str) -> None:
    assert init.calculate_gain(nonlinearity) == torch.nn.init.calculate_gain(nonlinearity)


@pytest.mark.parametrize("param", [None, 0, 1, 2, 0.01, 0.2, 1e-8, -0.5, 100.0])
def test_calculate_gain_leaky_relu_slopes_equal_torch(param: float | None) -> None:
    ours = init.calculate_gain("leaky_relu", param)
    assert ours == torch.nn.init.calculate_gain("leaky_relu", param)
    assert ours == math.sqrt(2.0 / (1 + (0.01 if param is None else param) ** 2))


@given(shape=shapes)
@settings(max_examples=80, deadline=None)
def test_fan_in_and_fan_out_equal_torch(shape: tuple[int, ...]) -> None:
    w = torch.empty(shape)
    fans = init._calculate_fan_in_and_fan_out(w)
    assert fans == torch.nn.init._calculate_fan_in_and_fan_out(w)
    receptive_field = math.prod(shape[2:])
    assert fans == (shape[1] * receptive_field, shape[0] * receptive_field)
    for mode in ("fan_in", "fan_out", "FAN_IN", "Fan_Out"):
        ours = init._calculate_correct_fan(w, mode)
        assert ours == torch.nn.init._calculate_correct_fan(w, mode)


def test_conv_fans_by_hand() -> None:
    # Conv2d(in=3, out=16, kernel 5x5): fan_in = 3*25, fan_out = 16*25
    assert init._calculate_fan_in_and_fan_out(torch.empty(16, 3, 5, 5)) == (75, 400)


# --- random pieces: bit-identical to torch -------------------------------------------------


@given(shape=shapes, dtype=dtypes, seed=seeds, lo=st.floats(-3, 0), width=st.floats(0, 4))
@SETTINGS
def test_uniform_(
    shape: tuple[int, ...], dtype: torch.dtype, seed: int, lo: float, width: float
) -> None:
    assert_same_draws(init.uniform_, torch.nn.init.uniform_, shape, dtype, seed, a=lo, b=lo + width)


@given(shape=shapes, dtype=dtypes, seed=seeds, mean=st.floats(-2, 2), std=st.floats(0, 3))
@SETTINGS
def test_normal_(
    shape: tuple[int, ...], dtype: torch.dtype, seed: int, mean: float, std: float
) -> None:
    assert_same_draws(init.normal_, torch.nn.init.normal_, shape, dtype, seed, mean=mean, std=std)


@given(
    shape=shapes,
    dtype=dtypes,
    seed=seeds,
    mean=st.floats(-1, 1),
    std=st.floats(0.05, 2),
    za=st.floats(-3, 1.9),
    width=st.floats(0.05, 4),
)
@SETTINGS
def test_trunc_normal_(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    seed: int,
    mean: float,
    std: float,
    za: float,
    width: float,
) -> None:
    # bounds in units of std around the mean; both sampling branches (mass above and below 0.3)
    a, b = mean + za * std, mean + (za + width) * std
    assume(not (mean < a - 2 * std or mean > b + 2 * std))  # far means: see the warning test
    w = assert_same_draws(
        init.trunc_normal_,
        torch.nn.init.trunc_normal_,
        shape,
        dtype,
        seed,
        mean=mean,
        std=std,
        a=a,
        b=b,
    )
    assert bool(
        (w >= torch.tensor(a, dtype=dtype)).all() and (w <= torch.tensor(b, dtype=dtype)).all()
    )


def test_trunc_normal_far_mean_warns_like_torch() -> None:
    with pytest.warns(UserWarning, match="more than 2 std"):
        assert_same_draws(
            init.trunc_normal_,
            torch.nn.init.trunc_normal_,
            (20, 30),
            torch.float32,
            0,
            a=2.5,
            b=2.6,
        )


@pytest.mark.parametrize(
    ("mean", "std", "a", "b"),
    [
        (0.0, 1.0, -2.0, 2.0),
        (0.0, 1.0, 1.0, 3.0),
        (0.0, 0.02, -0.04, 0.04),
        (0.5, 1.0, 2.4, 2.5),
        # bounds the dtype cannot store (bfloat16 keeps -0.999 as -1.0, and draws land on it)
        (0.0, 1.0, -0.999, 0.999),
    ],
    ids=["normal-branch", "rejection-branch", "vit-style", "narrow-tail", "dtype-rounded-bounds"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_trunc_normal_both_branches(
    mean: float, std: float, a: float, b: float, dtype: torch.dtype
) -> None:
    # a big tensor so that both branches go round their redraw loop several times
    for seed in range(3):
        assert_same_draws(
            init.trunc_normal_,
            torch.nn.init.trunc_normal_,
            (50, 40),
            dtype,
            seed,
            mean=mean,
            std=std,
            a=a,
            b=b,
        )


@given(shape=shapes, dtype=dtypes, seed=seeds, gain=gains)
@SETTINGS
def test_xavier_uniform_(
    shape: tuple[int, ...], dtype: torch.dtype, seed: int, gain: float
) -> None:
    assert_same_draws(
        init.xavier_uniform_, torch.nn.init.xavier_uniform_, shape, dtype, seed, gain=gain
    )


@given(shape=shapes, dtype=dtypes, seed=seeds, gain=gains)
@SETTINGS
def test_xavier_normal_(shape: tuple[int, ...], dtype: torch.dtype, seed: int, gain: float) -> None:
    assert_same_draws(
        init.xavier_normal_, torch.nn.init.xavier_normal_, shape, dtype, seed, gain=gain
    )


@given(
    shape=shapes,
    dtype=dtypes,
    seed=seeds,
    mode=modes,
    nonlinearity=st.sampled_from(NONLINEARITIES),
    a=slopes,
)
@settings(max_examples=120, deadline=None)
def test_kaiming_(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    seed: int,
    mode: str,
    nonlinearity: str,
    a: float | None,
) -> None:
    kwargs = {"mode": mode, "nonlinearity": nonlinearity} | ({} if a is None else {"a": a})
    assert_same_draws(
        init.kaiming_uniform_, torch.nn.init.kaiming_uniform_, shape, dtype, seed, **kwargs
    )
    assert_same_draws(
        init.kaiming_normal_, torch.nn.init.kaiming_normal_, shape, dtype, seed, **kwargs
    )


@given(shape=shapes, dtype=dtypes, seed=seeds, gain=gains)
@SETTINGS
def test_orthogonal_(shape: tuple[int, ...], dtype: torch.dtype, seed: int, gain: float) -> None:
    assert_same_draws(init.orthogonal_, torch.nn.init.orthogonal_, shape, dtype, seed, gain=gain)
    w = init.orthogonal_(
        torch.empty(shape, dtype=dtype), generator=torch.Generator().manual_seed(seed)
    )
    flat = w.reshape(shape[0], -1)  # (rows, cols)
    small = flat @ flat.T if flat.shape[0] <= flat.shape[1] else flat.T @ flat  # (k, k)
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(small, torch.eye(small.shape[0], dtype=dtype), atol=tol, rtol=0)


@given(shape=shapes, dtype=dtypes, val=st.floats(-10, 10))
@settings(max_examples=30, deadline=None)
def test_constant_ones_zeros(shape: tuple[int, ...], dtype: torch.dtype, val: float) -> None:
    def pair(
        ours: Callable[..., torch.Tensor], theirs: Callable[..., torch.Tensor], *args: Any
    ) -> None:
        assert torch.equal(
            ours(torch.empty(shape, dtype=dtype), *args),
            theirs(torch.empty(shape, dtype=dtype), *args),
        )

    pair(init.constant_, torch.nn.init.constant_, val)
    pair(init.ones_, torch.nn.init.ones_)
    pair(init.zeros_, torch.nn.init.zeros_)


@pytest.mark.parametrize(
    "name",
    ["uniform_", "normal_", "trunc_normal_", "xavier_uniform_", "kaiming_normal_", "orthogonal_"],
)
def test_returns_the_same_tensor_and_works_on_parameters(name: str) -> None:
    w = torch.nn.Parameter(torch.empty(4, 3))
    out = getattr(init, name)(w, generator=torch.Generator().manual_seed(0))
    assert out is w
    assert w.requires_grad and w.grad_fn is None  # filled under no_grad, still a leaf
    ref = torch.nn.Parameter(torch.empty(4, 3))
    getattr(torch.nn.init, name)(ref, generator=torch.Generator().manual_seed(0))
    assert torch.equal(w, ref)


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m._calculate_fan_in_and_fan_out(torch.empty(5)),
        lambda m: m.xavier_uniform_(torch.empty(5)),
        lambda m: m.xavier_normal_(torch.empty(5)),
        lambda m: m.kaiming_uniform_(torch.empty(5)),
        lambda m: m.kaiming_normal_(torch.empty(())),
    ],
    ids=["fans", "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_0d"],
)
def test_fewer_than_two_dims_refused(call: Callable[[Any], Any]) -> None:
    with pytest.raises(ValueError, match=r"at least 2 dimensions, got [01] \(shape \((5,)?\)\)"):
        call(init)
    with pytest.raises(ValueError):
        call(torch.nn.init)


def test_orthogonal_one_dim_refused() -> None:
    with pytest.raises(ValueError, match=r"orthogonal_ needs .* at least 2 dimensions, got 1"):
        init.orthogonal_(torch.empty(5))
    with pytest.raises(ValueError):
        torch.nn.init.orthogonal_(torch.empty(5))


@pytest.mark.parametrize("fn", ["kaiming_uniform_", "kaiming_normal_"])
def test_unknown_mode_refused(fn: str) -> None:
    with pytest.raises(
        ValueError, match=r"mode 'fan_avg' not supported, use one of \['fan_in', 'fan_out'\]"
    ):
        getattr(init, fn)(torch.empty(3, 4), mode="fan_avg")
    with pytest.raises(ValueError):
        getattr(torch.nn.init, fn)(torch.empty(3, 4), mode="fan_avg")
    with pytest.raises(ValueError, match="mode 'both' not supported"):
        init._calculate_correct_fan(torch.empty(3, 4), "both")


@pytest.mark.parametrize("fn", ["calculate_gain", "kaiming_uniform_", "kaiming_normal_"])
def test_unknown_nonlinearity_refused(fn: str) -> None:
    args: tuple[Any, ...] = (
        ("gelu",) if fn == "calculate_gain" else (torch.empty(3, 4), 0, "fan_in", "gelu")
    )
    with pytest.raises(
        ValueError, match=r"nonlinearity 'gelu' not supported, use one of \[.*'leaky_relu'.*\]"
    ):
        getattr(init, fn)(*args)
    with pytest.raises(ValueError):
        getattr(torch.nn.init, fn)(*args)


def test_mode_checked_before_nonlinearity_as_in_torch() -> None:
    w = torch.empty(3, 4)
    with pytest.raises(ValueError, match="mode"):
        init.kaiming_normal_(w, mode="bad", nonlinearity="gelu")
    with pytest.raises(ValueError, match=r"(?i)mode"):
        torch.nn.init.kaiming_normal_(w, mode="bad", nonlinearity="gelu")


@pytest.mark.parametrize("param", [True, False, "0.1", [0.1], 1j])
def test_bad_leaky_relu_param_refused(param: Any) -> None:
    with pytest.raises(
        ValueError, match=rf"negative_slope {re.escape(repr(param))} is not a number"
    ):
        init.calculate_gain("leaky_relu", param)
    with pytest.raises(ValueError):
        torch.nn.init.calculate_gain("leaky_relu", param)


@pytest.mark.parametrize("fn", ["kaiming_uniform_", "kaiming_normal_"])
def test_bool_leaky_slope_refused_by_kaiming(fn: str) -> None:
    with pytest.raises(ValueError, match="negative_slope True is not a number"):
        getattr(init, fn)(torch.empty(3, 4), a=True)
    with pytest.raises(ValueError):
        getattr(torch.nn.init, fn)(torch.empty(3, 4), a=True)


def test_leaky_param_ignored_for_other_nonlinearities() -> None:
    assert init.calculate_gain("relu", True) == torch.nn.init.calculate_gain("relu", True)


# --- zero-element tensors --------------------------------------------------------------------

ZERO_SHAPES = [(0,), (0, 3), (3, 0), (0, 0), (2, 0, 3), (4, 3, 0, 2)]
ZERO_FNS = [
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
]


@pytest.mark.parametrize("shape", ZERO_SHAPES, ids=str)
@pytest.mark.parametrize("name", ZERO_FNS)
def test_zero_element_behaviour_matches_torch(name: str, shape: tuple[int, ...]) -> None:
    args = (0.5,) if name == "constant_" else ()
    with kept_global_rng():
        before = torch.get_rng_state()
        ours = outcome(getattr(init, name), torch.empty(shape), *args)
        theirs = outcome(getattr(torch.nn.init, name), torch.empty(shape), *args)
        assert torch.equal(torch.get_rng_state(), before)  # nothing drawn
    if isinstance(ours[0], torch.Tensor):
        assert isinstance(theirs[0], torch.Tensor) and ours[0].shape == theirs[0].shape == shape
        assert ours[1] == theirs[1]
    else:
        assert ours == theirs  # same exception type (e.g. ZeroDivisionError), same warnings


@pytest.mark.parametrize("fn", ["kaiming_uniform_", "kaiming_normal_"])
@pytest.mark.parametrize("shape", [(0,), (0, 3), (5, 0, 2)], ids=str)
def test_kaiming_zero_element_warns_and_returns(fn: str, shape: tuple[int, ...]) -> None:
    w = torch.empty(shape)
    with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
        out = getattr(init, fn)(w, mode="not-checked", nonlinearity="nor-this")
    assert out is w


def test_xavier_with_no_rows_and_no_columns_divides_by_zero_like_torch() -> None:
    with pytest.raises(ZeroDivisionError):
        init.xavier_uniform_(torch.empty(0, 0))
    with pytest.raises(ZeroDivisionError):
        torch.nn.init.xavier_uniform_(torch.empty(0, 0))


# --- exact-float traps and the seed notebook's figures ---------------------------------------


def test_bound_formula_order_matters() -> None:
    # sqrt(3) * (gain * sqrt(2 / n)) and gain * sqrt(6 / n) agree on paper but not always in
    # the last bit; torch uses the first, so must we (or the uniform draws would differ).
    differ = [n for n in range(2, 400) if math.sqrt(3.0) * math.sqrt(2.0 / n) != math.sqrt(6.0 / n)]
    assert differ  # the trap is real
    n = differ[0]
    g1, g2 = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    ours = init.xavier_uniform_(torch.empty(n // 2, n - n // 2, dtype=torch.float64), generator=g1)
    naive_bound = math.sqrt(6.0 / n)
    naive = torch.empty(n // 2, n - n // 2, dtype=torch.float64).uniform_(
        -naive_bound, naive_bound, generator=g2
    )
    assert not torch.equal(ours, naive)


def test_seed_notebook_figures() -> None:
    with kept_global_rng():
        torch.manual_seed(0)
        w = torch.empty(64, 128)  # (fan_out, fan_in), like nn.Linear(128, 64)
        init.xavier_uniform_(w)
        assert f"{w.abs().max().item():.5f}" == "0.17675"
        assert round(math.sqrt(6 / 192), 5) == 0.17678
        init.kaiming_normal_(w, nonlinearity="relu")  # same RNG stream, continued
        assert round(w.std().item(), 5) == 0.12582
        assert math.sqrt(2 / 128) == 0.125
