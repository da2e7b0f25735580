"""What the doctor raises when it cannot examine a model: the model's own errors, named."""

from __future__ import annotations


class CannotDiagnose(ValueError):
    """The doctor cannot give a verdict on this model and input: no layer ran, no gradient, or a
    model with nothing to examine (on the meta device, quantized), said before it runs."""


class ModelInputError(ValueError):
    """The model raised when called on the input: its own message and the shape given, after
    the cause when it is known (a dtype other than the model's); or token ids out of an
    embedding's rows, refused before the embedding reads them."""


class ModelOutputError(TypeError):
    """The model returned something the doctor cannot take a gradient of."""
