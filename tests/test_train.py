"""The training loops: ``train_sgd`` basics, and the fast trainer against it.

Parity tolerances: without BatchNorm the fast trainer runs the kernels autograd runs, in the same
order, so losses, weights and gradients are compared bit for bit (``torch.equal``). With
BatchNorm its statistics come from torch's fused kernel and the eager path's from
``normlab.functional.batch_norm``: the two round differently (~1e-7 relative per step). At lr 0.5
that stays at float32 tolerance for the 30 steps compared (rtol 1e-5, atol 1e-6 on the losses).
At lr 2.0, the ``bn-lr`` widget's rate, training amplifies rounding: the curves agree to 1e-5 for
the first 10 steps and can then drift apart by 1e-4 and more (different but equally valid
trajectories), so only those steps are compared.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from normlab import _fastloop, data, models
from normlab import nn as nlnn
from normlab.experiments import run_experiment
from normlab.experiments.init_train import apply_init
from normlab.train import CHUNK, FastRun, train_mlp_fast, train_mlps_fast, train_sgd

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def moons() -> tuple[torch.Tensor, torch.Tensor]:
    return data.two_moons()


def mlp(norm: str = "none", width: int = 64, depth: int = 4, seed: int = 0) -> nn.Sequential:
    g = torch.Generator().manual_seed(seed)
    return models.mlp(2, width, depth, out_dim=1, norm=norm, generator=g)


def floats(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in model.state_dict().items() if v.dtype.is_floating_point}


# --------------------------------------------------------------------------------------------
# train_sgd


def test_train_sgd_learns_moons_with_he_init(moons: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = moons
    g = torch.Generator().manual_seed(0)
    net = models.mlp(2, 32, 5, out_dim=1, generator=g)
    apply_init(net, "he", g)
    losses = train_sgd(net, x, y, lr=0.2, steps=150)
    assert losses.shape == (150,) and losses.dtype == torch.float32
    assert losses[-1] < 0.5 * losses[0]
    assert losses[-10:].mean() < losses[:10].mean()


def test_train_sgd_progress_and_on_step(moons: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = moons
    net = mlp(width=8, depth=2)
    calls: list[tuple[int, int]] = []
    seen: list[tuple[int, float]] = []

    def on_step(step: int, model: nn.Module) -> None:
        grads = [p.grad for p in model.parameters()]
        assert all(gr is not None for gr in grads)
        seen.append((step, sum(float(gr.abs().sum()) for gr in grads if gr is not None)))

    train_sgd(
        net, x, y, lr=0.1, steps=7, on_step=on_step, progress=lambda d, t: calls.append((d, t))
    )
    assert calls == [(i, 7) for i in range(1, 8)]
    assert [s for s, _ in seen] == list(range(7))
    assert all(total > 0 for _, total in seen)  # the gradients are set when on_step runs


def test_train_sgd_matches_torch_optim_sgd_bit_for_bit(
    moons: tuple[torch.Tensor, torch.Tensor],
) -> None:
    # train_sgd writes optim.SGD's update out; the seed's loop, with the optimizer, must agree
    # exactly: losses, weights, BatchNorm's buffers. A frozen parameter stays as it was.
    x, y = moons
    ours, theirs = mlp("batch", width=16, depth=3), mlp("batch", width=16, depth=3)
    for net in (ours, theirs):
        net[0][0].bias.requires_grad_(False)
    losses = train_sgd(ours, x, y, lr=0.7, steps=25)
    theirs.train()
    opt = torch.optim.SGD(theirs.parameters(), lr=0.7)
    expected = []
    for _ in range(25):
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(theirs(x), y)
        loss.backward()
        opt.step()
        expected.append(loss.item())
    assert losses.tolist() == expected
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert torch.equal(ours[0][0].bias, mlp("batch", width=16, depth=3)[0][0].bias)


def test_train_sgd_leaves_torch_dynamo_unimported() -> None:
    # A torch optimizer imports torch._dynamo on first use (seconds); the CLI's symmetry run,
    # which trains through train_sgd for ~35 ms, must not pay that.
    code = (
        "import sys\n"
        "from normlab.experiments import run_experiment\n"
        "run_experiment('symmetry', steps=3)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# --------------------------------------------------------------------------------------------
# the fast trainer against train_sgd


@pytest.mark.parametrize("lr", [2.0, 0.2])
def test_fast_equals_eager_bitwise_without_bn(
    moons: tuple[torch.Tensor, torch.Tensor], lr: float
) -> None:
    x, y = moons
    eager, fast = mlp(), mlp()
    expected = train_sgd(eager, x, y, lr=lr, steps=150)
    got = train_mlp_fast(fast, x, y, lr=lr, steps=150).losses
    assert torch.equal(got, expected)  # all 150 steps, spike included
    for k, v in floats(eager).items():
        assert torch.equal(floats(fast)[k], v), k


def test_fast_equals_eager_init_train_net(moons: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = moons
    g = torch.Generator().manual_seed(0)
    eager = models.mlp(2, 32, 5, out_dim=1, generator=g)
    apply_init(eager, "xavier", g)
    fast = copy.deepcopy(eager)
    expected = train_sgd(eager, x, y, lr=0.2, steps=150)
    assert torch.equal(train_mlp_fast(fast, x, y, lr=0.2, steps=150).losses, expected)


def test_fast_matches_eager_with_bn(moons: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = moons
    eager, fast = mlp("batch"), mlp("batch")
    expected = train_sgd(eager, x, y, lr=0.5, steps=30)
    got = train_mlp_fast(fast, x, y, lr=0.5, steps=30).losses
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    # weights, gammas, betas, running mean and var after 30 steps; num_batches_tracked exactly
    torch.testing.assert_close(floats(fast), floats(eager), rtol=1e-5, atol=1e-5)
    for k, v in eager.state_dict().items():
        if k.endswith("num_batches_tracked"):
            assert int(fast.state_dict()[k]) == int(v) == 30


def test_fast_matches_eager_with_bn_at_the_widget_rate(
    moons: tuple[torch.Tensor, torch.Tensor],
) -> None:
    x, y = moons
    eager, fast = mlp("batch"), mlp("batch")
    expected = train_sgd(eager, x, y, lr=2.0, steps=10)
    got = train_mlp_fast(fast, x, y, lr=2.0, steps=10).losses
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(floats(fast), floats(eager), rtol=1e-4, atol=1e-4)


def bn_net(seed: int = 0, **bn_args: Any) -> nn.Sequential:
    """A flat 2-16-16-1 net with normlab BatchNorm1d layers built with ``bn_args``."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(2, 16),
        nlnn.BatchNorm1d(16, **bn_args),
        nn.ReLU(),
        nn.Linear(16, 16),
        nlnn.BatchNorm1d(16, **bn_args),
        nn.ReLU(),
        nn.Linear(16, 1),
    )


@pytest.mark.parametrize(
    "bn_args",
    [
        {"momentum": None},  # cumulative average
        {"momentum": 0.3, "eps": 1e-3},
        {"affine": False},
        {"track_running_stats": False},
        {"bias": False},
    ],
    ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()),
)
def test_fast_matches_eager_bn_options(
    moons: tuple[torch.Tensor, torch.Tensor], bn_args: dict[str, Any]
) -> None:
    x, y = moons
    eager, fast = bn_net(**bn_args), bn_net(**bn_args)
    # some steps already taken: the running average continues from the module's state
    train_sgd(eager, x, y, lr=0.3, steps=2)
    train_sgd(fast, x, y, lr=0.3, steps=2)
    expected = train_sgd(eager, x, y, lr=0.3, steps=12)
    got = train_mlp_fast(fast, x, y, lr=0.3, steps=12).losses
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.state_dict(), eager.state_dict(), rtol=1e-5, atol=1e-5)


def test_fast_accepts_torch_batchnorm_and_flat_sequential(
    moons: tuple[torch.Tensor, torch.Tensor],
) -> None:
    """The seed's own shape: one flat ``nn.Sequential`` with ``torch.nn.BatchNorm1d``."""
    x, y = moons

    def seed_net() -> nn.Sequential:
        torch.manual_seed(0)
        return nn.Sequential(
            nn.Linear(2, 32), nn.BatchNorm1d(32), nn.ReLU(),
            nn.Linear(32, 32), nn.BatchNorm1d(32), nn.ReLU(),
            nn.Linear(32, 1),
        )  # fmt: skip

    eager, fast = seed_net(), seed_net()
    expected = train_sgd(eager, x, y, lr=0.5, steps=20)
    got = train_mlp_fast(fast, x, y, lr=0.5, steps=20).losses
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.state_dict(), eager.state_dict(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("widths", "first_bn"),
    [((1, 8, 8), True), ((8, 8, 5), True), ((5, 3, 7), True), ((3, 6, 6), False)],
    ids=["1-8-8", "8-8-5", "5-3-7", "3-6-6,first-plain"],
)
def test_fast_first_block_shapes(widths: tuple[int, int, int], first_bn: bool) -> None:
    """The first block's weight is stored transposed when BatchNorm follows it: square,
    narrow and wide first layers train as eager training does, and the weights come back in
    their own layout; a first block without BatchNorm is left as it was."""
    d, h1, h2 = widths
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(40, d, generator=g), (torch.rand(40, 1, generator=g) > 0.5).float()

    def net() -> nn.Sequential:
        torch.manual_seed(1)
        first: list[nn.Module] = [nn.Linear(d, h1)]
        if first_bn:
            first.append(nn.BatchNorm1d(h1))
        return nn.Sequential(
            *first, nn.ReLU(), nn.Linear(h1, h2), nn.BatchNorm1d(h2), nn.ReLU(), nn.Linear(h2, 1)
        )

    eager, fast = net(), net()
    expected = train_sgd(eager, x, y, lr=0.3, steps=15)
    got = train_mlp_fast(fast, x, y, lr=0.3, steps=15).losses
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.state_dict(), eager.state_dict(), rtol=1e-5, atol=1e-5)
    assert all(p.is_contiguous() for p in fast.parameters())


# --------------------------------------------------------------------------------------------
# the scripted loop (normlab._fastloop) against the Python loop


def python_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fastloop, "scripted", lambda name="stacked": None)


def count_chunks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one at every call of the scripted loop (which still runs)."""
    calls: list[int] = []
    real = _fastloop.run_steps
    monkeypatch.setattr(_fastloop, "run_steps", lambda fn, *a: calls.append(1) or real(fn, *a))
    return calls


def same_run(a: FastRun, b: FastRun, net_a: nn.Module, net_b: nn.Module) -> None:
    exact = {"rtol": 0.0, "atol": 0.0, "equal_nan": True}  # a diverged run is nan on both
    torch.testing.assert_close(a.losses, b.losses, **exact)
    for (k, v), w in zip(net_a.state_dict().items(), net_b.state_dict().values(), strict=True):
        torch.testing.assert_close(v, w, **exact, msg=k)
    for u, v in zip(a.init_outputs + a.init_grads, b.init_outputs + b.init_grads, strict=True):
        torch.testing.assert_close(u, v, **exact)


@pytest.mark.parametrize(
    ("method", "width", "depth", "steps", "record"),
    [
        ("xavier", 32, 5, 150, True),  # init-train's defaults
        ("he", 16, 3, 2 * CHUNK + 7, False),  # a last chunk shorter than CHUNK
        ("large", 64, 7, CHUNK + 1, True),  # diverges to nan
        ("zeros", 8, 2, 1, True),  # step 0 only: no scripted call at all
        ("small", 3, 12, CHUNK - 1, False),
    ],
)
def test_scripted_loop_equals_the_python_loop_bit_for_bit(
    moons: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    width: int,
    depth: int,
    steps: int,
    record: bool,
) -> None:
    x, y = moons
    calls = count_chunks(monkeypatch)

    def net() -> nn.Module:
        g = torch.Generator().manual_seed(depth)
        m = models.mlp(2, width, depth, out_dim=1, generator=g)
        apply_init(m, method, g)
        return m

    scripted_net, python_net = net(), net()
    scripted = train_mlp_fast(scripted_net, x, y, lr=0.2, steps=steps, record_init=record)
    assert len(calls) == -(-(steps - record) // CHUNK)  # the scripted loop ran every chunk
    python_loop(monkeypatch)
    reference = train_mlp_fast(python_net, x, y, lr=0.2, steps=steps, record_init=record)
    assert len(calls) == -(-(steps - record) // CHUNK)  # and the Python loop never called it
    same_run(scripted, reference, scripted_net, python_net)


@pytest.mark.parametrize(
    ("width", "depth", "steps", "lr", "momentum", "record"),
    [
        (64, 4, 150, 2.0, 0.1, False),  # bn-lr's defaults
        (16, 1, CHUNK + 5, 0.5, None, True),  # one block; cumulative running average
        (33, 6, 2 * CHUNK + 11, 3.0, 0.3, False),
    ],
)
def test_scripted_batchnorm_loop_equals_the_python_loop_bit_for_bit(
    moons: tuple[torch.Tensor, torch.Tensor],
    monkeypatch: pytest.MonkeyPatch,
    width: int,
    depth: int,
    steps: int,
    lr: float,
    momentum: float | None,
    record: bool,
) -> None:
    x, y = moons
    calls = count_chunks(monkeypatch)

    def net() -> nn.Module:
        m = mlp("batch", width=width, depth=depth, seed=depth)
        for bn in m.modules():
            if isinstance(bn, nlnn.BatchNorm1d):
                bn.momentum = momentum
        return m

    scripted_net, python_net = net(), net()
    scripted = train_mlp_fast(scripted_net, x, y, lr=lr, steps=steps, record_init=record)
    assert len(calls) == -(-(steps - record) // CHUNK)
    python_loop(monkeypatch)
    reference = train_mlp_fast(python_net, x, y, lr=lr, steps=steps, record_init=record)
    same_run(scripted, reference, scripted_net, python_net)  # running stats and counts too


@pytest.mark.parametrize(
    "norm",
    [
        nlnn.BatchNorm1d(8, affine=False),
        nlnn.BatchNorm1d(8, track_running_stats=False),
        nn.BatchNorm1d(8, affine=False),
    ],
    ids=["no affine", "no running stats", "torch, no affine"],
)
def test_other_batchnorm_options_run_from_python(
    moons: tuple[torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch, norm: nn.Module
) -> None:
    x, y = moons
    calls: list[int] = []
    monkeypatch.setattr(_fastloop, "run_steps", lambda fn, *a: calls.append(1))
    net = nn.Sequential(nn.Linear(2, 8), norm, nn.ReLU(), nn.Linear(8, 1))
    run = train_mlp_fast(net, x, y, lr=0.1, steps=30)
    assert calls == [] and run.losses[-1] < run.losses[0]  # trained, from the Python loop


def test_scripted_loop_reports_every_step_and_stops_within_a_chunk(
    moons: tuple[torch.Tensor, torch.Tensor],
) -> None:
    x, y = moons
    calls: list[tuple[int, int]] = []
    train_mlp_fast(mlp(width=8), x, y, lr=0.1, steps=60, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(i, 60) for i in range(1, 61)]  # each step, in order, after its chunk

    net = mlp(width=8)
    before = copy.deepcopy(net.state_dict())
    seen: list[int] = []

    def stop(done: int, total: int) -> None:
        seen.append(done)
        if done == CHUNK + 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_mlp_fast(net, x, y, lr=0.1, steps=20_000, progress=stop)
    assert seen == list(range(1, CHUNK + 4))
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())  # not written


def test_without_torchscript_the_python_loop_runs(
    moons: tuple[torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(fn: object) -> None:
        raise RuntimeError("no TorchScript here")

    monkeypatch.setattr(_fastloop, "_compiled", {})  # not tried yet in this process
    monkeypatch.setattr(torch.jit, "script", refuse)
    assert _fastloop.scripted("stacked") is None and _fastloop.scripted("bn") is None
    assert _fastloop._compiled == {"stacked": None, "bn": None}  # each tried once only
    x, y = moons
    eager, fast = mlp(width=8), mlp(width=8)
    expected = train_sgd(eager, x, y, lr=0.5, steps=30)
    assert torch.equal(train_mlp_fast(fast, x, y, lr=0.5, steps=30).losses, expected)
    with_bn = train_mlp_fast(mlp("batch", width=8), x, y, lr=0.5, steps=30).losses
    python_loop(monkeypatch)
    torch.testing.assert_close(
        with_bn,
        train_mlp_fast(mlp("batch", width=8), x, y, lr=0.5, steps=30).losses,
        rtol=0,
        atol=0,
    )


def test_record_init_matches_autograd(moons: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = moons
    net = mlp(width=32, depth=3)
    ref = copy.deepcopy(net)
    acts = []
    h = x
    for block in list(ref)[:-1]:
        h = block(h)
        h.retain_grad()
        acts.append(h)
    nn.functional.binary_cross_entropy_with_logits(ref[-1](h), y).backward()
    run = train_mlp_fast(net, x, y, lr=0.1, steps=3, record_init=True)
    assert len(run.init_outputs) == len(run.init_grads) == 3
    for a, out, grad in zip(acts, run.init_outputs, run.init_grads, strict=True):
        assert torch.equal(out, a.detach())
        assert a.grad is not None and torch.equal(grad, a.grad)
    assert not run.init_outputs[0].is_inference()  # plain tensors, usable with autograd


def test_fast_progress_and_thread_count_restored(
    moons: tuple[torch.Tensor, torch.Tensor],
) -> None:
    x, y = moons
    threads = torch.get_num_threads()
    calls: list[tuple[int, int]] = []
    train_mlp_fast(
        mlp("batch", width=8), x, y, lr=0.1, steps=5, progress=lambda d, t: calls.append((d, t))
    )
    assert calls == [(i, 5) for i in range(1, 6)]
    assert torch.get_num_threads() == threads


def test_train_mlps_fast_parallel_equals_sequential(
    moons: tuple[torch.Tensor, torch.Tensor],
) -> None:
    x, y = moons
    threads = torch.get_num_threads()
    calls: list[int] = []
    par = train_mlps_fast(
        [mlp(), mlp("batch")], x, y, lr=2.0, steps=40, progress=lambda d, t: calls.append(d)
    )
    seq = train_mlps_fast([mlp(), mlp("batch")], x, y, lr=2.0, steps=40, parallel=False)
    for a, b in zip(par, seq, strict=True):
        assert torch.equal(a.losses, b.losses)  # each run is deterministic on one thread
    assert calls == list(range(1, 41))  # progress follows the run in this thread (the BN one)
    assert torch.get_num_threads() == threads
    assert train_mlps_fast([], x, y, lr=0.1, steps=3) == []


def test_train_mlps_fast_reraises_worker_errors(moons: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = moons
    bad = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    with pytest.raises(ValueError, match="not supported"):
        train_mlps_fast([mlp(width=8), bad], x, y, lr=0.1, steps=2)


def test_train_mlps_fast_stops_the_other_runs_when_this_one_is_interrupted(
    moons: tuple[torch.Tensor, torch.Tensor],
) -> None:
    # Ctrl+C lands in the calling thread's run; the run on the other thread must end at its
    # next step, not finish its 20 000 steps first (`normlab run` sat there for 35 s).
    x, y = moons
    here, there = mlp("batch", width=8, depth=1), mlp(width=8, depth=1)  # BN: trains here
    before = copy.deepcopy(there.state_dict())

    def interrupt(done: int, total: int) -> None:
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_mlps_fast(
            [here, there], x, y, lr=0.1, steps=20_000, progress=interrupt, helpers=False
        )
    after = there.state_dict()  # a run writes its weights back only when it completes
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize(
    "model",
    [
        nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1)),
        nn.Sequential(nn.Linear(2, 4), nlnn.LayerNorm(4), nn.ReLU(), nn.Linear(4, 1)),
        nn.Sequential(nn.Linear(2, 4), nn.ReLU()),
        nn.Sequential(),
    ],
    ids=["tanh", "layernorm", "no-head", "empty"],
)
def test_fast_refuses_other_models(
    moons: tuple[torch.Tensor, torch.Tensor], model: nn.Module
) -> None:
    x, y = moons
    with pytest.raises(ValueError, match=r"not supported, use Linear -> \[BatchNorm1d\] -> ReLU"):
        train_mlp_fast(model, x, y, lr=0.1, steps=1)


def test_fast_refuses_shared_parameters(moons: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = moons
    tied = nn.Linear(4, 4)
    model = nn.Sequential(
        nn.Linear(2, 4), nn.ReLU(), tied, nn.ReLU(), tied, nn.ReLU(), nn.Linear(4, 1)
    )
    with pytest.raises(ValueError, match="shares a parameter"):
        train_mlp_fast(model, x, y, lr=0.1, steps=1)


def test_fast_refuses_one_value_per_channel() -> None:
    x, y = torch.randn(1, 2), torch.ones(1, 1)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        train_mlp_fast(mlp("batch", width=4, depth=1), x, y, lr=0.1, steps=1)


@pytest.mark.parametrize("name", ["bn-lr", "init-train"])
def test_experiments_report_progress(name: str) -> None:
    calls: list[tuple[int, int]] = []
    run_experiment(name, progress=lambda d, t: calls.append((d, t)), steps=6)
    assert calls == [(i, 6) for i in range(1, 7)]


# --------------------------------------------------------------------------------------------
# the benchmark script


@pytest.mark.slow
def test_widgets_benchmark_quick_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "widgets.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=540,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for widget in ("bn-lr", "init-train", "symmetry", "variance"):
        assert any(line.startswith(f"ratio {widget}: ") for line in lines), proc.stdout
    assert any(line.startswith("verdict: ") for line in lines), proc.stdout
    assert any(line.startswith("same data: ") for line in lines), proc.stdout
    http = lines.index(next(line for line in lines if line.startswith("http: ")))
    for widget in ("bn-lr", "init-train", "symmetry", "variance"):  # a row each, with a ratio
        assert any(
            line.split()[:1] == [widget] and line.split()[3].endswith("x")
            for line in lines[http + 1 :]
        ), proc.stdout
    assert any(line.startswith("cached answers: ") for line in lines), proc.stdout
