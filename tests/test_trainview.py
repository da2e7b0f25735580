"""The training view's engine: one step is one optimizer step, reset is exact, frames are strict
JSON with fixed histogram edges and the doctor's labels, memory stays bounded, every bad value
is refused by name, and the plain script prints the session's losses step for step."""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from normlab import init as nlinit
from normlab import trainview as tv
from normlab.experiments import ParameterError, ParameterTypeError, run_experiment
from normlab.experiments.base.registry import ENGINE
from normlab.trainview import session as session_module

SMALL = {"depth": 2, "width": 8}


def session(**values: Any) -> tv.Session:
    return tv.Session(tv.make_setup({**SMALL, **values}))


# -- stepping ------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [{}, {"batch_size": 16, "optimizer": "adam", "norm": "batch"}])
def test_one_step_is_exactly_one_optimizer_step(values: dict[str, Any]) -> None:
    s = session(**values)
    steps = []
    s.optimizer.register_step_post_hook(lambda *_: steps.append(1))
    before = [p.detach().clone() for p in s.model.parameters()]
    record = s.step()
    assert (s.step_count, len(steps), record["step"]) == (1, 1, 0)
    after = list(s.model.parameters())
    assert all(not torch.equal(b, a) for b, a in zip(before, after, strict=True))
    s.step()
    assert (s.step_count, len(steps)) == (2, 2)
    assert len(s.losses["train"]) == len(s.losses["test"]) == 2


def test_reset_gives_back_the_initial_frame_and_the_same_run_bit_for_bit() -> None:
    s = session(norm="batch", batch_size=32, optimizer="momentum")
    first = s.frame()
    losses = [s.step()["train_loss"] for _ in range(4)]
    assert s.frame() != first
    s.reset()
    assert s.step_count == 0 and s.losses == {"train": [], "test": [], "start": 0}
    assert s.frame() == first  # floats compared exactly
    assert [s.step()["train_loss"] for _ in range(4)] == losses


def test_the_session_is_the_bn_lr_experiment_with_its_setup() -> None:
    """With bn-lr's setting (all 200 moons, 4 x 64 ReLU, PyTorch's init, SGD at lr 2) the view
    records the seed notebook's losses exactly, with and without BatchNorm."""
    for bn in (False, True):
        setup = {"test_frac": 0.0, "depth": 4, "width": 64, "init": "default", "lr": 2.0}
        s = tv.Session(tv.make_setup({**setup, "norm": "batch" if bn else "none"}))
        ours = [s.step()["train_loss"] for _ in range(12)]
        assert ours == run_experiment("bn-lr", batch_norm=bn, steps=12).losses


def test_the_building_leaves_the_caller_s_random_state_alone() -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    session().reset()
    assert torch.equal(torch.rand(3), expected)


def test_a_session_is_built_while_an_experiment_holds_the_engine() -> None:
    """The weights come from the session's own generator: building one takes no lock, so it
    does not wait for an experiment run (here: this thread holding the engine), and draws
    the same weights as a build with the engine free."""
    built: list[tv.Session] = []
    done = threading.Event()

    def build() -> None:
        built.append(session(init="lsuv", norm="batch"))
        done.set()

    with ENGINE:
        worker = threading.Thread(target=build, daemon=True)
        worker.start()
        assert done.wait(60), "the build waited for the engine lock"
    alone = session(init="lsuv", norm="batch").model.state_dict()
    for k, v in built[0].model.state_dict().items():
        assert torch.equal(v, alone[k]), k


# -- what a frame holds --------------------------------------------------------------------------


def test_frames_are_strict_json_with_fixed_shapes_even_when_training_blows_up() -> None:
    s = session(init="large", depth=6, width=32, lr=10.0, optimizer="momentum")
    for _ in range(12):
        s.step()
    frame = s.frame()
    assert None in s.losses["train"] or None in [la["act_std"] for la in frame["layers"]]
    text = json.dumps(frame, allow_nan=False)
    assert json.loads(text) == frame
    assert frame["step"] == 12
    b = frame["boundary"]
    assert len(b["x"]) == len(b["y"]) == tv.GRID
    assert len(b["z"]) == tv.GRID and all(len(row) == tv.GRID for row in b["z"])
    assert any("non-finite" in la["labels"] for la in frame["layers"])


def test_histograms_have_fixed_edges_and_count_every_element() -> None:
    s = session(depth=3, width=8)
    n = len(s.x_train)
    edges = tv.hist_edges()
    assert len(edges) == tv.HIST_BINS + 1 and (edges[0], edges[-1]) == tv.HIST_RANGE
    for _ in range(3):
        hist = s.frame()["hist"]
        assert hist["edges"] == edges
        assert hist["layers"] == ["1", "3", "5"]  # each hidden block's activation
        for counts in (*hist["act"], *hist["grad"]):
            assert len(counts) == tv.HIST_BINS and sum(counts) == n * 8
        s.step()


def test_the_histogram_bins_log_magnitudes() -> None:
    lo, hi = tv.HIST_RANGE
    counts = tv.log_histogram(torch.tensor([0.0, 10.0**lo, 1e-3, -1e-3, 1.0, 10.0**hi, 1e9]))
    width = (hi - lo) / tv.HIST_BINS
    assert counts[0] == 2  # 0 and 1e-8
    assert counts[int((-3 - lo) / width)] == 2  # +-1e-3: the sign is not kept
    assert counts[int((0 - lo) / width)] == 1
    assert counts[-1] == 2  # 100 and beyond
    assert sum(counts) == 7


def test_the_frame_s_statistics_are_the_last_step_s_pass() -> None:
    s = session()
    look = s.frame()["layers"]
    s.step()
    after_one = s.frame()["layers"]
    # full batch: the first step's pass sees the initial weights, as the look did
    assert [la["act_std"] for la in after_one] == [la["act_std"] for la in look]
    names = [name for name, _ in s.model.named_children()]
    assert [la["name"] for la in after_one] == names
    assert [la["block"] for la in after_one] == [1, 1, 2, 2, 3]
    s.step()
    assert s.frame()["layers"] != after_one


def test_an_unmeasured_step_trains_the_same_and_keeps_the_last_measured_pass() -> None:
    measured, plain = session(), session()
    for k in range(4):
        assert measured.step() == plain.step(measure=k == 3)  # the same losses either way
    assert measured.frame() == plain.frame()  # the frames show the same (last, measured) step
    before = plain.frame()["layers"]
    plain.step(measure=False)
    assert plain.frame()["layers"] == before and plain.step_count == 5


def test_a_look_measures_the_current_weights_and_changes_no_step() -> None:
    """What a frame cut short shows (a pause between two measured steps)."""
    looked, plain = session(norm="batch"), session(norm="batch")
    for _ in range(3):
        assert looked.step(measure=False) == plain.step(measure=False)
    looked.look()
    now = [la["act_std"] for la in looked.frame()["layers"]]
    assert now != [la["act_std"] for la in plain.frame()["layers"]]  # plain: still step 0's
    assert looked.step() == plain.step()  # weights, batches, running statistics untouched
    # full batch: that step's pass saw the weights the look saw
    assert [la["act_std"] for la in looked.frame()["layers"]] == now
    assert looked.frame() == plain.frame()


def test_the_doctor_labels_what_the_initializers_do() -> None:
    # tanh: the doctor reads the unit spread on the batch's first point, where a ReLU may be 0
    constant = session(init="constant", width=16, activation="tanh")
    zeros = session(init="zeros", width=16)
    for _ in range(2):  # at the look, then after a step
        hidden = [la["labels"] for la in constant.frame()["layers"] if la["kind"] == "Tanh"]
        assert all("symmetric" in labels for labels in hidden)
        # zero weights and biases: every unit is 0, and stays 0 (no gradient reaches it)
        hidden = [la["labels"] for la in zeros.frame()["layers"] if la["kind"] == "ReLU"]
        assert all("dead" in labels and "vanishing" in labels for labels in hidden)
        constant.step()
        zeros.step()
    small = session(init="small", activation="tanh", depth=6, width=32)
    small.step()
    labels = [la["labels"] for la in small.frame()["layers"]]
    # the drift is labelled from its cause on: the first layer already shrinks the RMS
    assert "vanishing" in labels[-2] and "vanishing" in labels[0]


def test_the_points_and_the_plane() -> None:
    s = session(points=101, test_frac=0.3, dataset="xor")
    data = s.data()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    train, test = data["train"], data["test"]
    assert (len(train["x"]), len(test["x"])) == (71, 30)
    assert set(train["label"]) | set(test["label"]) == {0, 1}
    (x0, x1), (y0, y1) = data["extent"]["x"], data["extent"]["y"]
    for part in (train, test):
        assert all(x0 < v < x1 for v in part["x"]) and all(y0 < v < y1 for v in part["y"])
    b = s.frame()["boundary"]
    assert (b["x"][0], b["x"][-1]) == pytest.approx((x0, x1))


@pytest.mark.parametrize("dataset", tv.DATASETS)
def test_every_dataset_is_standardized_two_classes(dataset: str) -> None:
    x, y, x_test, y_test = tv.make_data(dataset, 0.1, 200, 0.25, seed=3)
    both = torch.cat([x, x_test])
    assert (len(x), len(x_test)) == (150, 50)
    torch.testing.assert_close(both.mean(0), torch.zeros(2), atol=1e-6, rtol=0)  # float32 sums
    torch.testing.assert_close(both.std(0, unbiased=False), torch.ones(2), atol=1e-5, rtol=0)
    assert set(torch.cat([y, y_test]).flatten().tolist()) == {0.0, 1.0}


def test_minibatches_cover_an_epoch_once_and_drop_the_rest() -> None:
    x = torch.arange(10.0).unsqueeze(1)
    batches = tv.batches(x, x, 4, seed=0)
    epoch = [next(batches)[0] for _ in range(2)]
    assert all(len(b) == 4 for b in epoch)
    assert len(set(torch.cat(epoch).flatten().tolist())) == 8
    whole = tv.batches(x, x, 0, seed=0)
    assert next(whole)[0] is x and next(whole)[0] is x


# -- the initializers are normlab's ----------------------------------------------------------------


def _normlab_init(model: nn.Sequential, init: str, x: torch.Tensor) -> None:
    if init == "lsuv":
        nlinit.lsuv_(model, x)
        return
    fill = {
        "xavier": nlinit.xavier_uniform_,
        "he": lambda w: nlinit.kaiming_normal_(w, nonlinearity="relu"),
        "orthogonal": nlinit.orthogonal_,
    }[init]
    for m in model:
        if isinstance(m, nn.Linear):
            fill(m.weight)
            nlinit.zeros_(m.bias)


@pytest.mark.parametrize("init", ["xavier", "he", "orthogonal", "lsuv"])
def test_the_initializers_are_normlab_s_bit_for_bit(init: str) -> None:
    setup = tv.make_setup({**SMALL, "init": init, "norm": "batch", "activation": "tanh"})
    ours = tv.Session(setup).model.state_dict()
    x, *_ = tv.make_data(setup.dataset, setup.noise, setup.points, setup.test_frac, setup.seed)
    torch.manual_seed(setup.seed)
    model = tv.make_model(setup.depth, setup.width, setup.activation, setup.norm, setup.bias)
    _normlab_init(model, init, x)
    theirs = model.state_dict()
    assert ours.keys() == theirs.keys()
    for k in ours:
        assert torch.equal(ours[k], theirs[k]), k


# -- bounded ---------------------------------------------------------------------------------------


def test_memory_stays_bounded_over_many_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_module, "KEEP", 5)
    s = session(width=4)
    for _ in range(10):
        s.step()
        s.frame()
    gc.collect()  # the probes' reference cycles are garbage, not kept
    objects = len(gc.get_objects())
    for _ in range(40):
        s.step()
        s.frame()
    gc.collect()
    assert len(gc.get_objects()) - objects < 20  # no per-step record or tensor is kept
    assert len(s.losses["train"]) == 5 and s.losses["start"] == 45
    for m in s.model.modules():  # every probe and tap is gone between steps
        assert not m._forward_hooks and not m._forward_pre_hooks and not m._backward_hooks


# -- the declaration refuses by name ---------------------------------------------------------------


def _bad_values(p: Any) -> list[object]:
    if p.kind == "bool":
        return ["yes", 1]
    if p.kind == "choice":
        return ["nope", 3]
    bad: list[object] = [p.min - 1, p.max + 1, "1"]
    return [*bad, math.nan] if p.kind == "float" else [*bad, 1.5]


@pytest.mark.parametrize("p", tv.PARAMETERS, ids=lambda p: p.name)
def test_every_parameter_refuses_a_bad_value_naming_it(p: Any) -> None:
    for value in _bad_values(p):
        with pytest.raises((ParameterError, ParameterTypeError)) as caught:
            tv.make_setup({p.name: value})
        assert caught.value.param == p.name and repr(p.name) in str(caught.value)
    assert tv.make_setup({p.name: p.default}) == tv.Setup()


def test_refusals_beyond_one_value() -> None:
    with pytest.raises(ParameterError, match="unknown parameter 'depht'") as caught:
        tv.Setup.from_params({"depht": 3})
    assert caught.value.param == "depht"
    with pytest.raises(ParameterError, match="BatchNorm") as caught:
        tv.make_setup({"norm": "batch", "batch_size": 1})
    assert caught.value.param == "batch_size"
    with pytest.raises(ParameterError) as caught:
        tv.Session(dataclasses.replace(tv.Setup(), depth=0))  # a hand-built setup is checked
    assert caught.value.param == "depth"
    with pytest.raises(ParameterError) as caught:
        tv.script(tv.Setup(), 0)
    assert caught.value.param == "steps"


def test_the_declaration_is_the_registry_s() -> None:
    schema = {p.name: p.schema() for p in tv.PARAMETERS}
    assert list(schema) == [f.name for f in dataclasses.fields(tv.Setup)]
    assert schema["dataset"]["choices"] == list(tv.DATASETS)
    assert schema["depth"] == {
        "name": "depth",
        "kind": "int",
        "help": schema["depth"]["help"],
        "default": 3,
        "min": 1,
        "max": 12,
        "step": 1,
    }


# -- the plain script prints the session's losses ------------------------------------------------

SETUPS = [  # every dataset, norm, optimizer, initializer and activation, and the batch modes
    {"dataset": "moons", "norm": "batch", "optimizer": "sgd", "init": "he"},
    {"dataset": "circles", "norm": "layer", "optimizer": "momentum", "init": "xavier",
     "activation": "tanh", "batch_size": 32},
    {"dataset": "xor", "norm": "rms", "optimizer": "adam", "init": "lsuv", "activation": "gelu",
     "bias": False, "lr": 0.01},
    {"dataset": "spiral", "optimizer": "adam", "init": "orthogonal", "activation": "sigmoid",
     "batch_size": 16, "test_frac": 0.0, "lr": 0.01},
    {"dataset": "blobs", "norm": "batch", "optimizer": "momentum", "init": "lsuv",
     "activation": "linear", "batch_size": 10, "points": 50},
    {"dataset": "moons", "init": "zeros", "seed": 7},
    {"dataset": "blobs", "init": "constant", "batch_size": 64},
    {"dataset": "circles", "init": "small", "depth": 5, "activation": "tanh"},
    {"dataset": "xor", "init": "large", "optimizer": "momentum", "lr": 1.0, "noise": 0.0},
    {"dataset": "spiral", "init": "default", "norm": "batch", "points": 300, "width": 32},
]  # fmt: skip
STEPS = 5


def _expected(values: dict[str, Any]) -> list[list[str]]:
    """The session's steps as the script's loss table prints them: step, train, test."""
    s = session(**values)
    rows = []
    for _ in range(STEPS):
        r = s.step()
        losses = (
            "-" if v is None or not math.isfinite(v) else f"{v:.6f}"
            for v in (r["train_loss"], r["test_loss"])
        )
        rows.append([str(r["step"]), *losses])
    return rows


def _printed_losses(out: str) -> list[list[str]]:
    """The rows of the loss table a script printed (between its header and its note)."""
    lines = out.splitlines()
    start = lines.index(next(ln for ln in lines if ln.split() == ["step", "train", "test"]))
    return [ln.split() for ln in lines[start + 1 : start + 1 + STEPS]]


@pytest.fixture(scope="module")
def no_normlab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ``normlab`` package refuses to import; scripts run from it."""
    root = tmp_path_factory.mktemp("plain")
    (root / "normlab").mkdir()
    (root / "normlab" / "__init__.py").write_text(
        'raise ImportError("the training view\'s script must not import normlab")\n'
    )
    return root


def test_the_script_prints_the_session_s_losses_step_for_step(no_normlab: Path) -> None:
    """Each setup's script runs in one real interpreter (started once: a runner executes them
    in turn), from a folder where ``import normlab`` fails."""
    files = []
    for i, values in enumerate(SETUPS):
        text = tv.script(tv.make_setup({**SMALL, **values}), STEPS)
        assert "normlab" not in "".join(ln for ln in text.splitlines() if "import" in ln)
        files.append(no_normlab / f"setup_{i}.py")
        files[-1].write_text(text)
    runner = no_normlab / "run_all.py"
    runner.write_text(
        "import runpy, sys\n"
        "for path in sys.argv[1:]:\n"
        "    print('==', path)\n"
        "    runpy.run_path(path, run_name='__main__')\n"
    )
    done = subprocess.run(
        [sys.executable, str(runner), *map(str, files)],
        cwd=no_normlab,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout.split("== ")[1:]
    assert len(printed) == len(SETUPS)
    for values, out in zip(SETUPS, printed, strict=True):
        assert _printed_losses(out) == _expected(values), values
