"""Exercises closing lesson 5, ``doctor``: reading a diagnosis and choosing the cure."""

from __future__ import annotations

import math

from normlab import zoo
from normlab.lab.lessons.exercise import Choice, ChoiceExercise, Exercise, NumberExercise, Trap

LESSON = "doctor"


def _relu_layer_gain() -> float:
    """Std gain of one hidden layer of ``exploding-relu``: sqrt(fan_in * Var(w) / 2)."""
    return math.sqrt(zoo.MLP_WIDTH * 1.0**2 / 2)


def _gain_without_relu_half() -> float:
    return math.sqrt(zoo.MLP_WIDTH * 1.0**2)


EXERCISES: tuple[Exercise, ...] = (
    NumberExercise(
        id="doctor-relu-gain",
        lesson=LESSON,
        prompt=(
            f"In the zoo's `exploding-relu` model every hidden `Linear` has {zoo.MLP_WIDTH} "
            "inputs, weights drawn with std 1.0 and zero biases, and a ReLU after it. By the "
            "variance argument of the initialization lesson, by what factor does one such layer "
            "(Linear and its ReLU) multiply the std of the activations?"
        ),
        expected=_relu_layer_gain,
        rel_tol=0.02,
        digits=3,
        solution=(
            "Right: {expected}. Twenty such layers multiply the scale by about 10^15, which is "
            "why the doctor labels the deep layers exploding."
        ),
        hint=(
            "The second moment after a layer is fan_in × Var(w) × (second moment before), and "
            "ReLU keeps half of it; the std is the square root."
        ),
        traps=(
            Trap(
                _gain_without_relu_half,
                "That is sqrt(fan_in × Var(w)), the gain of the Linear layer alone. ReLU zeroes "
                "the negative half, which halves the second moment.",
            ),
        ),
    ),
    ChoiceExercise(
        id="doctor-dead-cure",
        lesson=LESSON,
        prompt=(
            "The doctor labels a ReLU layer `dead`: most of its units output 0 for every "
            "example, because the Linear before it has biases far below zero. Which change "
            "brings those units back?"
        ),
        choices=(
            Choice(
                "Lower the learning rate, so that training does not push the biases even "
                "further below zero.",
                "A lower learning rate changes how fast the weights move, but a unit that is 0 "
                "on every input passes no gradient back to its weights or bias: it stays dead.",
            ),
            Choice(
                "Add a BatchNorm1d after the ReLU, so the layer's outputs get back to unit "
                "variance.",
                "After the ReLU it is too late: the dead units output 0 for the whole batch, "
                "and normalizing a constant column gives zeros again.",
            ),
            Choice(
                "Re-initialize the Linear: zero biases, He-scaled weights (or a norm before "
                "the ReLU).",
                "Right. With zero-mean pre-activations about half the inputs make each unit "
                "fire again; a norm before the ReLU recentres the pre-activations the same way.",
                correct=True,
            ),
            Choice(
                "Multiply that layer's weights by 10.",
                "The biases dominate the pre-activations; larger weights let a few more inputs "
                "cross zero but leave the layer's outputs at the mercy of the bias, and the "
                "next layers' scale explodes.",
            ),
        ),
    ),
)
