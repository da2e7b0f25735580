"""normlab.widgets: an experiment as an anywidget, computed in the kernel by the same engine.

In process (no kernel: ipywidgets' comm is a dummy one): the state is JSON, setting parameters
from Python or from a control recomputes and matches ``run_experiment``, a bad value is the
registry's error, a newer change stops the run in progress, the front end is the lab's own
renderer. In a real kernel (nbclient): a widget of every registered experiment, its sized
parameters at their minima (every experiment runs in milliseconds there; see the registry's
``sized``), round-trips a parameter set from a later cell; and in the same kernel, a widget's
runs and the cells take turns at torch's global random state (:mod:`normlab.turns`).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import nbformat
import pytest
import torch
from nbclient import NotebookClient
from torch import nn

import normlab.widgets as widgets
from normlab import doctor
from normlab.experiments import (
    ParameterError,
    ParameterTypeError,
    Result,
    get_experiment,
    params_dict,
    run_experiment,
    script,
)
from normlab.lab.runner import answer

SMALL = {"depth": 3, "width": 4, "batch": 8}  # drift: three layers, milliseconds


def _state(w: widgets.Experiment) -> dict[str, Any]:
    """What the front end is sent: every synced trait but the module's source."""
    keys = ("experiment", "title", "trains", "parameters", "values", "answer", "frame")
    return {k: getattr(w, k) for k in (*keys, "status", "error")}


def test_setting_params_from_python_recomputes_as_run_experiment_does() -> None:
    w = widgets.Experiment("drift", **SMALL)
    first = w.result
    w.params = {"seed": 7}
    want = run_experiment("drift", **{**SMALL, "seed": 7})
    assert w.result.to_dict() == want.to_dict()
    assert w.result is not first
    assert w.params == want.params
    # the state is plain JSON: the declarations, the values, the lab's answer JSON
    state = _state(w)
    assert json.loads(json.dumps(state, allow_nan=False)) == state
    assert state["parameters"] == [p.schema() for p in get_experiment("drift").parameters]
    assert state["answer"] == json.loads(json.dumps(answer(get_experiment("drift"), want)))
    assert state["status"] == "ready"
    assert w.show_code() == script.render(get_experiment("drift"), w.params)


def test_a_bad_parameter_is_the_registry_s_error_and_changes_nothing() -> None:
    with pytest.raises(ParameterError, match="depth"):
        widgets.Experiment("drift", depth=0)
    with pytest.raises(ValueError, match="experiment 'nope' not found"):
        widgets.Experiment("nope")
    w = widgets.Experiment("drift", **SMALL)
    before = w.params
    with pytest.raises(ParameterTypeError, match="width"):
        w.params = {"width": "wide"}
    assert w.params == before
    assert w.result.params == before


def test_a_control_s_change_recomputes_and_a_bad_one_is_shown_beside_it() -> None:
    w = widgets.Experiment("drift", **SMALL)
    w.wait()
    w.values = {**w.values, "depth": 0}  # as the front end sends a moved control
    assert w.status == "error"
    assert w.error["parameter"] == "depth"
    assert "depth" in w.error["message"]
    w.values = {**w.values, "depth": 2}
    assert w.result.params["depth"] == 2
    assert w.status == "ready"
    assert w.error == {}


def test_a_streamed_run_sends_frames_and_a_newer_change_stops_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outcomes: list[str] = []
    real = widgets.run_experiment

    def recording(*args: Any, **kwargs: Any) -> Result:
        try:
            result = real(*args, **kwargs)
        except widgets.Superseded:
            outcomes.append("superseded")
            raise
        outcomes.append("finished")
        return result

    monkeypatch.setattr(widgets, "run_experiment", recording)
    framed = threading.Event()
    bn_lr = get_experiment("bn-lr")
    longest = {"steps": bn_lr.maxima()["steps"], "hidden_layers": 1, "width": 2}
    w = widgets.Experiment("bn-lr", **longest)
    w.observe(lambda _: framed.set(), names="frame")
    assert framed.wait(60)  # the first frame comes at the first yield
    frame = w.frame
    assert frame["unit"] == "step" and frame["figures"]
    assert frame["total"] == bn_lr.steps(bn_lr.make_params(longest))
    w.params = {"steps": 1}
    assert w.result.params["steps"] == 1
    assert outcomes == ["superseded", "finished"]


def test_the_front_end_is_the_lab_s_renderer_and_plotly_comes_once_from_the_wheel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    esm = widgets.esm()
    for name in widgets.SCRIPTS:
        assert (widgets.STATIC / name).read_text(encoding="utf-8") in esm
    assert "export default" in esm
    plotly = widgets.plotly_js()
    assert plotly[:1000] not in esm  # not in every widget's state: asked for once
    w = widgets.Experiment("drift", **SMALL)
    sent: list[Any] = []
    monkeypatch.setattr(w, "send", sent.append)
    w._handle_custom_msg({"want": "plotly"}, [])  # as ipywidgets hands the front end's message
    assert sent == [{"plotly": plotly}]
    # its run ends within the test: left going in its thread, it would draw from torch's global
    # generator while the next test seeds and draws from it (the doctor's test below once
    # measured another readout under CI's load)
    w.wait()


def test_the_doctor_s_widget_shows_its_figure_and_tables_of_the_model() -> None:
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(1)  # the doctor's readout is drawn from the global generator
    w = widgets.Doctor(net, x, title="a small tanh net")
    torch.manual_seed(1)
    d = doctor.diagnose(net, x)
    assert w.result.verdict == d.verdict
    assert w.answer["figures"] == json.loads(json.dumps([doctor.diagnosis_figure(d).to_dict()]))
    tables = doctor.diagnosis_tables(d, "a small tanh net")
    assert w.answer["tables"] == json.loads(json.dumps([t.to_dict() for t in tables]))
    assert w.parameters == [] and w.status == "ready"
    state = _state(w)
    assert json.loads(json.dumps(state, allow_nan=False)) == state


def test_train_is_the_training_experiment() -> None:
    w = widgets.Train(points=20, depth=1, width=1, steps=1)
    assert w.experiment == "training"
    assert w.result.to_dict() == run_experiment("training", **w.params).to_dict()


SEEDED = """\
import torch
torch.manual_seed(0)
total = 0.0
for _ in range(20_000):  # draws for longer than the widget's run takes (about 0.2 s)
    total += float(torch.randn(8).sum())
print(repr(total))"""
"""A seeded cell, as a lesson's listing is, whose draws last longer than the widget's run."""

VIEW = "application/vnd.jupyter.widget-view+json"
"""The output type of a widget shown in a cell."""

SMALL_BN_LR = {"steps": 150, "hidden_layers": 1, "width": 8}  # a run of about 0.2 s

SAME_AS_RUN = """\
from normlab.experiments import run_experiment
want = run_experiment("bn-lr", **first.params)
print(first.result.params["seed"], first.result.to_dict() == want.to_dict())"""

TAKING_TURNS = [
    f"""\
import normlab.widgets
first = normlab.widgets.Experiment("bn-lr", **{SMALL_BN_LR!r})
first""",
    SEEDED,
    SAME_AS_RUN,
    SEEDED,  # run right after the front end moved the seed's control (see kernel_notebook)
    SAME_AS_RUN,
]
"""A learner's "Run all" of a widget's cell and seeded cells, in a fresh kernel (the first
widget hooks the cells' events in the middle of its own cell), then a control moved by hand
just before a seeded cell runs."""

NOTEBOOK = [
    """\
import json
import normlab.widgets
from normlab.experiments import list_experiments, run_experiment

built = {}
for e in list_experiments():
    cheap = {p.name: int(p.min) for p in e.parameters if p.sized}
    built[e.name] = normlab.widgets.Experiment(e.name, **cheap)
built["drift"]""",
    """\
report = {}
for name, w in built.items():
    sized = [p for p in w._spec.parameters if p.sized]
    change = {"seed": 1} if "seed" in w.params else {sized[0].name: w.params[sized[0].name] + 1}
    w.params = change
    want = run_experiment(name, **w.params)
    report[name] = {
        "changed": all(w.result.params[k] == v for k, v in change.items()),
        "same": w.result.to_dict() == want.to_dict(),
        "answered": w.answer.get("params") == json.loads(json.dumps(want.params)),
    }
print(json.dumps(report))""",
    """\
import torch
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
seen = normlab.widgets.Doctor(net, torch.randn(16, 4))
print(seen.result.verdict == seen.answer["verdict"])
seen""",
]


def _move(client: NotebookClient, model_id: str, values: dict[str, Any]) -> None:
    """Send the kernel what the front end sends when a control moves (ipywidgets' protocol)."""
    state = {"values": values}
    content = {
        "comm_id": model_id,
        "data": {"method": "update", "state": state, "buffer_paths": []},
    }
    client.kc.shell_channel.send(client.kc.session.msg("comm_msg", content))


@pytest.fixture(scope="module")
def kernel_notebook(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """TAKING_TURNS then NOTEBOOK, executed cell by cell in one kernel (nbclient), the seed's
    control of TAKING_TURNS's widget moved from the front end before its second seeded cell."""
    cells = [nbformat.v4.new_code_cell(c) for c in (*TAKING_TURNS, *NOTEBOOK)]
    nb = nbformat.v4.new_notebook(cells=cells)
    path = str(tmp_path_factory.mktemp("kernel"))
    client = NotebookClient(nb, timeout=300, resources={"metadata": {"path": path}})
    moved = {**params_dict(get_experiment("bn-lr").make_params(SMALL_BN_LR)), "seed": 1}
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if index == 3:  # the comm message arrives first: its run starts before the cell
                _move(client, _model_id(nb.cells[0]), json.loads(json.dumps(moved)))
            client.execute_cell(cell, index)
        client.set_widgets_metadata()
    return nb


def _model_id(cell: Any) -> str:
    """The id of the widget a cell shows (its view's output)."""
    views = [o["data"][VIEW] for o in cell.outputs if VIEW in o.get("data", {})]
    assert len(views) == 1, cell.outputs
    model_id: str = views[0]["model_id"]
    return model_id


def _printed(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")


def _alone(source: str) -> str:
    """What ``source`` prints run in this process, alone (torch's random state left as it was)."""
    out: list[str] = []
    with torch.random.fork_rng(devices=[]):
        exec(source, {"print": lambda *a: out.append(" ".join(map(str, a)) + "\n")})
    return "".join(out)


def test_seeded_cells_print_what_they_print_alone_while_widgets_run(kernel_notebook: Any) -> None:
    """A widget's runs in the kernel's thread and the cells take turns at torch's global random
    state, so neither changes the other's numbers: a seeded cell right after the widget's cell,
    and one right after a control moved, print what they print alone, and each run is what
    ``run_experiment`` gives (before :mod:`normlab.turns`, a run that ended during the cell put
    back the random state it had found)."""
    printed = [_printed(c) for c in kernel_notebook.cells[: len(TAKING_TURNS)]]
    alone = _alone(SEEDED)
    assert printed[1:] == [alone, "0 True\n", alone, "1 True\n"]


@pytest.mark.slow
def test_every_experiment_s_widget_round_trips_in_a_kernel(kernel_notebook: Any) -> None:
    nb = kernel_notebook
    # the widgets' state is saved in the notebook, without a copy of plotly.js each
    assert len(nbformat.writes(nb)) < len(widgets.plotly_js())
    cells = nb.cells[len(TAKING_TURNS) :]
    assert _model_id(cells[0])  # a widget is shown (a run's warning may print before it)
    report = json.loads(_printed(cells[1]))
    from normlab.experiments import list_experiments

    assert set(report) == {e.name for e in list_experiments()}
    for name, checks in report.items():
        assert checks == {"changed": True, "same": True, "answered": True}, name
    doctor_cell = cells[2].outputs
    assert "True" in "".join(o.get("text", "") for o in doctor_cell)
    assert any(VIEW in o.get("data", {}) for o in doctor_cell)
