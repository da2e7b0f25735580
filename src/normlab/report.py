"""A self-contained HTML report of a :class:`normlab.doctor.Diagnosis` (``normlab doctor --html``).

One file, nothing fetched: the styles are inline and the figure is a base64 PNG that
:func:`normlab.plots.draw` renders from :func:`diagnosis_figure`'s description. The figure only
reads the diagnosis: activation scale, the weights' gradient ratio and gradient std per layer on
log axes, and the dead and saturated fractions; with a fix, the re-initialized model is drawn
beside the model as given.

>>> import torch
>>> from normlab.doctor import diagnose
>>> d = diagnose(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()), torch.randn(16, 4))
>>> page = html_report(d, title="m.py:make")
>>> "data:image/png;base64," in page and "://" not in page
True
"""

from __future__ import annotations

import base64
import dataclasses
import html
import io
import math
from pathlib import Path
from typing import Any

from normlab import figures, plots
from normlab.doctor import Diagnosis, FixReport, LayerDiagnosis, Trial, module_path
from normlab.doctor.view import (
    LABEL_COLORS,
    diagnosis_figure,
    diagnosis_tables,
    training_figure,
)
from normlab.figures import Table

UPDATE_NOTE = (
    "update: |ΔW| / |W|, the optimizer's step before this one relative to the weights "
    "(about 1e-3 is healthy, Karpathy's guide; far below, the layer barely learns)"
)


def _png(figure: figures.Figure) -> str:
    buf = io.BytesIO()
    plots.draw(figure).savefig(buf, format="png", dpi=96)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _num(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "-"


FOLD = 100
"""A table of more layers than this shows the flagged ones; the rest are one click away."""


def _table(d: Diagnosis) -> str:
    return _layer_table(d.layers, d)


def _layer_table(layers: list[LayerDiagnosis], d: Diagnosis | None = None) -> str:
    """The per-layer table the CLI prints, its labels as coloured badges with the rule that
    gave each (a long table folded to its flagged layers)."""
    if d is None:
        d = Diagnosis(layers, "", [], [], [], math.nan, 0)
    table = diagnosis_tables(d, "")[0]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in table.columns) + "<th>why</th>"
    flagged: list[str] = []
    rest: list[str] = []
    for layer, row in zip(d.layers, table.rows, strict=True):
        labels = " ".join(
            f'<span class="label" style="background:{LABEL_COLORS.get(lab, "#777")}">'
            f"{html.escape(lab)}</span>"
            for lab in layer.labels
        )
        cells = "".join(f"<td>{html.escape(c)}</td>" for c in row[:-1])  # the last: labels
        why = html.escape("; ".join(layer.criteria()))
        flag = layer.labels != ["ok"]
        style = ' class="flagged"' if flag else ""
        (flagged if flag or len(d.layers) <= FOLD else rest).append(
            f'<tr{style}>{cells}<td>{labels}</td><td class="why">{why}</td></tr>'
        )
    out = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(flagged)}</tbody></table>"
    if rest:
        out += (
            f"<details><summary>{len(rest)} more layers, all ok</summary><table><thead>"
            f"<tr>{head}</tr></thead><tbody>{''.join(rest)}</tbody></table></details>"
        )
    return out


def _section(heading: str, d: Diagnosis) -> str:
    items = "".join(f"<li>{html.escape(s)}</li>" for s in d.suggestions)
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in d.notes)
    shape = html.escape(str(tuple(d.input_shape)))
    trend = ""
    if d.trend is not None:
        t = d.trend
        trend = (
            f"<p>Depth trend of the gradient ratio: {t.factor:.3g}x per block toward the input "
            f"({t.factor**2:.3g}x squared) over {t.blocks} blocks, R<sup>2</sup> {t.r2:.2f}"
            f"{' (sustained: labelled)' if t.sustained else ''}.</p>"
        )
    return (
        f"<h2>{html.escape(heading)}</h2>"
        f'<p class="verdict"><b>Verdict:</b> {html.escape(d.verdict)}</p>'
        f"<p>Input {shape}, std {_num(d.input_std)}; {d.steps} step(s).</p>"
        f"{f'<ul class=notes>{notes}</ul>' if notes else ''}{trend}"
        f"{_table(d)}<h3>Suggestions</h3><ul>{items}</ul>"
    )


def _fix_section(fix: FixReport, trial: Trial | None) -> str:
    """What the fix left alone, and what the training comparison measured."""
    left = "".join(f"<li>{html.escape(n)}: {html.escape(why)}</li>" for n, why in fix.skipped)
    out = f"<h3>Left as it was</h3><ul>{left}</ul>" if left else ""
    if trial is not None:
        out += f'<p class="verdict"><b>Training check:</b> {html.escape(trial.words())}</p>'
    return out


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.2em 0.6em; text-align: right; }
th:first-child, td:first-child, td:nth-child(2) { text-align: left; font-family: monospace; }
.label { color: #fff; border-radius: 0.3em; padding: 0 0.35em; margin-right: 0.2em; }
.verdict { font-size: 1.05em; }
tr.flagged td { background: #fff6f0; }
td.why { text-align: left; font-size: 0.9em; color: #555; }
img { max-width: 100%; }
"""


def html_report(
    diagnosis: Diagnosis,
    *,
    title: str,
    after: Diagnosis | None = None,
    fix: FixReport | None = None,
    trial: Trial | None = None,
) -> str:
    """The whole report as one HTML document (the model as given, then after ``fix`` if any,
    with what it left alone and the training comparison)."""
    label = f"after --fix {fix.method}" if fix is not None else "fixed"
    png = _png(diagnosis_figure(diagnosis, after, label))
    body = [f"<h1>normlab doctor: {html.escape(title)}</h1>"]
    body.append(f'<img alt="per-layer statistics" src="data:image/png;base64,{png}">')
    body.append(_section("The model as given", diagnosis))
    if after is not None:
        body.append(_section(f"The model {label}", after))
    if fix is not None:
        body.append(_fix_section(fix, trial))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>normlab doctor: {html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def _fields(layer: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """A logged layer's fields as :class:`LayerDiagnosis` takes them (``None`` -> nan)."""
    return {k: math.nan if v is None else v for k, v in layer.items() if k in names}


def log_diagnosis(record: dict[str, Any]) -> Diagnosis:
    """A watch record as a :class:`Diagnosis` (no verdict or suggestions: a record has none)."""
    fields = {f.name for f in dataclasses.fields(LayerDiagnosis)}
    layers = [LayerDiagnosis(**_fields(la, fields)) for la in record["layers"]]
    problems = list(record["problems"])
    verdict = f"problems at step {record['step']}: {', '.join(problems) or 'none'}"
    return Diagnosis(layers, verdict, problems, [], [], record["input_std"], 1)


def _updates(record: dict[str, Any]) -> list[tuple[str, float]]:
    """The record's weight layers with a finite update:data ratio, ``(name, ratio)``."""
    out = []
    for la in record["layers"]:
        value = la.get("update_ratio")  # a log written before has none
        if isinstance(value, int | float) and math.isfinite(value):
            out.append((la["name"], float(value)))
    return out


def log_tables(record: dict[str, Any], title: str) -> list[Table]:
    """A watch record's tables as :func:`~normlab.doctor.view.diagnosis_tables` makes
    them, each weight layer's update:data ratio in a column before the labels (none for a
    record without: the first, or one written before)."""
    tables = diagnosis_tables(log_diagnosis(record), title)
    if not _updates(record):
        return tables
    table, at = tables[0], tables[0].columns.index("labels")
    cells = []
    for la in record["layers"]:
        value = la.get("update_ratio")
        cells.append(f"{value:.3g}" if isinstance(value, int | float) else "-")
    rows = [(*r[:at], c, *r[at:]) for r, c in zip(table.rows, cells, strict=True)]
    columns = (*table.columns[:at], "update", *table.columns[at:])
    with_updates = dataclasses.replace(
        table, columns=columns, rows=rows, notes=(*table.notes, UPDATE_NOTE)
    )
    return [with_updates, *tables[1:]]


def update_summary(record: dict[str, Any]) -> str:
    """One sentence on the record's update:data ratios: their median and range; ``""`` for
    a record without."""
    found = sorted(_updates(record), key=lambda nv: nv[1])
    if not found:
        return ""
    median = found[len(found) // 2][1]
    (low, lv), (high, hv) = found[0], found[-1]
    return (
        f"Update:data ratio at step {record['step']}: median {median:.2g} over {len(found)} "
        f"weight layers, from {lv:.2g} ({module_path(low)}) to {hv:.2g} ({module_path(high)}); "
        "about 1e-3 is healthy (Karpathy's guide)."
    )


def log_report(records: list[dict[str, Any]], *, title: str) -> str:
    """A :func:`normlab.watch` log as one HTML document: the curves over training, what changed
    and when, and the last record's table."""
    from normlab.watching import events

    if not records:
        raise ValueError("the log holds no record")
    png = _png(training_figure(records))
    depth = _png(diagnosis_figure(log_diagnosis(records[-1]), updates=dict(_updates(records[-1]))))
    changes = "".join(f"<li>{html.escape(e)}</li>" for e in events(records)) or "<li>none</li>"
    last = records[-1]
    layers = log_diagnosis(last).layers
    shown = f"{len(records)} records, steps {records[0]['step']}..{last['step']}"
    body = [
        f"<h1>normlab doctor: {html.escape(title)}</h1><p>{shown}.</p>",
        f'<img alt="statistics over training" src="data:image/png;base64,{png}">',
        f"<h2>Labels gained and lost</h2><ul>{changes}</ul>",
        f"<h2>Step {last['step']}</h2>",
        f'<img alt="statistics over depth at step {last["step"]}" '
        f'src="data:image/png;base64,{depth}">',
        f"<p>Problems: {html.escape(', '.join(last['problems']) or 'none')}.</p>",
        f"<p>{html.escape(update_summary(last))}</p>" * bool(_updates(last)),
        _layer_table(layers),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>normlab doctor: {html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def write_html(
    path: Path,
    diagnosis: Diagnosis,
    *,
    title: str,
    after: Diagnosis | None = None,
    fix: FixReport | None = None,
    trial: Trial | None = None,
) -> None:
    """Write :func:`html_report` to ``path`` (UTF-8)."""
    page = html_report(diagnosis, title=title, after=after, fix=fix, trial=trial)
    path.write_text(page, encoding="utf-8")
