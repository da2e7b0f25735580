"""normlab.watch: the doctor's layers every N training steps, bounded in memory, as JSON lines."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import math
import os
import subprocess
import tracemalloc
from pathlib import Path

import pytest
import torch
from torch import nn

import normlab
from normlab import cli, doctor
from normlab.doctor.view import training_figure
from normlab.report import log_tables
from normlab.watching import events, read_log, watch


def relu_net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)
    )


def train(
    net: nn.Module, w: normlab.watching.Watch, steps: int, kill_at: int | None = None
) -> None:
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    for step in range(steps):
        if step == kill_at:  # units die mid-training: a bias pushed far below 0
            with torch.no_grad():
                net[2].bias[:28] = -100.0
        opt.zero_grad()
        x = torch.randn(64, 8, generator=g)
        net(x).pow(2).mean().backward()
        w.step()
        opt.step()


def test_records_every_n_steps_are_the_doctor_s_layers(tmp_path: Path) -> None:
    net = relu_net()
    with normlab.watch(net, every=10, log=tmp_path / "run.jsonl") as w:
        train(net, w, 35)
    assert [r["step"] for r in w.records] == [0, 10, 20, 30]
    first = w.records[0]
    assert [la["name"] for la in first["layers"]] == ["0", "1", "2", "3", "4"]
    assert first["layers"][-1]["grad_ratio"] == 1.0 and first["problems"] == []
    back = list(read_log(tmp_path / "run.jsonl"))
    assert back == json.loads(json.dumps(list(w.records)))  # the log holds what was kept
    assert not any(h for m in net.modules() for h in m._forward_hooks.values())  # all removed


def test_a_run_that_diverges_is_found_non_finite(tmp_path: Path) -> None:
    """SGD at lr 50 sends the weights to inf within a few steps; the record of the step where
    it happens says so, and the log's events name the change."""
    net = relu_net()
    opt = torch.optim.SGD(net.parameters(), lr=50.0)
    g = torch.Generator().manual_seed(1)
    with normlab.watch(net, every=1, log=tmp_path / "run.jsonl") as w:
        for _ in range(12):
            opt.zero_grad()
            net(torch.randn(64, 8, generator=g)).pow(2).mean().backward()
            w.step()
            opt.step()
    assert w.records[0]["problems"] == [] or "non-finite" not in w.records[0]["problems"]
    assert "non-finite" in w.records[-1]["problems"]
    changes = events(list(read_log(tmp_path / "run.jsonl")))
    assert any(e.endswith("became non-finite") for e in changes)


def test_a_sigmoid_model_s_saturation_is_watched() -> None:
    """The doctor's sigmoid statistic is measured under watch as under diagnose."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.Sigmoid(), nn.Linear(16, 1))
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(2))
    with normlab.watch(net, every=1) as w:
        net(x).pow(2).mean().backward()
        record = w.step()
    assert record is not None
    want = doctor.diagnose(net, x).layers[1].saturated_frac
    assert record["layers"][1]["saturated_frac"] == pytest.approx(want)


def test_the_first_record_is_a_diagnosis_of_that_step() -> None:
    """With ``sample_size=None`` the probes read every element, as the doctor's do: the same
    numbers (float32 sums in another order: 1e-6) and the same labels."""
    net = relu_net()
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
    with watch(net, every=1, sample_size=None) as w:
        net(x).pow(2).mean().backward()
        record = w.step()
    assert record is not None
    d = doctor.diagnose(relu_net(), x)  # the doctor's own numbers, same model and input
    for got, want in zip(record["layers"], d.layers, strict=True):
        assert got["act_std"] == pytest.approx(want.act_std, rel=1e-6)
        assert got["dead_frac"] == want.dead_frac and got["labels"] == want.labels


def test_by_default_a_sample_gives_the_doctor_s_labels() -> None:
    """The default reads 1024 of each output's 64 x 32 = 2048 elements (std from a sample:
    relative error about sqrt((kurtosis - 1) / 4m) = 3% for a ReLU layer's kurtosis near 5;
    0.15 is 5 of those). The per-unit numbers (dead units) read every element, so they are
    the doctor's exactly, and so are the labels."""
    net = relu_net()
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
    with watch(net, every=1) as w:
        net(x).pow(2).mean().backward()
        record = w.step()
    assert record is not None
    d = doctor.diagnose(relu_net(), x)
    for got, want in zip(record["layers"], d.layers, strict=True):
        assert got["act_std"] == pytest.approx(want.act_std, rel=0.15)
        assert got["act_std"] != pytest.approx(want.act_std, rel=1e-9) or got["name"] == "4"
        assert got["dead_frac"] == want.dead_frac and got["labels"] == want.labels


def test_units_that_die_during_training_are_found_when_they_die() -> None:
    net = relu_net()
    with watch(net, every=5) as w:
        train(net, w, 40, kill_at=22)
    assert w.records[4]["problems"] == [] and "dead" in w.records[5]["problems"]  # steps 20, 25
    assert "step 25: model[3] became dead" in w.events()
    assert events(list(w.records)) == w.events()


def test_memory_stays_flat_over_10000_steps(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    x = torch.randn(16, 4)
    log = tmp_path / "long.jsonl"
    with watch(net, every=10, log=log, keep=20) as w:
        tracemalloc.start()
        for step in range(10_000):
            net.zero_grad()
            net(x).sum().backward()
            w.step()
            if step == 2_000:
                gc.collect()  # cycles waiting for the collector are not growth
                early, _ = tracemalloc.get_traced_memory()
        gc.collect()
        late, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert len(w.records) == 20 and w.records[-1]["step"] == 9_990
    assert late - early < 50_000  # bytes: the ring is full by step 2,000; nothing else grows
    assert sum(1 for _ in read_log(log)) == 1_000  # the log keeps every record


def test_a_writer_gets_each_layer_s_scalars() -> None:
    class Writer:
        def __init__(self) -> None:
            self.calls: list[tuple[str, float, int]] = []

        def add_scalar(self, tag: str, scalar_value: float, global_step: int) -> None:
            self.calls.append((tag, scalar_value, global_step))

    net, writer = relu_net(), Writer()
    with watch(net, every=3, writer=writer) as w:
        train(net, w, 4)
    tags = {tag for tag, _, _ in writer.calls}
    assert {"0/act_std", "0/grad_std", "0/grad_ratio", "1/act_std"} <= tags
    assert sorted({step for _, _, step in writer.calls}) == [0, 3]


def test_bad_arguments_and_a_bad_log(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="every must be an integer >= 1, got 0"):
        watch(relu_net(), every=0)
    with pytest.raises(ValueError, match="keep must be an integer >= 1, got True"):
        watch(relu_net(), keep=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0, "layers": []}\nnot json\n')
    with pytest.raises(ValueError, match="line 2 is not a watch record"):
        list(read_log(bad))


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``normlab doctor ARGS`` in this process (the entry point's own function), in ``cwd``."""
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(["doctor", *args])
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(args, status, out.getvalue(), err.getvalue())


def test_doctor_log_reports_a_watch_log(tmp_path: Path) -> None:
    net = relu_net()
    with watch(net, every=5, log=tmp_path / "run.jsonl") as w:
        train(net, w, 40, kill_at=22)
    out = run_cli("--log", "run.jsonl", "--html", "run.html", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "step 25: model[3] became dead" in out.stdout and "run.jsonl: step 35" in out.stdout
    page = (tmp_path / "run.html").read_text()
    assert "8 records, steps 0..35" in page and "data:image/png;base64," in page
    assert "became dead" in page and "://" not in page
    data = run_cli("--log", "run.jsonl", "--json", cwd=tmp_path)
    d = json.loads(data.stdout)
    assert d["records"] == 8 and d["last"]["step"] == 35 and d["events"] == w.events()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--log", "nope.jsonl"), "--log 'nope.jsonl': file not found"),
        (("--log", "bad.jsonl"), "line 1 is not a watch record"),
        (("--log", "empty.jsonl"), "the log holds no record"),
        (("m.py:build", "--log", "empty.jsonl"), "give no FILE.py:FACTORY with it"),
        ((), "doctor needs FILE.py:FACTORY (or --log FILE.jsonl)"),
    ],
)
def test_doctor_log_bad_input(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    (tmp_path / "empty.jsonl").write_text("")
    out = run_cli(*args, cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "" and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def _weights_and_grads(net: nn.Sequential, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer ``k``'s weight and gradient now, copied, in float64."""
    w, g = net[k].weight, net[k].weight.grad
    assert g is not None
    return w.detach().double().clone(), g.detach().double().clone()


def test_the_update_ratio_of_an_sgd_step_is_lr_grad_over_weight() -> None:
    """Plain SGD moves W by -lr g: the record after the step holds lr |g| / |W| of the step
    before it. Float32 rounds W - lr g to 2**-24 |W| per element, 6e-6 of an update 1e-2 of
    |W|, and the float32 norms add ~1e-6: rel 1e-4."""
    net, lr = relu_net(), 0.1
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    g = torch.Generator().manual_seed(1)
    want: list[float] = []
    with watch(net, every=1) as w:
        for _ in range(3):
            opt.zero_grad()
            net(torch.randn(64, 8, generator=g)).pow(2).mean().backward()
            w.step()
            weight, grad = _weights_and_grads(net, 2)
            want.append(lr * float(grad.norm() / weight.norm()))
            opt.step()
    first, *rest = w.records
    assert [la["update_ratio"] for la in first["layers"]] == [None] * 5  # no step before it
    for record, expected in zip(rest, want, strict=False):
        ratio = record["layers"][2]["update_ratio"]
        assert ratio == pytest.approx(expected, rel=1e-4) and 1e-3 < expected < 1e-1
        assert record["layers"][1]["update_ratio"] is None  # a ReLU has no weights


def test_adam_s_first_step_moves_every_weight_by_lr() -> None:
    """Adam's first step is lr g / (|g| + eps), lr in size wherever |g| >> eps: the ratio is
    near lr sqrt(n) / |W| at any gradient scale (a loss 1000 times larger: nearly the same;
    only the elements with |g| near eps differ), and the record holds it exactly."""
    ratios = []
    for scale in (1.0, 1000.0):
        net, lr = relu_net(), 1e-3
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
        with watch(net, every=1) as w:
            for step in range(2):
                opt.zero_grad()
                (scale * net(x).pow(2).mean()).backward()
                w.step()
                if step == 0:
                    weight, grad = _weights_and_grads(net, 0)
                opt.step()
        step = lr * grad / (grad.abs() + 1e-8)  # Adam's bias-corrected first step
        want = float(step.norm() / weight.norm())
        ratios.append(w.records[1]["layers"][0]["update_ratio"])
        assert ratios[-1] == pytest.approx(want, rel=1e-4)  # as for SGD above
    assert ratios[0] == pytest.approx(ratios[1], rel=1e-3) and ratios[0] != ratios[1]


def test_layers_without_an_update_and_a_record_every_3_steps() -> None:
    """A layer the optimizer leaves out: 0 (it did not move). A frozen layer is no weight
    layer of the doctor's: no ratio, as it has no gradient ratio. With every=3 the record at
    step 3 holds SGD's step from 2 to 3, lr |g_2| / |W_2| (rel 1e-4: see the SGD test)."""
    net, lr = relu_net(), 0.1
    net[4].weight.requires_grad_(False)
    opt = torch.optim.SGD(net[2].parameters(), lr=lr)  # layer 0 is not in it
    g = torch.Generator().manual_seed(1)
    with watch(net, every=3) as w:
        for step in range(4):
            opt.zero_grad()
            net(torch.randn(64, 8, generator=g)).pow(2).mean().backward()
            w.step()
            if step == 2:
                weight, grad = _weights_and_grads(net, 2)
            opt.step()
    last = w.records[-1]["layers"]
    assert w.records[-1]["step"] == 3 and last[0]["update_ratio"] == 0.0
    want = lr * float(grad.norm() / weight.norm())
    assert last[2]["update_ratio"] == pytest.approx(want, rel=1e-4)
    assert last[4]["update_ratio"] is None and last[4]["grad_ratio"] is None
    with watch(relu_net(), every=1, updates=False) as w:
        for _ in range(2):
            w.model(torch.randn(4, 8)).sum().backward()
            w.step()
    assert all(la["update_ratio"] is None for la in w.records[-1]["layers"])
    with pytest.raises(TypeError, match="updates must be True or False, got 1"):
        watch(relu_net(), updates=1)  # type: ignore[arg-type]


def test_the_report_draws_the_update_ratio_with_karpathy_s_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The figure over training has an update panel with the 1e-3 guide, its curves the
    records' ratios; the text table has an update column; a log without ratios (written
    before them) is drawn without the panel."""
    monkeypatch.delenv("COLUMNS", raising=False)  # pytest-xdist's workers set 80: too narrow
    net = relu_net()
    with watch(net, every=2, log=tmp_path / "run.jsonl") as w:
        train(net, w, 7)
    figure = training_figure(list(w.records))
    (panel,) = [p for p in figure.panels if p.title.startswith("Update:data ratio")]
    assert [line.value for line in panel.lines] == [1e-3] and panel.y.scale == "log"
    curve = panel.series[1]  # model[2]; the first record has none: a gap
    want = [r["layers"][2]["update_ratio"] for r in w.records]
    assert curve.name == "model[2]" and list(curve.y) == want and want[0] is None
    out = run_cli("--log", "run.jsonl", "--html", "run.html", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "update" in out.stdout and f"{want[-1]:.3g}" in out.stdout
    assert "Update:data ratio at step 6: median" in (tmp_path / "run.html").read_text()
    old = [{**r, "layers": [dict(la) for la in r["layers"]]} for r in w.records]
    for r in old:
        for la in r["layers"]:
            del la["update_ratio"]
    titles = [p.title for p in training_figure(old).panels]
    assert not any(t.startswith("Update") for t in titles) and len(titles) == 3
    assert "update" not in log_tables(old[-1], "")[0].columns


class _PreLN(nn.Module):
    """Four pre-LN residual MLP blocks and a one-unit head: norms read the stream's sums."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(8, 32)
        self.norms = nn.ModuleList(nn.LayerNorm(32) for _ in range(4))
        self.mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32)) for _ in range(4)
        )
        self.head = nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for norm, mlp in zip(self.norms, self.mlps, strict=True):
            h = h + mlp(norm(h))
        return self.head(h)


@pytest.mark.parametrize("make", [relu_net, _PreLN])
def test_a_later_record_is_a_diagnosis_of_that_step(make: type[nn.Module]) -> None:
    """Ten Adam steps at lr 0.03 move the inputs of the one-unit head and of the norms (the
    stream's sums); the record of step 10 holds the doctor's numbers for the model as it was at
    step 10 on that step's batch, not the values traced at step 0 (float32 sums in another
    order: 1e-6)."""
    import copy

    net = make()
    opt = torch.optim.Adam(net.parameters(), lr=0.03)
    g = torch.Generator().manual_seed(1)
    with watch(net, every=1, sample_size=None) as w:
        for _ in range(11):
            x = torch.randn(64, 8, generator=g)
            then = copy.deepcopy(net)
            opt.zero_grad()
            net(x).pow(2).mean().backward()
            record = w.step()
            opt.step()
    assert record is not None and record["step"] == 10
    first = w.records[0]["layers"]
    d = doctor.diagnose(then, x)
    for got, want, was in zip(record["layers"], d.layers, first, strict=True):
        assert got["act_std"] == pytest.approx(want.act_std, rel=1e-6)
        assert got["scale"] == pytest.approx(want.scale, rel=1e-6, nan_ok=True)
        assert got["labels"] == want.labels
        if math.isfinite(want.unit_rms):
            assert got["unit_rms"] == pytest.approx(want.unit_rms, rel=1e-6)
            assert got["unit_rms"] != pytest.approx(was["unit_rms"], rel=1e-2)  # it moved
