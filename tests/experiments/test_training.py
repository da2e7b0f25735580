"""``training``: the training view's run in the registry, the same numbers as its session."""

from __future__ import annotations

import dataclasses

from normlab import trainview as tv
from normlab.experiments import get_experiment, run_experiment, script
from normlab.experiments.base.results import Result

SETUP = {"dataset": "xor", "depth": 2, "width": 8, "norm": "batch", "batch_size": 32}


def test_the_run_is_the_session_s_step_for_step() -> None:
    """Losses, accuracies, points and the boundary at the end, compared exactly."""
    for values in (SETUP, {"init": "lsuv", "optimizer": "adam", "lr": 0.01, "test_frac": 0.0}):
        result = run_experiment("training", **values, steps=7).to_dict()  # nan: None
        session = tv.Session(tv.make_setup(values))
        records = [session.step() for _ in range(7)]
        assert result["train_losses"] == [r["train_loss"] for r in records]
        assert result["test_losses"] == [r["test_loss"] for r in records]
        frame, data = session.frame(), session.data()
        accuracy = {"train": result["train_accuracy"], "test": result["test_accuracy"]}
        assert accuracy == frame["accuracy"]
        assert result["boundary"] == frame["boundary"] and result["extent"] == data["extent"]
        assert [result["train_points"], result["test_points"]] == [data["train"], data["test"]]


def test_the_view_s_settings_are_the_experiment_s_declaration() -> None:
    declared = {p.name: p for p in get_experiment("training").parameters}
    assert list(declared) == [p.name for p in tv.PARAMETERS] + ["steps", "device"]
    for p in tv.PARAMETERS:
        assert dataclasses.replace(declared[p.name], help=p.help) == p  # the help adds the cost
    longer = {"help": tv.STEPS.help, "default": 300, "max": 100_000}  # normlab train: local
    assert dataclasses.replace(declared["steps"], **longer) == tv.STEPS


def test_the_view_s_code_is_the_registry_s_script() -> None:
    text = tv.script(tv.make_setup(SETUP), 9)
    params = {**SETUP, "steps": 9, "device": "cpu"}
    assert text == script.render(get_experiment("training"), params)
    assert "for result in training(" in text and text.endswith("print_tables(tables(result))\n")
    assert "steps=500," in tv.script(tv.Setup(), 500)  # a long local run's code is text only


def test_the_tables_and_figures() -> None:
    result = run_experiment("training", **SETUP, points=100, steps=8)
    losses, right = result.tables()
    assert [row[0] for row in losses.rows] == [str(t) for t in range(8)]  # every step
    assert right.rows == [
        ("train", f"{round(result.train_accuracy * 80)} of 80"),
        ("test", f"{round(result.test_accuracy * 20)} of 20"),
    ]
    [figure] = result.figures()
    kinds = [[s.kind for s in panel.series] for panel in figure.panels]
    assert kinds == [["line", "line"], ["heatmap", "markers", "markers"]]
    assert figure.panels[1].title == "decision boundary at step 8"


def test_a_streamed_run_draws_its_losses_so_far_then_the_boundary() -> None:
    partials: list[Result] = []
    run_experiment("training", **STREAMING, live=lambda partial: partials.append(partial()))
    assert len(partials) == 4  # a step each, then the whole run
    for n, partial in enumerate(partials[:-1], start=1):
        [figure] = partial.figures()
        [curves] = figure.panels  # no boundary before the end
        assert [len(s.x) for s in curves.series] == [n, n] and f"step {n}," in figure.title
    [figure] = partials[-1].figures()
    assert figure.panels[1].title == "decision boundary at step 3"


# -- what the registry-wide tests expect of it (tests/experiments/expectations.py) --------------


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {**SETUP, "points": 100, "steps": 3}


# What grows in its streamed result (the training loss), and how many partials STREAMING gives
# before the last yield (tests/test_registry.py): one a step.
CURVE = (lambda d: d["train_losses"], 3)
