"""A sweep's grid: its axes as written, every cell validated, and each cell's stable id."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from normlab import __version__
from normlab.experiments import get_experiment
from normlab.sweep import grid as grid_module
from normlab.sweep.grid import Grid, GridError, config_id, version
from normlab.sweep.sweeps import Sweep


def values(experiment: str, spec: str) -> tuple[object, ...]:
    return Grid.parse(experiment, [spec]).axes[0].values


def test_lists_take_each_declared_kind() -> None:
    assert values("bn-lr", "batch_norm=true,false") == (True, False)
    assert values("bn-lr", "batch-norm=false") == (False,)  # the flag's spelling too
    assert values("bn-lr", "init=he,xavier") == ("he", "xavier")
    assert values("bn-lr", "lr=0.1,0.3") == (0.1, 0.3)
    assert values("bn-lr", "width=4,8") == (4, 8)
    # a list parameter: its lists separated by ';'
    assert values("variance", "gains=0.9,1.1;1") == ((0.9, 1.1), (1.0,))


def test_a_range_spanning_a_decade_is_geometric_and_a_shorter_one_linear() -> None:
    lr = values("bn-lr", "lr=0.1:3:12")
    ratios = [b / a for a, b in itertools.pairwise(lr)]
    # 11 equal factors of 30 ** (1/11), up to the 12 significant digits each point keeps
    assert ratios == pytest.approx([30 ** (1 / 11)] * 11, rel=1e-11)
    assert (lr[0], lr[-1], len(lr)) == (0.1, 3.0, 12)  # the ends exactly as typed
    assert values("bn-lr", "lr=0.1:0.5:5") == (0.1, 0.2, 0.3, 0.4, 0.5)  # 5x: linear
    assert values("bn-lr", "lr=0.1:3:3:lin") == (0.1, 1.55, 3.0)
    assert values("bn-lr", "lr=0.1:0.4:3:log") == (0.1, 0.2, 0.4)
    assert values("bn-lr", "width=2:128:7") == (2, 4, 8, 16, 32, 64, 128)  # 64x: geometric
    assert values("bn-lr", "width=4:8:3") == (4, 6, 8)


def test_seeds_are_an_axis_over_the_seed_parameter() -> None:
    grid = Grid.parse("bn-lr", ["lr=0.5,1"], seeds=3)
    assert [(a.name, a.values) for a in grid.axes] == [("lr", (0.5, 1.0)), ("seed", (0, 1, 2))]
    configs = grid.configs()
    assert [(c.params["lr"], c.params["seed"]) for c in configs] == [
        (lr, seed) for lr in (0.5, 1.0) for seed in range(3)
    ]


def test_every_cell_holds_every_parameter_validated() -> None:
    configs = Grid.parse("bn-lr", ["lr=1", "steps=2"]).configs()
    declared = {p.name: p.default for p in get_experiment("bn-lr").parameters}
    assert len(configs) == 1
    assert configs[0].params == {**declared, "lr": 1.0, "steps": 2}
    assert configs[0].experiment == "bn-lr"


@pytest.mark.parametrize(
    ("experiment", "specs", "seeds", "param", "words"),
    [
        ("bn-lr", ["nope=1"], None, "nope", "unknown parameter 'nope' for 'bn-lr', use one of"),
        ("bn-lr", ["lr=9"], None, "lr", "use a number in [0.01, 5]"),
        ("bn-lr", ["lr=0.1:9:3"], None, "lr", "use a number in [0.01, 5]"),
        ("bn-lr", ["lr=1:2"], None, "lr", "is not a range A:B:N"),
        ("bn-lr", ["lr=1:2:x"], None, "lr", "is not a range A:B:N"),
        ("bn-lr", ["lr=1:2:1"], None, "lr", "is not a range A:B:N"),
        ("bn-lr", ["init=he,nope"], None, "init", "one of 'default', 'small'"),
        ("bn-lr", ["init=he:xavier:2"], None, "init", "a range A:B:N needs a number parameter"),
        ("bn-lr", ["batch_norm=maybe"], None, "batch_norm", "true or false"),
        ("bn-lr", ["width=2:4:5"], None, "width", "round to 3 (2, 3, 4), use at most 3 points"),
        # 100,000 points rounding to two integers: the message names the two, not 100,000
        ("bn-lr", ["width=2:3:100000"], None, "width", "100000 points round to 2 (2, 3)"),
        ("bn-lr", ["lr=0.5,0.5"], None, "lr", "given twice"),
        ("bn-lr", ["lr=1", "lr=2"], None, "lr", "given twice"),
        ("bn-lr", ["lr"], None, "grid", "write NAME=VALUES"),
        ("bn-lr", [], 0, "seeds", "use an integer in [1,"),
        ("bn-lr", ["seed=1"], 2, "seeds", "give one or the other"),
        (
            "bn-lr",
            ["seed=0:999:1000", "width=2:101:100:lin", "steps=1:2:2"],
            None,
            "grid",
            "at most",
        ),
        # a range or a list longer than any grid may hold: refused before its points are made
        # (a billion points would take minutes and gigabytes to build)
        ("bn-lr", ["lr=0.1:1:1000000000"], None, "lr", "asks for 1000000000 points, at most"),
        ("bn-lr", ["seed=" + ",".join(map(str, range(100_001)))], None, "seed", "at most"),
        # a combination the declaration refuses: lr_max must be larger than lr_min
        ("bn-lr-sweep", ["lr_min=0.5", "lr_max=0.2,1"], None, "lr_max", "lr_max=0.2"),
    ],
)
def test_a_bad_grid_raises_naming_the_parameter(
    experiment: str, specs: list[str], seeds: int | None, param: str, words: str
) -> None:
    with pytest.raises(ValueError) as caught:
        Grid.parse(experiment, specs, seeds).configs()
    assert isinstance(caught.value, GridError)
    assert caught.value.param == param
    assert words in str(caught.value)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400  # one line


def test_ids_are_stable_and_change_with_every_parameter() -> None:
    config = Grid.parse("bn-lr", ["steps=2"]).configs()[0]
    assert config_id("bn-lr", dict(config.params)) == config.id
    assert config_id("bn-lr", dict(reversed(list(config.params.items())))) == config.id
    changed = {"batch_norm": True, "lr": 1.0, "steps": 3, "hidden_layers": 2, "width": 8}
    changed |= {"init": "he", "seed": 1}
    assert set(changed) | {"device"} == set(config.params)  # (one device on a CPU machine)
    ids = {config_id("bn-lr", {**config.params, k: v}) for k, v in changed.items()}
    assert len(ids) == len(changed) and config.id not in ids


def test_a_changed_experiment_code_gives_new_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    params = dict(Grid.parse("bn-lr", []).configs()[0].params)
    before = config_id("bn-lr", params)
    assert version("bn-lr").startswith(__version__ + "+")
    real = grid_module.inspect.getsource

    def edited(obj: object) -> str:  # as if the training loop had been edited
        text = real(obj)  # type: ignore[arg-type]
        return text + "# edited\n" if getattr(obj, "__name__", "") == "train" else text

    monkeypatch.setattr(grid_module.inspect, "getsource", edited)
    version.cache_clear()
    try:
        assert config_id("bn-lr", params) != before
    finally:
        monkeypatch.undo()
        version.cache_clear()
    assert config_id("bn-lr", params) == before


def test_a_sweep_file_gives_the_command_line_s_cells(tmp_path: Path) -> None:
    path = tmp_path / "sweep.toml"
    path.write_text(
        'experiment = "bn-lr"\nseeds = 2\n[grid]\nlr = "0.1:3:3"\n'
        'batch_norm = [true, false]\ninit = "he,xavier"\nsteps = 2\n'
    )
    from_file = Sweep.from_file(path, store=tmp_path / "s.sqlite3")
    specs = ["lr=0.1:3:3", "batch_norm=true,false", "init=he,xavier", "steps=2"]
    from_cli = Grid.parse("bn-lr", specs, seeds=2).configs()
    assert [c.id for c in from_file.configs] == [c.id for c in from_cli]
    # the command line's axes replace the file's
    narrowed = Sweep.from_file(path, store=tmp_path / "s.sqlite3", grid={"lr": "1"}, seeds=1)
    assert len(narrowed.configs) == 4 and {c.params["lr"] for c in narrowed.configs} == {1.0}


@pytest.mark.parametrize(
    ("text", "param"),
    [
        ('experiment = "bn-lr"\nsteps = 3\n', "steps"),  # a parameter outside [grid]
        ('experiment = "bn-lr"\n[grid]\nlr = [0.5, 9]\n', "lr"),
        ('experiment = "bn-lr"\n[grid\n', "file"),  # not TOML
        ("[grid]\nlr = 1\n", "experiment"),
    ],
)
def test_a_bad_sweep_file_raises_naming_what(tmp_path: Path, text: str, param: str) -> None:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    with pytest.raises(GridError) as caught:
        Sweep.from_file(path, store=tmp_path / "s.sqlite3")
    assert caught.value.param == param


def test_log_points_are_rounded_to_12_digits() -> None:
    lr = values("bn-lr", "lr=0.01:5:9")
    assert all(float(f"{x:.12g}") == x for x in lr)
    assert math.isclose(lr[4], math.sqrt(0.01 * 5), rel_tol=1e-12)  # the geometric middle
