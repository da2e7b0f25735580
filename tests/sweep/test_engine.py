"""The engine: groups by ``batch_key``, one batched call per group, one by one otherwise.

Until an experiment declares the batching hooks, a stand-in does: ``bn-lr`` with a ``batched``
entry that runs each configuration through the experiment's own ``entry`` (so a batched group
must give exactly the results that running each alone gives) and a ``batch_key`` of its shape.
"""

from __future__ import annotations

import pickle
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import pytest

from normlab.experiments import Experiment, get_experiment
from normlab.sweep import engine
from normlab.sweep.engine import Group, groups_of, in_process, run_group, run_one
from normlab.sweep.grid import Grid

TINY = ["steps=2", "width=2", "hidden_layers=1"]


class Batching:
    """An experiment with the optional hooks ``batched`` and ``batch_key`` (it records calls)."""

    def __init__(self, experiment: Experiment, fail: bool = False) -> None:
        self._experiment = experiment
        self.calls: list[int] = []
        self.fail = fail

    def __getattr__(self, name: str) -> Any:
        return getattr(self._experiment, name)

    def batched(self, many: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        self.calls.append(len(many))
        if self.fail:
            raise RuntimeError("batched entry failed")
        return [list(self._experiment.entry(**p))[-1] for p in many]  # bn-lr streams

    def batch_key(self, params: Mapping[str, Any]) -> Hashable:
        return (params["width"], params["hidden_layers"], params["batch_norm"])


@pytest.fixture
def batching(monkeypatch: pytest.MonkeyPatch) -> Batching:
    stand_in = Batching(get_experiment("bn-lr"))
    real = engine.get_experiment
    monkeypatch.setattr(engine, "get_experiment", lambda n: stand_in if n == "bn-lr" else real(n))
    return stand_in


def test_without_hooks_each_config_runs_alone_in_groups_of_at_most_16() -> None:
    configs = Grid.parse("bn-lr", [*TINY, "seed=0:19:20"]).configs()
    groups = groups_of(configs)
    assert [len(g.configs) for g in groups] == [10, 10]  # 20 > 16: two near-equal groups
    assert [c for g in groups for c in g.configs] == configs


def test_groups_follow_the_batch_key_and_are_cut_near_equal(batching: Batching) -> None:
    configs = Grid.parse("bn-lr", [*TINY, "batch_norm=true,false", "seed=0:69:70"]).configs()
    groups = groups_of(configs)
    assert [len(g.configs) for g in groups] == [35, 35, 35, 35]  # 70 a key: 35 + 35
    for g in groups:
        assert len({batching.batch_key(c.params) for c in g.configs}) == 1
    assert sorted(c.id for g in groups for c in g.configs) == sorted(c.id for c in configs)


def test_a_batched_group_is_one_call_with_each_config_s_own_result(batching: Batching) -> None:
    configs = Grid.parse("bn-lr", [*TINY, "lr=0.5,1", "seed=0,1"]).configs()
    [group] = groups_of(configs)
    outcomes = run_group(group)
    assert batching.calls == [4]
    alone = [run_one(c) for c in configs]
    assert [o.config_id for o in outcomes] == [c.id for c in configs]
    assert [o.result for o in outcomes] == [o.result for o in alone]  # the same code, same seeds
    assert all(o.error is None and o.seconds > 0 for o in outcomes)


def test_a_batched_call_that_raises_runs_the_group_one_by_one(batching: Batching) -> None:
    batching.fail = True
    configs = Grid.parse("bn-lr", [*TINY, "lr=0.5,1"]).configs()
    outcomes = run_group(Group("bn-lr", tuple(configs)))
    assert batching.calls == [2]
    assert [o.result for o in outcomes] == [run_one(c).result for c in configs]


def test_a_config_that_raises_gives_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    configs = Grid.parse("bn-lr", [*TINY, "lr=0.5,1"]).configs()
    real = engine.run_experiment

    def flaky(name: str, **params: Any) -> Any:
        if params["lr"] == 1.0:
            raise FloatingPointError("lr 1 diverged")
        return real(name, **params)

    monkeypatch.setattr(engine, "run_experiment", flaky)
    first, second = run_group(Group("bn-lr", tuple(configs)))
    assert first.ok and first.result is not None and first.result["lr"] == 0.5
    assert not second.ok and second.result is None
    assert second.error is not None and "FloatingPointError: lr 1 diverged" in second.error


def test_groups_and_outcomes_survive_pickling() -> None:  # what a Ray task ships
    configs = Grid.parse("bn-lr", [*TINY, "lr=0.5,1"]).configs()
    [group] = groups_of(configs)
    outcomes = list(in_process([group]))
    assert pickle.loads(pickle.dumps(group)) == group
    assert pickle.loads(pickle.dumps(outcomes)) == outcomes
