"""Exercises closing the lesson ``residual-normalization``: residual streams at initialization.

The two number questions are the lesson's variance argument for sums, checked against
:func:`normlab.theory.residual_stream` (which the ``residual-stream`` experiment measures): a
pre-LN stack of MLP blocks adds the branch's gain 1/2 per block, and a branch scaled by ``s``
adds ``s**2`` times as much.
"""

from __future__ import annotations

from normlab import theory
from normlab.lab.lessons.exercise import Choice, ChoiceExercise, Exercise, NumberExercise, Trap

LESSON = "residual-normalization"

DEPTH = 20
"""Blocks of the pre-LN stack in the first number question."""
SCALED_DEPTH = 32
"""Blocks of the stack whose branches are scaled by 1/sqrt(L) in the second."""


def _pre_ln_moment() -> float:
    """E|x_L|^2/d after ``DEPTH`` pre-LN MLP blocks: ``1 + L/2``."""
    return theory.residual_stream("pre", DEPTH)[DEPTH]


def _scaled_moment() -> float:
    """The same after ``SCALED_DEPTH`` blocks whose branches are scaled by ``1/sqrt(L)``."""
    scale = SCALED_DEPTH**-0.5
    return theory.residual_stream("pre", SCALED_DEPTH, branch_scale=scale)[SCALED_DEPTH]


EXERCISES: tuple[Exercise, ...] = (
    NumberExercise(
        id="residual-pre-ln-stream",
        lesson=LESSON,
        prompt=(
            f"A pre-LN stack of {DEPTH} MLP blocks, `x = x + f(LayerNorm(x))`, where `f` is "
            "`Linear -> ReLU -> Linear` with weights drawn from N(0, 1/fan_in) and no biases, "
            "receives tokens with E|x|^2/d = 1. Predict E|x|^2/d after the last block, at "
            "initialization."
        ),
        expected=_pre_ln_moment,
        rel_tol=0.01,
        digits=4,
        solution=(
            "Right: {expected}. LayerNorm hands the branch second moment 1, the branch returns "
            "half of it (the ReLU halves, the Linears keep), and second moments of independent "
            "terms add: 1 + L/2. The residual-stream experiment measures it."
        ),
        hint=(
            "What second moment does the branch receive after LayerNorm, and what fraction of "
            "it does Linear -> ReLU -> Linear return? Each block adds that to the stream."
        ),
        traps=(
            Trap(
                lambda: 1.0 + DEPTH,
                "That counts a whole unit per block. The ReLU zeroes half of a symmetric input, "
                "so the branch returns only half of the second moment it receives.",
            ),
            Trap(
                lambda: DEPTH / 2,
                "That is what the blocks add. The stream also keeps its input, whose second "
                "moment is 1 before the first block.",
            ),
            Trap(
                lambda: 1.0,
                "That is post-LN, which normalizes the sum. Pre-LN normalizes only what the "
                "branch sees, and the stream itself keeps growing.",
            ),
            Trap(
                lambda: 1.5**DEPTH,
                "That multiplies, as a stack without any norm would (x + f(x) grows by 1.5 a "
                "block). Here the branch sees LN(x), so it adds the same amount every block.",
            ),
        ),
    ),
    NumberExercise(
        id="residual-scaled-branches",
        lesson=LESSON,
        prompt=(
            f"The same pre-LN MLP stack, now with {SCALED_DEPTH} blocks, and every branch's "
            f"output multiplied by 1/sqrt({SCALED_DEPTH}), as GPT-2 scales its output "
            "projections. Predict E|x|^2/d after the last block, at initialization."
        ),
        expected=_scaled_moment,
        rel_tol=0.01,
        digits=4,
        solution=(
            "Right: {expected}. A branch multiplied by s adds s^2 times as much: each block "
            "adds (1/L)(1/2), and L blocks add 1/2 in all, at any depth."
        ),
        hint=(
            "Multiplying a branch by s multiplies its second moment by s^2. How much does each "
            "block add then, and how much do all of them add together?"
        ),
        traps=(
            Trap(
                lambda: 1.0 + SCALED_DEPTH / 2,
                "That is the unscaled stack. The factor on every branch shrinks what it adds "
                "to the stream.",
            ),
            Trap(
                lambda: 1.0 + SCALED_DEPTH * SCALED_DEPTH**-0.5 / 2,
                "That scales the second moment by s itself. A second moment is a square: "
                "multiplying a branch by s multiplies it by s^2.",
            ),
            Trap(
                lambda: 0.5,
                "That is what the branches add together. The stream also keeps its input, "
                "whose second moment is 1.",
            ),
        ),
    ),
    ChoiceExercise(
        id="residual-rank-collapse",
        lesson=LESSON,
        prompt=(
            "Which of these stacks, at initialization, turns every token of a sequence into "
            "the same vector (rank collapse) within a few layers?"
        ),
        choices=(
            Choice(
                "Self-attention layers stacked with no skip connection, no MLP and no norm.",
                "Right. Each layer replaces every token by an average of the tokens, and the "
                "averages of averages converge doubly exponentially (Dong et al. 2021): four "
                "layers reached float32's precision in the lesson.",
                correct=True,
            ),
            Choice(
                "MLP blocks with no normalization and no skips, at He initialization.",
                "An MLP acts on every token on its own and never mixes them. Its ReLUs raise the "
                "tokens' cosine only slowly, layer after layer.",
            ),
            Choice(
                "Pre-LN blocks of attention and MLP, a LayerNorm before each branch.",
                "The skip keeps each token's own part, and the growing stream dilutes every new "
                "average: the lesson's tokens stay far from rank one after 48 blocks.",
            ),
            Choice(
                "ReZero blocks of attention and MLP, every gate starting at zero.",
                "With every gate at 0 each block is the identity at initialization: the tokens "
                "leave the stack exactly as different as they entered.",
            ),
        ),
    ),
)
