"""The lesson ``edge-of-chaos``'s exercises: a measurement passes, wrong turns fail, and the
answer key is what a stack measures.

The number exercise is checked against ``normlab.theory.critical_sigma_w2`` within
:data:`~normlab.lab.lessons.edge_of_chaos.exercises.REL_TOL`; here a measurement made the way the
prompt asks (the lesson's row listing: one stack of width 512 and depth 30, a row of weight
variances, where the measured chi_1 crosses 1) passes it, for several seeds.
"""

from __future__ import annotations

import math

import pytest
import torch

from normlab import models, theory
from normlab.experiments import edge_of_chaos as eoc
from normlab.lab import exercises
from normlab.lab.exercises import ChoiceExercise, NumberExercise
from normlab.lab.lessons.edge_of_chaos.exercises import LESSON, REL_TOL, SIGMA_B2


def _measured_crossing(seed: int, width: int = 512, depth: int = 30) -> float:
    """Where chi_1 crosses 1 on one stack, as the lesson's row listing measures it."""
    torch.manual_seed(seed)
    x = models.input_pair(width, 1.0, 0.6)
    stack = models.draw_stack(depth, width, "cpu")
    sigma_w2 = torch.linspace(3.0, 6.0, 13)
    m = models.propagate("tanh", stack, x, sigma_w2, torch.full_like(sigma_w2, SIGMA_B2))
    chi_1 = m["growth"][:, depth // 5 :].mean(1)
    found = eoc.crossing(sigma_w2.tolist(), chi_1.tolist())
    assert found is not None
    return found


def test_the_lesson_closes_with_a_measurement_and_a_phase() -> None:
    assert [e.kind for e in exercises.by_lesson(LESSON)] == ["number", "choice"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_measured_edge_passes(seed: int) -> None:
    ex = exercises.get("edge-critical-by-measurement")
    assert isinstance(ex, NumberExercise)
    measured = _measured_crossing(seed)
    verdict = ex.check(measured)
    assert verdict.passed, (measured, verdict.feedback)
    # the measurement scatters by 1.7% (sd over seeds): well inside the 6% allowed
    assert abs(measured / theory.critical_sigma_w2("tanh", SIGMA_B2) - 1) < REL_TOL / 2


def test_the_edge_itself_passes_and_the_wrong_turns_fail_with_their_reason() -> None:
    ex = exercises.get("edge-critical-by-measurement")
    assert isinstance(ex, NumberExercise)
    edge = theory.critical_sigma_w2("tanh", SIGMA_B2)
    assert 4.2 < edge < 4.35  # past the widget's largest bias variance's edge (3.44)
    assert ex.check(edge).passed and ex.check(f"{edge:.3g}").passed
    assert not ex.check(edge * (1 + 2 * REL_TOL)).passed
    assert not ex.check(edge * (1 - 2 * REL_TOL)).passed
    for trap, word in ((1.0, "without biases"), (2.0, "ReLU"), (1.761, "0.05")):
        verdict = ex.check(trap)
        assert not verdict.passed and word in verdict.feedback
    assert not ex.check(theory.critical_sigma_w2("tanh", 1.0)).passed  # the widget's last row


def test_the_chaotic_inputs_end_at_their_fixed_correlation() -> None:
    ex = exercises.get("edge-chaotic-inputs")
    assert isinstance(ex, ChoiceExercise)
    right = next(c for c in ex.choices if c.correct)
    assert "fixed correlation below 1" in right.text
    mf = theory.mean_field("tanh", 3.0, 0.05)
    assert mf.phase == "chaotic" and 0.1 < mf.c_star < 0.9  # not 1, and not 0 (the biases)
    # measured: 100 layers of width 512 from c0 = 0.99 end near c* (its per-layer scatter at
    # this width is about 0.07 in the chaotic phase, where the map pulls by 0.9 a layer)
    torch.manual_seed(0)
    x = models.input_pair(512, 1.0, 0.99)
    stack = models.draw_stack(100, 512, "cpu")
    c = models.propagate("tanh", stack, x, torch.tensor([3.0]), torch.tensor([0.05]))["c"][0]
    assert c[-1].item() == pytest.approx(mf.c_star, abs=0.2)
    assert c[:5].min().item() > c[-20:].max().item()  # it moved away from 0.99
    assert mf.xi_c < 10 and math.isfinite(mf.xi_c)
