r"""What the architecture predicts for each layer: the scale it should be judged against, the
layers whose scale is theirs by design, and what the residual stream should do with depth.

A layer's scale is not judged against the model's input but against its **anchor**, the nearest
place upstream where the architecture fixes the scale: the input (a float input), a
normalization layer's output (it resets the scale, whatever came before), or an embedding (token
ids have no scale of their own; the embedding's output is where the scale starts). A codebook
lookup passed on by VQ-VAE's straight-through estimator :math:`z + \mathrm{sg}(q - z)` (van den
Oord et al. 2017) is the value its reader reads, though autograd links that reader to the
encoder's :math:`z` alone: the reader is anchored where :math:`q` was made
(:class:`normlab.doctor.graph._StraightThrough`). Between two anchors the scale is what the
weights make of it, and the variance argument (LeCun et al. 1998; He et al. 2015) predicts it
stays put at a scale-preserving initialization: that segment is where a bad init shows. Some
layers are judged by what the architecture does with their output rather than by their own
scale:

- a layer whose output goes only into a normalization layer is divided by its own std there, so
  it is judged by what the norm passes on, :math:`s / \sqrt{s^2 + \epsilon}` of unit scale (only
  a std far under the norm's :math:`\sqrt{\epsilon}` is lost);
- a layer whose signal reaches the model's output only through normalization layers (a conv
  stem before the first norm, a patch embedding, the layers between two norms of a stack) matters
  only by what those norms pass on: they divide its scale out, so forward nothing is lost while
  the std :math:`s` at their input stays far above :math:`\sqrt{\epsilon}`, and it is judged,
  like the layer feeding a norm, by :math:`s / \sqrt{s^2 + \epsilon}`; a layer with one path to
  the output that crosses no norm is judged by its own scale;
- a layer on a residual branch adds into a stream that carries the signal past it: a small
  branch is a design (ReZero, SkipInit, T-Fixup and std-0.02 transformers start small and train;
  attention at init averages its values over the :math:`T` tokens, so its output shrinks like
  :math:`1/\sqrt{T}`), and its own gradient, not its scale, says whether it can grow;
- a layer run with gradient recording off (``torch.no_grad``: a frozen pretrained feature
  extractor inside a model) is no part of what trains: its output is a fixed transform of the
  input, as a spectrogram is, so its scale is not judged (nor does it start a segment);
- a layer whose parameters are all zero (a relative-position bias table, a zero-initialized
  last layer of a residual branch), or that looks up zero rows (a padding row) or maps the 0 it
  is fed to 0 (DETR's decoder starts from zero queries), is zero by design, not dead, where its
  zero joins another signal, through the layers that carry the zero on (an add, a
  concatenation, a cross-attention), or is a readout fed a live signal (a logit scale at 0); on
  the only path (a plain stack initialized at 0) it cuts the signal, and is judged.

The residual stream itself is judged against :func:`normlab.theory.residual_stream`. Pre-LN
(:math:`x + f(\mathrm{LN}(x))`) adds each branch's variance :math:`\Delta` to the stream, so
:math:`m_k = m_1 (1 + (k - 1)\Delta / m_1)` after :math:`k` adds; the later blocks then move the
stream :math:`\sqrt{m_k / m_1}` times less than the first, and branches scaled by
:math:`1/\sqrt{L}` (Depth-muP: Yang et al. 2023; Bordelon et al. 2023) keep that growth bounded.
Post-LN (:math:`\mathrm{LN}(x + f(x))`) keeps the stream's scale, but an update's effect on the
output grows with the sum of the branches' shares :math:`\beta_k` of the variance at each add
(Liu et al. 2020, "Understanding the difficulty of training transformers", the amplification
behind post-LN's need for warm-up; Xiong et al. 2020).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from torch import nn

from normlab.doctor.graph import _OUTPUT, Graph
from normlab.doctor.kinds import _has_weight, _is_norm, _passes

INPUT = ""
"""The anchor name of the model's input."""

STREAM_GROWTH = 4.0
"""The pre-LN stream's std growth, measured and predicted, from which it is labelled: the last
blocks then move the stream under a quarter as much as the first (a 64-block He-initialized
residual MLP grows ~7x and trains worse than its 1/sqrt(L)-scaled twin, which grows ~2x)."""

AMPLIFICATION = 10.0
r"""The post-LN amplification :math:`\sum_k \beta_k` from which a post-LN stack is labelled:
a 12-layer post-LN ``nn.TransformerEncoder`` (d 64, PyTorch's init) sums about 4 over its 23
adds and trains with warm-up, a 48-layer one about 25 and does not learn in 100 AdamW steps
even with warm-up (issue 30); the bound sits between them (their geometric mean), on the measure
Liu et al. derive, and a 24-layer one (BERT-large's depth, known to need warm-up) lands near it."""


@dataclass(frozen=True)
class Role:
    r"""How one layer is judged: its ``kind`` and the ``anchor`` its scale is compared with.

    ``kind`` is ``"norm"`` (a normalization layer: judged against unit scale), ``"embedding"``
    (a first layer fed token ids, or learned parameters only, as DETR's object queries: an
    anchor, not judged by scale), ``"feeds-norm"`` (its output
    only enters norms: judged by what they pass on), ``"branch"`` (on a residual branch: not
    judged by a small scale), ``"frozen"`` (run under ``torch.no_grad``: a fixed transform of
    the input that neither trains nor passes a gradient, as a pretrained feature extractor
    inside a model; not judged by scale), ``"zero"`` (zero by design: all its parameters 0, or
    fed only zeros, as DETR's decoder starts from zero queries, or only such layers) or
    ``"layer"``
    (judged by its scale against its anchor's, or, when every path from it to the output
    crosses a norm, by what the first norms on those paths, ``norms``, pass on).
    """

    kind: str
    anchor: str | None  # INPUT, a layer name, or None: not judged by scale
    eps: float = math.nan  # feeds-norm: the largest eps of the norms it feeds
    norms: tuple[str, ...] = ()  # layer: the norms every path of its output crosses first


def _eps(m: nn.Module) -> float:
    """A normalization layer's epsilon (torch's ``eps``, Hugging Face's ``variance_epsilon``)."""
    for attr in ("eps", "variance_epsilon", "epsilon"):
        value = getattr(m, attr, None)
        if isinstance(value, int | float):
            return float(value)
    return 1e-5


def _zero(m: nn.Module) -> bool:
    """Parameters of its own, every one exactly 0: zero by design (an init chose it)."""
    ps = [p for p in m.parameters(recurse=False) if p.numel() > 0]
    return bool(ps) and all(not p.detach().any() for p in ps)


def _fed_norms(graph: Graph, name: str) -> list[nn.Module] | None:
    """The norms ``name``'s output enters (through dropout, identity and other pass-through
    layers), or ``None`` when any of it goes elsewhere (another layer, the model's output)."""
    modules = dict(graph.order)
    norms, frontier, seen = [], [name], {name}
    while frontier:
        here = frontier.pop()
        if here in graph.edges.get(_OUTPUT, {}):
            return None
        consumers = graph.consumers.get(here, [])
        if here != name and not consumers:
            return None
        for c in consumers:
            m = modules[c]
            if _is_norm(m):
                norms.append(m)
            elif _passes(m) and c not in seen:
                seen.add(c)
                frontier.append(c)
            elif not _passes(m):
                return None
    return norms or None


def _norm_bound(graph: Graph) -> dict[str, frozenset[str]]:
    """Each layer whose output reaches the model's output only through normalization layers
    -> the norms first met on those paths. A path that ends before the output (a layer with
    layers inside reads its last one's output, which its consumers trace to that one) carries
    nothing to it; a layer with a path that crosses no norm, or none that reaches the output, is
    left out. Made once per graph."""
    if "norm_bound" in graph.memo:
        return cast(dict[str, frozenset[str]], graph.memo["norm_bound"])
    modules = dict(graph.order)
    direct = set(graph.edges.get(_OUTPUT, {}))
    bound: dict[str, frozenset[str]] = {}
    ends: set[str] = set()  # layers whose output reaches no layer and not the output
    for name, _ in reversed(graph.order):  # consumers come later in the forward order
        consumers = [c for c in graph.consumers.get(name, []) if c not in ends]
        if name in direct:
            continue
        if not consumers:
            ends.add(name)
            continue
        found: set[str] = set()
        for c in consumers:
            if _is_norm(modules[c]):
                found.add(c)
            elif c in bound:
                found |= bound[c]
            else:  # it reaches the output without a norm, or is called before (a loop)
                break
        else:
            bound[name] = frozenset(found)
    graph.memo["norm_bound"] = bound
    return bound


def _joins(graph: Graph, name: str, on_branch: set[str]) -> bool:
    """Whether ``name``'s zero joins another signal on its way to the output: it is on a
    residual branch, or, following the layers that carry the zero on (they make 0 of 0: a
    linear map without bias, a norm with zero bias, an attention whose values are 0), one of
    them is, or a layer they feed reads other layers too (a bias table added to the attention
    scores, DETR's zero queries meeting the encoder in cross-attention): a zero there is a
    design. A zero on the only path (every weight of a plain stack at 0) cuts the signal."""
    frontier, seen = [name], {name}
    while frontier:
        here = frontier.pop()
        if here in on_branch:
            return True
        for c in graph.consumers.get(here, []):
            if len(graph.producers.get(c, [])) >= 2:
                return True
            if c in graph.zero_made and c not in seen:
                seen.add(c)
                frontier.append(c)
    return False


def _zero_by_design(graph: Graph, name: str, m: nn.Module, on_branch: set[str]) -> bool:
    """Whether ``name``'s zero is a design: it joins another signal (:func:`_joins`), or it is
    a readout whose own parameters are 0 fed a live signal (muP's zero readout, a logit scale
    at 0: its weight's gradient :math:`x^\top g` is not 0, and it leaves 0 at the first
    step)."""
    if _joins(graph, name, on_branch):
        return True
    return _zero(m) and name in graph.edges.get(_OUTPUT, {}) and name not in graph.zero_fed


def roles(graph: Graph, tokens: bool) -> dict[str, Role]:
    """Each traced layer's :class:`Role`, in forward order.

    Args:
        graph: the traced forward pass.
        tokens: the input has no scale (token ids): a first weight layer is an embedding (as is
            one that reads only integer tensors, whatever the first input).
    """
    out: dict[str, Role] = {}
    passes_on: dict[str, str] = {}  # layer -> the anchor its consumers are judged against
    position = {name: i for i, (name, _) in enumerate(graph.order)}
    position[INPUT] = -1
    on_branch = graph.branch_layers()
    bound, modules = _norm_bound(graph), dict(graph.order)
    for name, m in graph.order:
        producers = [p for p in graph.producers.get(name, []) if p in passes_on]
        ups = [passes_on[p] for p in producers] or [INPUT]
        if lookup := [passes_on[p] for p in graph.straight.get(name, []) if p in passes_on]:
            ups = lookup  # its value is a lookup's, passed on by a straight-through add
        anchor: str | None = min(ups, key=lambda a: position.get(a, -1))  # the stream's source
        if normed := _normed_terms(producers, out, passes_on):
            anchor = min(normed, key=lambda a: position[a])  # the stream after its 1st branch
        eps = math.nan
        fed_zero = name in graph.zero_fed or (
            bool(producers) and all(out[p].kind == "zero" for p in producers)
        )
        made = _zero(m) or name in graph.zero_made  # params at 0, zero rows, or 0 of 0
        if name in graph.frozen:
            kind, anchor = "frozen", None
        elif name in graph.unread:  # its measured tensor is not what it gives the readout
            kind, anchor = "layer", None
        elif (made or fed_zero) and _zero_by_design(graph, name, m, on_branch):
            kind, anchor = "zero", None
        elif _is_norm(m):
            kind, anchor = "norm", None
        elif (
            not producers
            and (tokens or name in graph.ids_fed or name in graph.free)
            and (_has_weight(m))
        ):
            kind, anchor = "embedding", None
        elif (norms := _fed_norms(graph, name)) is not None:
            kind, eps = "feeds-norm", max(_eps(n) for n in norms)
        elif name in on_branch:
            kind = "branch"
        else:
            kind = "layer"
        crossed = bound.get(name, frozenset()) if kind == "layer" else frozenset()
        if crossed:
            eps = max(_eps(modules[n]) for n in crossed)
        out[name] = Role(kind, anchor, eps, tuple(sorted(crossed)))
        passes_on[name] = anchor if anchor is not None and kind == "layer" else name
        if kind in ("feeds-norm", "branch") and anchor is not None:
            passes_on[name] = anchor
        if (same := _alias(graph, name, out)) is not None:  # its output is another's
            out[name], passes_on[name] = out[same], passes_on[same]
    return out


def _normed_terms(
    producers: list[str], out: dict[str, Role], passes_on: dict[str, str]
) -> list[str]:
    r"""The norms whose outputs are themselves terms of the sum a layer reads (OLMo 2's
    :math:`h = x + \mathrm{LN}(f(x))`, read raw by the next block's projections): a
    normalized term fixes the sum's scale, :math:`\mathrm{Var}(x + n) \ge \mathrm{Var}(n)`
    for independent terms, so the sum is anchored at the earliest such norm, the stream after
    its first branch (as :class:`Stream` takes :math:`m_1`), not at an embedding that may be of
    any scale (std 0.02); the adds' growth after it is the stream rule's. A branch's last
    weight layer is a term judged against its own anchor, the norm its branch reads (a
    pre-LN branch read raw by OLMo Hybrid's attention block): the sum is anchored at that norm
    too, since a branch of a normalized input holds its scale by its own judgement."""
    if len(producers) < 2:
        return []
    return [
        passes_on[p]
        for p in producers
        if out[p].kind == "norm"
        or (out[p].kind == "branch" and passes_on[p] in out and out[passes_on[p]].kind == "norm")
    ]


def _alias(graph: Graph, name: str, out: dict[str, Role]) -> str | None:
    """The layer whose role ``name`` takes: the one whose output tensor it returned as it was
    at every call (a dropout in eval mode or at p=0, an identity, an inactive drop path) when
    all such layers share one kind. It is that layer's output, under another name: a dropout
    after a residual branch's last layer is on the branch, as that layer is."""
    of = [p for p in graph.aliases.get(name, []) if p in out]
    if not of or len({out[p].kind for p in of}) > 1:
        return None
    return of[0]


@dataclass
class Stream:
    r"""The residual stream over depth, against :func:`normlab.theory.residual_stream`.

    ``stds`` is the stream's std after each add (as the layer reading the sum sees it),
    ``placement`` ``"pre"`` (the stream is never normalized) or ``"post"`` (each sum is
    normalized and the norm's output is the next stream). Pre-LN: ``predicted`` is the std
    growth :math:`\sqrt{1 + (k-1)\Delta/m_1}` the first adds' variance :math:`\Delta` predicts
    for every add :math:`k`, ``growth`` the measured :math:`\sqrt{m_k/m_1}`, both from
    :math:`m_1`, the stream after its first branch (the embedding alone may be of any scale).
    Post-LN: ``shares`` are the branches' shares
    :math:`\beta_k = 1 - \sigma_{k-1}^2/\sigma_{\text{sum},k}^2` of each sum's variance (the
    stream before the add is the previous norm's output), and ``amplification`` their sum.

    ``raw_end`` (pre-LN): the stream's last sum reaches the model's output with no norm on the
    way (a head, or the output, reads it as it is), so the output's scale grows with the
    stream. A pre-LN stream that ends in a norm (GPT-2's ``ln_f``, Llama's ``norm``) grows by
    design: :math:`\mathbb{E}\lVert x_l \rVert^2` grows linearly with depth (Xiong et al. 2020,
    "On Layer Normalization in the Transformer Architecture", Lemma 1, at least as 1 + l/2),
    and that growth is what keeps the last blocks' gradients bounded; every norm reads it at unit
    scale. Measured (``tests/calibration.py``'s 64-block He residual MLP, the doctor's proxy,
    100 Adam steps, 4 to 8 seeds on two input draws): with a final LayerNorm before its head it fits
    to 0.06-0.17, and with its branches scaled by 1/sqrt(64) only to 0.74-0.90; with its head
    reading the stream as it is, to 0.40-1.28, and with a final norm added to 0.10-0.13. Only a
    stream whose end is read raw is labelled.
    """

    placement: str
    readers: list[str]  # the layers reading each sum, in forward order (raw_end: the last
    # is the head, or "<output>", reading the last sum as it is)
    stds: list[float]
    predicted: list[float]
    growth: list[float]
    shares: list[float]
    raw_end: bool = False  # pre-LN: its last sum reaches the output with no norm between
    adds: int = 0  # the sums read along the stream (made from readers)
    amplification: float = 0.0  # post-LN: the shares' sum; pre-LN: 0 (made from shares)

    def __post_init__(self) -> None:
        self.adds = len(self.readers)
        self.amplification = sum(s for s in self.shares if math.isfinite(s))

    @property
    def label(self) -> str | None:
        """``"exploding"`` when the stream breaks its design (see :data:`STREAM_GROWTH`,
        :data:`AMPLIFICATION`; pre-LN: with its end read raw), else ``None``."""
        if self.placement == "pre" and self.raw_end and self.flagged_from() is not None:
            return "exploding"
        if self.placement == "post" and self.amplification >= AMPLIFICATION:
            return "exploding"
        return None

    def flagged_from(self) -> int | None:
        """The first add from which the stream is labelled (pre-LN: both the measured and the
        predicted growth past :data:`STREAM_GROWTH`; post-LN: the running amplification past
        :data:`AMPLIFICATION`), or ``None``."""
        if self.placement == "pre":
            both = [
                k
                for k, (g, p) in enumerate(zip(self.growth, self.predicted, strict=True))
                if g >= STREAM_GROWTH and p >= STREAM_GROWTH
            ]
            return both[0] if both else None
        running = 0.0
        for k, share in enumerate(self.shares):
            running += share if math.isfinite(share) else 0.0
            if running >= AMPLIFICATION:
                return k
        return None


EARLY_ADDS = 4
"""The adds after the first whose mean variance increment predicts the rest (a stream that grows
faster later, as attention's shared component does, is measured but not predicted)."""


def stream(graph: Graph, stds: dict[str, float]) -> Stream | None:
    """The residual stream of ``graph`` (the sums read by norms, in forward order, one chain
    per stack: a vision tower's and a text tower's are two), or ``None`` with no chain of four
    or more such sums; of several, the first that breaks its design, else the longest.
    ``stds`` are the layers' output stds (a norm's output is the post-LN stream)."""
    modules = dict(graph.order)
    readers = [
        r for r, _ in graph.order if r in graph.streams and _is_norm(modules[r]) and r in stds
    ]
    found = [_chain(graph, chain, stds) for chain in _chains(graph, readers) if len(chain) >= 4]
    if not found:
        return None
    flagged = [s for s in found if s.label is not None]
    return flagged[0] if flagged else max(found, key=lambda s: s.adds)


def _chains(graph: Graph, readers: list[str]) -> list[list[str]]:
    """The readers grouped by the stream they read: the next sum of a stream is read by a
    layer whose producers hold the previous reader (post-LN: the norm's output is the stream)
    or all of the previous reader's producers (pre-LN: the stream's layers carry on)."""
    chains: list[list[str]] = []
    for r in readers:
        mine = set(graph.producers.get(r, []))
        for chain in reversed(chains):
            last = chain[-1]
            if last in mine or set(graph.producers.get(last, [])) <= mine:
                chain.append(r)
                break
        else:
            chains.append([r])
    return chains


def _chain(graph: Graph, readers: list[str], stds: dict[str, float]) -> Stream:
    """One stream's :class:`Stream`."""
    sums = [graph.streams[r] for r in readers]
    post = any(p in readers for r in readers for p in graph.producers.get(r, []))
    if post:
        shares = []
        for r, s in zip(readers, sums, strict=True):
            before = [stds[p] for p in graph.producers.get(r, []) if p in readers]
            shares.append(1 - (before[0] / s) ** 2 if before and s > 0 else math.nan)
        return Stream("post", readers, sums, [1.0] * len(sums), [1.0] * len(sums), shares)
    raw = _read_raw(graph, readers[-1])
    if raw is not None:  # its last sum, as the head (or the output) reads it
        readers, sums = [*readers, raw], [*sums, graph.streams[raw]]
    m = [s * s for s in sums]  # (K,) the stream's variance as each reader sees it
    base = m[1]  # after the first branch: the embedding alone may be any scale (GPT-2's 0.02)
    early = [b - a for a, b in itertools.pairwise(m[1 : 2 + EARLY_ADDS])]
    delta = max(sum(early) / len(early), 0.0) / base if base > 0 else 0.0  # per add, in m_1
    delta = min(delta, 1.0)  # a branch of a normalized input adds about the stream's own
    # variance at most: a larger first increment is a block of two kinds (a small attention
    # branch, then a large MLP one), not the rate of every add
    predicted = [math.sqrt(1 + max(k - 1, 0) * delta) for k in range(len(m))]
    growth = [math.sqrt(v / base) if base > 0 else math.nan for v in m]
    return Stream("pre", readers, sums, predicted, growth, [math.nan] * len(m), raw is not None)


def _read_raw(graph: Graph, last: str) -> str | None:
    """The first reader of the pre-LN stream after norm ``last`` that is no norm (a head, or
    ``_OUTPUT``, the model's output): one whose producers hold all of ``last``'s (the stream's
    layers carry on, as :func:`_chains` follows them); ``None`` when the stream ends in a
    norm."""
    modules = dict(graph.order)
    names = [name for name, _ in graph.order]
    mine = set(graph.producers.get(last, []))
    after = names[names.index(last) + 1 :] if last in names else []
    for r in [*after, _OUTPUT]:
        if r != _OUTPUT and (r not in graph.streams or _is_norm(modules[r])):
            continue
        producers = set(graph.edges.get(r, {})) if r == _OUTPUT else set(graph.producers.get(r, []))
        if mine and mine <= producers:
            return r
    return None


def like_for_like(names: Sequence[str], blocks: dict[str, tuple[str, int]]) -> dict[str, str]:
    """Each weight layer's reference for the gradient ratio: the same layer of the last block
    that has it (``h.3.attn.c_attn`` -> ``h.11.attn.c_attn``: a query projection against a
    query projection, whose gradient at init is second order whatever the depth), else the
    last weight layer outside the blocks (the head).

    ``blocks`` maps a layer in a repeated block to (its name with the block index removed,
    the index).
    """
    last: dict[str, tuple[int, str]] = {}
    for name in names:
        if name in blocks:
            key, index = blocks[name]
            if key not in last or index >= last[key][0]:
                last[key] = (index, name)
    outside = [n for n in names if n not in blocks]
    head = outside[-1] if outside else (names[-1] if names else "")
    return {n: last[blocks[n][0]][1] if n in blocks else head for n in names}


def _blocks(names: Sequence[str]) -> tuple[str, list[list[int]]]:
    """The repeated blocks among ``names``: the prefix whose integer component takes the most
    values, and the indices of the names under each of its values, in order (one name per
    block when no prefix repeats)."""
    by_prefix: dict[str, dict[int, list[int]]] = {}
    for i, name in enumerate(names):
        for match in re.finditer(r"(?:^|\.)(\d+)(?=\.|$)", name):
            prefix = name[: match.start(1)].rstrip(".")
            by_prefix.setdefault(prefix, {}).setdefault(int(match.group(1)), []).append(i)
    if not by_prefix:
        return "", [[i] for i in range(len(names))]
    prefix, groups = max(by_prefix.items(), key=lambda kv: (len(kv[1]), -len(kv[0])))
    return prefix, [groups[k] for k in sorted(groups)]


def block_keys(names: Sequence[str]) -> dict[str, tuple[str, int]]:
    """The layers of the repeated blocks among ``names`` -> (the name with its block index
    removed, the index): ``h.3.attn.c_attn`` -> (``h.{}.attn.c_attn``, 3)."""
    prefix, groups = _blocks(names)
    out: dict[str, tuple[str, int]] = {}
    if len(groups) < 2:
        return out
    for index, group in enumerate(groups):
        for i in group:
            name = names[i]
            rest = name[len(prefix) :].lstrip(".")
            _, _, tail = rest.partition(".")
            out[name] = (f"{prefix}.{{}}.{tail}" if prefix else f"{{}}.{tail}", index)
    return out
