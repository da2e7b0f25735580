r"""Exercises closing the lesson ``dynamical-isometry``: the spread of a Jacobian's spectrum.

Both number exercises ask for a prediction the lesson's formula gives,
:math:`\mathrm{Var}(s^2) = L\,(\mu_2/\mu_1^2 - 1 - s_1)` at :math:`\chi_1 = 1`, for a stack the
lesson does not show; the expected value is :func:`normlab.theory.jacobian_spectrum`'s, called
at check time. The traps are the wrong turns the lesson warns about: the Gaussian weights' term
kept for orthogonal ones, ReLU taken for isometric, the small-:math:`q^*` expansion used far
from the origin, and :math:`q^*` read as a standard deviation.
"""

from __future__ import annotations

from normlab import theory
from normlab.lab.lessons.exercise import Choice, ChoiceExercise, Exercise, NumberExercise, Trap

LESSON = "dynamical-isometry"

RELU_DEPTH = 20
TANH_DEPTH, TANH_Q = 50, 0.1
WIDTH = 1000
"""The width the predictions are asked at (they are its large-width limits, the same at any)."""


def _spread(activation: str, depth: int, weights: theory.Weights, q_star: float = 1.0) -> float:
    """The predicted var(s^2) of the Jacobian at the critical point (its mean is 1 there)."""
    return theory.jacobian_spectrum(activation, depth, WIDTH, weights, q_star=q_star).variance


EXERCISES: tuple[Exercise, ...] = (
    NumberExercise(
        id="isometry-relu-orthogonal",
        lesson=LESSON,
        prompt=(
            f"A stack of {RELU_DEPTH} ReLU layers, width {WIDTH}, no biases, has orthogonal "
            "weights scaled to the critical point (`torch.nn.init.orthogonal_` with gain "
            "sqrt(2), so sigma_w2 = 2 and the mean of s^2 is 1). Predict the variance of the "
            "squared singular values s^2 of its input-output Jacobian."
        ),
        expected=lambda: _spread("relu", RELU_DEPTH, "orthogonal"),
        rel_tol=0.02,
        digits=3,
        solution=(
            "Right: {expected}. ReLU's slopes are 0 or 1, half each: mu2 / mu1^2 - 1 = 1 per "
            "layer. Orthogonal weights add nothing of their own, and take nothing away either."
        ),
        hint=(
            "Add up, layer by layer, the spread of the slopes (mu2 / mu1^2 - 1 with mu_k = "
            "E[phi'(h)^(2k)]) and the spread of the weights (1 Gaussian, 0 orthogonal)."
        ),
        traps=(
            Trap(
                lambda: _spread("relu", RELU_DEPTH, "gaussian"),
                "That is the Gaussian stack's spread: its weights add 1 per layer of their own. "
                "Orthogonal weights remove that part, and only that part.",
            ),
            Trap(
                lambda: 0.0,
                "That would be an isometry, as a linear stack with orthogonal weights is. A "
                "ReLU switches half its units off (slope 0) and keeps the rest (slope 1): those "
                "unequal slopes spread the spectrum whatever the weights.",
            ),
        ),
    ),
    NumberExercise(
        id="isometry-tanh-orthogonal",
        lesson=LESSON,
        prompt=(
            f"A tanh stack of {TANH_DEPTH} layers with orthogonal weights sits on the critical "
            f"line chi_1 = 1 with its pre-activations' variance at q* = {TANH_Q}. Predict the "
            "variance of the squared singular values of its input-output Jacobian. (Compute "
            "mu1 = E[phi'(h)^2] and mu2 = E[phi'(h)^4] for h ~ N(0, q*): the lesson's "
            "quadrature listing does it for other values of q*.)"
        ),
        expected=lambda: _spread("tanh", TANH_DEPTH, "orthogonal", TANH_Q),
        rel_tol=0.03,
        digits=3,
        solution=(
            "Right: {expected}, L (mu2 / mu1^2 - 1): far below the Gaussian stack's, which "
            "is about L, and growing fast with q* as the units start to saturate."
        ),
        hint=(
            "Orthogonal weights add nothing: var(s^2) = L (mu2 / mu1^2 - 1), with the moments "
            "of phi'(h)^2 = (1 - tanh(h)^2)^2 at h ~ N(0, q*)."
        ),
        traps=(
            Trap(
                lambda: _spread("tanh", TANH_DEPTH, "gaussian", TANH_Q),
                "That is the Gaussian stack's spread (it adds 1 per layer for the weights). "
                "Orthogonal weights add nothing.",
            ),
            Trap(
                lambda: 8 * TANH_Q**2 * TANH_DEPTH,
                "That is the small-q* expansion 8 q*^2 per layer, which only holds very near "
                "the origin: at this q* it is off by a factor of 2. Compute the expectations.",
            ),
            Trap(
                lambda: _spread("tanh", TANH_DEPTH, "orthogonal", TANH_Q**2),
                "That is the spread at q* = 0.01: q* is the variance of h, so h has std "
                "sqrt(q*), not q*.",
            ),
        ),
    ),
    ChoiceExercise(
        id="isometry-why-not-relu",
        lesson=LESSON,
        prompt=(
            "At the critical point (sigma_w2 = 2) a deep ReLU stack keeps the mean of its "
            "Jacobian's s^2 at 1, with Gaussian or with orthogonal weights. Why can no choice "
            "of weights make it dynamically isometric?"
        ),
        choices=(
            Choice(
                "Its slopes are 0 for half the units and 1 for the rest; that inequality adds "
                "L to the spread, whatever the weights.",
                "Right. mu2 / mu1^2 = (1/2) / (1/2)^2 = 2 for any q*: the slopes' part of the "
                "spread is 1 per layer, and orthogonal weights only remove the weights' part.",
                correct=True,
            ),
            Choice(
                "At sigma_w2 = 2 the mean of s^2 grows like 2^L, so the spectrum runs away "
                "from 1 however the weights are drawn.",
                "The mean is chi_1^L, and chi_1 = sigma_w2 * E[phi'(h)^2] = 2 * 1/2 = 1: it "
                "stays at 1. The widget's mean panel shows it flat; the spread is what grows.",
            ),
            Choice(
                "An orthogonal matrix cannot be scaled to sigma_w2 = 2 without losing its "
                "orthogonality, so ReLU stacks must use Gaussian weights.",
                "sqrt(2) times an orthogonal matrix stretches every direction by the same "
                "factor: `orthogonal_(w, gain=sqrt(2))` does exactly that, and the lesson "
                "measures it.",
            ),
            Choice(
                "ReLU has no derivative at 0, so the Jacobian of a ReLU stack is undefined "
                "and has no singular values to speak of.",
                "A pre-activation is exactly 0 with probability 0: the Jacobian is defined at "
                "almost every input, and the lesson computes its singular values.",
            ),
        ),
    ),
)
