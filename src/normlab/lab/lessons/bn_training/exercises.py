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
            "layer's input distribution moved more than with no normalization at all, and the "
            "noisy networks trained nearly as fast as with plain BatchNorm. Which explanation "
            "of BatchNorm's speed-up does that result rule out?"
        ),
        choices=(
            Choice(
                "That it smooths the loss surface: added noise can only make the surface rougher.",
                "The noise moves the layers' inputs, not the loss surface's smoothness, which "
                "the authors measured separately: the normalized networks' loss and gradients "
                "still changed gently. That is the explanation they kept.",
            ),
            Choice(
                "That it speeds training by steadying the distribution every layer receives: "
                "the speed stayed when the steadiness was gone.",
                "Right. That was the original explanation (removing internal covariate shift). "
                "The authors traced the speed-up to a smoother loss surface instead: with "
                "gradients that change gently, a large step lands where the gradient said it "
                "would.",
                correct=True,
            ),
            Choice(
                "That it needs exactly mean 0 and variance 1 at every layer: the noise broke "
                "both, and training still worked.",
                "No explanation on the table needed exact moments; the question is whether the "
                "moving inputs matter, and the result says they hardly do.",
            ),
            Choice(
                "None: noise is a regularizer, so the result says nothing about the speed of "
                "training.",
                "The experiment measured the speed of training, which the noise left nearly "
                "unchanged; a regularizer would act on the test loss.",
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
            "Every weight and bias of a `Linear` layer that feeds a `BatchNorm1d` (training "
            "mode, gamma 1 and beta 0, as a new layer) is multiplied by -3. What happens to the "
            "BatchNorm layer's output?"
        ),
        choices=(
            Choice(
                "It is unchanged: a normalized layer ignores the scale of the weights before it.",
                "It ignores their size, not their sign: the mean and the deviations from it "
                "flip sign with the weights, and the std, which only grows threefold, cannot "
                "flip them back.",
            ),
            Choice(
                "It grows threefold and flips sign, since only gamma and beta can change its size.",
                "The batch's std grows threefold too, and dividing by it takes the 3 out "
                "again; what is left is the sign.",
            ),
            Choice(
                "Every output flips sign and keeps its size (up to eps): the std grows "
                "threefold and divides the 3 out.",
                "Right. BN(-3z) = -BN(z) with gamma 1 and beta 0: the mean subtraction keeps "
                "the sign, the division by the std removes only the size.",
                correct=True,
            ),
            Choice(
                "Every output becomes 0, since the mean of the flipped inputs is subtracted "
                "and nothing of their spread is left over.",
                "Subtracting the mean centres the features but keeps their spread, which the "
                "division by the std brings back to 1.",
            ),
        ),
    ),
)
