"""The visit: :func:`diagnose` (trace, measure, label, the trend, words), and
:func:`diagnosing`, the same pass by pass; what follows it, fix and check, is
:mod:`normlab.doctor.examination`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import nn

from normlab.doctor.graph import Graph, trace
from normlab.doctor.judge import judge
from normlab.doctor.measure import Measured, _measuring
from normlab.doctor.results import Diagnosis
from normlab.doctor.running import Input, _eager, _main, _overwritten_notes, _steps
from normlab.doctor.words import _scaled_notes, _suggestions, _verdict


def diagnose(
    model: nn.Module,
    batches: Input | Sequence[Input],
    *,
    generator: torch.Generator | None = None,
    output: str | None = None,
) -> Diagnosis:
    r"""Run one forward and backward pass per batch under the probes and label every leaf layer.

    The loss is a random linear readout :math:`L = \frac{1}{N} \sum_i r_i \cdot y_i` with
    :math:`r \sim \mathcal{N}(0, 1)` drawn once from ``generator``, so the gradient entering the
    model has a fixed scale. The model runs in the mode it is in; its buffers (BatchNorm running
    statistics) and parameter gradients are restored afterwards, so diagnosing changes nothing.
    Scales are relative to the input's std; for token ids (an input with no scale) to the std
    of the first layer's output, the embedding's, as the diagnosis's notes say. A
    ``torch.compile``'d model is examined through its original module.

    Args:
        model: the network to examine; its output is read by :func:`_output`: a tensor, a tuple
            whose first element is one, or a dict or ``ModelOutput``; a tuple of tensors
            there (a backbone's feature maps) is read whole, every tensor.
        batches: one input batch, or several (one step each).
        generator: draws the readout direction.
        output: the field of a dict or ``ModelOutput`` output to read (default: ``logits``,
            else ``last_hidden_state``, else the only field holding tensors). A number
            (``loss``, of a Hugging Face model given ``labels=``) is the model's own loss,
            and its gradient is used as it is.

    Returns:
        a :class:`Diagnosis`.

    Raises:
        ModelInputError: the model raised on the input, or in its backward pass.
        ModelOutputError: its output holds no tensor to read.
        CannotDiagnose: no probed layer ran, or the output carries no gradient (``argmax``).

    Examples::

        >>> from normlab import zoo
        >>> net = zoo.build("exploding-relu")
        >>> x = torch.randn(zoo.input_shape("exploding-relu", 32))
        >>> d = diagnose(net, x)
        >>> d.problems[:1], d.with_label("exploding")[-1]
        (['exploding'], '20')
    """
    xs = _steps(batches)
    model, notes = _eager(model)
    graph = trace(model, xs[0], output)
    *_, measured = _measuring(model, xs, generator, output, set(graph.scaled()), notes)
    return _diagnosis(model, xs, graph, measured(), notes)


def diagnosing(
    model: nn.Module,
    batches: Input | Sequence[Input],
    *,
    generator: torch.Generator | None = None,
    output: str | None = None,
) -> Iterator[Diagnosis]:
    """:func:`diagnose`, pass by pass: after each forward and backward pass, the diagnosis of
    the batches measured so far. The :math:`k`-th is what :func:`diagnose` gives for the first
    :math:`k` batches (from the same ``generator`` state), so the last is :func:`diagnose`'s;
    each is judged anew (the labels of two passes may differ from those of one). The model is
    left as it was when the passes end, or when the generator is closed.

    Args:
        model, batches, generator, output: as for :func:`diagnose`.

    Examples::

        >>> from normlab import zoo
        >>> net = zoo.build("vanishing-tanh")
        >>> [d.steps for d in diagnosing(net, [torch.randn(32, 32) for _ in range(3)])]
        [1, 2, 3]
    """
    xs = _steps(batches)
    model, notes = _eager(model)
    graph = trace(model, xs[0], output)
    passes = _measuring(model, xs, generator, output, set(graph.scaled()), notes)
    for k, measured in enumerate(passes, start=1):
        yield _diagnosis(model, xs[:k], graph, measured(), list(notes))


def _diagnosis(
    model: nn.Module, xs: Sequence[Input], graph: Graph, measured: Measured, notes: list[str]
) -> Diagnosis:
    """Judge the measurements of ``model`` on ``xs`` and put the diagnosis in words; ``notes``
    (what the visit noted so far) gets what the judgement notes."""
    acts, grad_stats, ratios, own = measured
    if own:
        notes.append(
            "the output is a number, the model's own loss: its gradient was used, not a readout"
        )
    found = judge(model, xs, acts, grad_stats, ratios, graph)
    notes += [found.note] if found.note else []
    notes += _scaled_notes(graph.scaled())
    notes += _overwritten_notes(model, acts.overwritten)
    layers, trend, problems = found.layers, found.trend, found.problems
    return Diagnosis(
        layers=layers,
        verdict=_verdict(layers, problems, trend, found.stream),
        problems=problems,
        suggestions=_suggestions(model, layers, graph, problems, trend, found.stream),
        input_shape=list(_main(xs[0]).shape),
        input_std=found.input_std,
        steps=len(xs),
        notes=notes,
        trend=trend,
        stream=found.stream,
    )
