"""Exercises closing lesson 5, ``bn-training``: why batch normalization helps, measured."""

from __future__ import annotations

from normlab.lab.lessons.exercise import Choice, ChoiceExercise, Exercise, NumberExercise, Trap

LESSON = "bn-training"

SCALE = 10.0
"""The factor the number question multiplies a BatchNorm-fed layer's weights by."""


def _gradient_factor() -> float:
    r"""New over old weight gradient after scaling :math:`W` by ``SCALE`` before a BatchNorm.

    :math:`L(cW) = L(W)` for every :math:`c > 0`, so differentiating at :math:`cW` gives
    :math:`c\,\nabla L(cW) = \nabla L(W)`: the gradient shrinks by :math:`1/c`.
    """
    return 1.0 / SCALE


EXERCISES: tuple[Exercise, ...] = (
    ChoiceExercise(
        id="bn-why-it-helps",
        lesson=LESSON,
        prompt=(
            "Santurkar et al. (2018) put random noise after every BatchNorm layer, so that each "
            "layer's input distribution moved more than with no normalization at all. What did "
            "they find, and what did they conclude?"
        ),
        choices=(
            Choice(
                "Training slowed to the speed of the plain network: removing the shift is what "
                "BatchNorm does for optimization.",
                "The noisy networks trained about as fast as with ordinary BatchNorm, which is "
                "what made the shift explanation doubtful.",
            ),
            Choice(
                "It still trained about as fast: BatchNorm helps by making the loss surface "
                "smoother, not by removing the shift.",
                "Right. With a smaller Lipschitz constant of the loss and its gradient, a large "
                "step lands where the gradient said it would.",
                correct=True,
            ),
            Choice(
                "Training diverged at every learning rate, since the noise undid the mean 0 and "
                "variance 1 that BatchNorm had set.",
                "It did not diverge: the networks trained nearly as well as with plain "
                "BatchNorm, despite the moving inputs.",
            ),
            Choice(
                "The noise acted as a regularizer, so the test loss fell: the shift itself was "
                "what had held the networks back.",
                "The experiment was about the speed of training, and the networks trained at "
                "BatchNorm's speed with the shift put back.",
            ),
        ),
    ),
    NumberExercise(
        id="bn-weight-gradient-scale",
        lesson=LESSON,
        prompt=(
            "A `Linear` layer feeds a `BatchNorm1d` in training mode, and the loss depends on "
            f"the weights only through that BatchNorm's output. Multiply the layer's weight "
            f"by {SCALE:g}. By what factor does the gradient of the loss with respect to that "
            "weight change (the new gradient over the old, for the same batch)?"
        ),
        expected=_gradient_factor,
        rel_tol=0.01,
        digits=3,
        solution=(
            "Right: {expected}. The loss does not change when W is scaled (L(cW) = L(W)), so "
            "by the chain rule c times the gradient at cW equals the gradient at W. Large "
            "weights learn slowly and small ones fast: BatchNorm pulls the effective step back "
            "towards a scale of its own."
        ),
        hint=(
            "The output does not change when W is scaled. Write L(cW) = L(W), differentiate "
            "both sides with respect to W, and compare the gradients at cW and at W."
        ),
        traps=(
            Trap(
                lambda: 1.0,
                "That is what happens to the output and the loss. The gradient is taken with "
                "respect to W itself: differentiate L(cW) = L(W) and see where c appears.",
            ),
            Trap(
                lambda: SCALE,
                "That would be a plain linear layer's output. With BatchNorm after it, the "
                "loss stays the same, and the chain rule puts c on the other side.",
            ),
        ),
    ),
    ChoiceExercise(
        id="bn-scale-invariance",
        lesson=LESSON,
        prompt=(
            "Every weight of a `Linear` layer that feeds a `BatchNorm1d` (training mode) is "
            "multiplied by 10. What happens to the BatchNorm layer's output?"
        ),
        choices=(
            Choice(
                "It grows tenfold, since the normalization keeps each feature's shape and only "
                "gamma and beta can change its size.",
                "The batch's std grows tenfold too, and dividing by it takes the factor out "
                "again: BN(10 Wx) = BN(Wx).",
            ),
            Choice(
                "It grows a hundredfold, because the batch variance that it divides by scales "
                "with the square of the weights.",
                "The variance grows a hundredfold, but the layer divides by its square root, "
                "the std, which grows tenfold like the input.",
            ),
            Choice(
                "It is unchanged (up to eps): the batch mean and std grow tenfold too, and the "
                "normalization divides them out.",
                "Right. That is why a normalized network depends less on its initializer's "
                "scale; its gradient shrinks tenfold instead.",
                correct=True,
            ),
            Choice(
                "Every output becomes 0, since the mean of the larger inputs is subtracted and "
                "nothing of their spread is left over.",
                "Subtracting the mean centres the features but keeps their spread, which the "
                "division by the std brings back to 1.",
            ),
        ),
    ),
)
