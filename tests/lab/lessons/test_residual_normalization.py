"""The lesson ``residual-normalization``'s exercises: right answers pass, wrong ones fail.

The right answers are worked out here by hand (1 + L/2, and 1 + L s^2/2 for branches scaled by
s) and checked against the live measurement of the ``residual-stream`` experiment's own blocks,
so the exercises ask for what the lab measures.
"""

from __future__ import annotations

import math

import torch

from normlab.experiments.residual_stream import probe_stack
from normlab.lab import exercises
from normlab.lab.exercises import ChoiceExercise, NumberExercise
from normlab.lab.lessons.residual_normalization.exercises import DEPTH, SCALED_DEPTH
from normlab.models import TransformerBlock


def number(exercise_id: str) -> NumberExercise:
    ex = exercises.get(exercise_id)
    assert isinstance(ex, NumberExercise)
    return ex


def measured(depth: int, scale: float, seeds: int = 4, d: int = 128) -> float:
    """E|x_L|^2/d of a pre-LN MLP stack, averaged over ``seeds`` runs of 8 x 16 tokens."""
    total = 0.0
    for seed in range(seeds):
        torch.manual_seed(seed)
        x0 = torch.randn(8, 16, d)
        blocks: list[torch.nn.Module] = [
            TransformerBlock(d, "pre", attention=False, branch_scale=scale) for _ in range(depth)
        ]
        total += probe_stack(blocks, x0, torch.randn(8, 16, d))["second_moment"][-1]
    return total / seeds


def test_the_pre_ln_question_takes_one_plus_l_over_two_and_names_its_traps() -> None:
    ex = number("residual-pre-ln-stream")
    right = 1 + DEPTH / 2
    assert ex.check(right).passed and ex.check(f"{right:g}").passed
    assert not ex.check(right * 1.05).passed  # 5% off is outside the 1% asked for
    for trap in (1.0 + DEPTH, DEPTH / 2, 1.0, 1.5**DEPTH):
        verdict = ex.check(trap)
        assert not verdict.passed and verdict.feedback.startswith("That")


def test_the_scaled_branches_question_takes_one_and_a_half() -> None:
    ex = number("residual-scaled-branches")
    assert ex.check(1.5).passed and ex.check("1.5").passed
    assert not ex.check(1.0 + SCALED_DEPTH / 2).passed
    wrong_square = ex.check(1 + math.sqrt(SCALED_DEPTH) / 2)
    assert not wrong_square.passed and "s^2" in wrong_square.feedback


def test_the_answers_are_what_the_stack_measures() -> None:
    """The seed-mean of 4 runs at d = 128 wanders by about 0.8/sqrt(128)/sqrt(4) = 3.5% around
    the prediction (see tests/experiments/test_residual_stream.py): within 4 of those, 14%,
    while every trap but the nearest (10 against 11) is 40% or more away."""
    for exercise_id, depth, scale in (
        ("residual-pre-ln-stream", DEPTH, 1.0),
        ("residual-scaled-branches", SCALED_DEPTH, SCALED_DEPTH**-0.5),
    ):
        ex = number(exercise_id)
        m = measured(depth, scale)
        assert abs(m / ex.expected() - 1) < 4 * 0.8 / math.sqrt(128) / 2, (exercise_id, m)


def test_the_rank_collapse_question_has_one_right_answer() -> None:
    ex = exercises.get("residual-rank-collapse")
    assert isinstance(ex, ChoiceExercise)
    right = [c for c in ex.choices if c.correct]
    assert len(right) == 1 and "no skip" in right[0].text
    assert ex.check(right[0].text).passed
    assert all(not ex.check(c.text).passed for c in ex.choices if not c.correct)


def test_the_lesson_closes_with_these_three() -> None:
    ids = [e.id for e in exercises.by_lesson("residual-normalization")]
    assert ids == ["residual-pre-ln-stream", "residual-scaled-branches", "residual-rank-collapse"]
