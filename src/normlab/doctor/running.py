"""Running the model: its input (a tensor, a tuple, a dict), its call, the tensor read from its
output, the readout's backward pass, and passes that leave the model as it was."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

import torch
from torch import nn

from normlab.doctor.errors import ModelInputError, ModelOutputError

Input = torch.Tensor | tuple[Any, ...] | dict[str, Any]
"""One step's input: a tensor (``model(x)``), a tuple of positional inputs (``model(*x)``) or a
dict of keyword inputs (``model(**x)``)."""


def _tensors(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _steps(batches: Input | Sequence[Input]) -> list[Input]:
    """The steps' inputs: one input (a tensor or a dict), or a list or tuple of them."""
    steps = [batches] if isinstance(batches, torch.Tensor | dict) else list(batches)
    if not steps:
        raise ValueError("batches is empty, use at least one input batch")
    if not all(_tensors(x) for x in steps):
        raise ValueError("every step's input must hold a tensor (a tensor, a tuple or a dict)")
    return steps


def _map(value: Any, f: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return f(value)
    if isinstance(value, tuple | list):
        return type(value)(_map(v, f) for v in value)
    if isinstance(value, dict):
        return {k: _map(v, f) for k, v in value.items()}
    return value


def _graph_input(x: torch.Tensor) -> torch.Tensor:
    """A copy that leaves a graph (layers without parameters too) and that the model may
    change in place (a leaf that requires grad may not be: ``nn.Dropout(inplace=True)``)."""
    if not x.is_floating_point():
        return x.clone()
    return x.detach().clone().requires_grad_(True).clone()


def _main(x: Input) -> torch.Tensor:
    """The input the scales are read from: the first tensor of a step's input."""
    return _tensors(x)[0]


def _shape(x: Input) -> str:
    """``(8, 16)``; ``((8, 16), (8,))`` for positional inputs; ``{ids: (8, 16)}`` for keywords."""
    if isinstance(x, torch.Tensor):
        return "(" + ", ".join(str(s) for s in x.shape) + ")"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}: {_shape(v)}" for k, v in x.items()) + "}"
    if isinstance(x, tuple | list):
        return "(" + ", ".join(_shape(v) for v in x) + ")"
    return type(x).__name__


OUTPUT_FIELDS = ("logits", "last_hidden_state")
"""The fields of a dict or ``ModelOutput`` read when no ``output=`` is named, in this order."""


def _output(out: object, field: str | None) -> torch.Tensor:
    """The tensor the doctor differentiates: ``out`` itself, the first element of a tuple (as
    ``nn.LSTM``'s ``(output, state)``), or a dict's or Hugging Face ``ModelOutput``'s
    ``field`` (by default the first of :data:`OUTPUT_FIELDS` it has)."""
    if isinstance(out, Mapping):
        keys = [k for k, v in out.items() if isinstance(v, torch.Tensor)]
        if field is None:
            field = next((k for k in OUTPUT_FIELDS if k in keys), None)
        if field not in keys:
            how = f"output={field!r} is not one of them" if field else "name one with output="
            raise ModelOutputError(
                f"the model returned {type(out).__name__} with tensor fields {keys}: {how}"
            )
        return cast(torch.Tensor, out[field])
    if field is not None:
        raise ModelOutputError(
            f"output={field!r} names a field, but the model returned "
            f"{type(out).__name__}, not a dict or ModelOutput"
        )
    if isinstance(out, tuple | list) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    if not isinstance(out, torch.Tensor):
        raise ModelOutputError(
            f"the model returned {type(out).__name__}, use a model that returns a tensor, a "
            "tuple whose first element is a tensor, or a dict or ModelOutput (see output=)"
        )
    return out


def _call(model: nn.Module, x: Input, field: str | None = None) -> torch.Tensor:
    """``model(x)`` (``*x``, ``**x``) as one tensor; errors say what the model said and what it
    was given."""
    try:
        out = model(**x) if isinstance(x, dict) else model(*x) if isinstance(x, tuple) else model(x)
    except Exception as exc:  # the user's model may raise anything: report it, with the shape
        raise ModelInputError(
            f"the model rejected input of shape {_shape(x)}: {type(exc).__name__}: {exc}"
        ) from exc
    return _output(out, field)


def _backward(out: torch.Tensor, readout: torch.Tensor) -> None:
    """The readout loss's backward pass (a number, the model's own loss, as it is); an error in
    it is the model's, said as such."""
    try:
        if out.dim() == 0:
            out.backward()
        else:
            ((out * readout).sum() / out.shape[0]).backward()
    except Exception as exc:  # a custom autograd.Function of the user's may raise anything
        raise ModelInputError(
            f"the model's backward pass raised {type(exc).__name__}: {exc}"
        ) from exc


def _eager(model: nn.Module) -> tuple[nn.Module, list[str]]:
    """The module to probe: a ``torch.compile``'d model's original module (compiled code runs
    no module hooks), and a note saying so."""
    original = getattr(model, "_orig_mod", None)
    if type(model).__name__ == "OptimizedModule" and isinstance(original, nn.Module):
        return original, [
            "a torch.compile'd model: its original module was examined, in eager mode, with "
            "the same parameters (compiled code calls no module hooks)"
        ]
    return model, []


@contextmanager
def _preserved(model: nn.Module) -> Iterator[None]:
    """Run passes through ``model`` and leave it as it was: buffers (running stats) and grads."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    grads = {p: p.grad for p in model.parameters()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])
        for p, g in grads.items():
            p.grad = g
