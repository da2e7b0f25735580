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
            "A batch passes through the lesson's plain stack: ten `Linear` layers with their "
            "default initialization, each followed by ReLU, nothing else. What happens to the "
            "std of the activations as they go deeper?"
        ),
        choices=(
            Choice(
                "It stays near the input's std of about 1 at every layer, since the default "
                "initialization scales each layer's weights to its fan-in.",
                "Look at the table again: the first layer already cuts the std to about a "
                "third, and nothing in the stack restores it.",
            ),
            Choice(
                "It grows layer by layer, because every layer adds its bias on top of what "
                "the layer before it passed on.",
                "The biases are small (drawn from the same narrow range as the weights); the "
                "table shows the std falling, not growing.",
            ),
            Choice(
                "It shrinks: about a tenth of the input's by layer 3, and it stays that small.",
                "Right. Each layer multiplies the scale by a factor below 1, and the factors "
                "compound, so the deep layers work with tiny values.",
                correct=True,
            ),
            Choice(
                "It becomes exactly 0 after the first ReLU, since ReLU drops half the values.",
                "ReLU zeroes the negative values, not all of them: the std after layer 1 is "
                "small but well above 0.",
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
            "A `Linear` layer gets a batch, then the same batch multiplied by 10. How does the "
            "std of its output change?"
        ),
        choices=(
            Choice(
                "It does not change: a layer's output scale is set by its weights alone, "
                "whatever the input.",
                "The output is a weighted sum of the inputs, so scaling the inputs scales it "
                "too. Compare the two std values in the lesson's first example.",
            ),
            Choice(
                "It grows about tenfold (exactly tenfold without the bias).",
                "Right. W(10x) = 10(Wx); only the bias b stays put, which is why the lesson's "
                "example shows a ratio a little under 10.",
                correct=True,
            ),
            Choice(
                "It grows about a hundredfold, because a variance scales with the square of "
                "the input.",
                "The variance grows a hundredfold; the std is its square root and grows tenfold.",
            ),
            Choice(
                "It shrinks, because the default initialization damps large inputs.",
                "Initialization fixes the weights once; the layer is linear in its input, so "
                "a larger input gives a proportionally larger output.",
            ),
        ),
    ),
)
