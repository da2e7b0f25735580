"""Any experiment as a notebook widget: Jupyter, JupyterLab, Colab, VS Code and marimo.

``normlab.widgets.Experiment("bn-lr", lr=2.0)`` in a cell shows the registry's controls for
the experiment and its figures and tables, as the lab's widget does. It is an
`anywidget <https://anywidget.dev>`_ widget, the one format all those front ends run:

- the kernel computes, with the same engine (:func:`normlab.experiments.run_experiment`); an
  experiment that streams sends its partial results as frames while it runs, at most as often
  as the lab's (:data:`normlab.lab.runner.FRAME_S`, :data:`~normlab.lab.runner.FRAME_SHARE`);
- the front end draws with the lab's own scripts (``lab/static``: ``dom.js``, ``controls.js``,
  ``render.js``), read from the package when this module is imported, and plotly.js from the
  plotly wheel, which the kernel sends a page once, when its first widget asks: one renderer
  for both faces, nothing fetched from the network;
- the state is JSON: the parameter declarations (``parameters``, as ``GET /api/experiments``
  gives them), the current parameters (``values``) and the current result as the lab's answer
  (``answer``: the result's data, its figures described as data and its tables).

Moving a control recomputes in the kernel; a newer change stops the run in progress at its next
step (or frame) and the newest settings run next. From Python, ``w.params = {"lr": 1.0}`` does
the same, ``w.result`` is the current :class:`~normlab.experiments.Result` (it waits for the run
in progress), and ``w.show_code()`` is the plain-PyTorch script for the current settings.

A run draws from torch's global random state, as the cells around it do: runs and cells take
turns (:mod:`normlab.turns`), so each prints the numbers it prints alone. A widget's run starts
once the cell that made or changed it has ended, or in that cell when it waits for the result.
"""

from __future__ import annotations

import atexit
import json
import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anywidget
import traitlets
from torch import nn

from normlab import doctor
from normlab.doctor import Input
from normlab.experiments import (
    Result,
    get_experiment,
    params_dict,
    run_experiment,
    script,
)
from normlab.lab import assets
from normlab.lab.runner import FRAME_S, FRAME_SHARE, answer
from normlab.turns import TURNS, share_with_cells

STATIC = Path(__file__).parent / "lab" / "static"
"""The lab's scripts, which the widget's front end is made of."""

SCRIPTS = ("dom.js", "controls.js", "render.js")
"""The lab's scripts the widget runs, in the order the lab's pages load them."""


def plotly_js() -> str:
    """plotly.js as the plotly wheel ships it (the lab serves the same file)."""
    return assets.plotly_js().read_text(encoding="utf-8")


def _once(global_name: str, source: str) -> str:
    """``source``, a classic script that defines ``window.<global_name>``, run once per page
    however many widgets load it (each widget's module brings its own copy)."""
    return f"if (!window.{global_name}) {{\n{source}\n}}\n"


_GLUE = """
let count = 0;

/** plotly.js, once per page: asked of the kernel by the first widget that draws, as a module
 * (blob: URLs are how anywidget loads every widget's module, so they load wherever it does). */
function plotly(model) {
  if (window.Plotly) return Promise.resolve();
  window.nlPlotly ??= new Promise((resolve, reject) => {
    const take = async (msg) => {
      if (!msg || typeof msg.plotly !== "string") return;
      model.off("msg:custom", take);
      const url = URL.createObjectURL(new Blob([msg.plotly], { type: "text/javascript" }));
      try { await import(url); resolve(); } catch (err) { reject(err); }
      finally { URL.revokeObjectURL(url); }
    };
    model.on("msg:custom", take);
    model.send({ want: "plotly" });
  });
  return window.nlPlotly;
}

/** One widget: the registry's controls, the run's status, its figures and tables. */
function render({ model, el }) {
  const h = window.NLDom.el;
  const msg = h("span", { class: "nl-msg" });
  const controlsBox = h("div", { class: "nl-controls" });
  const errorBox = h("div", { class: "nl-error", role: "alert", hidden: true });
  const plot = h("div", { class: "nl-plot" });
  const table = h("div", { class: "nl-table" });
  const node = h("div", { class: "normlab-widget", "data-experiment": model.get("experiment") },
    h("div", { class: "nl-head" }, h("strong", { text: model.get("title") }), msg),
    controlsBox, errorBox, plot, table);
  // JupyterLab's command mode takes the arrow keys from a focused slider or select (to move
  // between cells): a control in focus keeps its keys (Lumino skips shortcuts on this mark)
  node.addEventListener("focusin", (e) => e.target.setAttribute("data-lm-suppress-shortcuts", ""));
  el.append(node);
  const ready = plotly(model);

  const state = structuredClone(model.get("values"));
  let timer = null;
  const send = () => { model.set("values", structuredClone(state)); model.save_changes(); };
  const controls = window.NLControls.build(controlsBox, model.get("parameters"), state, null,
    `nb${++count}`, (name, v, typing) => {
      state[name] = v;
      msg.textContent = "waiting…";
      clearTimeout(timer);
      timer = setTimeout(send, typing ? 400 : 120); // as the lab: once the hand rests
    });

  // a frame that comes while one is drawn waits; only the latest waiting one is drawn
  let drawing = null;
  let waiting = null;
  const onFrame = () => {
    const f = model.get("frame");
    if (!f || !f.figures) return;
    const doing = model.get("trains") ? "training…" : "running…";
    msg.textContent = `${doing} ${f.unit} ${f.done} of ${f.total}`;
    waiting = f;
    drawing ??= (async () => {
      while (waiting) {
        const next = waiting;
        waiting = null;
        try {
          await ready;
          await window.NLRender.draw(plot, next.figures);
        } catch (_) { /* the answer redraws */ }
      }
      drawing = null;
    })();
  };
  const onAnswer = async () => {
    const a = model.get("answer");
    if (!a || !a.figures) return;
    await ready;
    await drawing;
    await window.NLRender.draw(plot, a.figures);
    window.NLRender.tables(table, a.tables || []);
  };
  const onValues = () => {
    const v = model.get("values");
    Object.assign(state, v);
    for (const [name, control] of controls) control.set(v[name]);
  };
  const onStatus = () => {
    const status = model.get("status");
    const error = model.get("error") || {};
    node.dataset.state = status;
    errorBox.hidden = status !== "error";
    errorBox.textContent = status === "error" ? error.message || "the run failed" : "";
    for (const [name, control] of controls) {
      control.mark(status === "error" && error.parameter === name);
    }
    const seed = model.get("values").seed;
    const where = (seed === undefined ? "" : `seed ${seed} · `) + "computed in the kernel";
    if (status === "running") msg.textContent = model.get("trains") ? "training…" : "running…";
    else if (status === "ready") msg.textContent = where;
    else msg.textContent = "";
  };
  const events = [["change:frame", onFrame], ["change:answer", onAnswer],
    ["change:values", onValues], ["change:status", onStatus], ["change:error", onStatus]];
  for (const [name, fn] of events) model.on(name, fn);
  onStatus();
  onAnswer();
  return () => {
    clearTimeout(timer);
    for (const [name, fn] of events) model.off(name, fn);
  };
}

export default { render };
"""

_CSS = """
.normlab-widget { font: 14px/1.4 system-ui, sans-serif; color: #1d2430; }
.normlab-widget .nl-head { display: flex; gap: 1em; align-items: baseline; margin-bottom: 0.5em; }
.normlab-widget .nl-msg { color: #5b6573; }
.normlab-widget .nl-controls { display: flex; flex-wrap: wrap; gap: 0.4em 1.5em; }
.normlab-widget .nl-control { min-width: 14em; }
.normlab-widget .nl-label { display: flex; gap: 0.5em; }
.normlab-widget .nl-name { font-family: monospace; }
.normlab-widget .nl-help { display: block; font-size: 0.85em; color: #5b6573; }
.normlab-widget .nl-invalid { outline: 2px solid #c0392b; }
.normlab-widget .nl-error { color: #c0392b; margin: 0.5em 0; }
.normlab-widget table { border-collapse: collapse; margin: 0.5em 0; }
.normlab-widget th, .normlab-widget td { padding: 0.15em 0.6em; text-align: right; }
.normlab-widget caption { text-align: left; font-weight: 600; }
.normlab-widget .nl-table-note { font-size: 0.85em; color: #5b6573; }
.normlab-widget .nl-figure-title { font-weight: 600; margin: 0.5em 0 0; }
"""


def esm() -> str:
    """The widget's front end: the lab's scripts, then the widget's own glue. plotly.js (4.8 MB)
    is not in it: a page asks a kernel for it once (:meth:`View._on_custom`), so that neither
    each widget's state nor a notebook saved with its widgets' state holds a copy."""
    globals_of = {"dom.js": "NLDom", "controls.js": "NLControls", "render.js": "NLRender"}
    parts = []
    for name in SCRIPTS:
        parts.append(_once(globals_of[name], (STATIC / name).read_text(encoding="utf-8")))
    return "\n".join([*parts, _GLUE])


class Superseded(Exception):
    """A run whose settings a newer change replaced: it stops at its next step or frame."""


class Script(str):
    """A rendered script: shown as itself (not as a quoted string) when a cell ends with it."""

    def __repr__(self) -> str:
        return str(self)

    def _repr_markdown_(self) -> str:
        return f"```python\n{self}```"


def _plain_json(value: Any) -> Any:
    """``value`` as JSON types only (tuples as lists), as the front end will see it."""
    return json.loads(json.dumps(value, allow_nan=False))


class View(anywidget.AnyWidget):
    """What every normlab widget is: a title, controls made from parameter declarations (none
    for some), and an answer as the lab draws it (figures described as data, tables)."""

    _esm = esm()
    _css = _CSS

    experiment = traitlets.Unicode().tag(sync=True)
    title = traitlets.Unicode().tag(sync=True)
    trains = traitlets.Bool(False).tag(sync=True)
    parameters: traitlets.List[dict[str, Any]] = traitlets.List().tag(sync=True)
    values = traitlets.Dict().tag(sync=True)
    answer = traitlets.Dict().tag(sync=True)
    frame = traitlets.Dict().tag(sync=True)
    status = traitlets.Unicode("running").tag(sync=True)
    error = traitlets.Dict().tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.on_msg(self._on_custom)

    def _on_custom(self, widget: object, content: Any, buffers: object) -> None:
        """The front end's one request: plotly.js, which a page asks for once."""
        if content == {"want": "plotly"}:
            self.send({"plotly": plotly_js()})


class Experiment(View):
    """A registered experiment as a notebook widget: its controls, figures and tables, live.

    Args:
        name: the experiment's registered name (``normlab list``).
        **params: its parameters; those not given take their declared defaults.

    The parameters are validated as every face validates them: an unknown name or a bad value
    raises the registry's ``ValueError``/``TypeError``, naming the parameter and what it
    allows. A bad value from a control is shown in the widget instead, beside the control.

    Example::

        w = normlab.widgets.Experiment("bn-lr", lr=2.0)
        w                        # the widget, in a cell
        w.params = {"lr": 0.5}   # recomputes, as moving the slider does
        w.result.data()          # the run's numbers
        w.show_code()            # the plain-PyTorch script for these settings
    """

    def __init__(self, name: str, **params: Any) -> None:
        spec = get_experiment(name)
        values = _plain_json(params_dict(spec.make_params(params)))
        super().__init__(
            experiment=name,
            title=spec.title,
            trains=spec.trains,
            parameters=[p.schema() for p in spec.parameters],
            values=values,
        )
        self._spec = spec
        self._lock = threading.Lock()
        self._generation = 0
        self._wanted: tuple[int, dict[str, Any]] | None = None
        self._worker: threading.Thread | None = None
        self._idle = threading.Event()
        self._result: Result | None = None
        self._failure: BaseException | None = None
        self._setting = False  # values being set from Python, already validated
        self.observe(self._on_values, names="values")
        _OPEN.add(self)
        share_with_cells()
        self._request(values)

    # -- what a learner reads and sets ---------------------------------------------------------

    @property
    def params(self) -> dict[str, Any]:
        """The current parameters (a copy). Set a dict of some of them to change those and
        recompute: ``w.params = {"lr": 0.5}``."""
        return dict(self.values)

    @params.setter
    def params(self, changes: Mapping[str, Any]) -> None:
        merged = {**self.values, **changes}
        values = _plain_json(params_dict(self._spec.make_params(merged)))  # raises if bad
        self._setting = True
        try:
            self.values = values
        finally:
            self._setting = False
        self._request(values)

    @property
    def result(self) -> Result:
        """The Result of the current parameters, once their run has finished (this waits)."""
        self.wait()
        if self._failure is not None:
            raise RuntimeError(f"the run failed: {self._failure}") from self._failure
        assert self._result is not None  # a finished run without failure set it
        return self._result

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the newest settings' run has finished; False if ``timeout`` passed first.

        In a cell, which holds the turn at torch's random state (:mod:`normlab.turns`), no run
        is in progress: the newest settings run here, now, whatever the ``timeout``."""
        if TURNS.mine():
            self._catch_up()
        return self._idle.wait(timeout)

    def show_code(self) -> Script:
        """The plain-PyTorch script that makes this result for the current settings."""
        return Script(script.render(self._spec, self.values))

    def close(self) -> None:
        """Close the widget: the run in progress stops at its next step, none follows."""
        self.stop()
        super().close()

    def stop(self) -> None:
        """Stop the run in progress at its next step (or frame) and wait for it to end."""
        if "_lock" not in self.__dict__:  # closed by ipywidgets after a refused __init__
            return
        with self._lock:
            self._generation += 1
            self._wanted = None
            worker = self._worker
        # a worker waiting for the turn this thread holds runs nothing more: no need to join
        if worker is not None and worker is not threading.current_thread() and not TURNS.mine():
            worker.join()

    # -- runs ----------------------------------------------------------------------------------

    def _on_values(self, change: dict[str, Any]) -> None:
        """A control moved: validate its settings and run them, or show what is wrong."""
        if self._setting:
            return
        try:
            values = _plain_json(params_dict(self._spec.make_params(change["new"])))
        except (ValueError, TypeError) as exc:
            self.error = {"parameter": getattr(exc, "param", None), "message": str(exc)}
            self.status = "error"
            return
        self._request(values)

    def _request(self, values: dict[str, Any]) -> None:
        """Run ``values`` next; a run in progress stops at its next step or frame."""
        with self._lock:
            self._generation += 1
            self._wanted = (self._generation, values)
            self._idle.clear()
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, daemon=True)
                self._worker.start()
        self.status = "running"

    def _work(self) -> None:
        """The worker thread: run the newest wanted settings until none are left, each in its
        turn at torch's random state (a cell, or another widget's run, may hold it)."""
        while True:
            with TURNS:
                if not self._run_wanted():
                    return

    def _catch_up(self) -> None:
        """Run the wanted settings in this thread, which holds the turn (a cell that waits)."""
        while self._run_wanted(in_worker=False):
            pass

    def _run_wanted(self, in_worker: bool = True) -> bool:
        """Run the newest wanted settings, if any (False when there were none: idle)."""
        with self._lock:
            if self._wanted is None:
                if in_worker:
                    self._worker = None
                self._idle.set()
                return False
            generation, values = self._wanted
            self._wanted = None
        try:
            self._run(generation, values)
        except BaseException:  # a cell interrupted while it ran them: the worker runs them later
            with self._lock:
                if not in_worker and self._wanted is None and generation == self._generation:
                    self._wanted = (generation, values)
            raise
        return True

    def _run(self, generation: int, values: dict[str, Any]) -> None:
        # steps done, of the total, as the run's progress counts them (the frames say it)
        count = [0, self._spec.steps(self._spec.make_params(values)) or 0]

        def progress(done: int, total: int) -> None:
            count[:] = done, total
            if generation != self._generation:  # newer settings are wanted: stop here
                raise Superseded

        live = self._framer(count, progress) if self._spec.streams else None
        try:
            result = run_experiment(self._spec.name, progress=progress, live=live, **values)
        except Superseded:
            return
        except Exception as exc:  # the run's own failure: shown, and raised by .result
            if generation == self._generation:
                self._result, self._failure = None, exc
                self.error = {"parameter": getattr(exc, "param", None), "message": str(exc)}
                self.status = "error"
            return
        if generation != self._generation:
            return
        self._result, self._failure = result, None
        with self.hold_sync():
            self.answer = answer(self._spec, result)
            self.error = {}
            self.status = "ready"

    def _framer(
        self, count: list[int], progress: Callable[[int, int], None]
    ) -> Callable[[Callable[[], Result]], None]:
        """The ``live`` callback: the partial result's figures as ``frame`` (with ``count``'s
        steps done of the total), throttled as the lab's frames (at most every FRAME_S, within
        FRAME_SHARE of the run's time); it stops a superseded run, as ``progress`` does."""
        due = -math.inf

        def live(partial: Callable[[], Result]) -> None:
            nonlocal due
            progress(*count)
            started = time.monotonic()
            if started < due:
                return
            figures = [f.to_dict() for f in partial().figures()]
            unit = self._spec.unit
            self.frame = {"done": count[0], "total": count[1], "unit": unit, "figures": figures}
            due = started + max(FRAME_S, (time.monotonic() - started) / FRAME_SHARE)

        return live


_OPEN: weakref.WeakSet[Experiment] = weakref.WeakSet()
"""The widgets alive: their runs are stopped before the interpreter exits (a thread still
inside torch then would abort the process)."""


@atexit.register
def _stop_all() -> None:
    for w in list(_OPEN):
        w.stop()


def Train(**params: Any) -> Experiment:
    """The training view as a widget: the registered ``training`` experiment."""
    return Experiment("training", **params)


class Doctor(View):
    """The doctor's diagnosis of a model as a widget: its figure and tables, as the lab shows
    them (:func:`normlab.doctor.diagnosis_figure`, :func:`~normlab.doctor.diagnosis_tables`).

    Args:
        model: the network to examine (:func:`normlab.doctor.diagnose` reads its output).
        batch: one input batch, or several (one step each).
        title: the verdict table's title.

    The diagnosis runs once, here; ``.result`` holds the :class:`~normlab.doctor.Diagnosis`.
    """

    def __init__(
        self, model: nn.Module, batch: Input | Sequence[Input], title: str = "your model"
    ) -> None:
        diagnosis = doctor.diagnose(model, batch)
        figure = doctor.diagnosis_figure(diagnosis)
        tables = doctor.diagnosis_tables(diagnosis, title)
        super().__init__(
            experiment="doctor",
            title=f"Diagnosis of {title}",
            answer=_plain_json(
                {
                    **diagnosis.to_dict(),
                    "figures": [figure.to_dict()],
                    "tables": [t.to_dict() for t in tables],
                }
            ),
            status="ready",
        )
        self.result = diagnosis
