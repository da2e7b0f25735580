"""Exercises closing the lesson ``width-depth``: what muP scales with the width, and what it
leaves to the depth."""

from __future__ import annotations

import math

from normlab import theory
from normlab.experiments.coord_check import BRANCH_GAIN, build_net, param_groups
from normlab.lab.lessons.exercise import Choice, ChoiceExercise, Exercise, NumberExercise, Trap

LESSON = "width-depth"

_LR, _BASE, _WIDTH = 0.01, 64, 1024
"""The hidden-rate question: Adam at rate 0.01 tuned at width 64, the net widened to 1024."""
_BLOCKS = 32
"""The stream question: residual blocks without normalization, branches unscaled."""


def _adam_hidden_rate() -> float:
    """Adam's rate for the hidden weights of the coord-check net under muP, read off the very
    parameter groups the experiment trains with."""
    net = build_net("muP", _WIDTH, 1, 10, _BASE, "zero", 0)
    groups = param_groups(net, "muP", "adam", _LR, _BASE)
    return float(groups[1]["lr"])  # input, hidden, output


def _sp_rate() -> float:
    return _LR


def _times_multiplier() -> float:
    return _LR * _WIDTH / _BASE


def _over_root_multiplier() -> float:
    return _LR / math.sqrt(_WIDTH / _BASE)


def _stream_growth() -> float:
    """The RMS growth over the blocks: the square root of the predicted second moment."""
    return math.sqrt(theory.residual_stream("none", _BLOCKS, branch_gain=BRANCH_GAIN)[-1])


def _second_moment_growth() -> float:
    return theory.residual_stream("none", _BLOCKS, branch_gain=BRANCH_GAIN)[-1]


def _added_growth() -> float:
    return 1.0 + _BLOCKS * BRANCH_GAIN


EXERCISES: tuple[Exercise, ...] = (
    NumberExercise(
        id="width-depth-adam-hidden-rate",
        lesson=LESSON,
        prompt=(
            f"A residual MLP trains well with Adam at learning rate {_LR:g} at width {_BASE}. "
            f"You widen it to {_WIDTH} and switch to muP with {_BASE} as the base width. What "
            "learning rate does Adam use for a hidden (width x width) weight matrix now?"
        ),
        expected=_adam_hidden_rate,
        rel_tol=0.01,
        digits=3,
        solution=(
            "Right: {expected}, the base rate over the width multiplier n / n0. Adam moves "
            "every weight by about the rate whatever its gradient, and a hidden unit adds up n "
            "such moves that all lean the same way, so the rate must fall like 1/n."
        ),
        hint=(
            "Adam's step is about the rate per weight; a hidden unit sums n of them along its "
            "input. How must the rate change so that the sum stays the same size?"
        ),
        traps=(
            Trap(
                _sp_rate,
                "That is SP's rate, the same at every width: the hidden update then grows like "
                "the width, which is SP's blow-up in the coordinate check.",
            ),
            Trap(
                _times_multiplier,
                "That multiplies by the width multiplier: it is muP's SGD rule for the input "
                "layer, whose gradient shrinks with the width. Adam's step does not shrink.",
            ),
            Trap(
                _over_root_multiplier,
                "That divides by the square root of the multiplier, as if the n moves had "
                "random signs. After a step they are aligned with the input: they add up like "
                "n, not like its square root.",
            ),
        ),
    ),
    NumberExercise(
        id="width-depth-stream-growth",
        lesson=LESSON,
        prompt=(
            f"A residual stream h + W relu(h) without normalization has {_BLOCKS} blocks. At "
            "initialization each branch W relu(h) returns 1/6 of the second moment it reads "
            "(PyTorch's default init, Var(w) = 1/(3 fan_in), behind a ReLU), and muP keeps that "
            f"init. By what factor is the stream's RMS larger after block {_BLOCKS} than before "
            "block 1?"
        ),
        expected=_stream_growth,
        rel_tol=0.01,
        digits=3,
        solution=(
            "Right: {expected} = (7/6)^16. Each block adds an independent branch, so the second "
            "moment is multiplied by 1 + 1/6 per block and the RMS by its square root: "
            "exponential in the depth, whatever the width."
        ),
        hint=(
            "The branch is independent of the stream at init: the second moments add. What "
            "factor per block does that give, and how does the RMS follow the second moment?"
        ),
        traps=(
            Trap(
                _second_moment_growth,
                "That is the growth of the second moment, (7/6)^32. The RMS is its square root.",
            ),
            Trap(
                _added_growth,
                "That adds 1/6 per block to the starting second moment, as a stream with "
                "normalized branch inputs (pre-LN) would. Here the branch reads the grown stream "
                "itself, so the factors multiply.",
            ),
        ),
    ),
    ChoiceExercise(
        id="width-depth-what-mup-leaves",
        lesson=LESSON,
        prompt=(
            "A residual MLP without normalization, width 256, trains under muP (Table 3's "
            "per-layer rates and output init) with unscaled branches. You stack 1, 2, 4, ... 32 "
            "blocks. What does the coordinate check over depth show for the last hidden layer?"
        ),
        choices=(
            Choice(
                "It holds flat: muP makes every layer's size independent of the model's size, "
                "and the depth is part of that size.",
                "muP's rules are written in the width. At a fixed width a deeper stack still "
                "multiplies the stream by 7/6 per block at init, and its updates add up over "
                "the blocks: the lesson's depth sweep spreads far above 1.",
            ),
            Choice(
                "It grows with depth, already at initialization; branches scaled by "
                "1/sqrt(L), with Adam's hidden rate scaled alike, hold it flat.",
                "Right. muP fixes the exponents of the width; the depth needs its own rule, "
                "depth-muP's 1/sqrt(L) branches, whose stream stays within a few percent.",
                correct=True,
            ),
            Choice(
                "It shrinks with depth, because muP divides every hidden learning rate by the "
                "width multiplier and deep stacks have more hidden layers.",
                "The rate is divided by the width multiplier at every depth alike, and a "
                "smaller rate cannot shrink the stream below its size at init, which grows.",
            ),
            Choice(
                "It grows only once training diverges; at init the stream has the same size "
                "at every depth, as the variance argument promises.",
                "The variance argument holds a plain stack's scale with the right gain. A "
                "residual block adds its branch to the stream, so the second moment grows by "
                "1 + 1/6 per block before any step.",
            ),
        ),
    ),
)
