"""Running the model: its input (a tensor, a tuple, a dict), its call, the tensor read from its
output, the readout's backward pass, and passes that leave the model as it was; the models and
inputs refused before they run (meta, quantized, token ids out of range), each with its cause;
the notes on outputs the model changed in place after they were measured."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, cast

import torch
from torch import nn

from normlab.doctor.errors import CannotDiagnose, ModelInputError, ModelOutputError

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


def _graph_call(model: nn.Module, x: Input, field: str | None = None) -> torch.Tensor:
    """``model(x)`` on copies of ``x`` that require grad (:func:`_graph_input`), so that the
    autograd graph reaches layers without parameters; on the copies as given when the model
    refuses those (it sets ``requires_grad`` on a view of its input, as Wav2Vec2's and HuBERT's
    feature encoders do in training mode: "you can only change requires_grad flags of leaf
    variables"), and only then. The error of the second call is the model's own."""
    try:
        return _call(model, _map(x, _graph_input), field)
    except ModelInputError:
        return _call(model, _map(x, torch.Tensor.clone), field)


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
"""The fields of a dict or ``ModelOutput`` read when no ``output=`` is named, in this order;
where it has none of them, its only field that holds tensors."""


def _held(value: object) -> list[torch.Tensor]:
    """The tensors a field (or a tuple's first element) holds: itself, or those of a tuple or
    list of tensors (a backbone's ``feature_maps``, one per stage; heads' logits)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, tuple | list) and value:
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _output(out: object, field: str | None) -> tuple[torch.Tensor, str | None]:
    """The tensor the doctor differentiates: ``out`` itself, the first element of a tuple (as
    ``nn.LSTM``'s ``(output, state)``), every tensor of a list (like outputs), or a dict's or
    Hugging Face ``ModelOutput``'s ``field`` (by default the first of :data:`OUTPUT_FIELDS`
    it has, else its only field that holds tensors); and what the notes say of it where the
    reading is not plain: a field found as the only one, several tensors read whole
    (:func:`_joined`), tensors after a tuple's first element left unread."""
    if isinstance(out, Mapping):
        keys = [k for k, v in out.items() if _held(v)]
        named = field
        if field is None:
            field = next((k for k in OUTPUT_FIELDS if k in keys), None)
            field = field or (keys[0] if len(keys) == 1 else None)
        if field not in keys:
            raise ModelOutputError(_unread(out, keys, field))
        only = named is None and field not in OUTPUT_FIELDS
        what = f"its only field that holds tensors, {field}," if only else f"its field {field}"
        return _joined(_held(out[field]), f"{type(out).__name__}; {what}", only)
    if field is not None:
        raise ModelOutputError(
            f"output={field!r} names a field, but the model returned "
            f"{type(out).__name__}, not a dict or ModelOutput"
        )
    if isinstance(out, list) and _held(out):  # like outputs (a backbone's feature maps)
        return _joined(_held(out), "list; it", False)
    if isinstance(out, tuple) and out and _held(out[0]):
        y, note = _joined(_held(out[0]), "tuple; its first element", False)
        return y, note or _rest_note(out)
    if not isinstance(out, torch.Tensor):
        raise ModelOutputError(
            f"the model returned {type(out).__name__}, use a model that returns a tensor, a "
            "tuple whose first element is a tensor (or a tuple of them), a list of tensors, "
            "or a dict or ModelOutput (see output=)"
        )
    return out, None


def _rest_note(out: tuple[Any, ...]) -> str | None:
    """The note on a tuple whose first element was read while tensors that carry a gradient
    follow it: the layers that feed only those get none from the readout."""
    rest = [t for v in out[1:] for t in _tensors(v) if t.is_floating_point() and t.requires_grad]
    if not rest:
        return None
    return (
        f"the model returned a tuple of {len(out)}: its first element was read (as "
        f"nn.LSTM's (output, state)), not the {len(rest)} tensor(s) after it, so the layers "
        "that feed only those get no gradient; to read them all, return them as a list or "
        "in one tuple first, ((a, b, ...),)"
    )


def _unread(out: Mapping[str, Any], keys: list[str], field: str | None) -> str:
    """Why no field of ``out`` was read: the named one holds no tensor, or the fields that
    do are several (name one), or none does (the model's output has nothing to read)."""
    said = f"the model returned {type(out).__name__}"
    if not keys:
        fields = [f"{k} ({type(v).__name__})" for k, v in out.items()]
        return (
            f"{said} with no tensor in its fields {fields}: return the scores as a tensor or "
            "a tuple of tensors, in a field that output= names"
        )
    if field is not None:
        return f"{said} with tensor fields {keys}: output={field!r} is not one of them"
    return f"{said} with tensor fields {keys}: name one with output="


def _joined(tensors: list[torch.Tensor], what: str, only: bool) -> tuple[torch.Tensor, str | None]:
    r"""One tensor for the readout to read every one of ``tensors`` (each stage of a backbone,
    each head: what a loss over them all reads), and the note saying so: each flattened per
    sample and joined, :math:`(N, \sum_k |y_k| / N)`, so that
    :math:`r \cdot \mathrm{cat}_k(y_k) = \sum_k r_k \cdot y_k`, the sum of a readout of each.
    The floating-point ones where there are any (integer predictions carry no gradient); a
    lone tensor as it is, with a note only where it was the ``only`` field. ``what`` says
    where they were found. Raises :class:`ModelOutputError` when they are not all per sample
    (their first sizes differ)."""
    floats = [t for t in tensors if t.is_floating_point()] or tensors
    if len(floats) == 1:
        return floats[0], f"the model returned {what} was read" if only else None
    shapes = [tuple(t.shape) for t in floats]
    if any(t.dim() == 0 or t.shape[0] != floats[0].shape[0] for t in floats):
        raise ModelOutputError(
            f"the model returned {what} holds tensors of shapes {shapes}, not all per sample "
            "(their first sizes differ): read one, named with output= (a field holding one "
            "tensor), or returned first"
        )
    n = floats[0].shape[0]
    joined = torch.cat([t.reshape(n, -1) for t in floats], dim=1)  # (N, sum of sizes / N)
    return joined, (
        f"the model returned {what} holds {len(floats)} tensors of shapes {shapes}: the "
        "readout reads every one of them"
    )


def _call(
    model: nn.Module, x: Input, field: str | None = None, notes: list[str] | None = None
) -> torch.Tensor:
    """``model(x)`` (``*x``, ``**x``) as one tensor (:func:`_output`; how it was read is
    added to ``notes``, once); errors say what the model said and what it was given, and the
    cause when it is known (:func:`_refuse`, :func:`_ids_checked`, :func:`_rejected`)."""
    _refuse(model)
    try:
        with _ids_checked(model, x):
            out = _invoke(model, x)
    except ModelInputError:  # ids out of range, refused before the embedding read them
        raise
    except Exception as exc:  # the user's model may raise anything: report it, with the shape
        raise ModelInputError(_rejected(model, x, exc)) from exc
    y, note = _output(out, field)
    if notes is not None and note is not None and note not in notes:
        notes.append(note)
    return y


def _invoke(model: nn.Module, x: Input) -> Any:
    """``model(x)``, ``model(*x)`` or ``model(**x)``, as :data:`Input` says."""
    if isinstance(x, dict):
        return model(**x)
    return model(*x) if isinstance(x, tuple) else model(x)


_QUANTIZED = ("torch.ao.nn.quantized", "torch.ao.nn.intrinsic.quantized", "torch.nn.quantized")
"""Where torch's quantized layers live (``quantize_dynamic``'s, ``convert``'s)."""


def _refuse(model: nn.Module) -> None:
    """Refuse, before it runs, a model with no values to examine: parameters or buffers on the
    meta device (shapes only: ``torch.device("meta")``, ``init_empty_weights``), or quantized
    layers, whose integer weights take no gradient. :class:`CannotDiagnose` says how to get a
    model that can be examined."""
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        name = next(n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta)
        raise CannotDiagnose(
            f"the model is on the meta device: {module_path(name)} has a shape but no values; "
            "materialize it first: model.to_empty(device='cpu'), then initialize the weights "
            "(each layer's reset_parameters(), or load_state_dict)"
        )
    for name, m in model.named_modules():
        if type(m).__module__.startswith(_QUANTIZED):
            raise CannotDiagnose(
                f"the model is quantized: {module_path(name)} is {_qualified(m)}, whose integer "
                "weights take no gradient; diagnose the float model, before quantization "
                "(torch.ao.quantization.quantize_dynamic or convert)"
            )


def _qualified(m: nn.Module) -> str:
    """``torch.ao.nn.quantized.dynamic.Linear``: the class as it is imported (quantized layers
    share the names of the float ones)."""
    return f"{type(m).__module__.split('.modules')[0]}.{type(m).__name__}"


def module_path(name: str, root: str = "model") -> str:
    """A qualified module name written as the Python that reaches the module.

    ``named_modules()`` joins indices and attributes with dots alike, so an ``nn.Sequential``'s
    ``"1.0"`` reads as a number in a table; as ``model[1][0]`` it reads as the path a learner
    types. The root module (name ``""``) is ``root`` itself.

    >>> module_path("1.0"), module_path("h.3.attn.c_attn"), module_path("")
    ('model[1][0]', 'model.h[3].attn.c_attn', 'model')
    """
    parts = [f"[{p}]" if p.isdigit() else f".{p}" for p in name.split(".") if p]
    return root + "".join(parts)


@contextmanager
def _ids_checked(model: nn.Module, x: Input) -> Iterator[None]:
    """While the model runs on ``x``: every ``nn.Embedding`` (``EmbeddingBag``) that looks its
    argument up (:data:`_LOOKUPS`) checks the ids before it reads them (torch's own error,
    "index out of range in self", names neither the layer nor the id; :func:`_rejected`
    hints at it for the others). An id out of [0, rows) raises :class:`ModelInputError`
    naming the embedding, its rows, the id, and the flag: ids from the input come from
    ``--tokens V``; others were computed by the model (positions)."""
    given = {t.untyped_storage().data_ptr() for t in _tensors(x) if not t.is_floating_point()}

    def check(module: nn.Module, args: tuple[Any, ...]) -> None:
        ids, rows = args[0] if args else None, cast(int, module.num_embeddings)
        if not isinstance(ids, torch.Tensor) or ids.is_floating_point() or ids.numel() == 0:
            return
        low, high = (int(v) for v in torch.aminmax(ids))
        if low >= 0 and high < rows:
            return
        bad, name = low if low < 0 else high, names[module]
        where = f"{module_path(name)} ({type(module).__name__} with {rows} rows) was given id {bad}"
        if ids.untyped_storage().data_ptr() in given:  # the input's ids, or a view of them
            raise ModelInputError(
                f"{where}, from the input; token ids must be in [0, {rows}): draw them below "
                f"{rows} (--tokens V with V <= {rows})"
            )
        raise ModelInputError(
            f"{where}, computed by the model from the input (a position beyond its {rows}? "
            "use a shorter sequence, --input-shape)"
        )

    names = {m: n for n, m in model.named_modules() if type(m).forward in _LOOKUPS}
    handles = [m.register_forward_pre_hook(check) for m in names]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


_LOOKUPS = (nn.Embedding.forward, nn.EmbeddingBag.forward)
"""The forwards that look their first argument up: a subclass with its own forward may read it
otherwise (positions computed from the ids' shape: Hugging Face's BART, FSMT, OPT)."""


def _rejected(model: nn.Module, x: Input, exc: Exception) -> str:
    """What the model said when it rejected ``x``, after the cause when it is a dtype: an input
    of another floating dtype than the model's parameters (a float16 model given float32), or
    a half-precision operation the device has no kernel for; or, guessed, token ids out of an
    embedding that :func:`_ids_checked` could not watch. Said after the model raised, not
    before: many models cast their input themselves (Hugging Face's ViT, CLIP)."""
    said = f"the model rejected input of shape {_shape(x)}: {type(exc).__name__}: {exc}"
    own = {p.dtype for p in model.parameters() if p.is_floating_point()}
    given = {t.dtype for t in _tensors(x) if t.is_floating_point()} - own
    if len(own) == 1 and given:
        want = str(own.pop()).removeprefix("torch.")
        given_names = ", ".join(sorted(str(d).removeprefix("torch.") for d in given))
        return (
            f"the model's parameters are {want} and the input {given_names}: give a {want} "
            f"input (--dtype {want}); {said}"
        )
    if "not implemented for 'Half'" in str(exc) or "not implemented for 'BFloat16'" in str(exc):
        return (
            "an operation of the model has no half-precision kernel on this device: diagnose "
            f"it in float32 (model.float(), --dtype float32); {said}"
        )
    ids = [t for t in _tensors(x) if not t.is_floating_point() and t.numel() > 0]
    if isinstance(exc, IndexError) and "index out of range" in str(exc) and ids:
        high = max(int(t.max()) for t in ids)
        return (
            f"token ids out of an embedding's range? the input's reach {high} (--tokens V); {said}"
        )
    return said


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


def _overwritten_notes(model: nn.Module, overwritten: Mapping[str, str | None]) -> list[str]:
    """What the notes say of the layers whose output the model changed in place after the
    probe measured it (:class:`normlab.probe.ActivationProbe`'s ``overwritten``): their
    numbers are of their output before the change. Three at most, then how many more."""
    notes = []
    for name, by in list(overwritten.items())[:NOTED_OVERWRITES]:
        if by is not None:
            kind = type(model.get_submodule(by)).__name__
            what = (
                f"{module_path(by)} ({kind}, inplace=True) overwrote {module_path(name)}'s output"
            )
        else:
            what = (
                "an in-place operation (such as x += f(x) in a forward) changed "
                f"{module_path(name)}'s output after it was measured"
            )
        notes.append(
            f"{what}: {module_path(name)}'s statistics are of its output before the change"
        )
    if (more := len(overwritten) - NOTED_OVERWRITES) > 0:
        notes.append(f"and {more} more layers' outputs were changed in place after measuring")
    return notes


NOTED_OVERWRITES = 3
"""The most layers overwritten in place that the notes name one by one."""
