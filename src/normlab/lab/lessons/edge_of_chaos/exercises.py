r"""Exercises closing the lesson ``edge-of-chaos``: find the critical line by measurement, and
read the phase of a stack.

The number exercise asks for the critical weight variance of a tanh stack at a bias variance
beyond the widget's range (:data:`SIGMA_B2`), to be *measured* with the lesson's row listing
(one matmul a layer over a row of weight variances, then where the measured :math:`\chi_1`
crosses 1). Its expected value is :func:`normlab.theory.critical_sigma_w2`, called at check
time; the tolerance, :data:`REL_TOL`, is what one finite stack's measurement justifies.
"""

from __future__ import annotations

from normlab import theory
from normlab.lab.lessons.exercise import Choice, ChoiceExercise, Exercise, NumberExercise, Trap

LESSON = "edge-of-chaos"

SIGMA_B2 = 2.0
"""The bias variance of the measured stack: past the widget's largest (1.0), so the listing,
run in the playground, is the instrument."""

REL_TOL = 0.06
r"""A measured crossing passes within 6% of the critical line.

One stack of the listing's size (width 512, 30 layers, :math:`\chi_1` averaged over layers
7-30) puts its crossing at :math:`\sigma_b^2 = 2` within a standard deviation of 1.7% of the
line (measured over 10 seeds; at width 1000, 1.1%): its own length :math:`q` wanders around
:math:`q^*` by about 1% and :math:`\mathbb{E}[\phi'^2]` moves with it, while :math:`\chi_1`
grows only slowly along :math:`\sigma_w^2` (:math:`d\chi_1/d\ln\sigma_w^2 = 0.68` there). 6% is
3.5 sd, with room for a scan whose columns are a few tenths apart; the edge of the widget's
largest bias variance (:math:`\sigma_b^2 = 1`: 3.44) is 19% away."""


def _critical(sigma_b2: float) -> float:
    return theory.critical_sigma_w2("tanh", sigma_b2)


EXERCISES: tuple[Exercise, ...] = (
    NumberExercise(
        id="edge-critical-by-measurement",
        lesson=LESSON,
        prompt=(
            f"Find the edge of chaos by measurement. A deep tanh stack has bias variance "
            f"sigma_b2 = {SIGMA_B2:g}, more than the widget allows. Open the row listing in the "
            f"playground, set `sigma_b2 = {SIGMA_B2:g}` and a row of `sigma_w2` values wide "
            "enough for chi_1 to cross 1, and run it: at what sigma_w2 does the measured "
            "chi_1 cross 1?"
        ),
        expected=lambda: _critical(SIGMA_B2),
        rel_tol=REL_TOL,
        digits=3,
        solution=(
            "Right: the critical line passes sigma_w2 = {expected} at this bias variance. The "
            "larger the biases, the larger the length q* they hold the stack at, the more the "
            "tanh units saturate (smaller phi'), and the larger the weights must be for a "
            "perturbation to keep its size."
        ),
        hint=(
            "Scan a row of sigma_w2 values (the listing's `torch.linspace`) wide enough that "
            "the first measured chi_1 is below 1 and the last above it, then read where it "
            "crosses; biases this large push the edge well past the lesson's values."
        ),
        traps=(
            Trap(
                lambda: 1.0,
                "That is the edge without biases (and the variance argument's sigma_w2 = 1 for "
                "a linear layer). Biases hold the length q* away from 0, where tanh is no "
                "longer linear: its slope drops, and the weights must make up for it.",
            ),
            Trap(
                lambda: 2.0,
                "That is He's value, the edge of a ReLU stack, whose slope is 1 or 0 whatever "
                "the length. tanh's average squared slope depends on q*, and so does its edge.",
            ),
            Trap(
                lambda: _critical(0.05),
                "That is the edge at sigma_b2 = 0.05, the lesson's row. Set sigma_b2 to "
                f"{SIGMA_B2:g} in the listing and measure again.",
            ),
        ),
    ),
    ChoiceExercise(
        id="edge-chaotic-inputs",
        lesson=LESSON,
        prompt=(
            "A tanh stack of 100 layers has sigma_w2 = 3 and sigma_b2 = 0.05 (chi_1 > 1 there). "
            "Two inputs enter at correlation 0.99. What does the correlation map say about "
            "them at the last layer?"
        ),
        choices=(
            Choice(
                "They end at the map's fixed correlation below 1, the same one any two "
                "different inputs end at",
                "Right: with chi_1 > 1 the fixed point c = 1 repels, so nearby inputs are "
                "pushed apart until they reach the stable c* below 1. Their starting 0.99 is "
                "forgotten within a few xi_c layers.",
                correct=True,
            ),
            Choice(
                "They become identical (correlation 1): the deep layers forget how they differ",
                "That is the ordered phase, chi_1 < 1, where c = 1 attracts. Here chi_1 > 1 "
                "and the same fixed point repels.",
            ),
            Choice(
                "Their correlation stays near 0.99: each layer keeps what it is given",
                "Only on the critical line, chi_1 = 1, is the map flat enough near c = 1 for "
                "that, and even there it drifts slowly. Off it, the correlation moves every "
                "layer.",
            ),
            Choice(
                "Their correlation falls to 0: chaos makes the outputs independent",
                "Not quite: the biases are shared by both inputs and add sigma_b2 to their "
                "covariance every layer, so the fixed correlation sits above 0 (it would be 0 "
                "only for an odd activation without biases).",
            ),
        ),
    ),
)
