"""The model's structure, as the forward pass shows it: which layer reads which layer's output
(through the autograd graph), residual streams, and branches scaled on purpose."""

from __future__ import annotations

import dataclasses
import functools
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from normlab.doctor.kinds import _has_weight, _is_norm, _nonlinearity, _passes
from normlab.doctor.running import Input, _graph_call, _preserved, _tensors
from normlab.probe import first_float_tensor, own_parameters, select_modules

Edges = dict[str, "str | None"]  # producing layer -> the small parameter on the way, if any
_OUTPUT = "<output>"  # the model's output, as a consumer


@dataclass
class Graph:
    """Which layer reads which layer's output, as one forward pass's autograd graph shows it.

    A layer's inputs are traced back through the operations between layers (a residual add, a
    mean, a reshape) to the layers that produced them, so "what follows a conv" is what consumes
    its output, not what happens to be called next.
    """

    order: list[tuple[str, nn.Module]]  # layers in first-call order
    producers: dict[str, list[str]]
    consumers: dict[str, list[str]]
    edges: dict[str, Edges] = field(default_factory=dict)  # consumer -> producer -> scaling
    streams: dict[str, float] = field(default_factory=dict)  # a sum's reader -> the sum's std
    norm_inputs: dict[str, float] = field(default_factory=dict)  # a norm -> its input's std
    # a layer of one output unit (weight of one row) -> its input's second moment E[x^2]
    unit_inputs: dict[str, float] = field(default_factory=dict)
    zero_fed: set[str] = field(default_factory=set)  # layers whose float inputs were all 0
    ids_fed: set[str] = field(default_factory=set)  # layers that read only integer tensors
    zero_out: set[str] = field(default_factory=set)  # layers whose float outputs were all 0
    # of those, the ones no non-zero float input fed: they made 0 of 0 (a linear map without
    # bias) or of their parameters alone (an embedding's padding row)
    zero_made: set[str] = field(default_factory=set)
    free: set[str] = field(default_factory=set)  # fed parameters only (a learned query), no data
    frozen: set[str] = field(default_factory=set)  # run with gradient recording off: not trained
    # the model itself when a probe measures another field of its output than the one read
    unread: set[str] = field(default_factory=set)
    # a layer whose output was at every call the very tensor another layer made (dropout in
    # eval or at p=0, an identity, a drop path): the layers whose output it passed on
    aliases: dict[str, list[str]] = field(default_factory=dict)
    sums: set[str] = field(default_factory=set)  # layers whose input is an add (of several)
    operands: dict[str, list[set[str]]] = field(default_factory=dict)  # a sum's reader -> the
    # layers each operand of its add reads (x + f(x): {x's layer}, {f's last layer})
    # a layer reading a straight-through add z + (q - z).detach() -> the layers that made q
    straight: dict[str, list[str]] = field(default_factory=dict)
    memo: dict[Any, Any] = field(default_factory=dict)  # what is read from it, made once

    def _ancestors(self) -> dict[str, set[str]]:
        """Each layer -> every layer whose output reaches its input (made once per graph)."""
        if "ancestors" in self.memo:
            return cast(dict[str, set[str]], self.memo["ancestors"])
        ancestors: dict[str, set[str]] = self.memo.setdefault("ancestors", {})
        for name, _ in self.order:  # producers are called first
            mine: set[str] = set()
            for p in self.producers.get(name, []):
                mine |= {p} | ancestors.get(p, set())
            ancestors[name] = mine
        return ancestors

    def _ends(self) -> list[tuple[str, str, list[str]]]:
        """(reader, branch end, the stream's producers) of every residual add.

        A layer reading a sum of several layers' outputs (``x + f(x)``) reads a stream; the
        producer that descends from all the others is the branch end (``f``'s last layer), the
        others make the stream. Two paths from one input (a conv shortcut) have no such end.
        """
        ancestors = self._ancestors()
        out = []
        for reader in self.streams:
            found = list(self.edges.get(reader, {}))
            ends = [b for b in found if all(o == b or o in ancestors.get(b, set()) for o in found)]
            if len(found) >= 2 and ends:
                out.append((reader, ends[0], [o for o in found if o != ends[0]]))
        return out

    def branches(self) -> dict[str, float]:
        """Residual branch ends -> the std of the stream they add into."""
        out: dict[str, float] = {}
        for reader, end, _ in self._ends():
            std = self.streams[reader]
            if math.isfinite(std) and end not in out:
                out[end] = std
        return out

    def branch_layers(self) -> set[str]:
        """The layers on a residual branch: the branch end and what feeds it since the branch
        left the stream (its ancestors that are not the stream's)."""
        ancestors = self._ancestors()
        out: set[str] = set()
        ends = self._ends()
        for reader, end, stream in ends:
            tips = self._tips(reader, end)
            stream = [s for s in stream if s not in tips]
            before = set().union(*({s} | ancestors.get(s, set()) for s in stream))
            for tip in tips:
                out |= ({tip} | ancestors.get(tip, set())) - before
        return out | self._parallel({reader for reader, _, _ in ends})

    def _tips(self, reader: str, end: str) -> set[str]:
        """The layers the branch's operand of the add reads: the branch end, and beside it the
        layers it multiplies (a gated branch, :math:`x + f(x) \\odot \\mathrm{softmax}(W f(x))`,
        ends in the gate, and the gated :math:`f(x)` is on the branch too, not the stream). The
        stream is the other operand; a layer both operands read is the stream's."""
        sides = self.operands.get(reader, [])
        for i, side in enumerate(sides):
            if end in side:
                others = set().union(*(o for j, o in enumerate(sides) if j != i))
                tips = side - others
                if others and set(self.edges.get(reader, {})) - tips:
                    return tips
        return {end}

    def _parallel(self, done: set[str]) -> set[str]:
        """The layers on the paths into an add of paths that left one input and none of which
        descends from another (a projection shortcut beside an attention or a conv stack):
        each path's layers since the split. No path alone carries the signal: their sum
        does, and the layer reading it is judged (against the input they split from)."""
        ancestors = self._ancestors()
        out: set[str] = set()
        for reader in self.sums - done:
            found = list(self.edges.get(reader, {}))
            lines = [{p} | ancestors.get(p, set()) for p in found]
            if len(found) < 2 or not set.intersection(*lines):
                continue  # independent sources (two inputs), not one input split
            for line in lines:
                out |= line - set().union(*(o for o in lines if o is not line))
        return out

    @classmethod
    def from_edges(cls, order: list[tuple[str, nn.Module]], edges: dict[str, Edges]) -> Graph:
        producers = {c: list(found) for c, found in edges.items() if c != _OUTPUT}
        consumers: dict[str, list[str]] = {}
        for name, _ in order:
            for p in producers.get(name, []):
                consumers.setdefault(p, []).append(name)
        return cls(order, producers, consumers, edges)

    def scaled(self) -> dict[str, str]:
        """Layer -> the small parameter scaling it: the layers whose every path to the output
        crosses an intentional branch scaling (:data:`BRANCH_SCALE`), and those right after
        one (through pass-through layers). Made once per graph: a watch reads it every record.
        """
        if "scaled" in self.memo:
            return cast(dict[str, str], self.memo["scaled"])
        reads: dict[str, Edges] = {}  # producer -> consumer -> scaling
        for consumer, found in self.edges.items():
            for producer, site in found.items():
                reads.setdefault(producer, {})[consumer] = site
        behind: dict[str, str] = {}
        for name, _ in reversed(self.order):  # consumers come later in the forward order
            out = reads.get(name, {})  # a site on the way, or the consumer's own scaling
            marks = [site or behind.get(c) for c, site in out.items()]
            if out and all(marks):
                behind[name] = cast(str, marks[0])
        for name, m in self.order:  # forward: the layers right after a scaling
            found = self.edges.get(name, {})
            marks = [site or behind.get(p) for p, site in found.items()]
            direct = any(site is not None for site in found.values())
            if name not in behind and found and all(marks) and (direct or _passes(m)):
                behind[name] = cast(str, marks[0])
        self.memo["scaled"] = behind
        return behind

    def _first(
        self, start: str, edges: dict[str, list[str]], stop: Callable[[nn.Module], bool]
    ) -> nn.Module | None:
        modules = dict(self.order)
        frontier, seen = list(edges.get(start, [])), {start}
        while frontier:  # breadth first, through pass-through layers
            name = frontier.pop(0)
            if name in seen:
                continue
            seen.add(name)
            if stop(modules[name]):
                return modules[name]
            frontier.extend(edges.get(name, []))
        return None

    def follows(self, name: str) -> tuple[str, float | None]:
        """The nonlinearity applied to layer ``name``'s output (linear when none)."""
        m = self._first(name, self.consumers, lambda m: not _passes(m))
        return ("linear", None) if m is None else _nonlinearity(m)

    def source(self, name: str) -> str | None:
        """The weight layer whose output reaches layer ``name`` (through pass-through layers)."""
        m = self._first(name, self.producers, lambda m: not _passes(m))
        if m is None or not _has_weight(m):
            return None
        return next(n for n, x in self.order if x is m)


BRANCH_SCALE = 1e-2
"""A parameter multiplied onto a layer's output between layers whose values average at most this
(in absolute value) is an intentional branch scaling: layer scale (CaiT, ConvNeXt: 1e-6),
ReZero and SkipInit (0). What it scales starts small on purpose, and learns to grow."""


def _scaling(node: Any, names: dict[int, str]) -> str | None:
    """The model parameter a ``MulBackward0`` node multiplies by, when it is a small one."""
    if type(node).__name__ != "MulBackward0":
        return None
    for next_node, _ in node.next_functions:
        p = getattr(next_node, "variable", None)  # an AccumulateGrad: a leaf, maybe a parameter
        small = isinstance(p, nn.Parameter) and p.numel() > 0 and p.abs().mean() <= BRANCH_SCALE
        if small and id(p) in names:
            return names[id(p)]
    return None


def _walk(tensors: list[torch.Tensor], made_by: dict[Any, str], names: dict[int, str]) -> Edges:
    """The layers whose outputs reach ``tensors`` through the autograd graph, each with the
    small parameter multiplied in on the way (``None``: no intentional scaling)."""
    return _reach([t.grad_fn for t in tensors], made_by, names)


def _reach(nodes: list[Any], made_by: dict[Any, str], names: dict[int, str]) -> Edges:
    """:func:`_walk` from autograd nodes."""
    found: Edges = {}
    stack: list[tuple[Any, str | None]] = [(node, None) for node in nodes]
    seen = set()
    while stack:
        node, site = stack.pop()
        if node is None or (node, site) in seen:
            continue
        seen.add((node, site))
        if node in made_by:
            layer = made_by[node]
            found[layer] = site if found.get(layer, site) is not None else None  # one clean path
            continue
        site = site or _scaling(node, names)
        stack.extend((next_node, site) for next_node, _ in node.next_functions)
    return found


def _reads_parameters_only(tensors: list[torch.Tensor], names: dict[int, str]) -> bool:
    """Whether the autograd graph behind ``tensors`` ends in model parameters only (DETR's and
    MaskFormer's learned object queries, read as a tensor): no data reaches them (the input's
    copies require grad, so the data shows as a leaf of its own; a leaf of zeros the forward
    pass makes, as MaskFormer's zero target, carries none)."""
    found = False
    stack: list[Any] = []
    for t in tensors:
        if t.grad_fn is not None:
            stack.append(t.grad_fn)
        elif t.requires_grad and t.any():  # a leaf read as it is: a parameter, or the data
            if id(t) not in names:
                return False
            found = True
    seen = set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)  # an AccumulateGrad
        if leaf is not None and leaf.any():
            if id(leaf) not in names:
                return False
            found = True
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found


class _StraightThrough(TorchFunctionMode):
    r"""Records one forward pass's straight-through adds, :math:`z + \mathrm{sg}(q - z)`.

    VQ-VAE's straight-through estimator (van den Oord et al. 2017, "Neural discrete
    representation learning"; DAC's and every residual vector quantizer's) passes a codebook
    lookup :math:`q` forward and copies the gradient back to the encoder's :math:`z`: the stop
    gradient (``detach``) hides :math:`q - z` from autograd, which sees :math:`z` alone, while
    the value is :math:`q`. The layer reading it reads the lookup's scale, not the encoder's, so
    it is anchored where :math:`q` was made (an embedding starts its own scale). An add (or
    subtract) is one when its detached operand was computed from every layer its visible
    operand reaches (:math:`z` cancels) and from others (``q``'s): those others are recorded
    for the add's autograd node. A detached operand without :math:`z` in it (a detached
    reference added to a fresh offset) is another sum, and is not one.
    """

    def __init__(self, made_by: dict[Any, str]) -> None:
        super().__init__()
        self.made_by = made_by
        # a detached tensor's id -> (the tensor, weakly; the autograd node it was cut from)
        self.detached: dict[int, tuple[weakref.ref[torch.Tensor], Any]] = {}
        self.adds: dict[Any, list[str]] = {}  # a straight-through add's node -> q's layers

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        cut = getattr(args[0], "grad_fn", None) if args else None  # the history detach drops
        if func in (torch.Tensor.detach, torch.detach) and cut is not None:
            self.detached[id(out)] = (weakref.ref(out), cut)
        elif isinstance(out, torch.Tensor) and type(out.grad_fn).__name__ in _ADDS:
            self._add(out.grad_fn, args)
        return out

    def _add(self, node: Any, args: Any) -> None:
        for a in args:
            cut = self.detached.get(id(a)) if isinstance(a, torch.Tensor) else None
            if cut is None or cut[0]() is not a:
                continue
            hidden = set(_reach([cut[1]], self.made_by, {}))  # the layers q - z was computed from
            seen = set(_reach([n for n, _ in node.next_functions], self.made_by, {}))  # z's
            if seen and seen <= hidden and (made := hidden - seen):
                self.adds[node] = sorted(made)


_ADDS = ("AddBackward0", "SubBackward0")


def _straight(
    tensors: list[torch.Tensor], made_by: dict[Any, str], adds: dict[Any, list[str]]
) -> set[str]:
    """The layers whose value reaches ``tensors`` through a straight-through add (q's), on
    the way back to the layers autograd links them to."""
    found: set[str] = set()
    stack, seen = [t.grad_fn for t in tensors], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen or node in made_by:
            continue
        seen.add(node)
        found |= set(adds.get(node, ()))
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found


@dataclass
class _Values:
    """What the layers read and made, in values, over the traced calls: norms' input std, the
    inputs of zeros only, of token ids only, of parameters only, and outputs of zeros only."""

    norm_inputs: dict[str, float] = field(default_factory=dict)  # a norm -> its input's std
    unit_inputs: dict[str, list[float]] = field(default_factory=dict)  # one unit: E[x^2]s
    zeros: dict[str, bool] = field(default_factory=dict)  # every float input it read was 0
    ids: set[str] = field(default_factory=set)  # layers that read only integer tensors
    zero_out: dict[str, bool] = field(default_factory=dict)  # every float output it made was 0
    free: dict[str, bool] = field(default_factory=dict)  # it read parameters only, no layer's
    frozen: dict[str, bool] = field(default_factory=dict)  # it ran without gradient recording

    def note(self, mod: nn.Module, name: str, args: Any, out: Any, free: bool) -> None:
        """One call of layer ``name``: ``free`` says it read parameters only at this call."""
        read = _tensors(args)
        self.note_inputs(mod, name, read)
        floats = [t for t in read if t.is_floating_point() and t.numel() > 0]
        if read and not any(t.is_floating_point() for t in read):
            self.ids.add(name)  # token ids (of a second input: a transducer's decoder)
        if floats:  # fed only zeros (DETR's decoder starts from zero queries)?
            self.zeros[name] = self.zeros.get(name, True) and not any(bool(t.any()) for t in floats)
            self.free[name] = self.free.get(name, True) and free
        outs = [t for t in _tensors(out) if t.is_floating_point() and t.numel() > 0]
        if outs:
            zero = not any(bool(t.any()) for t in outs)
            self.zero_out[name] = self.zero_out.get(name, True) and zero

    def note_inputs(self, mod: nn.Module, name: str, read: list[torch.Tensor]) -> None:
        """A norm's input std (its first call's), a one-unit layer's input E[x^2]."""
        if _is_norm(mod) and read:
            self.norm_inputs.setdefault(name, _std(read[0]))
        if _one_unit(mod) and read and read[0].is_floating_point():
            second = float(read[0].detach().double().square().mean())  # E[x^2] at this call
            self.unit_inputs.setdefault(name, []).append(second)

    def mean_unit_inputs(self) -> dict[str, float]:
        """Each one-unit layer's input E[x^2], over its calls."""
        return {name: sum(m) / len(m) for name, m in self.unit_inputs.items()}

    def into(self, graph: Graph) -> None:
        graph.norm_inputs = self.norm_inputs
        graph.unit_inputs = self.mean_unit_inputs()
        graph.zero_fed = {name for name, zero in self.zeros.items() if zero}
        graph.ids_fed = self.ids
        graph.zero_out = {name for name, zero in self.zero_out.items() if zero}
        graph.zero_made = {name for name in graph.zero_out if self.zeros.get(name, True)}
        graph.free = {name for name, only in self.free.items() if only}
        graph.frozen = {name for name, off in self.frozen.items() if off}


class Remeasure:
    """The graph's values that the weights set, measured again at a later forward pass: a
    sum's std as a norm or other layer reads it (:attr:`Graph.streams`), a norm's input std
    (:attr:`Graph.norm_inputs`) and a one-unit layer's input second moment
    (:attr:`Graph.unit_inputs`), each as :func:`trace` takes it. The structure is traced once;
    :func:`normlab.watch` judges step :math:`s` with these values of step :math:`s`, as the
    doctor would judge the model then, not with those of the step it traced.

    A context manager: while on, a pre-hook on each of those layers measures its input;
    :meth:`graph` gives the graph with them (the traced value where a layer did not run)."""

    def __init__(self, model: nn.Module, graph: Graph) -> None:
        self.traced = graph
        names = set(graph.streams) | set(graph.norm_inputs) | set(graph.unit_inputs)
        self.layers = [(n, m) for n, m in select_modules(model) if n in names]
        self.handles: list[Any] = []
        self.values = _Values()
        self.streams: dict[str, float] = {}

    def __enter__(self) -> Remeasure:
        self.handles = [
            m.register_forward_pre_hook(functools.partial(self._pre, name=name))
            for name, m in self.layers
        ]
        return self

    def __exit__(self, *exc_info: object) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []

    def _pre(self, mod: nn.Module, args: Any, name: str) -> None:
        read = _tensors(args)
        if not read:
            return
        if name in self.traced.streams:
            self.streams[name] = _std(read[0])  # the last call's, as the trace keeps
        self.values.note_inputs(mod, name, read)

    def graph(self) -> Graph:
        """The traced graph with the values of the passes since the last call (which it
        forgets): its structure, and the memo made of it, are shared."""
        g, seen = self.traced, self.values
        fresh = dataclasses.replace(
            g,
            streams={**g.streams, **self.streams},
            norm_inputs={**g.norm_inputs, **seen.norm_inputs},
            unit_inputs={**g.unit_inputs, **seen.mean_unit_inputs()},
        )
        self.values, self.streams = _Values(), {}
        return fresh


def trace(
    model: nn.Module, batch: Input, output: str | None = None, through: frozenset[str] = frozenset()
) -> Graph:
    """One forward pass with gradients on, recording which layer's output feeds which layer
    (and the model's output), and the small parameters multiplied in between.

    A module without parameters called more than once in the pass (one ``nn.ReLU`` applied
    after each of three convolutions) is a function used in several places, not one layer in
    one: as a node it would join those places into a loop. The pass is then traced again
    looking ``through`` such modules, to the layers that feed each call."""
    calls: dict[str, int] = {}  # layer -> how many times it ran in the pass
    made_by: dict[Any, str] = {}  # autograd node of a layer's output -> that layer
    order: dict[str, nn.Module] = {}
    edges: dict[str, Edges] = {}  # layer -> its producers, each with a scaling parameter
    names = {id(p): n for n, p in model.named_parameters()}
    streams: dict[str, float] = {}  # a layer reading a sum of layers' outputs: its input's std
    before: dict[str, float] = {}  # an in-place layer's input's std, before it changes it
    seen = _Values()
    split: dict[str, list[set[str]]] = {}  # an in-place layer -> its add's operands' layers
    operands: dict[str, list[set[str]]] = {}  # a sum's reader -> its add's operands' layers
    aliases: dict[str, list[str]] = {}  # a layer -> whose outputs it returned as they were
    sums: set[str] = set()  # the layers reading several layers through an add
    made: set[str] = set()  # the layers that made an output of their own at some call
    root: list[torch.Tensor | None] = []  # what a probe measures of the model's own output
    mode = _StraightThrough(made_by)  # the straight-through adds, as the pass makes them
    straight: dict[str, set[str]] = {}  # a layer -> the layers of the q its input's value is

    def pre(mod: nn.Module, args: Any, name: str) -> None:
        if _tensors(args) and name not in through:
            before[name] = _std(_tensors(args)[0])
            split[name] = _operands(_tensors(args)[0], made_by, names)

    def hook(mod: nn.Module, args: Any, out: Any, name: str) -> None:
        if name in through:
            return
        calls[name] = calls.get(name, 0) + 1
        order.setdefault(name, mod)
        # a layer with layers inside (ReZero's block: x + alpha * f(x)) also reads theirs
        read = _tensors(args) + (_tensors(out) if next(mod.children(), None) else [])
        for p, site in _walk(read, made_by, names).items():
            if p != name:
                known = edges.setdefault(name, {})
                known[p] = site if known.get(p, site) is not None else None
        if via := _straight(_tensors(args), made_by, mode.adds) - {name}:
            straight.setdefault(name, set()).update(via)
        if len(edges.get(name, {})) >= 2 and _tensors(args):  # it reads a sum: the stream?
            streams[name] = before.pop(name) if name in before else _std(_tensors(args)[0])
            found = split.pop(name, None) or _operands(_tensors(args)[0], made_by, names)
            operands.setdefault(name, found)
            if found:  # an add (not a product or a concatenation): the stream
                sums.add(name)
        floats = [t for t in _tensors(args) if t.is_floating_point() and t.numel() > 0]
        free = bool(floats) and name not in edges and _reads_parameters_only(floats, names)
        seen.note(mod, name, args, out, free)
        root.extend([first_float_tensor(out)] if mod is model else [])
        seen.frozen[name] = seen.frozen.get(name, True) and _frozen(mod, args, out)
        for t in _tensors(out):
            if t.grad_fn is None:
                continue
            first = made_by.setdefault(t.grad_fn, name)  # an identity layer keeps the first
            if first == name:
                made.add(name)
            elif first not in aliases.setdefault(name, []):
                aliases[name].append(first)

    handles = _hooked(model, hook, pre)
    try:
        with _preserved(model), torch.enable_grad(), mode:
            y = _graph_call(model, batch, output)
            edges[_OUTPUT] = _walk([y], made_by, names)
            streams[_OUTPUT] = _std(y)
            operands[_OUTPUT] = _operands(y, made_by, names)
    finally:
        for h in handles:
            h.remove()
    reused = {name for name, n in calls.items() if n > 1 and not own_parameters(order[name])}
    if reused:
        return trace(model, batch, output, through | reused)
    graph = Graph.from_edges(list(order.items()), edges)
    graph.streams, graph.sums, graph.operands = streams, sums, operands
    seen.into(graph)
    graph.unread = {""} if root and root[-1] is not y else set()  # a ModelOutput's other field
    graph.aliases = {name: of for name, of in aliases.items() if name not in made}
    graph.straight = {name: sorted(of) for name, of in straight.items()}
    return graph


def _hooked(model: nn.Module, hook: Callable[..., None], pre: Callable[..., None]) -> list[Any]:
    """``hook`` after every layer of ``model``, ``pre`` before each in-place one (an
    ``nn.ReLU(inplace=True)`` after a residual add: the sum, as it read it), each called with
    the layer's name; their handles."""
    layers = select_modules(model)
    handles = [m.register_forward_hook(functools.partial(hook, name=name)) for name, m in layers]
    return handles + [
        m.register_forward_pre_hook(functools.partial(pre, name=name))
        for name, m in layers
        if getattr(m, "inplace", False) is True
    ]


def _one_unit(mod: nn.Module) -> bool:
    """Whether ``mod`` maps its input to one output unit through a weight of one row (a
    ``Linear`` of one output feature, a convolution of one output channel; not a transposed
    one, whose first weight dimension is its input's)."""
    w = getattr(mod, "weight", None)
    units = getattr(mod, "out_features", getattr(mod, "out_channels", None))
    return (
        isinstance(w, torch.Tensor)
        and w.dim() >= 2
        and units == 1 == w.shape[0]
        and not getattr(mod, "transposed", False)
    )


def _frozen(mod: nn.Module, args: Any, out: Any) -> bool:
    """Whether a call ran with gradient recording off (under ``torch.no_grad``, as a frozen
    feature extractor inside a model runs): the grad mode at the hook, or, for a layer with
    parameters that require grad or fed inputs that do, an output without autograd history (no
    layer makes one with recording on from what carries it; a rotary table reads the stream for
    its dtype and device alone, and its cos and sin are no function of the stream's scale)."""
    if not torch.is_grad_enabled():
        return True
    trained = any(p.requires_grad for p in own_parameters(mod))
    fed = any(t.requires_grad for t in _tensors(args) if t.is_floating_point())
    outs = [t for t in _tensors(out) if t.is_floating_point()]
    return (trained or fed) and bool(outs) and not any(t.requires_grad for t in outs)


def _add_node(x: torch.Tensor, made_by: dict[Any, str]) -> Any:
    """The autograd node of the add ``x`` is (through reshapes and other one-input
    operations), or ``None``: a product or a concatenation is no add (an attention's output
    reads its query, key and value, a sum does not multiply what it reads)."""
    node = x.grad_fn
    while node is not None and node not in made_by:
        if type(node).__name__.startswith("AddBackward"):
            return node
        nexts = [n for n, _ in node.next_functions if n is not None]
        if len(nexts) != 1:
            return None
        node = nexts[0]
    return None


def _operands(x: torch.Tensor, made_by: dict[Any, str], names: dict[int, str]) -> list[set[str]]:
    """The layers each operand of the add ``x`` is reads (``[]`` when ``x`` is no add)."""
    node = _add_node(x, made_by)
    if node is None:
        return []
    return [set(_reach([n], made_by, names)) for n, _ in node.next_functions if n is not None]


def _std(x: torch.Tensor) -> float:
    return float(x.detach().double().std()) if x.is_floating_point() and x.numel() > 1 else math.nan
