"""The training view's figures, made in Python: a session's frames kept in a bounded History
and described as the panels, series, colours and labels the lab draws; the server sends them
with each frame (the layers' at most every ``STATS_S`` while a run plays)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from normlab import figures as fig
from normlab import trainview as tv
from normlab.lab import trainruns
from normlab.trainview.figures import (
    LIMITS,
    MAX_COLUMNS,
    MAX_POINTS,
    History,
    layer_table,
    live_figure,
    stats_figures,
    thin,
)

SMALL = {"depth": 2, "width": 8, "points": 40}


@pytest.fixture(scope="module")
def played() -> tuple[tv.Session, History]:
    """A session with three frames (steps 0, 1, 2) in its history."""
    session = tv.Session(tv.make_setup(SMALL))
    history = History()
    history.add(session.frame())
    for _ in range(2):
        session.step()
        history.add(session.frame())
    return session, history


def _names(figure: fig.Figure) -> list[list[str]]:
    return [[s.name for s in panel.series] for panel in figure.panels]


def test_the_live_figure_is_the_boundary_beside_the_losses(
    played: tuple[tv.Session, History],
) -> None:
    session, history = played
    figure = live_figure(history, session.data())
    boundary, loss = figure.panels
    assert _names(figure) == [["P(class 1)", "train points", "test points"], ["train", "test"]]
    assert boundary.title == "decision boundary at step 2" and loss.title == "loss"
    heat = boundary.series[0]
    assert heat.kind == "heatmap" and heat.zlimits == (0.0, 1.0) and heat.colorscale == "RdBu_r"
    assert heat.z == session.frame()["boundary"]["z"]
    assert boundary.x.limits == tuple(session.extent["x"])
    labels = session.data()["train"]["label"]
    assert boundary.series[1].colors == [fig.RED if c else fig.BLUE for c in labels]
    assert (boundary.series[1].hollow, boundary.series[2].hollow) == (False, True)
    assert [s.color for s in loss.series] == [fig.BLUE, fig.ORANGE] and loss.y.scale == "log"
    assert loss.series[0].x == [0, 1, 2] and loss.series[0].y[0] is None  # no step before 0
    assert loss.series[0].y[1:] == session.losses["train"]
    assert loss.series[1].y == [p["test"] for p in history.loss]
    accuracy = session.frame()["accuracy"]
    assert loss.note == f"accuracy: train {accuracy['train']:.3f}, test {accuracy['test']:.3f}"
    json.dumps(figure.to_dict(), allow_nan=False)  # what the wire carries: strict JSON


def test_the_layers_figures_and_table(played: tuple[tv.Session, History]) -> None:
    session, history = played
    scale, act, grad = stats_figures(history)
    layers = session.frame()["layers"]
    names = [f"{la['name']} {la['kind']}" for la in layers]
    linear = [n for n, la in zip(names, layers, strict=True) if la["kind"] == "Linear"]
    assert _names(scale) == [names, linear] and len(linear) == SMALL["depth"] + 1
    assert [s.color for s in scale.panels[0].series] == [
        fig.PALETTE[i % len(fig.PALETTE)] for i in range(len(layers))
    ]
    band = scale.panels[0].bands[0]
    assert (band.low, band.high) == (LIMITS["vanishing"], LIMITS["exploding"])
    assert scale.panels[0].series[0].x == [0, 1, 2]
    assert scale.panels[0].series[0].y[-1] == layers[0]["scale"]
    for figure in (act, grad):
        assert len(figure.panels) == SMALL["depth"]  # a heat map per hidden block
        heat = figure.panels[0].series[0]
        assert heat.kind == "heatmap" and not heat.colorbar and heat.x == [0, 1, 2]
        assert heat.z is not None and len(heat.z) == tv.HIST_BINS and len(heat.z[0]) == 3
    assert act.panels[0].title.startswith("block 1 (module ")
    table = layer_table(session.frame())
    assert [r[0] for r in table.rows] == [la["name"] for la in layers]
    assert table.columns[-1] == "labels" and table.title == "Every layer at step 2"


def _frame(step: int) -> dict[str, Any]:
    """A frame of one layer and one block (what the history keeps of a frame)."""
    layer = {"name": "0", "kind": "Linear", "scale": 1.0 + step, "grad_ratio": 0.1}
    hist = {"scale": "log10 |value|", "edges": [0.0, 1.0, 2.0], "layers": ["1"]}
    return {
        "step": step,
        "train_loss": 0.5,
        "test_loss": 0.6,
        "layers": [layer],
        "hist": {**hist, "act": [[step, 1]], "grad": [[1, step]]},
    }


def test_the_history_is_bounded_after_many_frames() -> None:
    history = History()
    frames = 3 * MAX_POINTS
    for step in range(frames):
        history.add(_frame(step))
    assert len(history.loss) <= MAX_POINTS and len(history.layers) <= MAX_POINTS
    assert len(history.columns) == MAX_COLUMNS
    assert history.loss[0]["step"] == 0 and history.loss[-1]["step"] == frames - 1  # end to end
    assert [c["step"] for c in history.columns] == list(range(frames - MAX_COLUMNS, frames))
    [scale, ratio] = stats_figures(history)[0].panels
    assert len(ratio.series[0].y) == len(history.layers)
    assert len(scale.series[0].x) == len(history.layers) <= MAX_POINTS
    assert thin(list(range(7)), 6) == [0, 2, 3, 4, 5, 6]  # the older half, every other one


def test_a_reset_clears_the_history() -> None:
    history = History()
    for step in range(5):
        history.add(_frame(step))
    history.add(_frame(0))  # a frame before the last: the run went back
    assert [p["step"] for p in history.loss] == [0] and len(history.columns) == 1
    history.clear()
    assert (history.loss, history.layers, history.columns, history.last) == ([], [], [], None)


def test_replayed_losses_are_drawn_at_the_steps_taken() -> None:
    history = History()
    history.losses({"train": [0.7, 0.6], "test": [0.65, None], "start": 3})
    assert history.loss == [
        {"step": 4, "train": 0.7, "test": 0.65},
        {"step": 5, "train": 0.6, "test": None},
    ]
    history.add({**_frame(5), "train_loss": 0.6})  # the replay's last step: not drawn twice
    assert [p["step"] for p in history.loss] == [4, 5]


async def _here(fn: Callable[..., Any], *args: Any) -> Any:
    """A run's "worker thread" for these tests: this one."""
    return fn(*args)


def _run(**play: Any) -> trainruns.Run:
    run = trainruns.Run({"a": tv.make_setup(SMALL)}, trainruns.Play(**play), _here)
    run.build()  # (what start() runs in a worker thread)
    return run


def test_the_server_sends_each_frame_s_figures() -> None:
    run = _run()
    first = run._frames()["a"]
    assert first["step"] == 0 and first["boundary"] == run.sessions["a"].frame()["boundary"]
    assert first["figures"] == [live_figure(run.histories["a"], run.sessions["a"].data()).to_dict()]
    stats = first["stats"]  # a paused run sends the layers' figures with every frame
    assert stats["step"] == 0 and len(stats["figures"]) == 3
    assert stats["tables"][0]["title"] == "Every layer at step 0"
    run._advance(2)
    assert [p["step"] for p in run.histories["a"].loss] == [0, 2]
    run._reset()
    assert [p["step"] for p in run.histories["a"].loss] == [0]  # the reset forgot the curves


def test_a_playing_run_sends_the_layers_figures_at_most_every_stats_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = _run()
    run.playing = True
    monkeypatch.setattr(trainruns, "STATS_S", float("inf"))
    assert "stats" in run._frames()["a"]  # never sent yet
    assert all("stats" not in run._advance(1)["a"] for _ in range(3))
    monkeypatch.setattr(trainruns, "STATS_S", 0.0)
    assert "stats" in run._advance(1)["a"]


def test_normlab_train_plots_the_lab_s_panels() -> None:
    setup = tv.make_setup(SMALL)
    [figure] = tv.run(setup, 3).figures()
    session = tv.Session(setup)  # the lab's side after a link's 3 steps are replayed
    for k in range(3):
        session.step(measure=k == 2)
    history = History()
    history.losses(session.losses)
    history.add(session.frame())
    boundary, loss = live_figure(history, session.data()).panels
    assert list(figure.panels) == [loss, boundary]  # the same panels, the losses first
    assert loss.series[0].x == [1, 2, 3]
