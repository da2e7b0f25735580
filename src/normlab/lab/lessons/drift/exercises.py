"""Exercises closing lesson 1, ``drift``: how a plain deep stack changes the activations' scale."""

from __future__ import annotations

from normlab.experiments import run_experiment
from normlab.lab.lessons.exercise import Choice, ChoiceExercise, Exercise, NumberExercise

LESSON = "drift"


def _layer3_shrink() -> float:
    """Input std over layer-3 std in the lesson's drift run (its defaults), live."""
    r = run_experiment("drift").to_dict()
    return float(r["input_std"] / r["stds"][2])  # stds[k] is layer k + 1


EXERCISES: tuple[Exercise, ...] = (
    ChoiceExercise(
        id="drift-std-through-depth",
        lesson=LESSON,
        prompt=(
            "The lesson's plain stack (ten `Linear(16, 16)` layers with their default "
            "initialization, each followed by ReLU, seed 0) receives the lesson's batch "
            "multiplied by 100, so its std is about 103 instead of 1.03. What does the std look "
            "like deeper in?"
        ),
        choices=(
            Choice(
                "It stays about 100 times the unscaled batch's at every layer (near 8 at layer "
                "10): each layer passes its input's scale on.",
                "Each layer passes the scale on times its own factor, about 0.4 per block here "
                "(a sixth of the mean square). From 103 that reaches the floor the biases hold "
                "up within eight layers, and from there on the input's size no longer shows.",
            ),
            Choice(
                "It grows, because ReLU lets the large positive values through unchanged.",
                "ReLU zeroes the negative half, and the default weights keep about a third of "
                "the mean square: every block loses more than it passes on.",
            ),
            Choice(
                "It shrinks layer by layer down to the floor the unscaled batch sits on (near "
                "0.08 at layer 10): the biases hold that floor up, whatever came in.",
                "Right. The per-layer factor is the same as for the unscaled batch, so the "
                "larger batch only needs more layers (about eight instead of three) to reach "
                "the floor the bias sets; after that the two runs agree.",
                correct=True,
            ),
            Choice(
                "It shrinks to a tenth of the input's by layer 3 (about 10) and stays there.",
                "A tenth by layer 3 is where the unscaled batch met the floor. The factor per "
                "layer is the same here, so at layer 3 the std is still about 6, and it keeps "
                "falling until it reaches the same floor, near 0.09, by layer 8.",
            ),
        ),
    ),
    NumberExercise(
        id="drift-shrink-factor",
        lesson=LESSON,
        prompt=(
            "Run the drift experiment with its defaults (`normlab run drift`, or the widget). "
            "By what factor has the std shrunk between the input and layer 3, that is, input "
            "std divided by layer-3 std?"
        ),
        expected=_layer3_shrink,
        rel_tol=0.01,
        digits=3,
        solution="Right: {expected}. Three layers took away about nine tenths of the spread.",
        hint="Divide the input's std by layer 3's std, both from the table of the default run.",
    ),
    ChoiceExercise(
        id="drift-linear-passes-scale",
        lesson=LESSON,
        prompt=(
            "A `Linear` layer built with `bias=False` gets a batch, then the same batch "
            "multiplied by -10. How does the std of its output change?"
        ),
        choices=(
            Choice(
                "It shrinks: a negative factor pushes the outputs below zero, toward nothing.",
                "The std measures spread around the mean, not size above zero; flipping every "
                "value's sign leaves the spread as it was.",
            ),
            Choice(
                "It grows exactly tenfold: the sign flips every output, which leaves the "
                "spread alone.",
                "Right. W(-10x) = -10(Wx), and the std ignores the sign. With no bias nothing "
                "stays put, so the ratio is exactly 10, not a little under it as in the "
                "lesson's example.",
                correct=True,
            ),
            Choice(
                "It grows about a hundredfold, because a variance scales with the square of "
                "the input.",
                "The variance grows a hundredfold; the std is its square root and grows tenfold.",
            ),
            Choice(
                "It grows a little less than tenfold, as in the lesson's example.",
                "The lesson's layer had a bias, which does not scale with the input; this one "
                "has none, so the output is exactly -10 times the old one.",
            ),
        ),
    ),
)
