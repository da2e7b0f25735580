r"""The doctor's remedies: changes it can apply by itself, each tried in a short training run
before it is advised.

Each entry of :data:`REMEDIES` is a named change with a test of whether it applies. A change
returns a *changed copy* of the model (the model given is never edited) or, for ``warmup``, a
change of the training schedule. A remedy does not apply when there is nothing for it to change,
or when **the model already has it**: He-initialized layers are not told ``he``, a pre-LN
transformer is not told ``pre-ln``, scaled branches are not told ``branch-scale``.

================  ====================================================  =====================
name              what it changes                                       tried for
================  ====================================================  =====================
``zero-bias``     the negative biases of the weight layers feeding      dead
                  dead units, reset to 0
``branch-scale``  each residual branch's last layer (weight and bias)   vanishing, exploding
                  times :math:`1/\sqrt{L}`, :math:`L` branches
``he``,           every Linear and Conv re-initialized by               vanishing, exploding,
``xavier``,       :func:`normlab.doctor.fix` (the gain of the           dead, saturated,
``orthogonal``,   activation that follows each), biases 0               symmetric
``lsuv``
``tanh``          each hidden ``nn.Sigmoid`` (read as it is by a        vanishing, saturated
                  Linear or Conv) replaced by ``nn.Tanh``, the layer
                  feeding it re-drawn by Xavier with gain 5/3
``layernorm``     each ``BatchNorm1d`` on 2-D input replaced by a       vanishing, exploding
                  ``LayerNorm`` of the same width
``shallower``     a run of alike normalized blocks in an                vanishing, exploding
                  ``nn.Sequential`` cut to the blocks the gradient
                  crosses growing under 10x at the measured trend
``pre-ln``        ``norm_first=True`` in every ``TransformerEncoder``/  vanishing, exploding
                  ``DecoderLayer``, a final norm added to their stack
``warmup``        the learning rate rises linearly over the first       vanishing, exploding
                  quarter of the steps (a schedule, not a model change)
================  ====================================================  =====================

:func:`advise` tries every remedy that applies to a diagnosed problem in the comparison run of
:func:`normlab.doctor.trial` and re-diagnoses the remedied model (for ``warmup``, the model after
its warmed-up run: the model at init is unchanged); a remedy is a cure only when both say so
(:class:`normlab.doctor.Trial`). The doctor's suggestions name remedies (:func:`named`);
:func:`checked` drops a suggestion whose remedy was not a cure.

References: Zhang et al., 2019, "Fixup initialization" and De & Smith, 2020, "Batch
normalization biases residual blocks towards the identity" (branch scaling); Xiong et al., 2020,
"On layer normalization in the Transformer architecture" (pre-LN, warm-up); Yang et al., 2019,
"A mean field theory of batch normalization" (the deep BatchNorm stack's gradient explosion,
inherent to its depth: ``shallower``); Glorot & Bengio, 2010 (sigmoid's slope of 1/4: ``tanh``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from normlab import init
from normlab import nn as nlnn
from normlab.doctor.cure import _skipped, _tied, fix
from normlab.doctor.graph import _OUTPUT, Graph, trace
from normlab.doctor.kinds import _WEIGHT_LAYERS, _is_norm
from normlab.doctor.results import TREND_MARK, Diagnosis
from normlab.doctor.running import Input, _call, _invoke, _preserved, _steps, module_path
from normlab.doctor.training import (
    TRIAL_SEEDS,
    TRIAL_STEPS,
    Trial,
    _check_trial,
    _flagged,
    _seeds,
    _train,
    _trial,
)
from normlab.doctor.visit import diagnose
from normlab.probe import finite_or_none

INIT_MATCH = 0.2
"""A weight layer has an initializer already when its weight std is within 20% of the std that
initializer gives (singular values, for ``orthogonal``; output variance, for ``lsuv``)."""
BRANCH_GROWTH = 1.5
r"""A residual stream whose std grows less than this from the first branch the doctor sees to the
last has nothing for ``branch-scale`` to do: its branches are scaled already, or a norm holds the
stream (post-LN). :math:`L` unscaled branches of the stream's size grow it about
:math:`\sqrt{(1 + L) / 3}`-fold from the first reader of a sum (1.7x at :math:`L = 8`, 4.7x at
64); branches scaled by :math:`1/\sqrt{L}` add one stream's variance in all, at most
:math:`\sqrt{2}`-fold (1.1x measured on 64 pre-LN blocks). Branches scaled by :math:`1/\sqrt{L}`
whose output is larger than the stream they add into still grow it more, and are still offered
it: their stream still grows."""
WARMUP = 0.25  # of the trial's steps
MAX_CHECK_PARAMS = 3_000_000
""":func:`advise` trains (1 + remedies) x seeds copies of the model: about 10 s per 100 steps
per million parameters on one CPU core for a 48-layer encoder; larger models are not checked."""
PROBLEMS_OF_SCALE = ("vanishing", "exploding")
PROBLEMS_OF_INIT = ("vanishing", "exploding", "dead", "saturated", "symmetric")


@dataclass(frozen=True)
class Remedied:
    """What a remedy made: the changed copy (the model itself for a schedule change), the
    warm-up it asks of the training run (a fraction of the steps), and what it changed."""

    model: nn.Module
    words: str
    warmup: float = 0.0


@dataclass
class _Case:
    """The model the remedies look at, with one batch, its diagnosis and its output field."""

    model: nn.Module
    batch: Input
    diagnosis: Diagnosis | None = None
    output: str | None = None

    @functools.cached_property
    def graph(self) -> Graph:
        return trace(self.model, self.batch, self.output)


@dataclass(frozen=True)
class Remedy:
    """A named change: the problems it is tried for, a test (``None``: it applies; else why
    not), and the change itself."""

    name: str
    addresses: tuple[str, ...]
    summary: str
    why_not: Callable[[_Case], str | None]
    apply: Callable[[_Case, torch.Generator | None], Remedied]


# -- re-initializations --------------------------------------------------------------------------


def _reinit_layers(case: _Case) -> list[tuple[str, nn.Module, str, float | None]]:
    """The layers :func:`fix` re-initializes: (name, module, activation after it, its slope)."""
    left = dict(_skipped(case.graph, _tied(case.model), False))
    return [
        (name, m, *case.graph.follows(name))
        for name, m in case.graph.order
        if isinstance(m, _WEIGHT_LAYERS) and name not in left
    ]


def _has_init(method: str, m: nn.Module, act: str, slope: float | None) -> bool:
    """Whether ``m``'s weight looks drawn by ``method`` (:data:`INIT_MATCH`)."""
    w = cast(torch.Tensor, m.weight).detach().double()  # (out, in, *kernel)
    gain = init.calculate_gain(act, slope)  # type: ignore[arg-type]
    fan_in, fan_out = w[0].numel(), w.shape[0] * w[0, 0].numel()
    if method == "orthogonal":
        s = torch.linalg.svdvals(w.reshape(w.shape[0], -1))  # (min(out, in),)
        return bool(((s - gain).abs() <= INIT_MATCH * gain).all())
    wanted = (
        gain / math.sqrt(fan_in) if method == "he" else gain * math.sqrt(2 / (fan_in + fan_out))
    )
    return w.numel() > 1 and math.isclose(float(w.std()), wanted, rel_tol=INIT_MATCH)


def _one_pass(case: _Case, hooks: dict[str, Callable[..., None]]) -> None:
    """One forward pass of the case's batch, without gradients, with a forward hook on each
    named layer, the model left as it was."""
    modules = dict(case.model.named_modules())
    handles = [modules[name].register_forward_hook(hook) for name, hook in hooks.items()]
    try:
        with _preserved(case.model), torch.no_grad():
            _call(case.model, case.batch, case.output)
    finally:
        for h in handles:
            h.remove()


def _output_variances(case: _Case, names: set[str]) -> list[float]:
    """The variance of each named layer's output on the case's batch (one forward pass)."""
    found: list[float] = []
    record = lambda _m, _a, out: found.append(float(out.detach().var()))  # noqa: E731
    ordered = [name for name, _ in case.model.named_modules() if name in names]
    _one_pass(case, {name: record for name in ordered})
    return found


def _reinit_why_not(method: str) -> Callable[[_Case], str | None]:
    def why_not(case: _Case) -> str | None:
        layers = _reinit_layers(case)
        if not layers:
            return "the model has no Linear or Conv1d/2d/3d layer to re-initialize"
        if method == "lsuv":
            if not isinstance(case.batch, torch.Tensor):
                return "lsuv feeds the model one tensor, and its input is not one"
            if any("tied" in why for _, why in _skipped(case.graph, _tied(case.model), False)):
                return "lsuv rescales every Linear and Conv, and one of them shares its weight"
            variances = _output_variances(case, {name for name, *_ in layers})
            if all(abs(v - 1) <= INIT_MATCH for v in variances):
                return "the model has it already: every layer's output variance is near 1"
            return None
        hidden = [e for e in layers if e[2] != "linear"] or layers  # a head's scale is one factor
        if all(_has_init(method, m, act, slope) for _, m, act, slope in hidden):
            return (
                f"the model has it already: its {len(hidden)} weight layer(s) followed by an "
                f"activation have {method}'s std (within {INIT_MATCH:.0%})"
            )
        return None

    return why_not


def _reinit_apply(method: str) -> Callable[[_Case, torch.Generator | None], Remedied]:
    def apply(case: _Case, generator: torch.Generator | None) -> Remedied:
        net = copy.deepcopy(case.model)
        report = fix(net, method, case.batch, generator=generator)
        words = f"re-initialize {len(report.layers)} Linear/Conv layer(s) by {method}, biases 0"
        left = f" ({len(report.skipped)} other weight layers left as they are)"
        return Remedied(net, words + (left if report.skipped else ""))

    return apply


# -- zero-bias -----------------------------------------------------------------------------------


def _dead_sources(case: _Case) -> list[str]:
    """The weight layers feeding dead units that have a negative bias."""
    if case.diagnosis is None:
        return []
    modules = dict(case.graph.order)
    out: list[str] = []
    for name in case.diagnosis.with_label("dead"):
        own = isinstance(modules.get(name), _WEIGHT_LAYERS)
        source = name if own else case.graph.source(name)
        bias = getattr(modules.get(source or ""), "bias", None)
        if source and isinstance(bias, torch.Tensor) and bool((bias < 0).any()):
            out += [source] if source not in out else []
    return out


def _zero_bias_why_not(case: _Case) -> str | None:
    if case.diagnosis is None or not case.diagnosis.with_label("dead"):
        return "no layer is dead"
    if not _dead_sources(case):
        return "the dead units' weight layers have no negative bias: it is not what kills them"
    return None


def _zero_bias(case: _Case, generator: torch.Generator | None) -> Remedied:
    net = copy.deepcopy(case.model)
    modules = dict(net.named_modules())
    said = []
    for name in _dead_sources(case):
        bias = modules[name].bias
        with torch.no_grad():
            said.append(f"{module_path(name)} ({int((bias < 0).sum())} of {bias.numel()}, ")
            said[-1] += f"min {float(bias.min()):.3g})"
            bias.clamp_(min=0.0)  # a unit is killed by a negative bias, never a positive one
    return Remedied(net, "reset the negative biases to 0 in " + ", ".join(said))


# -- branch-scale --------------------------------------------------------------------------------


def _scalable(graph: Graph, end: str) -> tuple[str, nn.Module] | None:
    """The module whose weight (and bias) scale a branch end's output exactly: the end, or the
    layer behind the dropout or identity it is; an attention's output projection."""
    modules = dict(graph.order)
    name = end
    while isinstance(modules[name], nn.Dropout | nn.Identity) and len(graph.producers[name]) == 1:
        name = graph.producers[name][0]
    m = modules[name]
    if isinstance(m, nn.MultiheadAttention):
        return f"{name}.out_proj", m.out_proj
    linear = isinstance(m, _WEIGHT_LAYERS) or type(m).__name__ == "Conv1D"  # HF's Conv1D too
    affine = _is_norm(m) and isinstance(getattr(m, "weight", None), torch.Tensor)
    return (name, m) if linear or affine else None


def _branches(case: _Case) -> tuple[list[tuple[str, nn.Module]], float]:
    """The scalable branch ends, and the stream's growth from the first branch to the last."""
    found = case.graph.branches()  # branch end -> the stream's std, in forward order
    stds = list(found.values())
    growth = stds[-1] / stds[0] if stds and stds[0] > 0 else math.nan
    ends = [s for s in (_scalable(case.graph, end) for end in found) if s is not None]
    return ends, growth


def _branch_scale_why_not(case: _Case) -> str | None:
    ends, growth = _branches(case)
    if not case.graph.branches():
        return "the model has no residual branch (x + f(x)) the doctor can see"
    if not ends:
        return "its branches end in layers with no weight to scale"
    if not growth > BRANCH_GROWTH:
        return (
            f"its stream grows {growth:.3g}x over {len(ends)} branches, at most "
            f"{BRANCH_GROWTH:g}x: the branches are scaled already, or the stream is normalized"
        )
    return None


def _branch_scale(case: _Case, generator: torch.Generator | None) -> Remedied:
    ends, growth = _branches(case)
    factor = 1 / math.sqrt(len(ends))
    net = copy.deepcopy(case.model)
    modules = dict(net.named_modules())
    with torch.no_grad():
        for name, _ in ends:
            for p in (modules[name].weight, getattr(modules[name], "bias", None)):
                if isinstance(p, torch.Tensor):
                    p.mul_(factor)
    return Remedied(
        net,
        f"scale the output of each of {len(ends)} residual branches by 1/sqrt({len(ends)}) = "
        f"{factor:.3g} (its last layer's weight and bias; the stream grew {growth:.3g}x)",
    )


def _raw_end(case: _Case) -> str | None:
    """The layer (or ``<output>``) reading the diagnosed pre-LN stream's end as it is."""
    stream = case.diagnosis.stream if case.diagnosis is not None else None
    if stream is None or stream.placement != "pre" or not stream.raw_end:
        return None
    return stream.readers[-1]


class _NormedOutput(nn.Module):
    """``model`` with a LayerNorm over its output's last dimension."""

    def __init__(self, model: nn.Module, width: int) -> None:
        super().__init__()
        self.model, self.norm = model, nn.LayerNorm(width)

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        return cast(torch.Tensor, self.norm(self.model(*args, **kwargs)))  # (..., width)


def _read_width(case: _Case, end: str) -> int | None:
    """The features of what ``end`` (or the model's output) reads: the last dimension of a
    (N, D) or (N, T, D) tensor, ``None`` for anything else (a conv's channels-first map)."""
    seen: list[Any] = []
    hook = None
    if end != _OUTPUT:
        module = case.model.get_submodule(end)
        hook = module.register_forward_pre_hook(lambda m, args: seen.extend(args[:1]))
    try:
        with torch.no_grad(), _preserved(case.model):
            out = _invoke(case.model, case.batch)
    finally:
        if hook is not None:
            hook.remove()
    x = out if end == _OUTPUT else (seen[0] if seen else None)
    return x.shape[-1] if isinstance(x, torch.Tensor) and x.dim() in (2, 3) else None


def _final_norm_why_not(case: _Case) -> str | None:
    end = _raw_end(case)
    if end is None:
        return "its diagnosis shows no pre-LN stream read as it is at its end (it ends in a norm)"
    if _read_width(case, end) is None:
        where = "the model's output" if end == _OUTPUT else module_path(end)
        return f"{where} is not one (N, D) or (N, T, D) tensor to normalize over D"
    return None


def _final_norm(case: _Case, generator: torch.Generator | None) -> Remedied:
    end = _raw_end(case) or _OUTPUT
    width = _read_width(case, end) or 0
    growth = case.diagnosis.stream.growth[-1] if case.diagnosis and case.diagnosis.stream else 0.0
    net = copy.deepcopy(case.model)
    like = next(net.parameters(), torch.zeros(()))  # the new norm's dtype and device
    if end == _OUTPUT:
        net, where = _NormedOutput(net, width).to(like), "the model's output"
    else:
        parent, _, last = end.rpartition(".")
        norm = nn.LayerNorm(width).to(like)
        setattr(net.get_submodule(parent), last, nn.Sequential(norm, net.get_submodule(end)))
        where = module_path(end)
    return Remedied(
        net,
        f"put a LayerNorm before {where}, which reads the residual stream as it is (grown "
        f"{growth:.3g}x): a pre-LN stream grows by design and a final norm reads it at unit "
        "scale (GPT-2's ln_f; Xiong et al. 2020)",
    )


# -- pre-ln, layernorm, warmup -------------------------------------------------------------------

_TRANSFORMER_LAYERS = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
_STACKS = (nn.TransformerEncoder, nn.TransformerDecoder)


def _pre_ln_why_not(case: _Case) -> str | None:
    layers = [m for m in case.model.modules() if isinstance(m, _TRANSFORMER_LAYERS)]
    if not layers:
        return "the model has no torch.nn.TransformerEncoderLayer or TransformerDecoderLayer"
    if all(m.norm_first for m in layers):
        return "the model is pre-LN already (norm_first=True)"
    return None


def _pre_ln(case: _Case, generator: torch.Generator | None) -> Remedied:
    net = copy.deepcopy(case.model)
    switched = [m for m in net.modules() if isinstance(m, _TRANSFORMER_LAYERS) and not m.norm_first]
    for m in switched:
        m.norm_first = True
    added = []
    for name, stack in net.named_modules():
        inside = [m for m in stack.modules() if m in switched]
        if isinstance(stack, _STACKS) and inside and stack.norm is None:
            norm1 = inside[0].norm1
            stack.norm = nn.LayerNorm(norm1.normalized_shape, norm1.eps).to(norm1.weight)
            added.append(module_path(name))
    stacked = {id(m) for s in net.modules() if isinstance(s, _STACKS) for m in s.modules()}
    loose = sum(id(m) not in stacked for m in switched)
    words = f"set norm_first=True in {len(switched)} transformer layer(s) (post-LN -> pre-LN)"
    if added:
        words += f"; add a final LayerNorm to {', '.join(added)} (pre-LN leaves the stream as is)"
    if loose:
        words += f"; {loose} layer(s) sit in no TransformerEncoder/Decoder: add a final LayerNorm"
    return Remedied(net, words)


_BATCH_NORM_1D = (nn.BatchNorm1d, nlnn.BatchNorm1d)


def _flat_batch_norms(case: _Case) -> list[str]:
    """The BatchNorm1d layers that the forward pass gives 2-D (N, C) inputs."""
    names = {name for name, m in case.graph.order if isinstance(m, _BATCH_NORM_1D)}
    flat: list[str] = []
    _one_pass(
        case,
        {
            n: lambda _m, args, _o, n=n: flat.append(n) if args[0].dim() == 2 else None
            for n in names
        },
    )
    return [n for n, _ in case.graph.order if n in flat]


def _layernorm_why_not(case: _Case) -> str | None:
    if not any(isinstance(m, _BATCH_NORM_1D) for _, m in case.graph.order):
        return "the model has no BatchNorm1d"
    if not _flat_batch_norms(case):
        return "its BatchNorm1d layers normalize (N, C, L) inputs, not (N, C) ones"
    return None


def _layernorm(case: _Case, generator: torch.Generator | None) -> Remedied:
    names = _flat_batch_norms(case)
    net = copy.deepcopy(case.model)
    for name in names:
        parent, _, leaf = name.rpartition(".")
        bn = cast(nn.BatchNorm1d, net.get_submodule(name))  # or normlab's: the same fields
        ln = nn.LayerNorm(bn.num_features, eps=bn.eps, elementwise_affine=bn.affine)
        if bn.affine:
            with torch.no_grad():
                ln.weight.copy_(bn.weight)
                ln.bias.copy_(bn.bias)
        floats = [t for t in (*bn.parameters(), *bn.buffers()) if t.is_floating_point()]
        like = floats[0] if floats else None  # its device and dtype
        setattr(net.get_submodule(parent), leaf, ln if like is None else ln.to(like))
    return Remedied(
        net, f"replace {len(names)} BatchNorm1d layer(s) on (N, C) inputs by LayerNorm(C)"
    )


_ATTENTION = re.compile(r"Attention$")


def _warmup_why_not(case: _Case) -> str | None:
    attention = any(
        isinstance(m, nn.MultiheadAttention) or _ATTENTION.search(type(m).__name__)
        for m in case.model.modules()
    )
    if not attention:
        return "the model has no attention layer, whose early Adam steps a warm-up tames"
    return None


def _warmup(case: _Case, generator: torch.Generator | None) -> Remedied:
    return Remedied(
        case.model,
        f"warm the learning rate up linearly over the first {WARMUP:.0%} of the steps (a schedule "
        "change: the doctor cannot see yours, so it assumes none)",
        warmup=WARMUP,
    )


# -- tanh ----------------------------------------------------------------------------------------

TANH_GAIN = 5 / 3  # init.calculate_gain("tanh")


def _hidden_sigmoids(case: _Case) -> list[tuple[str, str]]:
    """(sigmoid, the weight layer feeding it) for each ``nn.Sigmoid`` that is a hidden
    activation: every output it makes is read, as it is, by a Linear or Conv. A gate (its
    output multiplied into another signal, as in a squeeze-excite block or a GLU) and an output
    sigmoid (a probability) are not: a weight layer never reads their output itself."""
    sigmoids = [n for n, m in case.graph.order if isinstance(m, nn.Sigmoid)]
    if not sigmoids:
        return []
    made: dict[int, str] = {}  # id of a sigmoid's output -> the sigmoid
    kept: list[torch.Tensor] = []  # alive, so no other tensor takes an output's id
    calls = dict.fromkeys(sigmoids, 0)
    reads = dict.fromkeys(sigmoids, 0)

    def record(name: str) -> Callable[..., None]:
        def hook(_m: nn.Module, _args: Any, out: torch.Tensor) -> None:
            calls[name] += 1
            made[id(out)] = name
            kept.append(out)

        return hook

    def read(_m: nn.Module, args: Any, _out: Any) -> None:
        if args and (name := made.pop(id(args[0]), None)) is not None:
            reads[name] += 1

    weights = [n for n, m in case.graph.order if isinstance(m, _WEIGHT_LAYERS)]
    _one_pass(case, {n: record(n) for n in sigmoids} | {n: read for n in weights})
    hidden = [n for n in sigmoids if calls[n] and reads[n] == calls[n]]
    sources = [case.graph.source(n) for n in hidden]
    modules = dict(case.graph.order)
    return [
        (n, s)
        for n, s in zip(hidden, sources, strict=True)
        if s is not None and isinstance(modules[s], _WEIGHT_LAYERS)
    ]


def _tanh_why_not(case: _Case) -> str | None:
    if not any(isinstance(m, nn.Sigmoid) for _, m in case.graph.order):
        return "the model has no nn.Sigmoid"
    if not _hidden_sigmoids(case):
        return (
            "its nn.Sigmoid layers are no hidden activations fed by a Linear or Conv (a gate or "
            "an output sigmoid keeps its sigmoid)"
        )
    return None


def _tanh(case: _Case, generator: torch.Generator | None) -> Remedied:
    pairs = _hidden_sigmoids(case)
    net = copy.deepcopy(case.model)
    for sigmoid, source in pairs:
        parent, _, leaf = sigmoid.rpartition(".")
        setattr(net.get_submodule(parent), leaf, nn.Tanh())
        layer = net.get_submodule(source)
        init.xavier_normal_(cast(torch.Tensor, layer.weight), gain=TANH_GAIN, generator=generator)
        if isinstance(getattr(layer, "bias", None), torch.Tensor):
            init.zeros_(cast(torch.Tensor, layer.bias))
    n = len(pairs)
    return Remedied(
        net,
        f"replace {n} hidden nn.Sigmoid by nn.Tanh (slope 1 at 0, where sigmoid's is 1/4) and "
        f"re-draw the {n} Linear/Conv layer(s) feeding them by Xavier with tanh's gain 5/3, "
        "biases 0; every other layer as it was",
    )


# -- shallower -----------------------------------------------------------------------------------

MIN_RUN = 3


def _chunks(seq: nn.Sequential, prefix: str) -> list[list[str]]:
    """A Sequential's children cut before each one holding a Linear or Conv: its blocks."""
    out: list[list[str]] = []
    for k, child in seq.named_children():
        name = f"{prefix}.{k}" if prefix else k
        if any(isinstance(m, _WEIGHT_LAYERS) for m in child.modules()):
            out.append([name])
        elif out:
            out[-1].append(name)
    return out


def _signature(model: nn.Module, chunk: list[str]) -> tuple[Any, ...]:
    mods = [m for name in chunk for m in model.get_submodule(name).modules()]
    return tuple((type(m).__name__, *(p.shape for p in m.parameters(False))) for m in mods)


def _shapes(case: _Case, chunks: list[list[str]]) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Each block's first and last child -> (its input's shape, its output's shape)."""
    shapes: dict[str, tuple[tuple[int, ...], ...]] = {}

    def hook(name: str) -> Callable[..., None]:
        def record(_m: nn.Module, args: Any, out: Any) -> None:
            first = args[0] if args and isinstance(args[0], torch.Tensor) else None
            ins = () if first is None else tuple(first.shape)
            shapes.setdefault(name, (ins, tuple(getattr(out, "shape", ()))))

        return record

    _one_pass(case, {n: hook(n) for c in chunks for n in (c[0], c[-1])})
    return shapes


def _runs(case: _Case) -> list[list[list[str]]]:
    """Runs of :data:`MIN_RUN` or more alike blocks in an ``nn.Sequential``, each holding a norm
    and giving out its input's shape: a normalized stack, whose gradient trend is the
    architecture's, not the init's, and whose blocks can go without changing the others."""
    seqs = [(n, m) for n, m in case.model.named_modules() if isinstance(m, nn.Sequential)]
    shapes = _shapes(case, [c for n, m in seqs for c in _chunks(m, n)])

    def fits(c: list[str]) -> bool:  # keeps its input's shape, holds a norm
        ends = c[0] in shapes and c[-1] in shapes and shapes[c[0]][0] == shapes[c[-1]][1]
        mods = [x for n in c for x in case.model.get_submodule(n).modules()]
        return ends and any(_is_norm(x) for x in mods)

    runs: list[list[list[str]]] = []
    for n, m in seqs:
        run: list[list[str]] = []
        for c in [*_chunks(m, n), []]:
            ok = bool(c) and fits(c)
            if ok and run and _signature(case.model, run[0]) == _signature(case.model, c):
                run.append(c)
                continue
            runs += [run] if len(run) >= MIN_RUN else []
            run = [c] if ok else []
    return runs


def _keep(case: _Case) -> int | None:
    """How many blocks of a run the gradient crosses growing under :data:`TREND_MARK`, at the
    diagnosis's fitted factor per block; ``None`` without a sustained depth trend."""
    trend = None if case.diagnosis is None else case.diagnosis.trend
    if trend is None or not trend.sustained:
        return None
    per_block = max(trend.factor, 1 / trend.factor)
    return max(1, math.floor(math.log(TREND_MARK) / math.log(per_block)))


def _shallower_why_not(case: _Case) -> str | None:
    keep = _keep(case)
    if keep is None:
        return "the diagnosis has no sustained depth trend of the gradient"
    runs = _runs(case)
    if not runs:
        return (
            f"the model has no nn.Sequential of {MIN_RUN} or more alike normalized blocks that "
            "keep their input's shape"
        )
    if all(len(run) <= keep for run in runs):
        return f"its runs of blocks are {keep} long at most already"
    return None


def _shallower(case: _Case, generator: torch.Generator | None) -> Remedied:
    keep = cast(int, _keep(case))
    trend = cast(Diagnosis, case.diagnosis).trend
    net = copy.deepcopy(case.model)
    said = []
    for run in _runs(case):
        if len(run) <= keep:
            continue
        gone = [n for c in run[keep:] for n in c]
        said.append(
            f"{len(run) - keep} of {len(run)} ({module_path(gone[0])} to {module_path(gone[-1])})"
        )
        for name in reversed(gone):
            parent, _, leaf = name.rpartition(".")
            del cast(nn.Sequential, net.get_submodule(parent))[int(leaf)]
    factor = max(trend.factor, 1 / trend.factor) if trend else math.nan
    return Remedied(
        net,
        f"drop the last blocks of each run of alike normalized blocks: {'; '.join(said)}. The "
        f"gradient grows {factor:.3g}x per block toward the input whatever the init (Yang et al. "
        f"2019), so {keep} blocks keep it under {TREND_MARK:g}x; the model loses the dropped "
        "blocks' depth",
    )


def _remedies() -> dict[str, Remedy]:
    inits = {
        m: Remedy(
            m, PROBLEMS_OF_INIT, f"re-initialize by {m}", _reinit_why_not(m), _reinit_apply(m)
        )
        for m in ("he", "xavier", "orthogonal", "lsuv")
    }
    return {
        "zero-bias": Remedy(
            "zero-bias", ("dead",), "reset negative biases feeding dead units to 0",
            _zero_bias_why_not, _zero_bias,
        ),
        "branch-scale": Remedy(
            "branch-scale", PROBLEMS_OF_SCALE, "scale each residual branch by 1/sqrt(L)",
            _branch_scale_why_not, _branch_scale,
        ),
        "final-norm": Remedy(
            "final-norm", PROBLEMS_OF_SCALE, "a LayerNorm before the stream's raw reader",
            _final_norm_why_not, _final_norm,
        ),
        **inits,
        "tanh": Remedy(
            "tanh", ("vanishing", "saturated"), "hidden sigmoids -> tanh, Xavier-drawn",
            _tanh_why_not, _tanh,
        ),
        "layernorm": Remedy(
            "layernorm", PROBLEMS_OF_SCALE, "BatchNorm1d on (N, C) inputs -> LayerNorm",
            _layernorm_why_not, _layernorm,
        ),
        "shallower": Remedy(
            "shallower", PROBLEMS_OF_SCALE, "fewer blocks in a deep normalized stack",
            _shallower_why_not, _shallower,
        ),
        "pre-ln": Remedy(
            "pre-ln", PROBLEMS_OF_SCALE, "post-LN transformer layers -> pre-LN",
            _pre_ln_why_not, _pre_ln,
        ),
        "warmup": Remedy(
            "warmup", PROBLEMS_OF_SCALE, "linear learning-rate warm-up",
            _warmup_why_not, _warmup,
        ),
    }  # fmt: skip


REMEDIES: dict[str, Remedy] = _remedies()
"""Every remedy by name, the smallest changes first (the order :func:`advise` tries them in)."""


def _remedy(name: str) -> Remedy:
    if name not in REMEDIES:
        raise ValueError(f"remedy {name!r} not known, use one of {tuple(REMEDIES)}")
    return REMEDIES[name]


def why_not(
    name: str,
    model: nn.Module,
    batch: Input,
    diagnosis: Diagnosis | None = None,
    *,
    output: str | None = None,
) -> str | None:
    """Why remedy ``name`` does not apply to ``model`` (nothing to change, or the model has it
    already); ``None`` when it applies. ``zero-bias`` reads the dead layers of ``diagnosis``.

    Examples::

        >>> from normlab import zoo
        >>> why_not("he", zoo.build("dead-relu"), torch.randn(16, 32))[:25]
        'the model has it already:'
        >>> why_not("he", zoo.build("exploding-relu"), torch.randn(16, 32)) is None
        True
    """
    return _remedy(name).why_not(_Case(model, batch, diagnosis, output))


def remedy(
    name: str,
    model: nn.Module,
    batch: Input,
    diagnosis: Diagnosis | None = None,
    *,
    generator: torch.Generator | None = None,
    output: str | None = None,
) -> Remedied:
    """Apply remedy ``name`` to a copy of ``model`` (``model`` is left as it is).

    Raises:
        ValueError: an unknown name, or a remedy that does not apply (:func:`why_not` says why).
    """
    case = _Case(model, batch, diagnosis, output)
    reason = _remedy(name).why_not(case)
    if reason is not None:
        raise ValueError(f"remedy {name!r} does not apply: {reason}")
    return _remedy(name).apply(case, generator)


# -- advice: every remedy that applies, tried --------------------------------------------------


@dataclass
class Advice:
    """One remedy tried on a diagnosed model: what it changed, the training check (both losses
    per seed) and what the re-diagnosis of the remedied model found."""

    remedy: str
    words: str  # what it changed
    tried_for: list[str]  # the diagnosis's problems it addresses
    trial: Trial  # trial.flagged: what the re-diagnosis still flags
    after: list[str]  # every problem of the re-diagnosis

    @property
    def cured(self) -> bool:
        return self.trial.cured

    def line(self) -> str:
        """The advice in one sentence: the change, then the training check's words."""
        return f"{self.remedy}: {self.words}. " + self.trial.words(f"the {self.remedy} remedy")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = finite_or_none(
            {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "trial"}
        )
        return out | {"trial": self.trial.to_dict(), "cured": self.cured}


def check_cost(model: nn.Module, max_params: int = MAX_CHECK_PARAMS) -> str | None:
    """Why :func:`advise` would not train ``model`` (too many parameters); ``None``: it will."""
    n = sum(p.numel() for p in model.parameters())
    if n <= max_params:
        return None
    return (
        f"the advice was not checked in training: the model has {n:,} parameters, more than "
        f"{max_params:,} (each check trains several copies of it)"
    )


def advise(
    model: nn.Module,
    batches: Input | Sequence[Input],
    diagnosis: Diagnosis,
    *,
    seeds: int = TRIAL_SEEDS,
    steps: int = TRIAL_STEPS,
    generator: torch.Generator | None = None,
    output: str | None = None,
    max_params: int = MAX_CHECK_PARAMS,
    remedies: Sequence[str] | None = None,
) -> list[Advice]:
    """Try every remedy that applies to one of ``diagnosis``'s problems; the checked advice.

    Each remedy of :data:`REMEDIES` (in that order) that addresses a problem of the diagnosis
    and applies to the model (:func:`why_not`) is applied to a copy, trained against the model
    as given over ``seeds`` seeds of ``steps`` Adam steps (the model as given is trained once
    per seed for all of them), and the copy is diagnosed again (for ``warmup``, the copy after
    the first seed's warmed-up run). A remedy that does not apply, or whose change cannot be
    made, is not named at all. Cost:
    (1 + remedies) x seeds x steps forward and backward passes; a model with more than
    ``max_params`` parameters is refused (:func:`check_cost`).

    Args:
        model: the network diagnosed; left as it is.
        batches: the batches it was diagnosed on (cycled through in training).
        diagnosis: its :func:`normlab.doctor.diagnose`; a healthy one gets no advice.
        seeds: seeds per model, in [2, 10].
        steps: Adam steps per run, in [10, 1000].
        generator: draws the seeds, then each remedy's weights and re-diagnosis readout.
        output: the output field to read, as for :func:`normlab.doctor.diagnose`.
        max_params: the largest model checked.
        remedies: try only these (names of :data:`REMEDIES`); default: all of them.

    Returns:
        one :class:`Advice` per remedy tried, cures and not; ``[]`` for a healthy model.

    Raises:
        ValueError: ``seeds`` or ``steps`` out of range, a model over ``max_params``, or an
            unknown remedy.
    """
    xs = _steps(batches)
    _check_trial(steps, seeds)
    names = list(REMEDIES) if remedies is None else [_remedy(name).name for name in remedies]
    if too_big := check_cost(model, max_params):
        raise ValueError(f"{too_big}: pass max_params={max_params} or more to check it anyway")
    case = _Case(model, xs[0], diagnosis, output)
    wanted = [r for r in REMEDIES.values() if r.name in names]
    todo = [r for r in wanted if set(r.addresses) & set(diagnosis.problems)]
    todo = [r for r in todo if r.why_not(case) is None]  # never what the model has already
    if not todo:
        return []
    drawn = _seeds(generator, seeds)
    given = [_train(model, xs, s, steps=steps, output=output)[0] for s in drawn]
    tried = [_check(r, case, xs, given, drawn, steps, generator) for r in todo]
    return [a for a in tried if a is not None]


def _check(
    r: Remedy,
    case: _Case,
    xs: list[Input],
    given: list[list[float]],
    seeds: list[int],
    steps: int,
    generator: torch.Generator | None,
) -> Advice | None:
    """Apply one remedy, train it on every seed, re-diagnose it; ``None`` when the change
    could not be made (LSUV on a layer whose output has no variance)."""
    assert case.diagnosis is not None
    try:
        made = r.apply(case, generator)
    except ValueError:
        return None
    warmup = round(made.warmup * steps)
    runs = [
        _train(made.model, xs, s, steps=steps, warmup=warmup, output=case.output) for s in seeds
    ]
    subject = runs[0][1] if warmup else made.model  # a schedule shows in the trained model
    again = diagnose(subject, xs, generator=generator, output=case.output)
    flagged = _flagged(case.diagnosis, again, r.addresses)
    check = _trial(seeds, given, [curve for curve, _ in runs], warmup=warmup, flagged=flagged)
    tried_for = [p for p in case.diagnosis.problems if p in r.addresses]
    return Advice(r.name, made.words, tried_for, check, again.problems)


_NAMED = re.compile(
    r"`([a-z-]+)`|--fix ([a-z-]+)|\bthe ((?:[a-z-]+(?:, | and | or ))*[a-z-]+) remed(?:y|ies)"
)


def named(text: str) -> list[str]:
    """The remedies a suggestion names: as ```name```, ``--fix name``, ``the name remedy`` or
    ``the name, name and name remedies``.

    >>> named("reset the biases to 0 (`zero-bias`), or re-initialize (--fix he)")
    ['zero-bias', 'he']
    >>> named("use pre-LN or warm the learning rate up: the pre-ln and warmup remedies")
    ['pre-ln', 'warmup']
    """
    found = []
    for quoted, flag, phrase in _NAMED.findall(text):
        found += [quoted or flag] if quoted or flag else re.split(r", | and | or ", phrase)
    return [name for name in found if name in REMEDIES]


def checked(suggestions: Sequence[str], advice: Sequence[Advice]) -> list[str]:
    """The suggestions that stand after the checks: one that names a remedy stays only when
    that remedy was tried and is a cure (a remedy not tried did not apply, or the model has
    it already); one that names none stays as it is.

    >>> checked(["use `he`", "use `xavier`", "add a norm"], [])
    ['add a norm']
    """
    cures = {a.remedy for a in advice if a.cured}
    return [s for s in suggestions if all(name in cures for name in named(s))]
