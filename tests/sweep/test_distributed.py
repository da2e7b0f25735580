"""The Ray backend: the same outcomes as in this process, and a killed worker costs nothing.

One local Ray instance (``ray.init(num_cpus=2)``) serves the whole module: starting one costs
seconds, and a task's first run on a worker imports torch. The grid is four ``bn-lr`` runs of
two steps on 1x4 and 1x5 MLPs (two batched groups of two: two tasks), so that the runs
themselves cost milliseconds and what is tested is the path: tasks out, outcomes back, a worker
killed on the way.

The same numbers: a task runs ``run_group`` on one CPU, in a worker where Ray sets
``OMP_NUM_THREADS=1``, with the Python, torch and normlab of this process (a local instance);
this process runs the reference under ``OMP_NUM_THREADS=1`` too. Same code, same machine, same
thread count: the same float operations in the same order, so the results are compared for
equality, not within a tolerance.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from normlab.cli import main
from normlab.sweep import (
    Config,
    Grid,
    Group,
    Outcome,
    Store,
    Sweep,
    groups_of,
    in_process,
    run_group,
)
from normlab.sweep.distributed import (
    RayBackend,
    RayNotInstalled,
    RayUnreachable,
    chunk_size,
    import_ray,
    resources,
    run_on_ray,
    split,
)

pytestmark = pytest.mark.slow

AXES = ["lr=0.1,0.5", "width=4,5", "batch_norm=true", "steps=2", "hidden_layers=1"]


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[Any]:
    """One local Ray instance for the module, with two CPUs; ``run_on_ray`` uses it as found."""
    ray = import_ray()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def configs() -> list[Config]:
    return Grid.parse("bn-lr", AXES).configs()


@pytest.fixture(scope="module")
def expected(configs: list[Config]) -> dict[str, Outcome]:
    """Every configuration's outcome, run in this process."""
    assert len(groups_of(configs)) == 2  # the two shapes: two groups, batched each
    outcomes = {o.config_id: o for o in in_process(groups_of(configs))}
    assert all(o.ok for o in outcomes.values()), outcomes
    return outcomes


def _by_id(outcomes: Iterator[Outcome]) -> dict[str, Outcome]:
    """Outcomes by configuration id, checking that none came twice."""
    seen: dict[str, Outcome] = {}
    for outcome in outcomes:
        assert outcome.config_id not in seen, f"{outcome.config_id} handed over twice"
        seen[outcome.config_id] = outcome
    return seen


def _dies_once(marker: Path, group: Group) -> list[Outcome]:
    """``run_group``, except that the first task to get here kills its own worker process.

    ``open(marker, "x")`` creates the file for exactly one caller (it fails where it exists), so
    exactly one task attempt dies, whichever worker runs it and whenever: no timing decides.
    """
    try:
        open(marker, "x").close()
    except FileExistsError:
        return run_group(group)
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer or a lost node would
    raise AssertionError("unreachable: SIGKILL ends this process")


def test_outcomes_on_ray_equal_those_in_this_process(
    ray_instance: Any, configs: list[Config], expected: dict[str, Outcome]
) -> None:
    # one batched group a task: two tasks over the two workers
    got = _by_id(RayBackend("auto")(groups_of(configs)))
    assert sorted(got) == sorted(expected)
    for config_id, outcome in got.items():
        assert outcome.error is None, outcome.error
        assert outcome.result == expected[config_id].result
    assert ray_instance.is_initialized()  # it found Ray connected, and left it so


def test_a_worker_killed_mid_task_is_retried_and_the_sweep_completes(
    ray_instance: Any, configs: list[Config], expected: dict[str, Outcome], tmp_path: Path
) -> None:
    marker = tmp_path / "killed"
    runner = functools.partial(_dies_once, marker)
    got = _by_id(run_on_ray(groups_of(configs), max_retries=1, runner=runner))
    assert marker.exists()  # a worker was killed
    assert sorted(got) == sorted(expected)  # every configuration once, none lost
    for config_id, outcome in got.items():
        assert outcome.error is None, outcome.error
        assert outcome.result == expected[config_id].result


def test_a_task_lost_on_every_try_gives_its_configurations_an_error(
    ray_instance: Any, configs: list[Config], expected: dict[str, Outcome], tmp_path: Path
) -> None:
    # no retries: the killed task's two configurations are stored as errors, the rest as results
    runner = functools.partial(_dies_once, tmp_path / "killed")
    got = _by_id(run_on_ray(groups_of(configs), max_retries=0, runner=runner))
    assert sorted(got) == sorted(expected)
    lost = [o for o in got.values() if not o.ok]
    assert len(lost) == 2
    assert all(o.result is None and "lost after 0 retries" in str(o.error) for o in lost)
    for outcome in got.values():
        if outcome.ok:
            assert outcome.result == expected[outcome.config_id].result


def _engine_bug(group: Group) -> list[Outcome]:
    raise RuntimeError(f"a bug in the engine, on {len(group.configs)} configurations")


def test_an_engine_bug_in_a_task_is_raised_not_stored(
    ray_instance: Any, configs: list[Config]
) -> None:
    # run_group raises only for a bug of its own: that stops the sweep, as it would in process
    with pytest.raises(RuntimeError, match="a bug in the engine, on 2 configurations"):
        list(run_on_ray(groups_of(configs), runner=_engine_bug))


def test_split_cuts_groups_that_run_alone_and_keeps_batched_ones_whole(
    configs: list[Config],
) -> None:
    alone = Grid.parse("drift", ["width=2,3,4,5", "depth=1"]).configs()  # drift cannot batch
    (runs_alone,) = groups_of(alone)
    batched = groups_of(configs)
    tasks = split([runs_alone, *batched], 3)
    assert [len(t.configs) for t in tasks] == [3, 1, 2, 2]
    assert tasks[2:] == batched == split(batched, 1)  # whole: cut, it gives other numbers
    assert tuple(c for t in tasks[:2] for c in t.configs) == runs_alone.configs  # in order
    assert all(t.experiment == "drift" for t in tasks[:2])
    assert chunk_size(4, 2) == 1 and chunk_size(64, 2) == 16 and chunk_size(65, 2) == 17
    with pytest.raises(ValueError, match="chunk 0 not supported"):
        split([runs_alone], 0)


def test_a_task_on_the_gpu_asks_ray_for_one(configs: list[Config]) -> None:
    (group, _) = groups_of(configs)
    assert resources(group) == {"num_cpus": 1, "num_gpus": 0}
    on_gpu = Config("bn-lr", {**group.configs[0].params, "device": "cuda"}, "id-on-gpu")
    assert resources(Group("bn-lr", (on_gpu,))) == {"num_cpus": 1, "num_gpus": 1}


def test_without_ray_installed_the_error_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(RayNotInstalled, match=r"pip install 'normlab\[ray\]'"):
        import_ray()


def test_an_address_where_nothing_answers_is_refused_at_once() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago and is closed now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}"):
        with pytest.raises(RayUnreachable, match="no Ray cluster answers at"):
            list(run_on_ray([], address=address))


def _results(store: Path) -> dict[str, Any]:
    """Each stored configuration's result (or error), by id."""
    return {r["id"]: r["result"] or r["error"] for r in Sweep("bn-lr", AXES, None, store).records()}


def test_normlab_sweep_ray_stores_what_an_in_process_sweep_stores(
    ray_instance: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = [arg for axis in AXES for arg in ("--grid", axis)]
    on_ray, here = tmp_path / "ray.sqlite3", tmp_path / "here.sqlite3"
    assert main(["sweep", "bn-lr", *grid, "--store", str(on_ray), "--ray", "auto", "--json"]) == 0
    assert main(["sweep", "bn-lr", *grid, "--store", str(here), "--json"]) == 0
    assert len(_results(on_ray)) == 4 and None not in _results(on_ray).values()
    assert _results(on_ray) == _results(here)
    assert ray_instance.is_initialized()


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("not installed", "Ray is not installed: pip install 'normlab[ray]'"),
        ("nothing there", "no Ray cluster answers at '127.0.0.1:"),
    ],
)
def test_normlab_sweep_ray_refused_in_one_line_before_anything_runs(
    case: str,
    why: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    address = "auto"
    if case == "not installed":
        monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    else:
        with socket.socket() as probe:  # a port that was free a moment ago and is closed now
            probe.bind(("127.0.0.1", 0))
            address = f"127.0.0.1:{probe.getsockname()[1]}"
    store = tmp_path / "s.sqlite3"
    grid = [arg for axis in AXES for arg in ("--grid", axis)]
    assert main(["sweep", "bn-lr", *grid, "--store", str(store), "--ray", address]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("normlab: error: --ray: ") and why in err
    with Store(store) as stored:
        assert stored.count() == 0
