"""A self-contained HTML report of a :class:`normlab.doctor.Diagnosis` (``normlab doctor --html``).

One file, nothing fetched: the styles are inline and the figure is a base64 PNG drawn with
matplotlib's object-oriented API (:func:`normlab.plots.diagnosis_figure`). The figure only reads
the diagnosis: activation std and gradient std per layer on log axes, and the dead and saturated
fractions; with a fix, the re-initialized model is drawn beside the model as given.

>>> import torch
>>> from normlab.doctor import diagnose
>>> d = diagnose(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()), torch.randn(16, 4))
>>> page = html_report(d, title="m.py:make")
>>> "data:image/png;base64," in page and "://" not in page
True
"""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path

from matplotlib.figure import Figure

from normlab.doctor import Diagnosis, FixReport
from normlab.plots import LABEL_COLORS, diagnosis_figure


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _num(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "-"


def _frac(x: float) -> str:
    return f"{x:.0%}" if math.isfinite(x) else "-"


def _table(d: Diagnosis) -> str:
    head = "".join(
        f"<th>{c}</th>"
        for c in (
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
    )
    rows = []
    for layer in d.layers:
        labels = " ".join(
            f'<span class="label" style="background:{LABEL_COLORS.get(lab, "#777")}">'
            f"{html.escape(lab)}</span>"
            for lab in layer.labels
        )
        cells = (
            html.escape(layer.name),
            html.escape(layer.kind),
            _num(layer.act_mean),
            _num(layer.act_std),
            _frac(layer.dead_frac),
            _frac(layer.saturated_frac),
            _num(layer.grad_std),
            _num(layer.grad_ratio),
        )
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + f"<td>{labels}</td></tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _section(heading: str, d: Diagnosis) -> str:
    items = "".join(f"<li>{html.escape(s)}</li>" for s in d.suggestions)
    shape = html.escape(str(tuple(d.input_shape)))
    return (
        f"<h2>{html.escape(heading)}</h2>"
        f'<p class="verdict"><b>Verdict:</b> {html.escape(d.verdict)}</p>'
        f"<p>Input {shape}, std {_num(d.input_std)}; {d.steps} step(s).</p>"
        f"{_table(d)}<h3>Suggestions</h3><ul>{items}</ul>"
    )


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.2em 0.6em; text-align: right; }
th:first-child, td:first-child, td:nth-child(2) { text-align: left; font-family: monospace; }
.label { color: #fff; border-radius: 0.3em; padding: 0 0.35em; margin-right: 0.2em; }
.verdict { font-size: 1.05em; }
img { max-width: 100%; }
"""


def html_report(
    diagnosis: Diagnosis,
    *,
    title: str,
    after: Diagnosis | None = None,
    fix: FixReport | None = None,
) -> str:
    """The whole report as one HTML document (the model as given, then after ``fix`` if any)."""
    label = f"after --fix {fix.method}" if fix is not None else "fixed"
    png = _png(diagnosis_figure(diagnosis, after, label))
    body = [f"<h1>normlab doctor: {html.escape(title)}</h1>"]
    body.append(f'<img alt="per-layer statistics" src="data:image/png;base64,{png}">')
    body.append(_section("The model as given", diagnosis))
    if after is not None:
        body.append(_section(f"The model {label}", after))
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
) -> None:
    """Write :func:`html_report` to ``path`` (UTF-8)."""
    path.write_text(html_report(diagnosis, title=title, after=after, fix=fix), encoding="utf-8")
