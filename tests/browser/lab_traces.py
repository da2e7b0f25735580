"""A widget seen from the test: what it must draw for a result, read off the result's own
figure descriptions, and the page-side helpers that wait for it and read what it drew.

The lab's renderer (``render.js``) knows no experiment: every series of every figure becomes one
plotly trace, in order, named as the series, with the series' x and y. A histogram is drawn as
bars at its bin centres (nothing when its edges cannot place them); a heatmap carries its z.
Tables are shown as given: title, columns, rows of formatted cells, notes.
"""

from __future__ import annotations

import math
from typing import Any

from labpage import api

Trace = dict[str, Any]

TRACES = """(plot) => [...plot.querySelectorAll('.nl-figure-plot')].map((gd) =>
  (gd.data || []).map((t) => ({ name: t.name, x: t.x ?? null, y: t.y ?? null, z: t.z ?? null })))"""
"""JS: per figure drawn in a widget's ``.nl-plot``, its traces' name, x, y and z."""

TABLES = """(box) => [...box.querySelectorAll('.nl-table-block')].map((b) => ({
  title: b.querySelector('caption')?.textContent ?? '',
  columns: [...b.querySelectorAll('thead th')].map((c) => c.textContent),
  rows: [...b.querySelectorAll('tbody tr')].map((r) => [...r.children].map((c) => c.textContent)),
  notes: [...b.querySelectorAll('.nl-table-note')].map((n) => n.textContent),
}))"""
"""JS: the tables shown in a widget's ``.nl-table``."""


def _histogram(s: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    edges, counts = s.get("edges") or [], s["y"]
    usable = len(edges) == len(counts) + 1 and all(
        isinstance(e, int | float) and math.isfinite(e) for e in edges
    )
    if not usable:
        return [], []
    return [(edges[i] + edges[i + 1]) / 2 for i in range(len(counts))], counts


def expected_traces(result: dict[str, Any]) -> list[list[Trace]]:
    """Per figure of ``result``, the traces its series must become."""
    out = []
    for figure in result["figures"]:
        traces = []
        for panel in figure["panels"]:
            for s in panel["series"]:
                x, y = _histogram(s) if s["kind"] == "histogram" else (s["x"], s["y"])
                z = s.get("z") if s["kind"] == "heatmap" else None
                traces.append({"name": s["name"], "x": x, "y": y, "z": z})
        out.append(traces)
    return out


def expected_tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The tables of ``result`` as the page must show them."""
    return [
        {
            "title": t.get("title") or "",
            "columns": list(t["columns"]),
            "rows": [list(r) for r in t["rows"]],
            "notes": list(t.get("notes") or []),
        }
        for t in result["tables"]
    ]


def unescaped(traces: list[list[Trace]]) -> list[list[Trace]]:
    """Drawn traces with their names as the series wrote them (plotly's texts are escaped)."""
    import html

    return [[{**t, "name": html.unescape(t["name"])} for t in fig] for fig in traces]


# -- a widget seen from the test ---------------------------------------------------------

SETTLED = """([id, error]) => {
  const w = document.querySelector(`.nl-widget[data-widget="${id}"]`);
  if (!w || !w.nlWidget) return false;
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  if (error) {
    return w.dataset.state === "error" && !!w.nlError && same(w.nlError.params, w.nlParams);
  }
  return w.dataset.state === "ready" && same(w.nlLastParams, w.nlParams);
}"""

ALL_SETTLED = """() => [...document.querySelectorAll(".nl-widget")].every(
  (w) => w.nlWidget && w.dataset.state !== "loading")"""

SNAPSHOT = f"""(id) => {{
  const w = document.querySelector(`.nl-widget[data-widget="${{id}}"]`);
  return {{
    experiment: w.dataset.experiment,
    state: w.dataset.state,
    params: w.nlParams,
    lastParams: w.nlLastParams,
    result: w.nlLastResult,
    error: w.nlError,
    errorText: w.querySelector(".nl-error").textContent,
    traces: ({TRACES})(w.querySelector(".nl-plot")),
    titles: [...w.querySelectorAll(".nl-figure-title")].map((t) => t.textContent),
    tables: ({TABLES})(w.querySelector(".nl-table")),
    controls: [...w.querySelectorAll("input[data-param], select[data-param]")].map((c) =>
      [c.dataset.param, c.dataset.index ?? null, c.type === "checkbox" ? c.checked : c.value]),
  }};
}}"""


def widget_ids(page: Any) -> list[str]:
    ids: list[str] = page.eval_on_selector_all(".nl-widget", "ws => ws.map(w => w.dataset.widget)")
    return ids


def snapshot(page: Any, wid: str) -> dict[str, Any]:
    snap: dict[str, Any] = page.evaluate(SNAPSHOT, wid)
    return snap


def settle(page: Any, wid: str, error: bool = False) -> dict[str, Any]:
    page.wait_for_function(SETTLED, arg=[wid, error])
    return snapshot(page, wid)


def check_drawing(snap: dict[str, Any]) -> None:
    """The widget draws its result's figures (every series one trace) and tables as given."""
    result, name = snap["result"], snap["experiment"]
    assert result["figures"], f"{name}: the result describes no figure"
    assert snap["titles"] == [f["title"] for f in result["figures"]], f"{name}: figure titles"
    drawn, expected = unescaped(snap["traces"]), expected_traces(result)
    assert len(drawn) == len(expected), f"{name}: {len(drawn)} plots for {len(expected)} figures"
    for i, (got, want) in enumerate(zip(drawn, expected, strict=True)):
        assert [t["name"] for t in got] == [t["name"] for t in want], f"{name}: figure {i} traces"
        for g, w in zip(got, want, strict=True):
            assert g == w, f"{name}: figure {i}, trace {w['name']!r} differs from its series"
    assert snap["tables"] == expected_tables(result), f"{name}: tables differ from the result's"


def check_plot(base: str, snap: dict[str, Any]) -> None:
    """The widget draws exactly what the API answers for the parameters it shows."""
    status, answer = api(base, snap["experiment"], snap["lastParams"])
    assert status == 200, answer
    assert snap["result"] == answer
    check_drawing(snap)


CODE_READY = """(id) => {
  const w = document.querySelector(`.nl-widget[data-widget="${id}"]`);
  const panel = w.querySelector(".nl-code-panel");
  return !!panel && panel.dataset.state === "ready"
    && JSON.stringify(w.nlCodeParams) === JSON.stringify(w.nlParams);
}"""

SHOWN = """(id) => {
  const w = document.querySelector(`.nl-widget[data-widget="${id}"]`);
  const link = (sel) => w.querySelector(sel).getAttribute("href");
  return {
    params: w.nlCodeParams,
    code: w.nlCode,
    text: w.querySelector(".nl-code-box").textContent,
    playground: link(".nl-open-playground"),
    notebook: link(".nl-download-notebook"),
    download: w.querySelector(".nl-download-notebook").hasAttribute("download"),
  };
}"""


def show_code(page: Any, wid: str) -> dict[str, Any]:
    """Press "Show the code" (if it is not shown) and wait for the code of the settings."""
    toggle = page.locator(f'.nl-widget[data-widget="{wid}"] .nl-code-toggle')
    if toggle.get_attribute("aria-expanded") != "true":
        toggle.click()
    page.wait_for_function(CODE_READY, arg=wid)
    shown: dict[str, Any] = page.evaluate(SHOWN, wid)
    return shown


def open_lesson(page: Any, server: str, slug: str, query: str = "") -> list[str]:
    page.goto(f"{server}/lessons/{slug}{query}", wait_until="load")
    page.wait_for_function(ALL_SETTLED)
    return widget_ids(page)
