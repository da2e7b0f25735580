"""What the doctor raises when it cannot examine a model: the model's own errors, named."""

from __future__ import annotations


class CannotDiagnose(ValueError):
    """The doctor cannot give a verdict on this model and input (no layer ran, no gradient)."""


class ModelInputError(ValueError):
    """The model raised when called on the input: its own message and the shape given."""


class ModelOutputError(TypeError):
    """The model returned something the doctor cannot take a gradient of."""
