"""Exercises closing lesson 2, ``batch-norm``: what the layer computes in training and in eval.

The number exercises are answered by a live :class:`normlab.nn.BatchNorm1d` (which matches
``torch.nn.BatchNorm1d``, see ``tests/test_nn.py``) fed the numbers of the prompt.
"""

from __future__ import annotations

import torch

from normlab import nn as nlnn
from normlab.lab.lessons.exercise import Choice, ChoiceExercise, Exercise, NumberExercise, Trap

LESSON = "batch-norm"

# The batch of the running-statistics questions: four rows of one feature.
_BATCH = (1.0, 3.0, 8.0, 4.0)
_START_MEAN = 2.0
_MOMENTUM = 0.1


def _one_pass() -> nlnn.BatchNorm1d:
    """A ``BatchNorm1d(1)`` that starts at running mean 2.0 and then sees ``_BATCH`` once."""
    layer = nlnn.BatchNorm1d(1, momentum=_MOMENTUM)
    assert layer.running_mean is not None and layer.running_var is not None
    layer.running_mean.fill_(_START_MEAN)
    layer.train()
    with torch.no_grad():
        layer(torch.tensor(_BATCH).unsqueeze(1))  # (N,) -> (N, 1)
    return layer


def _running_mean() -> float:
    layer = _one_pass()
    assert layer.running_mean is not None
    return float(layer.running_mean.item())


def _running_var() -> float:
    layer = _one_pass()
    assert layer.running_var is not None
    return float(layer.running_var.item())


def _running_var_if_biased() -> float:
    """The trap: feeding the biased batch variance (divide by N) to the running estimate."""
    batch = torch.tensor(_BATCH, dtype=torch.float64)
    return float((1 - _MOMENTUM) * 1.0 + _MOMENTUM * batch.var(unbiased=False))


def _running_mean_momentum_swapped() -> float:
    """The trap: weighting the old value by the momentum instead of the new batch."""
    return _MOMENTUM * _START_MEAN + (1 - _MOMENTUM) * sum(_BATCH) / len(_BATCH)


_values = ", ".join(f"{v:g}" for v in _BATCH)

EXERCISES: tuple[Exercise, ...] = (
    ChoiceExercise(
        id="bn-eval-statistics",
        lesson=LESSON,
        prompt=(
            "A model with `BatchNorm1d` layers has been trained and switched to `model.eval()`. "
            "You pass it the same row twice: alone, and as one row of a batch of 100 very "
            "different rows. What comes out for that row?"
        ),
        choices=(
            Choice(
                "Two different outputs: each batch is normalized with its own mean and (biased) "
                "variance, as in training.",
                "That is training mode. In eval mode the output for a row must not depend on "
                "the other rows in its batch.",
            ),
            Choice(
                "The same output twice: it is normalized with the running mean and running "
                "variance, which no batch changes now.",
                "Right. The running estimates were accumulated during training and are fixed "
                "in eval mode, so one row gives the same output whatever batch it comes in, "
                "even a batch of one.",
                correct=True,
            ),
            Choice(
                "An error for the row alone, since a batch of one row has no spread to measure.",
                "Only training mode measures a spread; eval mode normalizes with stored "
                "estimates, so a single row is fine.",
            ),
            Choice(
                "The same output twice, because eval mode switches the normalization off.",
                "Normalization stays on in eval mode; only the source of the statistics "
                "changes, from the batch to the running estimates.",
            ),
        ),
    ),
    NumberExercise(
        id="bn-running-mean-update",
        lesson=LESSON,
        prompt=(
            f"A `BatchNorm1d(1, momentum={_MOMENTUM:g})` has running mean {_START_MEAN:g}. In "
            f"training mode it sees one batch whose single feature holds the values {_values}. "
            "What is its running mean after that pass?"
        ),
        expected=_running_mean,
        abs_tol=1e-3,
        solution=(
            "Right: {expected}. The new batch weighs the momentum, the old value the rest: "
            "(1 - m) * old + m * batch mean."
        ),
        hint="Start from the momentum rule of the lesson: which value does m multiply?",
        traps=(
            Trap(
                _running_mean_momentum_swapped,
                "That weighs the old value by the momentum. In BatchNorm the momentum is the "
                "weight of the new batch: (1 - m) * old + m * batch mean.",
            ),
        ),
    ),
    NumberExercise(
        id="bn-running-var-update",
        lesson=LESSON,
        prompt=(
            f"Same layer, same batch ({_values}); its running variance starts at 1, as in a "
            "new layer. What is the running variance after the pass?"
        ),
        expected=_running_var,
        abs_tol=1e-3,
        solution=(
            "Right: {expected}. The running estimate takes the unbiased batch variance "
            "(divide by N - 1), even though normalizing used the biased one."
        ),
        hint="Work out the batch variance first, then apply the momentum rule.",
        traps=(
            Trap(
                _running_var_if_biased,
                "That uses the biased batch variance (divide by N). The running estimate is "
                "fed the unbiased one (divide by N - 1); only the normalization uses N.",
            ),
        ),
    ),
    ChoiceExercise(
        id="bn-batch-of-one",
        lesson=LESSON,
        prompt=(
            "A `BatchNorm1d(8)` in training mode receives a tensor of shape (1, 8, 1): one "
            "sequence of length 1 with 8 features. What happens?"
        ),
        choices=(
            Choice(
                "It raises an error: one value per feature has no spread to measure.",
                "Right. The batch variance of a single value is 0, so the normalization would "
                "divide 0 by sqrt(eps); PyTorch and normlab refuse it with a ValueError.",
                correct=True,
            ),
            Choice(
                "It silently falls back on its running statistics, as it would in eval mode.",
                "Only eval mode uses the running statistics; training mode needs a real batch.",
            ),
            Choice(
                "It works: only a 2D batch of one row is refused.",
                "A (N, C, L) input is normalized per channel over the batch and the length "
                "together: 1 x 1 = 1 value per channel here, nothing to measure a spread from. "
                "A (1, 8, 5) input would work.",
            ),
            Choice(
                "It returns all zeros (times gamma, plus beta): each value equals its batch mean.",
                "That is what the arithmetic would give, and exactly why the layer refuses: "
                "the output would carry no information about the input.",
            ),
        ),
    ),
)
