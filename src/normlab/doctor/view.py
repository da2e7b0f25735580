"""The doctor's view: a :class:`~normlab.doctor.Diagnosis` as tables and figures described as data.

The per-layer table, the verdict and the advice checked in training (:func:`diagnosis_tables`);
the figure over depth, measured beside predicted (:func:`diagnosis_figure`: activation scale,
each weight layer's gain, the residual stream, the gradient ratio, an update:data ratio,
dead and saturated fractions); and a :func:`normlab.watch` log over training steps
(:func:`training_figure`). The ``doctor`` experiment, ``normlab doctor``, its HTML report and the
lab's watch page all show a diagnosis through these; like every figure description they hold
data only, and :mod:`normlab.plots` or the lab's renderer draws them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

from normlab import figures as fig
from normlab.doctor.constants import EXPLODING, GRAD_EXPLODING, GRAD_VANISHING, VANISHING
from normlab.doctor.expect import AMPLIFICATION, STREAM_GROWTH, Stream
from normlab.doctor.remedies import Advice, checked, named
from normlab.doctor.results import Diagnosis, LayerDiagnosis
from normlab.doctor.running import module_path
from normlab.figures import Table


def _cell(x: float | None, digits: int = 3) -> str:
    return f"{x:.{digits}g}" if x is not None and math.isfinite(x) else "-"  # None: from JSON


def _frac(x: float | None) -> str:
    return f"{x:.0%}" if x is not None and math.isfinite(x) else "-"


def diagnosis_tables(d: Diagnosis, title: str, advice: list[Advice] | None = None) -> list[Table]:
    """The per-layer table and the verdict with its suggestions, as the CLI and pages show them;
    with ``advice`` (:func:`normlab.doctor.advise`), the suggestions that stand after the
    training checks (:func:`normlab.checked`) and a table of every remedy tried."""
    rows = [
        (
            module_path(layer.name),
            layer.kind,
            _cell(layer.act_mean),
            _cell(layer.act_std),
            _frac(layer.dead_frac),
            _frac(layer.saturated_frac),
            _cell(layer.grad_std),
            _cell(layer.grad_ratio),
            ", ".join(layer.labels),
        )
        for layer in d.layers
    ]
    columns = (
        "layer",
        "kind",
        "act mean",
        "act std",
        "dead",
        "saturated",
        "grad std",
        "grad ratio",
        "labels",
    )
    note = f"input {tuple(d.input_shape)}, std {_cell(d.input_std)}; {d.steps} step(s)"
    suggestions = d.suggestions if advice is None else _checked(d.suggestions, advice)
    return [
        Table(title, columns, rows, notes=(note, *d.notes)),
        Table(
            "Verdict: " + d.verdict,
            ("suggestion",),
            [(s,) for s in suggestions],
        ),
    ] + ([] if not advice else [advice_table(advice)])


def _checked(suggestions: list[str], advice: list[Advice]) -> list[str]:
    """The suggestions that stand after the checks, then each cure that none of them names."""
    kept = checked(suggestions, advice)
    cited = {name for s in kept for name in named(s)}
    return kept + [
        f"{a.words} (the {a.remedy} remedy: {math.exp(a.trial.gain):.3g}x lower loss in training)"
        for a in advice
        if a.cured and a.remedy not in cited
    ]


def advice_table(advice: list[Advice]) -> Table:
    """Every remedy tried: what it changed, the final loss per seed both ways, the verdict."""
    t = advice[0].trial
    rows = [
        (
            a.remedy,
            a.words,
            ", ".join(_cell(x) for x in a.trial.before),
            ", ".join(_cell(x) for x in a.trial.after),
            ", ".join(a.after) or "healthy",
            "cure" if a.cured else "not a cure",
        )
        for a in advice
    ]
    return Table(
        f"Advice checked in training ({t.steps} Adam steps on a proxy task, {len(t.seeds)} seeds)",
        ("remedy", "what it changes", "loss as given", "loss with it", "re-diagnosis", "verdict"),
        rows,
        notes=tuple(f"{a.remedy}: {a.trial.verdict(f'the {a.remedy} remedy')}" for a in advice),
    )


LABEL_COLORS = {
    "ok": "#2e7d32",
    "non-finite": "#ad1457",
    "vanishing": "#1565c0",
    "exploding": "#c62828",
    "dead": "#424242",
    "saturated": "#ef6c00",
    "symmetric": "#6a1b9a",
}
"""The colour of each label's badge, and of its band or bar in the figure."""

FLOOR = 1e-38  # a collapsed std (0 in float32) still shows on the log axes
MAX_LAYER_TICKS = 30  # more layer names than this crowd the x axis: name every k-th


def _per_layer(layers: list[LayerDiagnosis], attr: str) -> list[float | None]:
    """One attribute per layer; not finite -> ``None``, a gap."""
    values = [getattr(layer, attr) for layer in layers]
    return [float(v) if v is not None and math.isfinite(v) else None for v in values]


def _log_panel(
    runs: list[tuple[str, Diagnosis]],
    attr: str,
    y: str,
    title: str,
    bounds: tuple[float, float] | None = None,
    join: bool = False,
) -> fig.Panel:
    """One statistic per layer on a log axis, a curve per run, shaded below and above
    ``bounds`` (low, high). A missing value is a gap, or with ``join`` left out (only weight
    layers have a gradient ratio: their points are joined)."""
    series = []
    for k, (name, d) in enumerate(runs):
        values = fig.floored(_per_layer(d.layers, attr), FLOOR)
        kept = [(float(i), v) for i, v in enumerate(values) if v is not None or not join]
        series.append(
            fig.Series(
                name,
                [i for i, _ in kept],
                [v for _, v in kept],
                kind="line+markers",
                dash="dash" if k else "solid",
                marker="square" if k else "circle",
                marker_size=3.0,
            )
        )
    panel = fig.Panel(_layer_axis(runs[0][1]), fig.Axis(y, scale="log"), series, title)
    if bounds is None:
        return panel
    low, high = bounds
    return dataclasses.replace(
        panel,
        lines=(fig.Line(low), fig.Line(high)),
        bands=(
            fig.Band(-math.inf, low, color=LABEL_COLORS["vanishing"], opacity=0.08),
            fig.Band(high, math.inf, color=LABEL_COLORS["exploding"], opacity=0.08),
        ),
    )


def _layer_axis(d: Diagnosis) -> fig.Axis:
    names = [module_path(layer.name) for layer in d.layers]
    every = math.ceil(len(names) / MAX_LAYER_TICKS) or 1
    return fig.Axis(
        "layer (forward order)",
        ticks=tuple(float(i) for i in range(0, len(names), every)),
        tick_labels=tuple(names[::every]),
    )


def _fraction_panel(runs: list[tuple[str, Diagnosis]]) -> fig.Panel:
    """Dead and saturated fractions per layer, side by side; the fixed model's bars hollow."""
    series = []
    for k, (name, d) in enumerate(runs):
        x = [float(i) for i in range(len(d.layers))]
        for attr, what in (("dead_frac", "dead"), ("saturated_frac", "saturated")):
            values = [
                None if v is None else min(max(v, 0.0), 1.0) for v in _per_layer(d.layers, attr)
            ]
            series.append(
                fig.Series(
                    f"{what} ({name})",
                    x,
                    values,
                    kind="bars",
                    color=LABEL_COLORS[what],
                    hollow=bool(k),
                )
            )
    return fig.Panel(
        _layer_axis(runs[0][1]),
        fig.Axis("fraction", limits=(0.0, 1.0)),
        series,
        title="Dead units and saturated outputs",
    )


def diagnosis_figure(
    diagnosis: Diagnosis,
    after: Diagnosis | None = None,
    label: str = "fixed",
    updates: dict[str, float] | None = None,
) -> fig.Figure:
    """Panels over the layers, measured beside predicted: activation std over its anchor's,
    each weight layer's RMS gain and the variance argument's prediction, the residual stream
    against :func:`normlab.theory.residual_stream` (when the model has one), the weights'
    gradient ratio, gradient std, the update:data ratio of a watched training step (with
    ``updates``, by layer name: Karpathy's 1e-3 guide drawn), dead/saturated fractions;
    ``after`` (a fixed model) drawn beside, dashed."""
    runs = [("as given", diagnosis)] + ([(label, after)] if after is not None else [])
    shaded = "(shaded: vanishing below, exploding above)"
    stream = [] if diagnosis.stream is None else [_stream_panel(diagnosis, diagnosis.stream)]
    update = [] if not updates else [_update_panel(diagnosis, updates)]
    panels = [
        _log_panel(
            runs,
            "scale",
            "activation std / its anchor's",
            f"Activation scale against its anchor (the input, a norm, an embedding) {shaded}",
            (VANISHING, EXPLODING),
        ),
        _gain_panel(diagnosis),
        *stream,
        _log_panel(
            runs,
            "grad_ratio",
            "gradient ratio ρ",
            "Each weight layer's |dL/dW| / |W| over its reference's (shaded: vanishing "
            "below, exploding above, along a depth trend)",
            (GRAD_VANISHING, GRAD_EXPLODING),
            join=True,
        ),
        *update,
        _log_panel(
            runs,
            "grad_std",
            "gradient std",
            "Gradient of the loss w.r.t. each layer's output",
        ),
        _fraction_panel(runs),
    ]
    return fig.Figure("", panels, columns=1, height=2.75, shared_x=True)


def _update_panel(d: Diagnosis, updates: dict[str, float]) -> fig.Panel:
    """Each weight layer's update:data ratio |dW| / |W| of one training step, over depth, with
    Karpathy's 1e-3 guide: far under it a layer barely learns, far over it it churns."""
    found = [(i, updates[la.name]) for i, la in enumerate(d.layers) if la.name in updates]
    y = fig.floored([v if math.isfinite(v) else None for _, v in found], UPDATE_FLOOR)
    return fig.Panel(
        _layer_axis(d),
        fig.Axis("|ΔW| / |W| per step", scale="log"),
        [fig.Series("measured", [float(i) for i, _ in found], y, kind="line+markers")],
        "Update:data ratio of the weight layers at this step",
        lines=(fig.Line(UPDATE_GUIDE, label="1e-3, Karpathy's guide"),),
    )


def _gain_panel(d: Diagnosis) -> fig.Panel:
    """Each weight layer's RMS gain with its activation, measured and as the variance argument
    predicts from its weights; 1 keeps the scale."""
    weighted = [(i, la) for i, la in enumerate(d.layers) if math.isfinite(la.predicted_gain)]
    x = [float(i) for i, _ in weighted]
    series = [
        fig.Series("measured", x, [la.gain for _, la in weighted], kind="markers"),
        fig.Series(
            "predicted (fan_in Var[w] E[phi(z)^2])",
            x,
            [la.predicted_gain for _, la in weighted],
            kind="markers",
            marker="square",
            hollow=True,
        ),
    ]
    return fig.Panel(
        _layer_axis(d),
        fig.Axis("RMS gain per weight layer", scale="log"),
        series,
        "Each weight layer's gain: measured and predicted from its weights",
        lines=(fig.Line(1.0, label="scale-preserving"),),
    )


def _stream_panel(d: Diagnosis, stream: Stream) -> fig.Panel:
    """The residual stream at each layer reading a sum: pre-LN, its std growth measured and
    predicted (theory.residual_stream with the first adds' branch variance), with the bound;
    post-LN, the running amplification and its bound."""
    index = {la.name: float(i) for i, la in enumerate(d.layers)}
    x = [index.get(r, float(len(d.layers))) for r in stream.readers]  # the output: after all
    if stream.placement == "pre":
        series = [
            fig.Series("measured growth", x, stream.growth, kind="line+markers"),
            fig.Series("predicted (theory)", x, stream.predicted, kind="line", dash="dash"),
        ]
        bound, what = STREAM_GROWTH, "stream std / after the first add"
    else:
        running = list(itertools.accumulate(s if math.isfinite(s) else 0.0 for s in stream.shares))
        series = [fig.Series("amplification", x, running, kind="line+markers")]
        bound, what = AMPLIFICATION, "sum of branch shares (Liu et al. 2020)"
    title = f"Residual stream ({stream.placement}-LN) over depth"
    if stream.placement == "pre" and not stream.raw_end:  # its growth is the design: no bound
        return fig.Panel(
            _layer_axis(d), fig.Axis(what, scale="log"), series, f"{title}, into a final norm"
        )
    return fig.Panel(
        _layer_axis(d),
        fig.Axis(what, scale="log"),
        series,
        title,
        lines=(fig.Line(bound, label="bound"),),
        bands=(fig.Band(bound, math.inf, color=LABEL_COLORS["exploding"], opacity=0.08),),
    )


MAX_WATCHED = 12  # layers drawn over training: the weight layers, every k-th when more
UPDATE_GUIDE = 1e-3  # Karpathy's update:data ratio of a healthy learning rate (normlab.watching)
UPDATE_FLOOR = 1e-12  # an update of 0 (a layer the optimizer skips) shows at the bottom


def training_figure(records: list[dict[str, Any]]) -> fig.Figure:
    """A :func:`normlab.watch` log over training steps: each weight layer's activation scale,
    gradient ratio and update:data ratio (log axes, the doctor's bounds shaded, the 1e-3 guide
    line drawn; no update panel for a log without them), and the number of layers with each
    problem label."""
    steps = [float(r["step"]) for r in records]
    names = [la["name"] for la in records[-1]["layers"] if la.get("grad_ratio") is not None]
    names = names[:: math.ceil(len(names) / MAX_WATCHED) or 1]

    def over(key: str, floor: float = FLOOR) -> list[fig.Series]:
        series = []
        for name in names:
            values = [
                next((la.get(key) for la in r["layers"] if la["name"] == name), None)
                for r in records
            ]
            y = fig.floored([None if v is None else float(v) for v in values], floor)
            series.append(fig.Series(module_path(name), steps, y, kind="line"))
        return series

    step_axis = fig.Axis("training step")
    counts = [
        fig.Series(
            label,
            steps,
            [float(sum(label in la["labels"] for la in r["layers"])) for r in records],
            kind="line+markers",
            color=LABEL_COLORS[label],
        )
        for label in ("non-finite", "vanishing", "exploding", "dead", "saturated", "symmetric")
    ]
    shade = (
        fig.Band(-math.inf, VANISHING, color=LABEL_COLORS["vanishing"], opacity=0.08),
        fig.Band(EXPLODING, math.inf, color=LABEL_COLORS["exploding"], opacity=0.08),
    )
    panels = [
        fig.Panel(step_axis, fig.Axis("activation std / input std", scale="log"), over("scale"),
                  "Activation scale of the weight layers", bands=shade),
        fig.Panel(step_axis, fig.Axis("gradient ratio ρ", scale="log"), over("grad_ratio"),
                  "Gradient ratio of the weight layers"),
        fig.Panel(step_axis, fig.Axis("layers"), counts, "Layers with each label"),
    ]  # fmt: skip
    updates = over("update_ratio", UPDATE_FLOOR)
    if any(v is not None for s in updates for v in s.y):  # a log written before: no panel
        guide = fig.Line(UPDATE_GUIDE, label="1e-3, Karpathy's guide")
        panels.insert(2, fig.Panel(
            step_axis, fig.Axis("|ΔW| / |W| per step", scale="log"), updates,
            "Update:data ratio of the weight layers", lines=(guide,),
        ))  # fmt: skip
    return fig.Figure("Over training", panels, columns=1, height=2.75, shared_x=True)
