"""The lesson ``width-depth``'s exercises: right answers pass, wrong ones fail with their own
feedback, and the right answers are what the coord-check net does when measured.

The right answers are worked out here by hand: Adam's hidden rate under muP is the base rate
over the width multiplier, 0.01 / (1024 / 64); the unscaled stream's RMS grows by
(1 + 1/6)^(32/2) over 32 blocks. Each is then checked against a measurement on the
``coord-check`` experiment's own network.
"""

from __future__ import annotations

import statistics

import pytest
import torch
import torch.nn.functional as F

from normlab.experiments.coord_check import blobs, build_net, rms_sizes
from normlab.lab import exercises
from normlab.lab.exercises import ChoiceExercise, NumberExercise

RATE, BASE, WIDE = 0.01, 64, 1024
RIGHT_RATE = RATE * BASE / WIDE
RIGHT_GROWTH = (7 / 6) ** 16


def number(exercise_id: str) -> NumberExercise:
    ex = exercises.get(exercise_id)
    assert isinstance(ex, NumberExercise)
    return ex


def test_the_lesson_closes_with_its_three_questions() -> None:
    ids = [e.id for e in exercises.by_lesson("width-depth")]
    assert ids == [
        "width-depth-adam-hidden-rate",
        "width-depth-stream-growth",
        "width-depth-what-mup-leaves",
    ]


def test_the_hidden_rate_question_takes_the_rate_over_the_multiplier() -> None:
    ex = number("width-depth-adam-hidden-rate")
    assert ex.check(RIGHT_RATE).passed and ex.check("6.25e-4").passed
    assert ex.check("0.000625").feedback.startswith("Right")
    assert not ex.check(RIGHT_RATE * 1.05).passed  # 5% off is outside the 1% asked for
    for trap, words in ((RATE, "SP's rate"), (RATE * 16, "multiplies"), (RATE / 4, "square root")):
        verdict = ex.check(trap)
        assert (
            not verdict.passed and verdict.feedback.startswith("That") and words in verdict.feedback
        )


def test_the_stream_question_takes_seven_sixths_to_the_sixteenth() -> None:
    ex = number("width-depth-stream-growth")
    assert ex.check(RIGHT_GROWTH).passed and ex.check("11.78").passed
    assert not ex.check(RIGHT_GROWTH * 1.05).passed
    second_moment = ex.check((7 / 6) ** 32)
    assert not second_moment.passed and "square root" in second_moment.feedback
    added = ex.check(1 + 32 / 6)
    assert not added.passed and "multiply" in added.feedback


def test_the_choice_marks_the_growth_over_depth_right() -> None:
    ex = exercises.get("width-depth-what-mup-leaves")
    assert isinstance(ex, ChoiceExercise)
    right = [c for c in ex.choices if c.correct]
    assert len(right) == 1 and right[0].text.startswith("It grows with depth")
    assert all(ex.check(c.text).passed is c.correct for c in ex.choices)


def _hidden_update(width: int, rate: float, seed: int) -> float:
    """RMS of the change of the first hidden layer's output after one Adam step on it alone, in
    the coord-check net under muP (output drawn small, not zero, so that step 1 has a gradient)."""
    x, y = blobs(200, 10, seed, "cpu")
    net = build_net("muP", width, 1, 10, BASE, "scaled", seed)
    layer = net.hidden[0]
    with torch.no_grad():
        h = torch.relu(net.input(x))  # (N, n): what the hidden layer reads
    before = layer.weight.detach().clone()
    opt = torch.optim.Adam(layer.parameters(), lr=rate)
    F.cross_entropy(net(x)[-1], y).backward()
    opt.step()
    with torch.no_grad():
        return (h @ (layer.weight - before).T).pow(2).mean().sqrt().item()  # (N, n) -> ()


@pytest.mark.parametrize("seed", [0, 3])
def test_the_right_rate_keeps_the_hidden_update_the_base_width_s(seed: int) -> None:
    """Adam's first step is the rate times the gradient's sign, so a unit's change sums n steps
    of size rate: with rate / 16 at width 1024 it is the width-64 change up to finite-width
    noise (about 8% at width 64, ratios 0.91-1.08 over 5 seeds; 0.75-1.33 is 3 of those),
    with SP's rate it is about 16 times larger (14.6-17.3)."""
    base = _hidden_update(BASE, RATE, seed)
    assert 0.75 < _hidden_update(WIDE, RIGHT_RATE, seed) / base < 1.33
    assert _hidden_update(WIDE, RATE, seed) / base > 8


def test_the_stream_grows_by_the_answer_on_the_coord_check_net() -> None:
    """32 unscaled blocks at width 512, at init: h_32's RMS over h_0's, averaged over 4 seeds.
    One seed wanders by 7.9% around (7/6)^16 (12 seeds: mean 1.03, sd 0.079), the mean of 4 by
    4%: within 12% is 3 of those."""
    ratios = []
    for seed in range(4):
        x, _ = blobs(200, 10, seed, "cpu")
        with torch.no_grad():
            sizes = rms_sizes(build_net("muP", 512, 32, 10, BASE, "zero", seed)(x))
        ratios.append(sizes[-2] / sizes[0])  # the last hidden layer over the input layer
    assert statistics.mean(ratios) == pytest.approx(RIGHT_GROWTH, rel=0.12)
