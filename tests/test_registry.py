"""The experiment registry: declared parameters, validation, results that json.dumps accepts."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from normlab.experiments import (
    ParameterError,
    ParameterTypeError,
    UnknownExperiment,
    get_experiment,
    list_experiments,
    params_dict,
    run_experiment,
)
from normlab.experiments.base.params import DEVICES, Parameter, param
from normlab.experiments.base.registry import SWEEP_BUILTINS, Cost
from normlab.sweep.summary import VALUES
from tests.experiments import expectations

# The seed experiments, in lesson order. The registry may hold more (a new experiment needs no
# line here): every test below that runs each experiment takes the names from the registry.
SEEDS = [
    "linear-scale",
    "drift",
    "bn-columns",
    "bn-running-stats",
    "bn-stack",
    "two-moons",
    "error-surface",
    "symmetry",
    "variance",
    "init-compare",
    "init-train",
    "bn-from-scratch",
    "bn-lr",
    "bn-lr-sweep",
    "bn-regularization",
    "edge-of-chaos",
    "jacobian-spectrum",
    "bn-gradient-explosion",
    "residual-stream",
    "coord-check",
    "doctor",
]


NAMES = [e.name for e in list_experiments()]


def test_every_seed_experiment_is_registered_in_lesson_order() -> None:
    assert [name for name in NAMES if name in SEEDS] == SEEDS


@pytest.mark.parametrize("name", NAMES)
def test_declarations_are_complete_and_defaults_valid(name: str) -> None:
    e = get_experiment(name)
    params = {p.name: p for p in e.parameters}
    assert params["device"].choices == DEVICES and params["device"].default == "cpu"
    assert "seed" in params
    for p in e.parameters:
        assert p.help
        assert p.validate(p.default) == p.default
        if p.kind in ("int", "float", "float_list"):
            assert p.min is not None and p.max is not None  # every size is bounded
        schema = p.schema()
        json.dumps(schema)
        assert schema["name"] == p.name and schema["kind"] == p.kind


@pytest.mark.parametrize("name", NAMES)
def test_small_runs_give_json_ready_results_that_record_their_params(name: str) -> None:
    small = {
        "steps": 3,
        "depth": 3,
        "passes": 2,
        "parity_batches": 2,
        "hist_layer": 2,
        "points": 2,
        "tail": 2,
        "epochs": 2,
    }
    declared = {p.name: p for p in get_experiment(name).parameters}
    params = {k: max(v, declared[k].min or v) for k, v in small.items() if k in declared}
    r = run_experiment(name, **params)
    d = r.to_dict()
    text = json.dumps(d, allow_nan=False)  # strict JSON: no NaN/inf
    assert json.loads(text)["experiment"] == name
    assert d["params"]["seed" if "seed" in d["params"] else "device"] is not None
    for key, value in params.items():
        assert d["params"][key] == value
    assert r.tables() and all(t.rows for t in r.tables())


@pytest.mark.parametrize("name", NAMES)
def test_every_number_at_its_least_allowed_value_runs_cleanly(name: str) -> None:
    """The least value a parameter declares is allowed, so the run it gives must be whole: no
    warning (the suite makes warnings errors: ``init-compare`` at ``fan_in = fan_out = 1`` took
    the sample std of one number), every number in its table and JSON."""
    declared = [p for p in get_experiment(name).parameters if p.min is not None]
    least = {p.name: [p.min] if p.kind == "float_list" else p.min for p in declared}
    r = run_experiment(name, **least)
    json.dumps(r.to_dict(), allow_nan=False)
    assert r.tables() and all(t.rows for t in r.tables())


def test_same_seed_same_result_other_seed_other_result() -> None:
    a = run_experiment("drift", seed=3).to_dict()
    b = run_experiment("drift", seed=3).to_dict()
    c = run_experiment("drift", seed=4).to_dict()
    assert a == b and a["stds"] != c["stds"]


def test_a_run_leaves_the_global_rng_alone() -> None:
    import torch

    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    run_experiment("init-compare", depth=2, hist_layer=1)
    assert torch.equal(torch.rand(3), expected)


def test_diverged_losses_become_null_in_json() -> None:
    r = run_experiment("bn-lr", lr=5.0, steps=60, hidden_layers=6)
    d = r.to_dict()
    json.dumps(d, allow_nan=False)
    raw = r.losses_with(False)
    assert any(not math.isfinite(x) for x in raw) == (
        None in d["losses" if not r.batch_norm else "contrast_losses"]
    )


def test_unknown_experiment_names_the_valid_set() -> None:
    with pytest.raises(UnknownExperiment, match=r"'nope' not found, use one of: linear-scale"):
        run_experiment("nope")
    assert issubclass(UnknownExperiment, ValueError)


@pytest.mark.parametrize(
    ("params", "exc", "pattern"),
    [
        ({"depht": 3}, ParameterError, r"unknown parameter 'depht' .*use one of: depth, width"),
        ({"depth": 0}, ParameterError, r"'depth': 0 is not allowed, use an integer in \[1, 100\]"),
        ({"depth": 101}, ParameterError, r"'depth'.*\[1, 100\]"),
        ({"depth": 2.5}, ParameterTypeError, r"'depth': 2.5 \(float\) is not an integer"),
        ({"depth": True}, ParameterTypeError, r"'depth'"),
        ({"depth": "3"}, ParameterTypeError, r"'depth': '3' \(str\)"),
        ({"activation": "gelu"}, ParameterError, r"'activation'.*one of 'relu', 'tanh'"),
        ({"activation": 1}, ParameterTypeError, r"'activation'"),
        ({"device": "tpu"}, ParameterError, r"'device'.*one of 'cpu'"),
        # the bound in full, as it would be typed (not :g's 2.14748e+09)
        ({"seed": -1}, ParameterError, r"'seed': -1 is not allowed, .* in \[0, 2147483647\]$"),
        ({"seed": 2**31}, ParameterError, r"'seed'.*\[0, 2147483647\]$"),
    ],
)
def test_bad_params_name_the_parameter_and_the_allowed_set(params, exc, pattern) -> None:
    with pytest.raises(exc, match=pattern) as info:
        run_experiment("drift", **params)
    assert info.value.param == next(iter(params))


@pytest.mark.parametrize(
    ("name", "params", "exc", "param"),
    [
        ("variance", {"gains": []}, ParameterError, "gains"),
        ("variance", {"gains": [1.0] * 6}, ParameterError, "gains"),
        ("variance", {"gains": [2.0]}, ParameterError, "gains"),
        ("variance", {"gains": "1.0"}, ParameterTypeError, "gains"),
        ("variance", {"gains": [float("nan")]}, ParameterError, "gains"),
        ("bn-lr", {"lr": float("inf")}, ParameterError, "lr"),
        ("bn-lr", {"batch_norm": "yes"}, ParameterTypeError, "batch_norm"),
        ("init-compare", {"hist_layer": 30, "depth": 20}, ParameterError, "hist_layer"),
        ("bn-lr-sweep", {"lr_min": 2.0, "lr_max": 1.0}, ParameterError, "lr_max"),
        ("bn-lr-sweep", {"lr_min": 2.0, "lr_max": 2.0}, ParameterError, "lr_max"),
        ("bn-lr-sweep", {"tail": 20, "steps": 20}, ParameterError, "tail"),
    ],
)
def test_list_bool_float_and_cross_field_checks(name, params, exc, param) -> None:
    with pytest.raises(exc) as info:
        run_experiment(name, **params)
    assert info.value.param == param
    assert repr(param) in str(info.value)


def test_dependent_bounds_are_declared_and_named_with_their_partner() -> None:
    declared = {
        (e.name, p.name): p.schema()["follows"]
        for e in list_experiments()
        for p in e.parameters
        if p.follows is not None
    }
    assert declared == {
        ("init-compare", "hist_layer"): {"relation": "<=", "partner": "depth"},
        ("bn-lr-sweep", "lr_max"): {"relation": ">", "partner": "lr_min"},
        ("bn-lr-sweep", "tail"): {"relation": "<", "partner": "steps"},
        ("bn-regularization", "batch_size"): {"relation": "<=", "partner": "n_train"},
        ("coord-check", "max_width"): {"relation": ">", "partner": "base_width"},
        ("edge-of-chaos", "sigma_w2_max"): {"relation": ">", "partner": "sigma_w2_min"},
        ("edge-of-chaos", "sigma_b2_max"): {"relation": ">", "partner": "sigma_b2_min"},
    }
    with pytest.raises(ParameterError, match=r"'hist_layer': 8 must be at most depth \(5\)"):
        run_experiment("init-compare", depth=5, hist_layer=8)
    with pytest.raises(ParameterError, match=r"'lr_max': 1 must be larger than lr_min \(2\)"):
        get_experiment("bn-lr-sweep").make_params({"lr_min": 2.0, "lr_max": 1.0})
    # every declared range leaves room for the partner: the widget's moves stay in bounds
    sweep = {p.name: p for p in get_experiment("bn-lr-sweep").parameters}
    assert sweep["lr_min"].max + sweep["lr_max"].step <= sweep["lr_max"].max
    assert sweep["steps"].min - 1 >= sweep["tail"].min
    with pytest.raises(ValueError, match="relation '>=' not supported"):
        param(1, "x", follows=(">=", "y"))


def test_cuda_is_refused_clearly_where_there_is_none() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert DEVICES == ("cpu",)  # only the devices there are are offered
    with pytest.raises(ParameterError, match="'cuda' is not allowed, use one of 'cpu'"):
        run_experiment("drift", device="cuda")


def test_every_experiment_states_its_cost_where_its_sizes_are_chosen() -> None:
    assert (
        str(Cost(5.0))
        == "at every setting's maximum a run takes at most about 5 s of CPU and 1 GiB"
    )
    assert str(Cost(0.5, 256)).endswith("0.5 s of CPU and 256 MiB")
    for e in list_experiments():
        e.make_params(e.maxima())  # the costliest request is an allowed one
        sized = [p for p in e.parameters if p.sized]
        assert sized, e.name
        assert all(p.help.endswith(f" ({e.cost})") for p in sized), e.name
        assert all(str(e.cost) not in p.help for p in e.parameters if not p.sized), e.name
        assert e.cost.cpu_s <= 15 and e.cost.mib <= 1024, e.name  # issue 19: about 10 s, 1 GiB
        schemas = {p.name: p.schema() for p in e.parameters}  # what the CLI and the lab show
        assert all(str(e.cost) in schemas[p.name]["help"] for p in sized), e.name


def test_an_experiment_must_bound_every_number_and_name_real_heavy_choices() -> None:
    """A number with no maximum leaves the cost unbounded and :meth:`Experiment.maxima`
    unbuildable; both, and a ``heaviest`` that names no parameter, are refused when declared."""
    drift = get_experiment("drift")

    @dataclasses.dataclass(frozen=True)
    class Unbounded:
        depth: int = param(10, "layers", min=1)

    with pytest.raises(ValueError, match=r"'x': \['depth'\] declare no maximum"):
        dataclasses.replace(drift, name="x", params_type=Unbounded, heaviest={})
    with pytest.raises(ValueError, match=r"'x': heaviest names no parameter \{'widht'\}"):
        dataclasses.replace(drift, name="x", heaviest={"widht": 512})


def test_sweep_values_must_be_distinct_result_keys_that_are_no_built_in_value() -> None:
    """Each of ``sweep_values`` names one number of the result that a sweep summarizes beside
    the loss curve's values, whose names it may not take."""
    bn_lr = get_experiment("bn-lr")  # result: batch_norm, lr, losses, contrast_losses
    assert dataclasses.replace(bn_lr, sweep_values=("lr",)).sweep_values == ("lr",)
    assert set(SWEEP_BUILTINS) == set(VALUES)  # the registry's copy of the summary's names
    with pytest.raises(
        ValueError,
        match=r"'bn-lr': sweep value 'chi_1' is not a field of its "
        "result other than its loss curve, use one of: batch_norm, lr, contrast_losses$",
    ):
        dataclasses.replace(bn_lr, sweep_values=("chi_1",))
    with pytest.raises(ValueError, match="sweep value 'losses' is not a field of its result"):
        dataclasses.replace(bn_lr, sweep_values=("losses",))  # the curve: no number per run
    with pytest.raises(ValueError, match="sweep value 'params' is not a field of its result"):
        dataclasses.replace(bn_lr, sweep_values=("params",))  # every result's: no number
    with pytest.raises(ValueError, match="'bn-lr': sweep value 'best' is a built-in sweep value"):
        dataclasses.replace(bn_lr, sweep_values=("best",))
    with pytest.raises(ValueError, match=r"sweep_values \('lr', 'lr'\) repeats a name"):
        dataclasses.replace(bn_lr, sweep_values=("lr", "lr"))
    with pytest.raises(ValueError, match="sweep_values 'lr': give a tuple of result keys"):
        dataclasses.replace(bn_lr, sweep_values="lr")  # type: ignore[arg-type]


def test_an_integer_parameter_takes_an_integral_float_from_json() -> None:
    # JSON has one number type: a client that sends 2.0 means 2 (2.5 is still refused)
    depth = next(p for p in get_experiment("drift").parameters if p.name == "depth")
    assert depth.validate(2.0) == 2 and type(depth.validate(2.0)) is int
    assert get_experiment("drift").make_params({"depth": 3.0, "batch": 8.0}).depth == 3
    with pytest.raises(ParameterTypeError, match=r"'depth': 2.5 \(float\) is not an integer"):
        depth.validate(2.5)
    with pytest.raises(ParameterError, match=r"'depth': 101 is not allowed, .* \[1, 100\]"):
        depth.validate(101.0)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ParameterTypeError, match="is not an integer"):
            depth.validate(bad)


def test_parse_reads_command_line_text() -> None:
    p = Parameter("gains", "float_list", (1.0,), "h", min=0.5, max=1.5, max_len=3)
    assert p.parse("0.9, 1,1.1") == (0.9, 1.0, 1.1)
    with pytest.raises(ParameterTypeError, match="'gains': 'a,b' is not a list of numbers"):
        p.parse("a,b")
    b = Parameter("flag", "bool", False, "h")
    assert b.parse("yes") is True and b.parse("OFF") is False
    with pytest.raises(ParameterTypeError, match="true or false"):
        b.parse("maybe")


@pytest.mark.parametrize("name", [e.name for e in list_experiments() if e.trains])
def test_training_experiments_report_progress_every_step(name: str) -> None:
    # progress is how a run in the lab is stopped (shutdown, a dropped request) and how the
    # CLI's bar moves: it must come every step, counting up to the whole run's steps
    calls: list[tuple[int, int]] = []
    declared = {p.name for p in get_experiment(name).parameters}
    # what it trains with, and its steps: PROGRESS in its own test module; one that declares
    # none runs 12 steps (if it has the parameter) and its total is not pinned
    default = ({"steps": 12} if "steps" in declared else {}, None)
    params, steps = expectations.expected(name, "PROGRESS", default)
    run_experiment(name, progress=lambda done, total: calls.append((done, total)), **params)
    total = calls[-1][1]
    assert calls == [(i, total) for i in range(1, total + 1)]
    if steps is not None:  # every optimizer step of the run counts
        assert total == steps


def test_the_progress_expectations_name_training_experiments() -> None:
    assert expectations.declaring("PROGRESS") <= {e.name for e in list_experiments() if e.trains}


STREAMERS = [e.name for e in list_experiments() if e.streams]


def test_the_streaming_expectations_name_experiments_that_stream() -> None:
    assert expectations.declaring("STREAMING") == expectations.declaring("CURVE") <= set(STREAMERS)


@pytest.mark.parametrize("name", STREAMERS)
def test_a_streamed_run_grows_by_prefixes_to_the_plain_run_s_result(name: str) -> None:
    """Every streaming experiment: live changes nothing, each partial is a JSON-ready Result of
    the same run; where its curve is named above, it grows by one step (or rate) each time; the
    last yield, handed to live too, is the whole run."""
    params = expectations.expected(name, "STREAMING", {})
    partials = []
    final = run_experiment(name, live=lambda partial: partials.append(partial()), **params)
    assert final.to_dict() == run_experiment(name, **params).to_dict()  # live changes nothing
    assert len(partials) >= 2
    assert partials.pop().to_dict() == final.to_dict()  # the last yield: the whole run
    curve, count = expectations.expected(name, "CURVE", (None, len(partials)))
    assert len(partials) == count
    for n, partial in enumerate(partials, start=1):
        d = partial.to_dict()
        assert d["experiment"] == name and d["params"] == final.params
        if curve is not None:
            grown = curve(d)
            assert len(grown) == n and grown == curve(final.to_dict())[:n]
        assert json.dumps([f.to_dict() for f in partial.figures()], allow_nan=False)


def test_a_partial_result_is_a_copy_the_run_does_not_change() -> None:
    kept = []
    run_experiment("bn-lr", live=lambda partial: kept.append(partial()) if not kept else None)
    assert len(kept[0].losses) == 1 and kept[0].contrast_losses == []


@pytest.mark.parametrize("name", ["bn-lr", "init-train"])
def test_a_streaming_entry_yields_the_whole_run_once_even_with_no_step(name: str) -> None:
    """The code itself, below the declared minimum of steps: its loop yields nothing, and its
    one yield is the whole run (so a script's ``print_tables(tables(result))`` after the loop
    has a result)."""
    experiment = get_experiment(name)
    values = {**params_dict(experiment.make_params({})), "steps": 0}
    yields = list(experiment.entry(**values))
    assert len(yields) == 1
    curves = [v for k, v in yields[0].items() if k.endswith("losses")]
    assert curves and all(c == [] for c in curves)


def test_live_for_an_experiment_that_does_not_stream_is_refused() -> None:
    with pytest.raises(ValueError, match="'linear-scale' does not stream"):
        run_experiment("linear-scale", live=lambda partial: None)


STAGED = [e.name for e in list_experiments() if e.stages is not None]


@pytest.mark.parametrize("name", STAGED)
def test_a_staged_run_reports_progress_at_every_stage(name: str) -> None:
    """An experiment that streams without training counts its own steps (layers, stacks): one
    at every yield, up to the total it declares, which the lab's frames and the CLI's bar
    show as "k of n"."""
    experiment = get_experiment(name)
    params = expectations.expected(name, "STREAMING", {})
    calls: list[tuple[int, int]] = []
    run_experiment(name, progress=lambda done, total: calls.append((done, total)), **params)
    total = experiment.steps(experiment.make_params(params))
    assert calls == [(k, total) for k in range(1, (total or 0) + 1)] and len(calls) >= 2
    assert experiment.unit == experiment.stage != "step" and not experiment.trains


def test_a_progress_callback_that_raises_stops_a_staged_run_at_that_stage() -> None:
    seen: list[int] = []

    def stop_at_2(done: int, total: int) -> None:
        seen.append(done)
        if done == 2:
            raise Stop

    with pytest.raises(Stop):
        run_experiment("jacobian-spectrum", progress=stop_at_2, depth=5, width=8)
    assert seen == [1, 2]


def test_only_a_streaming_experiment_that_does_not_train_declares_stages() -> None:
    plain = get_experiment("linear-scale")  # returns its result: nothing to count at
    with pytest.raises(ValueError, match="'linear-scale': stages count the yields"):
        dataclasses.replace(plain, stages=lambda p: 1)
    trains = get_experiment("bn-lr")  # counted at its optimizer steps
    with pytest.raises(ValueError, match="'bn-lr': stages count the yields"):
        dataclasses.replace(trains, stages=lambda p: 1)
    assert trains.unit == "step" and trains.steps(trains.make_params({"steps": 7})) == 14
    assert plain.steps(plain.make_params({})) is None


class Stop(Exception):
    pass


def test_a_progress_callback_that_raises_stops_the_run_at_that_step() -> None:
    seen: list[int] = []

    def stop_at_5(done: int, total: int) -> None:
        seen.append(done)
        if done == 5:
            raise Stop

    with pytest.raises(Stop):
        run_experiment("bn-lr", progress=stop_at_5, steps=100)
    assert seen == [1, 2, 3, 4, 5]
    run_experiment("bn-lr", steps=3)  # and the next run is not stopped by a stale hook


def test_runs_in_threads_take_turns_and_match_runs_one_after_another() -> None:
    import threading

    seeds = [1, 2, 3, 4]
    alone = {s: run_experiment("bn-lr", seed=s, steps=20).to_dict() for s in seeds}
    together: dict[int, dict[str, object]] = {}

    def one(s: int) -> None:
        together[s] = run_experiment("bn-lr", seed=s, steps=20).to_dict()

    threads = [threading.Thread(target=one, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert together == alone  # the global generator each run seeds is never shared mid-run


def test_small_running_statistics_keep_their_significant_digits() -> None:
    # a variance of 0.0064 printed to 2 decimals would read 0.01 (or 0.0): 3 digits below 0.1
    r = run_experiment("bn-running-stats", scale=0.08, cumulative=True, passes=50)
    last = r.tables()[0].rows[-1]
    shown = [float(v) for v in last[2].strip("[]").split(", ")]
    exact = r.running_vars[-1]
    assert all(0.001 < v < 0.05 for v in exact)  # small, near 0.08**2 = 0.0064
    assert shown == pytest.approx(exact, rel=5e-3)  # 3 significant digits, not 0.01
