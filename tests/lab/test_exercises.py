"""Exercises: every one passes a right answer and fails a wrong one with useful feedback.

Code exercises run through the real sandbox. The answer key is tested against the library too:
the choice marked right is what normlab's own layers and experiments do.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import sqlite3
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from normlab import nn as nlnn
from normlab.experiments import run_experiment
from normlab.lab import exercises, trainlesson
from normlab.lab.app import create_app
from normlab.lab.exercises import (
    BadSubmission,
    ChoiceExercise,
    CodeExercise,
    NumberExercise,
    Verdict,
)
from normlab.lab.lessons import LESSONS
from normlab.lab.lessons.bn_from_scratch.exercises import (
    BACKWARD_STARTER,
    COMPARE_STARTER,
    bn_still_helps,
    judge_compare,
    reference_curves,
)
from normlab.lab.lessons.exercise import CodeJob
from normlab.lab.lessons.initialization.exercises import (
    HE_STARTER,
    KEPT_RTOL,
    STACK_WIDTH,
    he_args,
    judge_he_derivation,
    kept_exact,
)
from normlab.lab.lessons.markup import num
from normlab.lab.lessons.numbers import parse_number
from normlab.lab.progress import ProgressStore
from normlab.lab.sandbox import Sandbox, SandboxError
from normlab.lab.state import state_of

LAB = "http://127.0.0.1"  # the lab answers loopback Host names only


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    db = tmp_path_factory.mktemp("progress") / "progress.sqlite3"
    with TestClient(create_app(db_path=db), base_url=LAB) as c:
        yield c


@pytest.fixture(scope="module")
def sandbox(client: TestClient) -> Sandbox:
    box: Sandbox = state_of(client.app).sandbox  # type: ignore[attr-defined]
    return box


def choice(exercise_id: str) -> ChoiceExercise:
    ex = exercises.get(exercise_id)
    assert isinstance(ex, ChoiceExercise)
    return ex


def code(exercise_id: str) -> CodeExercise:
    ex = exercises.get(exercise_id)
    assert isinstance(ex, CodeExercise)
    return ex


def right_text(exercise_id: str) -> str:
    return next(c.text for c in choice(exercise_id).choices if c.correct)


# -- the registry ------------------------------------------------------------------------------


def test_every_lesson_closes_with_two_to_four_checked_questions() -> None:
    for lesson in LESSONS:
        mine = exercises.by_lesson(lesson.slug)
        questions = [e for e in mine if e.kind in ("choice", "number")]
        assert 2 <= len(questions) <= 4, lesson.slug
    kinds = {e.kind for e in exercises.EXERCISES}
    assert kinds == {"choice", "number", "code"}
    ids = [e.id for e in exercises.EXERCISES]
    assert len(set(ids)) == len(ids)
    assert {"he-derivation", "bn-backward", "init-vs-bn"} <= set(ids)


def test_unknown_ids_and_lessons_are_refused_by_name() -> None:
    with pytest.raises(exercises.UnknownExercise, match="'nope' not found, use one of: "):
        exercises.get("nope")
    with pytest.raises(ValueError, match="lesson 'nope' not found"):
        exercises.by_lesson("nope")


def test_public_view_never_holds_the_answer() -> None:
    for ex in exercises.EXERCISES:
        view = ex.public()
        json.dumps(view)  # JSON-ready
        common = {"id", "lesson", "kind", "prompt"}
        extra = {
            "choice": {"choices"},
            "number": {"tolerance", "tolerance_text"},
            "code": {"starter", "checks", "time_limit_s"},
        }[ex.kind]
        assert set(view) == common | extra, ex.id
        if isinstance(ex, ChoiceExercise):
            assert view["choices"] == [c.text for c in ex.choices]
        if isinstance(ex, NumberExercise):
            assert str(ex.expected()) not in json.dumps(view)


# -- choice exercises --------------------------------------------------------------------------

CHOICES = [e.id for e in exercises.EXERCISES if isinstance(e, ChoiceExercise)]


@pytest.mark.parametrize("exercise_id", CHOICES)
def test_choice_right_passes_and_each_wrong_one_fails_with_its_own_feedback(
    exercise_id: str,
) -> None:
    ex = choice(exercise_id)
    feedbacks = set()
    for i, c in enumerate(ex.choices):
        by_text, by_index = ex.check(c.text), ex.check(i)
        assert by_text == by_index
        assert by_text.passed is c.correct
        assert len(by_text.feedback) > 20
        feedbacks.add(by_text.feedback)
    assert len(feedbacks) == len(ex.choices)


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ("not a choice", "is not one of the 4 choices"),
        (4, "choice index 4 is not in [0, 3]"),
        (-1, "is not in [0, 3]"),
        (True, "(bool) is not a choice"),
        (1.5, "(float) is not a choice"),
        (None, "(NoneType) is not a choice"),
    ],
)
def test_choice_refuses_what_is_not_a_choice(answer: object, fragment: str) -> None:
    with pytest.raises(BadSubmission, match=None) as info:
        choice("bn-eval-statistics").check(answer)
    assert info.value.parameter == "answer" and fragment in str(info.value)


def test_an_index_written_as_a_whole_float_is_that_index() -> None:
    """JSON has one kind of number (JSON Schema's ``integer`` takes ``2.0``): the document
    declares the index an integer, so 2.0 picks what 2 picks."""
    ex = choice("bn-eval-statistics")
    assert [ex.pick(float(i)) for i in range(len(ex.choices))] == list(ex.choices)


def test_answer_key_plain_stack_shrinks_and_stays_small() -> None:
    assert right_text("drift-std-through-depth").startswith("It shrinks")
    d = run_experiment("drift").to_dict()
    assert d["stds"][2] < 0.15 * d["input_std"]  # "about a tenth by layer 3"
    assert max(d["stds"][2:]) < 0.15 * d["input_std"]  # never brought back


def test_answer_key_linear_passes_scale_tenfold_exactly_without_bias() -> None:
    assert "tenfold" in right_text("drift-linear-passes-scale")
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
    layer = torch.nn.Linear(8, 8, bias=False)
    with torch.no_grad():
        ratio = float(layer(10 * x).std() / layer(x).std())
    assert math.isclose(ratio, 10.0, rel_tol=1e-5)
    d = run_experiment("linear-scale").to_dict()
    assert 5 < d["scaled_output_std"] / d["output_std"] < 10


def test_answer_key_eval_mode_uses_running_statistics() -> None:
    assert "running mean and running variance" in right_text("bn-eval-statistics")
    layer = nlnn.BatchNorm1d(3)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        layer(torch.randn(16, 3, generator=g) * 4 + 2)  # a training pass moves the running stats
        layer.eval()
        x = torch.randn(5, 3, generator=g)
        assert layer.running_mean is not None and layer.running_var is not None
        expected = (x - layer.running_mean) / torch.sqrt(layer.running_var + layer.eps)
        torch.testing.assert_close(layer(x), expected)  # default float32 tolerances


def test_answer_key_a_training_batch_of_one_is_refused() -> None:
    assert right_text("bn-batch-of-one").startswith("It raises an error")
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nlnn.BatchNorm1d(8)(torch.zeros(1, 8))


def test_answer_key_constant_init_keeps_units_identical() -> None:
    assert right_text("init-constant-symmetry").startswith("They are still identical")
    summary = run_experiment("symmetry").to_dict()["summary"]
    assert summary["max_weight_diff"] == 0.0 and summary["max_grad_diff"] == 0.0


def test_answer_key_biased_to_normalize_unbiased_for_running_var() -> None:
    assert right_text("bn-variance-conventions").startswith("Biased (divide by N) to normalize")
    x = torch.randn(6, 2, generator=torch.Generator().manual_seed(3))
    layer = nlnn.BatchNorm1d(2, momentum=1.0)  # running_var = the last batch's estimate
    with torch.no_grad():
        y = layer(x)
    assert layer.running_var is not None
    torch.testing.assert_close(layer.running_var, x.var(0, unbiased=True))
    torch.testing.assert_close(y.var(0, unbiased=False), torch.ones(2), atol=1e-3, rtol=0)


def test_answer_key_a_linear_bias_before_batchnorm_changes_nothing() -> None:
    assert right_text("bn-linear-bias").startswith("Nothing")
    g = torch.Generator().manual_seed(2)
    x = torch.randn(16, 4, generator=g)
    linear, norm = torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)
    with torch.no_grad():
        before = norm(linear(x))
        linear.bias.add_(5.0)
        torch.testing.assert_close(norm(linear(x)), before, atol=1e-5, rtol=0)


def _lesson_stack(scale: float) -> list[float]:
    """Lesson 1's plain stack (seed 0, ten Linear(16, 16) + ReLU) on its batch times ``scale``."""
    torch.manual_seed(0)
    h = torch.randn(64, 16) * scale
    layers = [torch.nn.Linear(16, 16) for _ in range(10)]
    stds = []
    with torch.no_grad():
        for layer in layers:
            h = torch.relu(layer(h))
            stds.append(float(h.std()))
    return stds


def test_answer_key_a_hundred_times_larger_batch_shrinks_to_the_same_floor() -> None:
    assert "floor" in right_text("drift-std-through-depth")
    plain, large = _lesson_stack(1.0), _lesson_stack(100.0)
    assert 1.0 < large[2] < 10.0  # "about 6 at layer 3", not a tenth of 103 yet
    assert large[0] > large[1] > large[2] > large[5]  # falling layer by layer at first
    assert math.isclose(large[-1], plain[-1], rel_tol=0.05)  # layer 10: the same floor
    assert 0.07 < large[-1] < 0.09  # "near 0.08"
    assert not all(s > 0.5 for s in large[5:])  # well below the input's 103 deep in


def test_answer_key_minus_ten_times_the_input_is_exactly_ten_times_the_spread() -> None:
    assert "exactly tenfold" in right_text("drift-linear-passes-scale")
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(4))
    layer = torch.nn.Linear(8, 8, bias=False)
    with torch.no_grad():
        ratio = float(layer(-10 * x).std() / layer(x).std())
    assert math.isclose(ratio, 10.0, rel_tol=1e-5)


def test_answer_key_in_eval_mode_a_row_s_output_ignores_its_batch() -> None:
    assert right_text("bn-eval-statistics").startswith("The same output twice")
    layer = nlnn.BatchNorm1d(3)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        layer(torch.randn(16, 3, generator=g) * 4 + 2)  # trained a little
        layer.eval()
        row = torch.randn(1, 3, generator=g)
        others = torch.randn(100, 3, generator=g) * 50 - 30  # very different rows
        alone, inside = layer(row), layer(torch.cat([row, others]))[:1]
    torch.testing.assert_close(alone, inside, atol=0, rtol=0)


def test_answer_key_one_value_per_channel_counts_the_length_too() -> None:
    for make in (torch.nn.BatchNorm1d, nlnn.BatchNorm1d):
        with pytest.raises(ValueError, match="more than 1 value per channel"):
            make(8)(torch.zeros(1, 8, 1))
        assert make(8)(torch.randn(1, 8, 5)).shape == (1, 8, 5)  # "(1, 8, 5) would work"


def test_answer_key_adam_keeps_constant_init_units_identical() -> None:
    assert "Adam" in choice("init-constant-symmetry").prompt
    torch.manual_seed(6)
    x, y = torch.randn(32, 2), torch.randn(32, 1)
    net = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    for layer in (net[0], net[2]):
        torch.nn.init.constant_(layer.weight, 0.1)
        torch.nn.init.zeros_(layer.bias)
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    start = net[0].weight.detach().clone()
    for _ in range(30):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    w = net[0].weight.detach()
    assert not torch.equal(w, start)  # it learned
    assert torch.equal(w[0], w[1]) and torch.equal(w[1], w[3])  # in lockstep, bit for bit


def test_answer_key_x_var_normalizes_too_small_but_feeds_running_var_right() -> None:
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4, 3, generator=g) * 3 + 1
    ref = torch.nn.BatchNorm1d(3, momentum=1.0, affine=False)  # running_var = the batch's
    with torch.no_grad():
        want = ref(x)
    assert ref.running_var is not None
    torch.testing.assert_close(ref.running_var, x.var(0))  # "its running_var matches"
    mine = (x - x.mean(0)) / torch.sqrt(x.var(0) + 1e-5)
    ratio = (mine / want).flatten()
    torch.testing.assert_close(ratio, torch.full_like(ratio, math.sqrt(3 / 4)), atol=1e-4, rtol=0)


def test_answer_key_minus_three_times_the_weights_flips_batchnorm_s_output() -> None:
    assert right_text("bn-scale-invariance").startswith("Every output flips sign")
    g = torch.Generator().manual_seed(8)
    x = torch.randn(32, 5, generator=g)
    linear, norm = torch.nn.Linear(5, 4), torch.nn.BatchNorm1d(4)
    with torch.no_grad():
        before = norm(linear(x))
        linear.weight.mul_(-3.0)
        linear.bias.mul_(-3.0)
        torch.testing.assert_close(norm(linear(x)), -before, atol=1e-4, rtol=0)


# -- number exercises --------------------------------------------------------------------------


def _bn_weight_gradient_ratio(scale: float = 10.0) -> float:
    """By autograd: |grad of the loss w.r.t. W| at scale * W over that at W, BatchNorm after."""
    g = torch.Generator().manual_seed(3)
    x, target = torch.randn(32, 5, generator=g), torch.randn(32, 4, generator=g)
    w0 = torch.randn(4, 5, generator=g)
    norms = []
    for c in (1.0, scale):
        w = (c * w0).requires_grad_()
        bn = torch.nn.BatchNorm1d(4)  # training mode: batch statistics
        loss = ((bn(x @ w.T) - target) ** 2).mean()
        loss.backward()
        norms.append(w.grad.norm().item())
    return norms[1] / norms[0]


def _tanh_slope_spread(q: float) -> float:
    """mu2 / mu1^2 - 1 of tanh's squared slopes (1 - tanh(h)^2)^2 at h ~ N(0, q), by the
    trapezoid rule on a fine grid (normlab.theory uses Gauss-Legendre quadrature)."""
    h = torch.linspace(-12.0, 12.0, 200_001, dtype=torch.float64) * q**0.5
    density = torch.exp(-h * h / (2 * q))  # unnormalized: the constant cancels in the ratio
    d2 = (1 - torch.tanh(h) ** 2) ** 2
    mu0, mu1, mu2 = (torch.trapezoid(density * d2**k, h) for k in (0, 1, 2))
    return float(mu2 * mu0 / mu1**2 - 1)


def _tanh_edge(sigma_b2: float) -> float:
    """The critical sigma_w2 of tanh at ``sigma_b2``, by the trapezoid rule: on the critical
    line q* fixes sigma_w2 = 1 / E[phi'^2] and sigma_b2 = q* - sigma_w2 E[phi^2]; bisect q*."""
    z = torch.linspace(-12.0, 12.0, 100_001, dtype=torch.float64)
    density = torch.exp(-z * z / 2)

    def expect(f: torch.Tensor) -> float:
        return float(torch.trapezoid(density * f, z) / torch.trapezoid(density, z))

    lo, hi = 1e-9, 10.0
    for _ in range(60):
        q = (lo * hi) ** 0.5
        u = q**0.5 * z
        sw2 = 1 / expect((1 - torch.tanh(u) ** 2) ** 2)
        lo, hi = (q, hi) if q - sw2 * expect(torch.tanh(u) ** 2) < sigma_b2 else (lo, q)
    return 1 / expect((1 - torch.tanh((lo * hi) ** 0.25 * z) ** 2) ** 2)


# Right answers worked out here, by hand, by autograd or from the seeds' printed figures, not
# from the exercise's own expected() function; traps are the wrong turns each exercise names.
NUMBERS: dict[str, tuple[float, list[float]]] = {
    "drift-shrink-factor": (1.0280 / 0.0993, []),  # the seed table: input std / layer-3 std
    "bn-running-mean-update": (0.9 * 2.0 + 0.1 * statistics.mean([1, 3, 8, 4]), [3.8]),
    "bn-running-var-update": (
        0.9 * 1.0 + 0.1 * statistics.variance([1, 3, 8, 4]),
        [0.9 * 1.0 + 0.1 * statistics.pvariance([1, 3, 8, 4])],
    ),
    "init-variance-after-depth": (1.1 ** (2 * 20), [1.1**20]),
    "init-xavier-bound": (math.sqrt(6 / (256 + 128)), [math.sqrt(2 / (256 + 128))]),
    "doctor-relu-gain": (math.sqrt(64 / 2), [8.0]),  # width 64, std-1 weights; 8 forgets ReLU
    "bn-weight-gradient-scale": (_bn_weight_gradient_ratio(), [1.0, 10.0]),
    # 20 ReLU layers, orthogonal: the slopes (0 or 1, half each) add 1 per layer; 40 keeps the
    # Gaussian weights' 1 per layer, 0 takes ReLU for isometric
    "isometry-relu-orthogonal": (20 * 1.0, [40.0, 0.0]),
    # 50 tanh layers at q* = 0.1, orthogonal: L (mu2 / mu1^2 - 1); the traps add the Gaussian
    # weights' 1, use the small-q* expansion 8 q*^2, or read q* as the std of h
    "isometry-tanh-orthogonal": (
        50 * _tanh_slope_spread(0.1),
        [50 * (1 + _tanh_slope_spread(0.1)), 50 * 8 * 0.1**2, 50 * _tanh_slope_spread(0.01)],
    ),
    # tanh's edge of chaos at sigma_b2 = 2 (measured in the lesson's listing); the traps: the
    # edge without biases, He's ReLU value, the lesson's own row at sigma_b2 = 0.05
    "edge-critical-by-measurement": (_tanh_edge(2.0), [1.0, 2.0, _tanh_edge(0.05)]),
    # pre-LN MLP stack: each block adds the branch's 1/2 (ReLU halves); 21 forgets the ReLU,
    # 10 the input, 1 is post-LN, 1.5^20 compounds as without a norm
    "residual-pre-ln-stream": (1 + 20 / 2, [21.0, 10.0, 1.0, 1.5**20]),
    # branches scaled by 1/sqrt(32) add (1/32)(1/2) each; 17 is unscaled, 1 + sqrt(32)/2 scales
    # the second moment by s instead of s^2, 0.5 forgets the input
    "residual-scaled-branches": (1 + 32 * (1 / 32) / 2, [17.0, 1 + math.sqrt(32) / 2, 0.5]),
    # muP, Adam, hidden weights: 0.01 / (1024 / 64); SP's rate, times the multiplier, over its root
    "width-depth-adam-hidden-rate": (0.01 * 64 / 1024, [0.01, 0.01 * 16, 0.01 / 4]),
    # 32 unscaled blocks, branch gain 1/6: RMS (7/6)^16; the second moment; added, not multiplied
    "width-depth-stream-growth": ((7 / 6) ** 16, [(7 / 6) ** 32, 1 + 32 / 6]),
}


def test_every_number_exercise_is_covered() -> None:
    assert set(NUMBERS) == {e.id for e in exercises.EXERCISES if isinstance(e, NumberExercise)}


@pytest.mark.parametrize("exercise_id", sorted(NUMBERS))
def test_number_right_within_tolerance_wrong_outside_traps_named(exercise_id: str) -> None:
    ex = exercises.get(exercise_id)
    assert isinstance(ex, NumberExercise)
    right, traps = NUMBERS[exercise_id]
    ok = ex.check(right)
    assert ok.passed and ok.feedback.startswith("Right")
    tol = max(ex.rel_tol * abs(right), ex.abs_tol)
    assert ex.check(right + 0.5 * tol).passed
    for off in (right + 3 * tol, right - 3 * tol, -right):
        wrong = ex.check(off)
        assert not wrong.passed
        assert ("too large" if off > right else "too small") in wrong.feedback
    for trap in traps:
        verdict = ex.check(trap)
        assert not verdict.passed and "That" in verdict.feedback and "too" not in verdict.feedback
    assert "%" in ex.public()["tolerance_text"] or "within" in ex.public()["tolerance_text"]


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ("2.2x", "'2.2x' is not a number: use digits"),
        ("Infinity", "'Infinity' is not allowed: the answer must be a finite number"),
        ("", "the answer is empty"),
        (True, "(bool) is not a number"),
        (None, "(NoneType) is not a number"),
        (math.inf, "inf is not allowed"),
        (math.nan, "nan is not allowed"),
        (10**400, "must be a finite number"),
    ],
)
def test_number_refuses_what_is_not_a_number(answer: object, fragment: str) -> None:
    with pytest.raises(BadSubmission) as info:
        exercises.get("bn-running-mean-update").check(answer)  # type: ignore[attr-defined]
    assert info.value.parameter == "answer" and fragment in str(info.value)


# -- number answers as typed -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10,355", 10355.0),
        ("10 355", 10355.0),
        ("10\u202f355", 10355.0),  # the narrow no-break space of typeset numbers
        ("1,234,567.5", 1234567.5),
        ("1e-3", 0.001),
        ("-0.5", -0.5),
        ("\u22120.5", -0.5),  # the minus sign copied from a formula
        ("  +2.5E+2 ", 250.0),
        (".5", 0.5),
        ("3.", 3.0),
        ("10355", 10355.0),
    ],
)
def test_numbers_read_as_people_type_them(text: str, value: float) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("Infinity", "'Infinity' is not allowed: the answer must be a finite number, like 10355"),
        ("-inf", "'-inf' is not allowed"),
        ("nan", "'nan' is not allowed"),
        ("∞", "'∞' is not allowed"),
        ("1e999", "'1e999' is too large"),
        ("", "the answer is empty: type a number, like 10355, 10,355, -0.5 or 1e-3"),
        ("   ", "the answer is empty"),
        ("0,5", "'0,5' is not a number here: a comma separates thousands (10,355), decimals take "),
        ("10,35", "decimals take a point (10.35)"),
        ("0,125", "decimals take a point (0.125)"),  # never read as 125
        ("-0,125", "decimals take a point"),
        ("1,0000", "is not a number"),  # not groups of three
        ("10, 355", "is not a number: use digits"),
        ("10,355 000", "is not a number"),  # two kinds of separator
        ("abc", "'abc' is not a number: use digits with an optional sign, decimal point and "),
        ("0x10", "is not a number"),
        ("1_000", "is not a number"),
        ("1/3", "is not a number"),
        (".", "is not a number"),
        ("e5", "is not a number"),
        ("٣", "is not a number"),  # other scripts' digits: only 0-9
        ("1" * 65, "65 characters, a number at most 64"),
    ],
)
def test_numbers_refused_say_what_is_allowed(text: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_number(text)
    assert fragment in str(info.value)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_float_reads_back_exactly(x: float) -> None:
    assert parse_number(repr(x)) == x
    assert parse_number(f"{x:e}") == float(f"{x:e}")
    assert parse_number(f"  {x!r}\n") == x


@given(st.integers(-(2**53), 2**53), st.sampled_from([",", " ", "\u00a0", "\u2009", "\u202f"]))
def test_grouped_integers_read_as_the_integer(n: int, sep: str) -> None:
    assert parse_number(f"{n:,}".replace(",", sep)) == n
    assert parse_number(f"{n:,}.25".replace(",", sep)) == n + math.copysign(0.25, n or 1)


@given(st.text(alphabet="0123456789.eE+-", max_size=12))
def test_plain_numbers_agree_with_float(text: str) -> None:
    try:
        expected = float(text)
    except ValueError:
        with pytest.raises(ValueError):
            parse_number(text)
        return
    if math.isfinite(expected):
        assert parse_number(text) == expected
    else:
        with pytest.raises(ValueError, match="too large"):
            parse_number(text)


@given(st.text(max_size=30))
def test_any_text_is_a_finite_number_or_a_value_error(text: str) -> None:
    try:
        value = parse_number(text)
    except ValueError as exc:
        assert "number" in str(exc) or "empty" in str(exc)
    else:
        assert math.isfinite(value)


def test_a_number_exercise_takes_the_text_as_typed() -> None:
    ex = NumberExercise(id="t", lesson="drift", prompt="?", expected=lambda: 10355.0, abs_tol=0.5)
    assert ex.check("10,355").passed and ex.check("10 355").passed and ex.check(10355).passed
    assert not ex.check("10,356").passed and "too large" in ex.check("10,356").feedback
    small = NumberExercise(id="s", lesson="drift", prompt="?", expected=lambda: 1e-3, rel_tol=1e-9)
    assert small.check("1e-3").passed and small.check("0.001").passed
    with pytest.raises(BadSubmission, match="'Infinity' is not allowed") as info:
        ex.check("Infinity")
    assert info.value.parameter == "answer"


# -- choices: shuffled per learner, length gives nothing away ----------------------------------


def order(exercise_id: str, learner: str) -> list[str]:
    shown: list[str] = choice(exercise_id).for_learner(learner).public()["choices"]
    return shown


def test_choices_are_shuffled_per_learner_and_stable_for_one() -> None:
    for exercise_id in CHOICES:
        ex = choice(exercise_id)
        mine = order(exercise_id, "learner-a")
        assert mine == order(exercise_id, "learner-a")  # the same on every call
        assert sorted(mine) == sorted(c.text for c in ex.choices)  # the same statements
        mixed = ex.for_learner("learner-a")
        for i, text in enumerate(mine):  # an index counts in the learner's order
            assert mixed.check(i) == ex.check(text)
    assert any(order(e, "learner-a") != order(e, "learner-b") for e in CHOICES)
    assert all(exercises.get(e).for_learner("x") is exercises.get(e) for e in ("he-derivation",))


def test_the_right_choice_lands_in_every_place_as_often() -> None:
    learners = [f"learner-{i}" for i in range(400)]
    for exercise_id in CHOICES:
        right = right_text(exercise_id)
        places = [order(exercise_id, who).index(right) for who in learners]
        n = len(choice(exercise_id).choices)
        counts = [places.count(k) for k in range(n)]
        # 400 draws, 1/4 each: expected 100, sd 8.7; 60..140 is more than 4.5 sd either side
        assert all(60 <= c <= 140 for c in counts), (exercise_id, counts)


def test_one_learner_finds_the_right_choice_in_every_place_as_often() -> None:
    """Over one learner's questions, not only over learners: the places are dealt in blocks of
    k questions of k choices, each block every place once, so over n such questions each place
    holds the right choice n // k times, or once more (the last, partial block). Independent
    shuffles would cluster: 14 questions of 4 land 4/4/3/3 for 1 learner in 18."""
    sizes = {len(choice(e).choices) for e in CHOICES}
    for who in [f"learner-{i}" for i in range(30)]:
        for k in sizes:
            same_k = [e for e in CHOICES if len(choice(e).choices) == k]
            places = [order(e, who).index(right_text(e)) for e in same_k]
            low, high = len(same_k) // k, -(-len(same_k) // k)
            counts = [places.count(p) for p in range(k)]
            assert all(low <= c <= high for c in counts), (who, k, counts)
    assert len(CHOICES) >= 8  # enough questions for a cluster to show


def test_option_lengths_do_not_give_the_right_one_away() -> None:
    longest = shortest = 0
    for exercise_id in CHOICES:
        ex = choice(exercise_id)
        right = len(right_text(exercise_id))
        others = [len(c.text) for c in ex.choices if not c.correct]
        longest += right >= max(others)  # a tie counts as longest
        shortest += right <= min(others)
    assert longest <= len(CHOICES) / 2, f"the right option is the longest in {longest}"
    assert shortest <= len(CHOICES) / 2, f"the right option is the shortest in {shortest}"


def test_two_databases_are_two_learners_with_their_own_order(tmp_path: Path) -> None:
    def orders(db: Path) -> dict[str, list[str]]:
        with TestClient(create_app(db_path=db), base_url=LAB) as c:
            body = c.get("/api/exercises").json()
        return {e["id"]: e["choices"] for e in body if e["kind"] == "choice"}

    first = orders(tmp_path / "a.sqlite3")
    assert orders(tmp_path / "a.sqlite3") == first  # the same learner after a restart
    other = orders(tmp_path / "b.sqlite3")
    assert set(other) == set(first) == set(CHOICES)
    assert other != first  # 8 questions of 4 choices: the same by chance once in 24**8
    learner = ProgressStore(tmp_path / "a.sqlite3")
    assert first == {e: order(e, learner.learner_id) for e in CHOICES}
    learner.close()


def test_the_train_page_folds_exercise_3_s_outcome_after_it_until_it_is_solved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/train asks the notebook's exercise 3 (init-vs-bn, lesson 4) and says what the runs did
    only after the question, in a fold that is closed until the learner has solved it."""
    quick = {name: trainlesson.summary(v, 3) for name, v in trainlesson.CASES.items()}
    monkeypatch.setattr(trainlesson, "numbers", lambda **_: quick)  # 3 steps, not 150
    outcome = f"ends at {num(quick['batch']['last'])}"  # the BatchNorm run's last loss
    with TestClient(create_app(db_path=tmp_path / "p.sqlite3"), base_url=LAB) as c:
        page = c.get("/train").text
        fold = re.search(r'<details class="nl-answer" data-exercise="([^"]+)"( open)?>', page)
        assert fold is not None and fold.group(1) == trainlesson.EXERCISE_ID == "init-vs-bn"
        assert page.index("exercise 3: can a good initializer") < fold.start()
        assert page.count(outcome) == 1 and page.index(outcome) > fold.end()
        assert fold.group(2) is None  # folded: nothing solved yet
        store = state_of(c.app).progress  # type: ignore[attr-defined]
        store.record_attempt("init-vs-bn", {"code": "..."}, True, "all checks passed")
        fold = re.search(r'<details class="nl-answer"[^>]*>', c.get("/train").text)
        assert fold is not None and fold.group(0).endswith(" open>")


# -- code exercises, judged from fake runs (no sandbox) ----------------------------------------


@dataclasses.dataclass
class FakeRun:
    status: str
    stdout: str
    stderr: str = ""


def _job() -> CodeJob:
    return code("he-derivation").prepare("def kept_fraction(f): return 0.5")


def he_report(args: dict[str, Any], **changes: object) -> dict[str, object]:
    """What the probe reports for a right submission (exact fractions), then changed."""
    kept = [kept_exact(spec) for spec in args["activations"]]
    report: dict[str, object] = {
        "functions": {"kept_fraction": "ok", "init_std": "ok"},
        "kept": kept,
        "stack_std": [math.sqrt(1 / (k * STACK_WIDTH)) for k in kept],
        "std": [math.sqrt(1 / (k * n)) for n, k in args["calls"]],
    }
    return {**report, **changes}


def test_a_run_without_the_report_line_fails_and_says_why() -> None:
    ex, job = code("he-derivation"), _job()
    timeout = ex.verdict(job, FakeRun("timeout", "partial output\n"))
    assert not timeout.passed and "longer than the 30 s limit" in timeout.feedback
    killed = ex.verdict(job, FakeRun("killed", "", "[normlab sandbox: out of memory]"))
    assert (
        not killed.passed and "was stopped" in killed.feedback and "out of memory" in killed.output
    )
    flood = ex.verdict(job, FakeRun("ok", "x\n[normlab sandbox: stdout truncated: ...]\n"))
    assert not flood.passed and "printed more than the sandbox keeps" in flood.feedback


def test_a_report_line_with_a_guessed_nonce_is_ignored_and_two_lines_fail() -> None:
    ex, job = code("he-derivation"), _job()
    report = json.dumps({"report": he_report(job.args)})
    guessed = ex.verdict(job, FakeRun("ok", f"normlab-check-{'0' * 32} {report}\n"))
    assert not guessed.passed and "ended before the checks could run" in guessed.feedback
    real = f"normlab-check-{job.nonce} {report}\n"
    assert ex.verdict(job, FakeRun("ok", "hello\n" + real)).passed
    twice = ex.verdict(job, FakeRun("ok", real + real))
    assert not twice.passed and "more than once" in twice.feedback


def test_code_submissions_are_validated() -> None:
    ex = code("he-derivation")
    with pytest.raises(BadSubmission, match="code must be a string, got int") as info:
        ex.prepare(3)
    assert info.value.parameter == "code"
    with pytest.raises(BadSubmission, match="the limit is 20,000"):
        ex.prepare("#" * 20_001)
    a, b = ex.prepare("pass"), ex.prepare("pass")
    assert a.nonce != b.nonce and a.args != b.args  # fresh inputs for every submission


# -- code exercises through the real sandbox ---------------------------------------------------

HE_RIGHT = """
import math

import torch

torch.manual_seed(0)  # the samples, and so every verdict below, are the same on every run

def kept_fraction(activation):
    z = torch.randn(10**6)
    return ((activation(z) ** 2).mean() / (z**2).mean()).item()

def init_std(fan_in, kept):
    # Var(z') = fan_in * Var(w) * kept * Var(z): steady when fan_in * Var(w) * kept = 1
    return math.sqrt(1.0 / (kept * fan_in))
"""
MEASURE = "((activation(z) ** 2).mean() / (z**2).mean()).item()"
DERIVE = "math.sqrt(1.0 / (kept * fan_in))"


def check(sandbox: Sandbox, exercise_id: str, source: str) -> Verdict:
    return code(exercise_id).check(source, sandbox)


def test_he_derivation_right_answer_passes(sandbox: Sandbox) -> None:
    v = check(sandbox, "he-derivation", HE_RIGHT)
    assert v.passed, v.feedback
    assert v.feedback.startswith("all 7 checks passed. You measured that ReLU keeps 0.49")
    assert "He's factor, derived" in v.feedback
    assert r"n\,\mathrm{Var}(w) = 2" in v.explanation  # the derivation, shown once solved
    html = v.to_dict()["explanation"]
    assert "<math" in html and "\\(" not in html


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        # the starter measures nothing: 1 for every activation
        (HE_STARTER, "kept_fraction gave 1 for every activation"),
        # He's constant copied: right for ReLU only
        (HE_RIGHT.replace(DERIVE, "math.sqrt(2.0 / fan_in)"), "your std ignores `kept`"),
        # ReLU's fraction hard-coded
        (
            HE_RIGHT.replace(MEASURE, "0.5"),
            "check 2 of 7 (kept_fraction measures what each activation keeps) failed: "
            "kept_fraction gave 0.5 for every activation",
        ),
        (HE_RIGHT.replace(MEASURE, "(activation(z).var() / z.var()).item()"), "That is Var(f(z))"),
        (HE_RIGHT.replace("10**6", "1000"), "is your sample large enough?"),
        # wrong derivations
        (HE_RIGHT.replace(DERIVE, "math.sqrt(kept / fan_in)"), "needs larger weights"),
        (
            HE_RIGHT.replace(DERIVE, "1 / (kept * math.sqrt(fan_in))"),
            "check 5 of 7 (it makes up for the kept fraction) failed",
        ),
        (HE_RIGHT.replace(DERIVE, "math.sqrt(1.0 / kept) / 512**0.5"), "should halve the std"),
        (HE_RIGHT.replace("1.0 / (kept", "2.0 / (kept"), "each layer multiplies it by about 2"),
        (
            HE_RIGHT.replace("1.0 / (kept", "1.01 / (kept"),
            "check 7 of 7 (it is the std the variance argument gives) failed: "
            "kept * fan_in * init_std(fan_in, kept)**2 = 1.01",
        ),
        ("kept_fraction = 0.5", "check 1 of 7 (kept_fraction and init_std are functions) failed"),
        ("def kept_fraction(f):\n    return 0.5", "your code defines no `init_std`"),
        (
            HE_RIGHT.replace("kept * fan_in", "kept * (fan_in - 1)"),
            ") raised ZeroDivisionError: float division by zero",
        ),
        (HE_RIGHT.replace(MEASURE, "'half'"), "kept_fraction(relu) gave str 'half'"),
        (HE_RIGHT.replace(DERIVE, "-" + DERIVE), "a std must be a positive"),
        ("import math\nraise RuntimeError('oops')", "RuntimeError: oops (line 2 of your code)"),
        (HE_RIGHT + "raise SystemExit(0)", "leave out exit()"),
    ],
)
def test_he_derivation_wrong_answers_fail_naming_the_check(
    sandbox: Sandbox, source: str, fragment: str
) -> None:
    v = check(sandbox, "he-derivation", source)
    assert not v.passed and fragment in v.feedback, v.feedback
    assert not v.explanation  # the derivation is kept for a right answer


def test_he_derivation_output_is_shown_and_starter_prints_its_trial(sandbox: Sandbox) -> None:
    v = check(sandbox, "he-derivation", HE_STARTER)
    assert "kept_fraction(relu) = 1.0000" in v.output and "layer 20: Var(z)" in v.output
    assert "normlab-check" not in v.output


def test_he_derivation_draws_activations_copying_cannot_fit() -> None:
    draws = [he_args(random.Random(seed)) for seed in range(200)]
    for args in draws:
        leaky = args["activations"][1]
        assert abs(0.5 / kept_exact(leaky) - 1) > 3 * KEPT_RTOL  # ReLU's 0.5 is far off
        assert len({kept_exact(spec) for spec in args["activations"]}) == 4
    assert len({a["activations"][1]["neg"] for a in draws}) > 20  # fresh slopes


def test_he_derivation_judge_from_reports() -> None:
    args = he_args(random.Random(0))
    assert judge_he_derivation(args, he_report(args)).passed
    missing = {"functions": {"kept_fraction": "ok", "init_std": "not callable"}}
    relu_std = math.sqrt(2 / STACK_WIDTH)
    cases = [
        (missing, "`init_std` is not a function"),
        (he_report(args, kept=[0.5, math.nan, 1.0, 1.0]), "a ratio of mean squares is > 0"),
        (he_report(args, stack_std=[relu_std] * 4), "each layer multiplies it by about"),
    ]
    for report, fragment in cases:
        v = judge_he_derivation(args, report)
        assert not v.passed and fragment in v.feedback, v.feedback


def test_a_learner_who_finds_the_nonce_cannot_forge_a_pass(sandbox: Sandbox) -> None:
    # A hard-coded 0.5, plus a forged report (nonce read off the harness's frame) of right
    # numbers.
    forge = """
import json, sys

def kept_fraction(activation):
    return 0.5

def init_std(fan_in, kept):
    return (1 / (kept * fan_in)) ** 0.5

frame = sys._getframe()
while frame is not None and "mark" not in frame.f_locals:
    frame = frame.f_back
mark, job = frame.f_locals["mark"], frame.f_locals["job"]
args = job["args"]
kept = [(a["pos"] ** 2 + a["neg"] ** 2) / 2 for a in args["activations"]]
report = {
    "functions": {"kept_fraction": "ok", "init_std": "ok"},
    "kept": kept,
    "stack_std": [init_std(args["width"], k) for k in kept],
    "std": [init_std(n, k) for n, k in args["calls"]],
}
print(mark + json.dumps({"report": report}))
"""
    v = check(sandbox, "he-derivation", forge)
    assert not v.passed and "more than once" in v.feedback


def test_a_run_past_its_time_limit_fails(sandbox: Sandbox) -> None:
    quick = dataclasses.replace(code("he-derivation"), wall_s=1.5)
    v = quick.check("while True:\n    pass", sandbox)
    assert not v.passed and "longer than the 1.5 s limit" in v.feedback


BACKWARD_RIGHT = """
import torch

def batchnorm_backward(dy, x, gamma, eps=1e-5):
    n = x.shape[0]
    x_hat = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + eps)   # (N, D)
    inv_std = 1 / torch.sqrt(x.var(0, unbiased=False) + eps)               # (D,)
    dbeta = dy.sum(0)
    dgamma = (dy * x_hat).sum(0)
    dxhat = dy * gamma
    dx = inv_std / n * (n * dxhat - dxhat.sum(0) - x_hat * (dxhat * x_hat).sum(0))
    return dx, dgamma, dbeta
"""


def test_bn_backward_right_answer_passes(sandbox: Sandbox) -> None:
    v = check(sandbox, "bn-backward", BACKWARD_RIGHT)
    assert v.passed, v.feedback
    assert v.feedback.startswith("all 6 checks passed")


AUTOGRAD_INSIDE = """
import torch

def batchnorm_backward(dy, x, gamma, eps=1e-5):
    with torch.enable_grad():
        x = x.detach().requires_grad_()
        gamma = gamma.detach().requires_grad_()
        beta = torch.zeros_like(gamma, requires_grad=True)
        y = torch.nn.functional.batch_norm(x, None, None, gamma, beta, training=True, eps=eps)
        y.backward(dy)
    return x.grad, gamma.grad, beta.grad
"""


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        (BACKWARD_STARTER, "check 4 of 6 (grad of beta matches autograd) failed"),
        # dx as if mean and variance did not depend on x: the classic slip
        (
            BACKWARD_RIGHT.replace(
                "dx = inv_std / n * (n * dxhat - dxhat.sum(0) - x_hat * (dxhat * x_hat).sum(0))",
                "dx = dxhat * inv_std",
            ),
            "check 6 of 6 (grad of x matches autograd) failed",
        ),
        (BACKWARD_RIGHT.replace(" + eps", ""), "grad of gamma differs from autograd by"),
        (AUTOGRAD_INSIDE, "check 3 of 6 (it computes the gradients without autograd) failed"),
        (
            BACKWARD_RIGHT.replace("return dx, dgamma, dbeta", "return dx, dgamma"),
            "it returned 2 values, not (dx, dgamma, dbeta)",
        ),
        (
            BACKWARD_RIGHT.replace("dbeta = dy.sum(0)", "dbeta = dy.sum(0, keepdim=True)"),
            "dbeta has shape (1, 3), expected (3,)",
        ),
    ],
)
def test_bn_backward_wrong_answers_fail_naming_the_check(
    sandbox: Sandbox, source: str, fragment: str
) -> None:
    v = check(sandbox, "bn-backward", source)
    assert not v.passed and fragment in v.feedback, v.feedback
    if "differs from autograd" in v.feedback:
        assert "(max abs), tolerance 1e-06 + 1e-05 x |autograd|" in v.feedback


COMPARE_RIGHT = """
import math
from normlab.experiments import run_experiment

common = dict(hidden_layers=4, width=64, lr=2.0, steps=150, seed=0)
he_losses = run_experiment("init-train", method="he", **common).losses
bn_losses = run_experiment("bn-lr", batch_norm=True, **common).losses

def trains(curve):
    return all(math.isfinite(v) for v in curve) and curve[-1] < curve[0]

bn_still_helps = trains(bn_losses) and not trains(he_losses)
print("He ends at", he_losses[-1], "BN ends at", bn_losses[-1])
"""


def test_init_vs_bn_right_answer_passes(sandbox: Sandbox) -> None:
    v = check(sandbox, "init-vs-bn", COMPARE_RIGHT)
    assert v.passed, v.feedback
    assert "non-finite from step" in v.feedback and "BN ends at" in v.output


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        (COMPARE_STARTER, "check 3 of 5 (bn_losses is the run with BatchNorm"),  # He half: right
        (
            COMPARE_RIGHT.replace("bn_still_helps = ", "bn_still_helps = not "),
            "bn_still_helps = False does not follow from that",
        ),
        ("he_losses = []", "your code does not set bn_losses, bn_still_helps"),
    ],
)
def test_init_vs_bn_wrong_answers_fail_naming_the_check(
    sandbox: Sandbox, source: str, fragment: str
) -> None:
    v = check(sandbox, "init-vs-bn", source)
    assert not v.passed and fragment in v.feedback, v.feedback


def compare_report(**changes: object) -> dict[str, object]:
    """What the probe reports for a right submission (the recomputed curves), then changed."""
    he, bn = reference_curves()
    report: dict[str, object] = {
        "missing": [],
        "he_losses": list(he),
        "bn_losses": list(bn),
        "bn_still_helps": True,
    }
    return {**report, **changes}


def test_init_vs_bn_judge_from_reports() -> None:
    args: dict[str, object] = {}
    assert judge_compare(args, compare_report()).passed
    plain = run_experiment("bn-lr", batch_norm=False).to_dict()["losses"]
    cases = [
        (compare_report(bn_losses=plain), "check 3 of 5 (bn_losses is the run with BatchNorm)"),
        (compare_report(he_losses=list(reference_curves()[0])[:100]), "has 100 losses"),
        (compare_report(he_losses="a str ('x'), not a list"), "he_losses is a str ('x')"),
        (compare_report(bn_still_helps="'yes'"), "bn_still_helps is 'yes'"),
        (compare_report(missing=["he_losses"]), "your code does not set he_losses"),
    ]
    for report, fragment in cases:
        v = judge_compare(args, report)
        assert not v.passed and fragment in v.feedback, v.feedback


def test_init_vs_bn_conclusion_comes_from_the_curves() -> None:
    falling = tuple(1.0 / (1 + t) for t in range(150))
    diverging = (0.7, 40.0, 1e30, *([math.nan] * 147))
    assert bn_still_helps(diverging, falling) is True
    assert bn_still_helps(falling, falling) is False  # both train alike: BN adds nothing here
    assert bn_still_helps(tuple(3 * v for v in falling), falling) is True  # He ends 3x higher
    assert bn_still_helps(falling, diverging) is False
    he, bn = reference_curves()  # the lesson's runs: He alone blows up at lr 2.0, BN does not
    assert not all(math.isfinite(v) for v in he) and all(math.isfinite(v) for v in bn)


COMPARE_EAGER = """
# The seed notebook's way: torch layers, torch's optimizer, a loop of our own.
import math
import torch
import torch.nn.functional as F
from normlab import data

x, y = data.two_moons()

def net(batch_norm, he):
    torch.manual_seed(0)
    layers, d = [], 2
    for _ in range(4):
        layers.append(torch.nn.Linear(d, 64))
        if batch_norm:
            layers.append(torch.nn.BatchNorm1d(64))
        layers.append(torch.nn.ReLU())
        d = 64
    layers.append(torch.nn.Linear(d, 1))
    model = torch.nn.Sequential(*layers)
    if he:
        for m in model:
            if isinstance(m, torch.nn.Linear):  # the head too, as the lesson's widget does
                torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                torch.nn.init.zeros_(m.bias)
    return model

def train(model):
    opt = torch.optim.SGD(model.parameters(), lr=2.0)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses

he_losses = train(net(batch_norm=False, he=True))
bn_losses = train(net(batch_norm=True, he=False))
bn_still_helps = not all(math.isfinite(v) for v in he_losses) and bn_losses[-1] < bn_losses[0]
"""


@pytest.mark.slow
def test_init_vs_bn_an_independent_eager_loop_passes_too(sandbox: Sandbox) -> None:
    v = check(sandbox, "init-vs-bn", COMPARE_EAGER)
    assert v.passed, v.feedback


# -- the HTTP routes ---------------------------------------------------------------------------


def still_serving(client: TestClient) -> None:
    r = client.get("/api/exercises")
    assert r.status_code == 200 and len(r.json()) == len(exercises.EXERCISES)


def test_get_exercises_lists_every_exercise_without_answers(client: TestClient) -> None:
    body = client.get("/api/exercises").json()
    assert [e["id"] for e in body] == [e.id for e in exercises.EXERCISES]
    for e in body:
        assert e["kind"] in ("choice", "number", "code") and e["prompt"]
        assert "correct" not in json.dumps(e) and "expected" not in e
    he = next(e for e in body if e["id"] == "he-derivation")
    assert he["starter"] == HE_STARTER and len(he["checks"]) == 7
    bn_mean = next(e for e in body if e["id"] == "bn-running-mean-update")
    assert bn_mean["tolerance"] == {"relative": 0.0, "absolute": 0.001}


def shown_choices(client: TestClient, exercise_id: str) -> list[str]:
    body = client.get("/api/exercises").json()
    shown: list[str] = next(e["choices"] for e in body if e["id"] == exercise_id)
    return shown


def test_submit_choice_and_number_through_http(client: TestClient) -> None:
    training = next(
        c.text for c in choice("bn-eval-statistics").choices if "as in training" in c.text
    )
    index = shown_choices(client, "bn-eval-statistics").index(training)  # the learner's order
    wrong = client.post("/api/exercises/bn-eval-statistics/submit", json={"answer": index})
    assert wrong.status_code == 200
    assert wrong.json()["passed"] is False and "training mode" in wrong.json()["feedback"]
    right = client.post(
        "/api/exercises/bn-eval-statistics/submit",
        json={"answer": right_text("bn-eval-statistics")},
    )
    assert right.json() == {
        "passed": True,
        "feedback": right.json()["feedback"],
        "attempts": 2,
        "solved": True,
        "saved": True,
    }
    n = client.post("/api/exercises/init-xavier-bound/submit", json={"answer": 0.125})
    assert n.json()["passed"] is True
    progress = client.get("/api/progress").json()["lessons"]
    assert progress["batch-norm"]["exercises"]["bn-eval-statistics"] == {
        "kind": "choice",
        "solved": True,
        "attempts": 2,
    }
    assert progress["initialization"]["solved"] >= 1


def test_a_verdict_the_database_could_not_keep_is_still_given_marked_unsaved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TestClient(create_app(db_path=tmp_path / "p.sqlite3"), base_url=LAB) as c:
        store = state_of(c.app).progress  # type: ignore[attr-defined]

        def locked(*args: object) -> int:
            raise sqlite3.OperationalError("database is locked")

        monkeypatch.setattr(store, "record_attempt", locked)
        r = c.post("/api/exercises/init-xavier-bound/submit", json={"answer": 0.125})
        assert r.status_code == 200
        body = r.json()
        assert body["passed"] is True and body["saved"] is False
        assert "could not be saved (database is locked)" in body["unsaved"]
        monkeypatch.undo()
        assert c.get("/api/progress").status_code == 200  # and the lab goes on


def test_submit_code_through_http(client: TestClient) -> None:
    r = client.post("/api/exercises/bn-backward/submit", json={"code": BACKWARD_RIGHT})
    assert r.status_code == 200 and r.json()["passed"] is True, r.json()
    assert "<math" in r.json()["explanation"]  # the closed form, once solved
    r = client.post("/api/exercises/he-derivation/submit", json={"code": HE_STARTER})
    d = r.json()
    assert d["passed"] is False and "check 2 of 7" in d["feedback"] and "layer 5" in d["output"]
    assert "explanation" not in d  # not before it is solved
    lesson = client.get("/api/progress").json()["lessons"]["initialization"]
    assert lesson["exercises"]["he-derivation"]["attempts"] >= 1


def test_the_attempt_count_answered_is_the_databases(client: TestClient) -> None:
    store = state_of(client.app).progress  # type: ignore[attr-defined]
    url = "/api/exercises/init-variance-after-depth/submit"
    start = store.standing("init-variance-after-depth")["attempts"]
    answers = ["3", "45.26", "1e3", "Infinity", "10,000", "45.259", "x"]  # two are refused
    counted = 0
    for answer in answers:
        r = client.post(url, json={"answer": answer})
        if r.status_code == 422:  # refused: not an attempt
            assert r.json()["detail"]["parameter"] == "answer"
            continue
        counted += 1
        body = r.json()
        db = store.standing("init-variance-after-depth")
        assert body["attempts"] == db["attempts"] == start + counted
        assert body["solved"] == db["solved"]
    assert counted == 5
    lesson = client.get("/api/progress").json()["lessons"]["initialization"]
    assert lesson["exercises"]["init-variance-after-depth"]["attempts"] == start + 5
    assert len(store.attempts("init-variance-after-depth")) == start + 5


def test_a_checked_code_is_kept_for_the_next_visit(client: TestClient) -> None:
    source = HE_RIGHT + "# checked, kept\n"
    r = client.post("/api/exercises/he-derivation/submit", json={"code": source})
    assert r.status_code == 200 and r.json()["passed"] is True, r.json()
    assert client.get("/api/progress").json()["exercise_code"]["he-derivation"] == source
    assert client.get("/api/exercises/he-derivation/code").json()["code"] == source


@pytest.mark.parametrize(
    ("path", "body", "parameter", "fragment"),
    [
        ("/api/exercises/nope/submit", {"answer": 1}, "id", "exercise 'nope' not found"),
        ("/api/exercises/bn-eval-statistics/submit", {}, "answer", "missing 'answer'"),
        ("/api/exercises/bn-eval-statistics/submit", {"answer": 1, "x": 2}, "x", "unknown field"),
        ("/api/exercises/bn-eval-statistics/submit", {"code": "1"}, "code", "send only 'answer'"),
        ("/api/exercises/bn-eval-statistics/submit", {"answer": 9}, "answer", "not in [0, 3]"),
        ("/api/exercises/init-xavier-bound/submit", {"answer": "0.1x"}, "answer", "not a number"),
        ("/api/exercises/init-xavier-bound/submit", {"answer": None}, "answer", "not a number"),
        ("/api/exercises/init-xavier-bound/submit", {"answer": "Infinity"}, "answer", "finite"),
        ("/api/exercises/init-xavier-bound/submit", {"answer": "nan"}, "answer", "finite"),
        ("/api/exercises/init-xavier-bound/submit", {"answer": " "}, "answer", "is empty"),
        ("/api/exercises/init-xavier-bound/submit", {"answer": "0,125"}, "answer", "a point"),
        ("/api/exercises/init-xavier-bound/submit", {"answer": 10**400}, "answer", "finite"),
        ("/api/exercises/he-derivation/submit", {"answer": 2}, "answer", "send only 'code'"),
        ("/api/exercises/he-derivation/submit", {"code": 5}, "code", "code must be a string"),
        ("/api/exercises/he-derivation/submit", {"code": "#" * 20_001}, "code", "the limit is"),
        ("/api/exercises/he-derivation/submit", [1], None, "must be a JSON object"),
    ],
)
def test_bad_submissions_are_422_naming_the_parameter(
    client: TestClient, path: str, body: object, parameter: str | None, fragment: str
) -> None:
    before = client.get("/api/progress").json()
    r = client.post(path, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"]["parameter"] == parameter
    assert fragment in r.json()["detail"]["message"]
    assert client.get("/api/progress").json() == before  # nothing recorded
    still_serving(client)


def test_broken_bodies_are_422_and_oversized_ones_413(client: TestClient) -> None:
    url = "/api/exercises/bn-eval-statistics/submit"
    headers = {"content-type": "application/json"}
    r = client.post(url, content=b"{not json", headers=headers)
    assert r.status_code == 422 and "not valid JSON" in r.json()["detail"]["message"]
    r = client.post(url, content=b'"' + b"a" * (2 << 20) + b'"', headers=headers)
    assert r.status_code == 413 and "the limit is 1,048,576" in r.json()["detail"]["message"]
    still_serving(client)


class BrokenSandbox:
    async def arun(self, code: str, **kw: object) -> object:
        raise SandboxError("could not start the sandbox (bwrap): not installed")

    def close(self) -> None:
        pass


def test_a_broken_sandbox_answers_503_and_records_nothing(tmp_path: Path) -> None:
    app = create_app(db_path=tmp_path / "p.sqlite3")
    state_of(app).sandbox = BrokenSandbox()
    with TestClient(app, base_url=LAB) as c:
        r = c.post("/api/exercises/he-derivation/submit", json={"code": HE_RIGHT})
        assert r.status_code == 503
        assert "could not start the sandbox" in r.json()["detail"]["message"]
        lesson = c.get("/api/progress").json()["lessons"]["initialization"]
        he = lesson["exercises"]["he-derivation"]
        assert he["attempts"] == 0
        still_serving(c)


def test_openapi_lists_the_learning_routes(client: TestClient) -> None:
    """Each exercise's submit route is documented with the body its kind takes (a templated
    path could state only their union, which would call a code body valid for a choice)."""
    paths = client.get("/openapi.json").json()["paths"]
    assert "/api/progress" in paths and "/api/exercises/{exercise_id}/code" in paths
    assert "/api/exercises/{exercise_id}/submit" not in paths
    for exercise in exercises.EXERCISES:
        body = paths[f"/api/exercises/{exercise.id}/submit"]["post"]["requestBody"]
        schema = body["content"]["application/json"]["schema"]
        assert schema["required"] == (["code"] if exercise.kind == "code" else ["answer"])
        if isinstance(exercise, ChoiceExercise):
            texts, index = schema["properties"]["answer"]["oneOf"]
            assert texts["enum"] == [c.text for c in exercise.choices]
            assert (index["minimum"], index["maximum"]) == (0, len(exercise.choices) - 1)


def test_progress_db_is_the_one_given(client: TestClient, tmp_path: Path) -> None:
    store = state_of(client.app).progress  # type: ignore[attr-defined]
    assert Path(store.path).name == "progress.sqlite3" and store.journal_mode() == "wal"
