"""The lab's training widgets: the seed notebook's own code against normlab, in this process and
through a real lab server; then what a learner waits for after the lab's warm start.

Why. An experiment's run is plain PyTorch, the seed notebook's own loop (``zero_grad``, forward,
loss, backward, step, ``loss.item()``), so a setting nobody has asked for before costs what the
notebook's code costs for the same data: the honest expectation is a ratio of about 1.0 in
process, and a little below it through HTTP (validation, a worker thread, the answer's figures,
tables and printed output, JSON). What a learner feels as speed comes from the lab's
architecture instead: the lesson defaults are computed when the lab starts, and every answer is
cached by its full parameter set. This script measures both.

What, for every training widget (``symmetry``, ``init-train``, ``bn-lr``, ``bn-lr-sweep``) and a
few parameter sets, three ways side by side:

- ``seed``: the seed notebook's code for the same data, written here from its description (eager
  ``nn.Module``\\ s, ``torch.optim.SGD``, ``loss.item()`` per step; the dataset built once, as the
  notebook does). The result of each widget holds a contrast, so the seed way computes it too:
  ``symmetry`` runs ``init_net`` and ``train_track`` for the chosen init and the other one;
  ``init-train`` is ``init_task_demo`` without the plot; ``bn-lr`` is ``train_bn`` for both
  settings; ``bn-lr-sweep`` is ``train_bn`` over the rates, without and with BN;
- ``ours``: ``normlab.experiments.run_experiment(name, **params)`` in this process;
- ``http``: ``POST /api/experiments/{name}`` to a lab started in its own process as a learner
  starts it (``python -m normlab lab --port P --db TMP``), over loopback; then the same request
  again, answered from the lab's cache (target: under 10 ms).

The ratio is seed / ours (at least 1.0: ours is no slower). Every timed call uses a parameter set
not seen before (each repeat changes the seed, the same on every side; the lab never saw it), the
repeats are interleaved with a rotating order, and the tables show medians. Each repeat pairs the
seed way with ours for the same parameters; a ratio is called within noise of 1.0 when a sign
test cannot tell which of the two was faster more often (p >= 0.05). Each timed call starts
after a short pause (:data:`SETTLE_S`): after a parallel region, torch's OpenMP worker threads
(libgomp) spin for up to ~10 ms before they sleep, and without the pause that spinning lands on
the next call, most often the one right after the seed way's. Before the tables, the seed way's
numbers are compared with ours for the first case: the same loop from the same seed gives the
same numbers.

After the warm start (the server's CPU time stops growing: the lessons have been rendered once),
before any other request: ``GET /lessons/{slug}`` for every lesson, and each training widget's
default answer (``POST`` with ``{}``: a lesson's widget starts at its defaults), first visit and
again. The lesson pages count as computed at start-up when a first visit takes no longer than a
later one (within 2x + 5 ms); in the full run, a lab started without the warm-up shows what the
first visit of each page would cost instead. The server's process tree is read from ``/proc``
(Linux). Absolute times on a shared machine move from run to run; the ratios within one run are
the result, and the load average is printed so that a noisy run can be told apart.

The notebook widget (``normlab.widgets``, issue 35) beside the lab, in the same run: what a
learner waits for from a control change to the updated figure. The lab's experiment page
``/experiments/linear-scale`` (on the lab above) and the same experiment as a widget in a real
JupyterLab (``jupyter lab`` started here with throwaway settings folders, its calls to the
network off; the cell run from its Run menu), both in one headless Chromium whose requests off
127.0.0.1 are aborted and reported. Each press of ArrowRight on the ``scale`` slider is timed in
the page, from the key's ``keydown`` to the moment the widget's figures hold other data (the lab
asks its server over HTTP; the widget asks its kernel over the Jupyter comm); the two take turns,
and both sliders walk through the same values, new to both servers. Each face waits for the hand
to rest before it asks (the lab 150 ms, the widget 120 ms): the times include it, as the learner's
wait does. The row prints both medians and notebook / lab.

Usage::

    python benchmarks/widgets.py                 # 1-5 cases per widget, 7 repeats, warm-up
    python benchmarks/widgets.py --quick         # one case per widget, 1 repeat, no warm-up
    python benchmarks/widgets.py --no-notebook   # without JupyterLab (and Chromium)
"""

import argparse
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab.data import two_moons
from normlab.experiments import get_experiment, params_dict, run_experiment
from normlab.lab.lessons import LESSONS

SETTLE_S = 0.03  # pause before every timed call: the last call's OpenMP threads stop spinning
CACHED_TARGET_MS = 10.0
TRAINING = ("symmetry", "init-train", "bn-lr", "bn-lr-sweep")
X_moons, y_moons = two_moons()  # the seed's shared dataset, built once as the notebook does


# --------------------------------------------------------------------------------------------
# The seed notebook's way (eager modules, torch.optim.SGD, loss.item() per step)


def seed_train(net: nn.Module, lr: float, steps: int) -> list[float]:
    """The notebook's ``train_moons`` (and ``train_bn``'s loop): full-batch SGD."""
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(net(X_moons), y_moons)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class SeedMLPBN(nn.Module):
    """The notebook's ``MLPBN``: hidden blocks Linear -> (BN) -> ReLU, BN before the ReLU."""

    def __init__(self, width: int, n_hidden: int, use_bn: bool) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = 2
        for _ in range(n_hidden):
            layers.append(nn.Linear(d, width))
            if use_bn:
                layers.append(nn.BatchNorm1d(width))
            layers.append(nn.ReLU())
            d = width
        layers.append(nn.Linear(d, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


def seed_train_bn(use_bn: bool, lr: float, p: dict[str, Any]) -> list[float]:
    """The notebook's ``train_bn``."""
    torch.manual_seed(p["seed"])
    net = SeedMLPBN(p["width"], p["hidden_layers"], use_bn)
    return seed_train(net, lr, p["steps"])


def seed_bn_lr(p: dict[str, Any]) -> list[list[float]]:
    """Widget 4 for the chosen setting, and for the other one (a bn-lr result holds both)."""
    return [seed_train_bn(bn, p["lr"], p) for bn in (p["batch_norm"], not p["batch_norm"])]


def seed_bn_lr_sweep(p: dict[str, Any]) -> list[list[tuple[float, float]]]:
    """``train_bn`` at every rate, without and with BN: the final loss and the later peak."""
    lrs = torch.logspace(math.log10(p["lr_min"]), math.log10(p["lr_max"]), p["points"]).tolist()
    tail = p["tail"]
    curves = []
    for use_bn in (False, True):
        runs = []
        for lr in lrs:
            losses = [math.inf if math.isnan(v) else v for v in seed_train_bn(use_bn, lr, p)]
            runs.append((sum(losses[-tail:]) / tail, max(losses[tail:])))
        curves.append(runs)
    return curves


class SeedTinyMLP(nn.Module):
    """The notebook's ``TinyMLP``: one hidden ReLU layer, then a linear output."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, hidden)
        self.fc2 = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(torch.relu(self.fc1(x)))
        return out


def seed_symmetry(p: dict[str, Any]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Widget 1 (``init_net`` then ``train_track``) for the chosen init and the other one."""
    runs = []
    for random_init in (p["random_init"], not p["random_init"]):
        net = SeedTinyMLP(p["hidden"])
        torch.manual_seed(p["seed"])  # init_net
        with torch.no_grad():
            for name, w in net.named_parameters():
                if "bias" in name:
                    w.zero_()
                elif random_init:
                    nn.init.normal_(w, mean=0.0, std=p["std"])
                else:
                    w.fill_(p["const"])
        opt = torch.optim.SGD(net.parameters(), lr=p["lr"])  # train_track
        w_hist, g_hist = [], []
        for _ in range(p["steps"]):
            opt.zero_grad()
            loss = F.binary_cross_entropy_with_logits(net(X_moons), y_moons)
            loss.backward()
            assert net.fc1.weight.grad is not None
            w_hist.append(net.fc1.weight.detach().cpu().clone())  # (hidden, 2)
            g_hist.append(net.fc1.weight.grad.detach().cpu().clone())
            opt.step()
        w_all, g_all = torch.stack(w_hist), torch.stack(g_hist)  # (steps, hidden, 2)
        (w_all[:, 0] - w_all[:, 1]).abs().max().item()  # what the notebook prints
        (g_all[:, 0] - g_all[:, 1]).abs().max().item()
        runs.append((w_all, g_all))
    return runs


class SeedDeepMLP(nn.Module):
    """The notebook's ``DeepMLP``: ReLU hidden layers that can hand back their outputs."""

    def __init__(self, width: int, n_hidden: int) -> None:
        super().__init__()
        self.hidden = nn.ModuleList()
        d = 2
        for _ in range(n_hidden):
            self.hidden.append(nn.Linear(d, width))
            d = width
        self.out = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.acts(x)[0]

    def acts(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        acts = []
        for lin in self.hidden:
            x = torch.relu(lin(x))
            acts.append(x)
        out: torch.Tensor = self.out(x)
        return out, acts


def seed_weight(method: str, fan_in: int, fan_out: int) -> torch.Tensor | None:
    """The notebook's ``apply_init`` for one weight (``None``: zero it)."""
    if method == "small":
        return torch.randn(fan_out, fan_in) * 0.02
    if method == "large":
        return torch.randn(fan_out, fan_in) * 0.30
    if method == "xavier":  # xavier_uniform_init
        a: float = (6.0 / (fan_in + fan_out)) ** 0.5
        return (torch.rand(fan_out, fan_in) * 2.0 - 1.0) * a
    if method == "he":  # he_normal_init
        std: float = (2.0 / fan_in) ** 0.5
        return torch.randn(fan_out, fan_in) * std
    return None


def seed_init_train(p: dict[str, Any]) -> tuple[list[float], list[float], list[float]]:
    """Widget 3's ``init_task_demo`` without the plot: variances at init, then the losses.

    The widget also shows each hidden output's gradient variance at init, which the notebook
    does not compute: the seed way gets it as a notebook would, one more forward and backward
    with ``retain_grad``, so that both sides compute the same data.
    """
    torch.manual_seed(p["seed"])
    net = SeedDeepMLP(p["width"], p["hidden_layers"])
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.Linear):
                w = seed_weight(p["method"], m.in_features, m.out_features)
                if w is None:
                    m.weight.zero_()
                else:
                    m.weight.copy_(w)
                m.bias.zero_()
        _, acts = net.acts(X_moons)
        variances = [max(a.var(unbiased=False).item(), 1e-12) for a in acts]
    out, acts = net.acts(X_moons)
    for a in acts:
        a.retain_grad()
    F.binary_cross_entropy_with_logits(out, y_moons).backward()
    grads = [a.grad.var(unbiased=False).item() for a in acts if a.grad is not None]
    net.zero_grad()
    return variances, seed_train(net, p["lr"], p["steps"]), grads


SEED_WAY: dict[str, Callable[[dict[str, Any]], Any]] = {
    "symmetry": seed_symmetry,
    "init-train": seed_init_train,
    "bn-lr": seed_bn_lr,
    "bn-lr-sweep": seed_bn_lr_sweep,
}


# --------------------------------------------------------------------------------------------
# The same data: the seed way's numbers against ours


def _max_diff(ours: list[float], seed: list[float]) -> float:
    """The largest |difference|; two equal non-finite values (inf, nan) count as equal."""
    assert len(ours) == len(seed), (len(ours), len(seed))
    worst = 0.0
    for a, b in zip(ours, seed, strict=True):
        if a == b or (math.isnan(a) and math.isnan(b)):
            continue
        worst = max(worst, abs(a - b) if math.isfinite(a - b) else math.inf)
    return worst


def same_data(widget: str, ours: Any, seed: Any) -> float:
    """The largest difference between what ours and the seed way computed for one case."""
    if widget == "bn-lr":
        return _max_diff(ours.losses + ours.contrast_losses, seed[0] + seed[1])
    if widget == "init-train":
        variances = [max(v, 1e-12) for v in ours.forward_variances]  # the seed floors them
        mine = variances + ours.losses + ours.backward_variances
        return _max_diff(mine, seed[0] + seed[1] + seed[2])
    if widget == "symmetry":
        (w, g), (w_other, g_other) = seed
        summaries = [ours.contrast.max_weight_diff, ours.contrast.max_grad_diff]
        expected = [(w_other[:, 0] - w_other[:, 1]).abs().max().item()]
        expected.append((g_other[:, 0] - g_other[:, 1]).abs().max().item())
        mine = torch.tensor(ours.weights + ours.grads).flatten().tolist() + summaries
        return _max_diff(mine, torch.cat([w, g]).flatten().tolist() + expected)
    assert widget == "bn-lr-sweep"
    pairs = [zip(c.final_losses, c.peak_losses, strict=True) for c in ours.curves]
    mine = [v for curve in pairs for pair in curve for v in pair]
    return _max_diff(mine, [v for runs in seed for pair in runs for v in pair])


# --------------------------------------------------------------------------------------------
# A real lab server in its own process


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` and its living descendants (``/proc``)."""
    procs: dict[int, tuple[int, int]] = {}  # pid -> (parent, utime + stime in ticks)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # it ended meanwhile
                continue
            procs[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    tree, grown = {pid}, True
    while grown:
        more = {p for p, (parent, _) in procs.items() if parent in tree} - tree
        tree |= more
        grown = bool(more)
    return sum(procs[p][1] for p in tree if p in procs) / os.sysconf("SC_CLK_TCK")


@dataclass
class LabServer:
    """A lab serving on 127.0.0.1 in its own process; ``serving_s``/``ready_s``: its start."""

    base: str
    proc: subprocess.Popen[bytes]
    serving_s: float = 0.0  # from the start to the first HTTP answer
    ready_s: float = 0.0  # from the start until its CPU time stops growing (warm-up done)
    errors: list[str] = field(default_factory=list)  # what it said on stderr, once stopped


@contextmanager
def lab_server(warm: bool) -> Iterator[LabServer]:
    """``python -m normlab lab`` (which warms up), or ``create_app(warm=False)`` via uvicorn."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="normlab-bench-") as tmp:
        db = str(Path(tmp) / "progress.sqlite3")
        if warm:
            cmd = [sys.executable, "-m", "normlab", "lab", "--port", str(port), "--db", db]
        else:
            code = (
                "import uvicorn; from normlab.lab.app import create_app; "
                f"uvicorn.run(create_app(db_path={db!r}), host='127.0.0.1', port={port}, "
                "log_level='warning')"
            )
            cmd = [sys.executable, "-c", code]
        log = Path(tmp) / "stderr.txt"
        t0 = time.perf_counter()
        with log.open("wb") as err:
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        server = LabServer(f"http://127.0.0.1:{port}", proc)
        try:
            _wait_until_serving(server)
            server.serving_s = time.perf_counter() - t0
            _wait_until_idle(proc.pid)
            server.ready_s = time.perf_counter() - t0
            yield server
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            server.errors = _summary(log.read_text(errors="replace"))


def _summary(stderr: str) -> list[str]:
    """The lines of a lab's stderr that say what went wrong (tracebacks' frames left out)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    return [
        line
        for line in lines
        if not line.startswith((" ", "\t", "Traceback", "During handling", "The above"))
        and not set(line.strip()) <= set("^~")
    ]


def _wait_until_serving(server: LabServer, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if server.proc.poll() is not None:
            raise RuntimeError(f"the lab exited with status {server.proc.returncode}")
        try:
            urllib.request.urlopen(server.base + "/api/experiments", timeout=30).close()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the lab did not answer within {timeout:g} s") from exc
            time.sleep(0.1)


def _wait_until_idle(pid: int, window: float = 1.5, share: float = 0.05) -> None:
    """Until the server's process tree uses under ``share`` of one core over ``window`` s."""
    deadline = time.monotonic() + 900
    before = _tree_cpu_s(pid)
    while time.monotonic() < deadline:
        time.sleep(window)
        now = _tree_cpu_s(pid)
        if now - before < share * window:
            return
        before = now
    raise RuntimeError("the lab kept computing for 15 minutes after it started serving")


def _request(url: str, body: dict[str, Any] | None = None) -> tuple[float, int, bytes]:
    """GET (no body) or POST JSON: the time to the whole answer (ms), its status and body."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=900) as response:
            status, answer = int(response.status), response.read()
    except urllib.error.HTTPError as exc:  # the lab's error answers are timed and reported too
        status, answer = exc.code, exc.read()
        exc.close()
    return (time.perf_counter() - t0) * 1e3, status, answer


def _post_ok(url: str, body: dict[str, Any]) -> tuple[float, bytes]:
    """POST that must succeed: the time (ms) and the answer."""
    ms, status, answer = _request(url, body)
    if status != 200:
        raise RuntimeError(f"POST {url} {body} answered {status}: {answer[:300]!r}")
    return ms, answer


# --------------------------------------------------------------------------------------------
# Cases and timing


@dataclass(frozen=True)
class Case:
    widget: str
    label: str
    params: dict[str, Any]  # what the widget sends, the seed aside

    def full(self, seed: int) -> dict[str, Any]:
        """Every parameter, defaults included, as the experiment runs with them."""
        experiment = get_experiment(self.widget)
        return params_dict(experiment.make_params({**self.params, "seed": seed}))


def cases(quick: bool) -> list[Case]:
    if quick:
        return [
            Case("symmetry", "random init", {"random_init": True}),
            Case("init-train", "xavier", {"method": "xavier"}),
            Case("bn-lr", "BN, lr=1.7", {"batch_norm": True, "lr": 1.7}),
            Case("bn-lr-sweep", "2 rates", {"points": 2, "lr_max": 2.5}),
        ]
    out = [
        Case("symmetry", "random init", {"random_init": True}),
        Case("symmetry", "const 0.3", {"const": 0.3}),
    ]
    out += [Case("init-train", m, {"method": m}) for m in ("zeros", "small", "large", "xavier")]
    out.append(Case("init-train", "he, lr=0.1", {"lr": 0.1}))
    out += [
        Case("bn-lr", "lr=2", {}),
        Case("bn-lr", "lr=0.5", {"lr": 0.5}),
        Case("bn-lr", "BN, lr=1.2", {"batch_norm": True, "lr": 1.2}),
        Case("bn-lr", "lr=3", {"lr": 3.0}),
        Case("bn-lr-sweep", "4 rates", {"points": 4, "lr_max": 2.5}),
    ]
    return out


Way = Callable[[Case, int], Any]  # (case, seed) -> what it computed


def ways(base: str) -> dict[str, Way]:
    def seed(case: Case, s: int) -> Any:
        return SEED_WAY[case.widget](case.full(s))

    def ours(case: Case, s: int) -> Any:
        return run_experiment(case.widget, **case.params, seed=s)

    def http(case: Case, s: int) -> Any:
        return _post_ok(f"{base}/api/experiments/{case.widget}", {**case.params, "seed": s})[1]

    return {"seed": seed, "ours": ours, "http": http}


Times = dict[str, dict[str, list[float]]]  # case label -> way -> ms per repeat


def time_new(
    all_cases: list[Case], fns: dict[str, Way], repeats: int, seed_base: int
) -> tuple[Times, dict[str, float]]:
    """Interleaved repeats, each a seed never used before; and the same-data check per widget."""
    times: Times = {_key(c): {name: [] for name in fns} for c in all_cases}
    diffs: dict[str, float] = {}
    for r in range(repeats):
        for i, case in enumerate(all_cases):
            names = list(fns)
            k = (r + i) % len(names)
            outputs = {}
            for name in names[k:] + names[:k]:  # rotate the order
                time.sleep(SETTLE_S)
                t0 = time.perf_counter()
                outputs[name] = fns[name](case, seed_base + r)
                times[_key(case)][name].append((time.perf_counter() - t0) * 1e3)
            if r == 0 and case.widget not in diffs:
                diffs[case.widget] = same_data(case.widget, outputs["ours"], outputs["seed"])
    return times, diffs


def time_cached(base: str, all_cases: list[Case], seed: int, n: int) -> dict[str, list[float]]:
    """Each case's last new request, asked again ``n`` times: answered from the lab's cache."""
    out = {}
    for case in all_cases:
        url = f"{base}/api/experiments/{case.widget}"
        out[_key(case)] = [_post_ok(url, {**case.params, "seed": seed})[0] for _ in range(n)]
    return out


def _key(case: Case) -> str:
    return f"{case.widget} {case.label}"


@dataclass(frozen=True)
class Wait:
    """What a learner waits for one page or answer: the first visit, then the median again."""

    what: str
    first_ms: float
    again_ms: float
    status: int  # the HTTP status of the first visit (200 unless the lab failed)


def learner_waits(base: str, repeats: int) -> list[Wait]:
    """After the warm start: every lesson page and every training widget's default answer."""
    targets: list[tuple[str, str, dict[str, Any] | None]] = [
        (f"page {lesson.url}", base + lesson.url, None) for lesson in LESSONS
    ]
    targets += [(f"answer {w} {{}}", f"{base}/api/experiments/{w}", {}) for w in TRAINING]
    rows = []
    for what, url, body in targets:
        time.sleep(SETTLE_S)
        first, status, _ = _request(url, body)
        again = []
        for _ in range(repeats):
            time.sleep(SETTLE_S)
            again.append(_request(url, body)[0])
        rows.append(Wait(what, first, statistics.median(again), status))
    return rows


def cold_pages(base: str) -> dict[str, tuple[float, int]]:
    """Each lesson's first visit on a lab that did not warm up: computed on the visit."""
    out = {}
    for lesson in LESSONS:
        time.sleep(SETTLE_S)
        ms, status, _ = _request(base + lesson.url)
        out[f"page {lesson.url}"] = (ms, status)
    return out


# --------------------------------------------------------------------------------------------
# The notebook widget: from a control change to the updated figure, in JupyterLab and the lab

NOTEBOOK_WIDGET = "linear-scale"  # the cheapest run (one Linear layer): the wait is the faces'
NOTEBOOK_SLIDER = "scale"
CHROMIUM = os.environ.get("NORMLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]

# JupyterLab's own calls to the network, all off: the news feed, the update check, the
# extension manager's PyPI listing, the announcements.
JUPYTER_CONFIG = {
    "LabApp": {
        "news_url": None,
        "check_for_updates_class": "jupyterlab.handlers.announcements.NeverCheckForUpdate",
        "extension_manager": "readonly",
    },
    "ServerApp": {"terminals_enabled": False},
}
JUPYTER_PAGE_CONFIG = {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}
KERNEL_IDLE = """() => /^(?!No Kernel).+ \\| Idle$/m.test(
  document.querySelector('.jp-StatusBar-Widget')?.parentElement?.innerText ?? '')"""

ARM = """([widget, param]) => {
  const w = document.querySelector(widget);
  const drawn = () => JSON.stringify([...w.querySelectorAll('.nl-figure-plot')].map(
    (gd) => (gd.data || []).map((t) => [t.x, t.y, t.z])));
  const before = drawn();
  const input = w.querySelector(`input[type="range"][data-param="${param}"]`);
  window.nlTimed = new Promise((resolve) => {
    let t0 = null;
    input.addEventListener('keydown', () => { t0 = performance.now(); }, { once: true });
    const seen = new MutationObserver(() => {
      if (t0 !== null && drawn() !== before) { seen.disconnect(); resolve(performance.now() - t0); }
    });
    seen.observe(w, { subtree: true, childList: true, attributes: true, characterData: true });
  });
}"""
"""JS: times the next key pressed on the widget's slider until its figures hold other data
(``window.nlTimed``, ms, measured in the page)."""


@contextmanager
def jupyter_lab(cells: list[str]) -> Iterator[str]:
    """``jupyter lab`` on a free port serving one notebook of ``cells``: its URL. Every folder
    of settings, data and state is a temporary one; the kernel runs one torch thread."""
    import nbformat
    from nbformat import v4

    with tempfile.TemporaryDirectory(prefix="normlab-jupyter-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HOME": tmp, "IPYTHONDIR": f"{tmp}/ipython"}
        env |= {f"XDG_{d}_HOME": f"{tmp}/{d.lower()}" for d in ("CONFIG", "CACHE", "STATE", "DATA")}
        env |= {
            f"JUPYTER_{d}_DIR": f"{tmp}/jupyter-{d.lower()}" for d in ("CONFIG", "DATA", "RUNTIME")
        }
        config = root / "jupyter-config"
        (config / "labconfig").mkdir(parents=True)
        (config / "jupyter_server_config.json").write_text(json.dumps(JUPYTER_CONFIG))
        (config / "labconfig" / "page_config.json").write_text(json.dumps(JUPYTER_PAGE_CONFIG))
        (root / "notebooks").mkdir()
        nb = v4.new_notebook(cells=[v4.new_code_cell(c) for c in cells])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        nbformat.write(nb, root / "notebooks" / "widget.ipynb")
        port, token = free_port(), os.urandom(16).hex()
        cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}"]
        cmd += ["--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", "--allow-root"]
        cmd += [f"--ServerApp.root_dir={root / 'notebooks'}"]
        with (root / "jupyter.log").open("wb") as log:
            proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 300
            while True:
                try:
                    urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5).close()
                    break
                except OSError as exc:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError("jupyter lab did not start") from exc
                    time.sleep(0.1)
            yield f"{base}/lab/tree/widget.ipynb?token={token}"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def offline_browser() -> Iterator[tuple[Any, list[str]]]:
    """Headless Chromium whose contexts abort (and list) every request that leaves 127.0.0.1."""
    from playwright.sync_api import sync_playwright

    foreign: list[str] = []

    def route(r: Any) -> None:
        if urllib.parse.urlsplit(r.request.url).hostname != "127.0.0.1":
            foreign.append(r.request.url)
            r.abort()
        else:
            r.continue_()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield (lambda height=900: _guarded_page(browser, route, height)), foreign
        finally:
            browser.close()


def _guarded_page(browser: Any, route: Callable[[Any], None], height: int) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": height})
    context.route("**/*", route)
    page = context.new_page()
    page.set_default_timeout(300_000)
    return page


def open_jupyter_widget(page: Any, url: str) -> str:
    """Open the notebook, run its cells from the Run menu, wait for the widget's first figure."""
    page.goto(url, wait_until="load")
    page.wait_for_function(KERNEL_IDLE)
    page.locator(".lm-MenuBar-itemLabel").get_by_text("Run", exact=True).click()
    page.locator(".lm-Menu-itemLabel").get_by_text("Run All Cells", exact=True).click()
    widget = f'.normlab-widget[data-experiment="{NOTEBOOK_WIDGET}"]'
    page.wait_for_selector(f"{widget}[data-state='ready'] .nl-plot .js-plotly-plot")
    return widget


def open_lab_widget(page: Any, base: str) -> str:
    """The experiment's page in the lab, once its widget has drawn."""
    page.goto(f"{base}/experiments/{NOTEBOOK_WIDGET}", wait_until="load")
    widget = f'.nl-widget[data-widget="{NOTEBOOK_WIDGET}"]'
    page.wait_for_selector(f"{widget}[data-state='ready'] .nl-plot .js-plotly-plot")
    return widget


def time_control(page: Any, widget: str) -> float:
    """One ArrowRight on the widget's slider, to its figures redrawn with the new run (ms)."""
    page.evaluate(ARM, [widget, NOTEBOOK_SLIDER])
    page.locator(f'{widget} input[type="range"][data-param="{NOTEBOOK_SLIDER}"]').focus()
    page.keyboard.press("ArrowRight")
    ms: float = page.evaluate("() => window.nlTimed")
    return ms


def notebook_row(lab_base: str, presses: int) -> tuple[list[float], list[float], list[str]]:
    """The lab's experiment page and the same widget in JupyterLab, one key press each in turn
    (both sliders walk through the same values, each new to its server): (lab ms, notebook ms,
    requests that left 127.0.0.1)."""
    cell = f"import normlab.widgets\n\nnormlab.widgets.Experiment({NOTEBOOK_WIDGET!r})"
    with offline_browser() as (new_page, foreign), jupyter_lab([cell]) as url:
        lab_page, notebook_page = new_page(), new_page()
        lab_widget = open_lab_widget(lab_page, lab_base)
        notebook_widget = open_jupyter_widget(notebook_page, url)
        lab, notebook = [], []
        for _ in range(presses):
            time.sleep(SETTLE_S)
            lab.append(time_control(lab_page, lab_widget))
            time.sleep(SETTLE_S)
            notebook.append(time_control(notebook_page, notebook_widget))
    return lab, notebook, foreign


def print_notebook_row(lab: list[float], notebook: list[float], foreign: list[str]) -> None:
    """The notebook widget's row beside the lab's: medians, and their ratio."""
    m_lab, m_nb = statistics.median(lab), statistics.median(notebook)
    print(
        f"a control change to the updated figure ({NOTEBOOK_WIDGET}, one key press on its "
        f"{NOTEBOOK_SLIDER!r} slider, timed in the page, {len(lab)} presses each, medians; each "
        "includes its face's wait for the hand to rest: the lab 150 ms, the widget 120 ms)"
    )
    print(f"  {'lab page (HTTP)':28s} {m_lab:8.1f} ms   (min {min(lab):.1f}, max {max(lab):.1f})")
    print(
        f"  {'notebook widget (JupyterLab)':28s} {m_nb:8.1f} ms   (min {min(notebook):.1f}, "
        f"max {max(notebook):.1f})   notebook / lab {m_nb / m_lab:.2f}x"
    )
    if foreign:
        print(f"  requests that left 127.0.0.1 (aborted): {foreign}")


# --------------------------------------------------------------------------------------------
# Reports


def print_new(all_cases: list[Case], times: Times, cached: dict[str, list[float]]) -> None:
    print(
        f"  {'widget':11s} {'case':12s} {'seed (ms)':>10s} {'ours (ms)':>10s} {'ratio':>6s}"
        f" {'http (ms)':>10s} {'ratio':>6s}   {'cached median (max) ms':>22s}"
    )
    for case in all_cases:
        m = {name: statistics.median(v) for name, v in times[_key(case)].items()}
        again = cached[_key(case)]
        print(
            f"  {case.widget:11s} {case.label:12s} {m['seed']:10.1f} {m['ours']:10.1f}"
            f" {m['seed'] / m['ours']:5.2f}x {m['http']:10.1f} {m['seed'] / m['http']:5.2f}x"
            f"   {statistics.median(again):13.2f} ({max(again):5.2f})"
        )


def sign_test(wins: int, n: int) -> float:
    """Two-sided p-value of ``wins`` of ``n`` paired repeats if either way is as fast."""
    tail: float = sum(math.comb(n, k) for k in range(min(wins, n - wins) + 1)) / 2**n
    return min(1.0, 2 * tail)


def ratio_verdict(all_cases: list[Case], times: Times, widget: str, way: str) -> tuple[str, bool]:
    """seed / ``way`` for one widget over its cases: the line and whether it is at least 1.0."""
    rows = [times[_key(c)] for c in all_cases if c.widget == widget]
    seed = sum(statistics.median(t["seed"]) for t in rows)
    ours = sum(statistics.median(t[way]) for t in rows)
    ratio = seed / ours
    paired = [s / o for t in rows for s, o in zip(t["seed"], t[way], strict=True)]
    wins = sum(r > 1.0 for r in paired)
    line = f"{ratio:.2f}x (faster than the seed way in {wins} of {len(paired)} paired repeats"
    if len(paired) >= 4:
        low, _, high = statistics.quantiles(paired, n=4)
        p = sign_test(wins, len(paired))
        noise = "within noise of 1.0" if p >= 0.05 else "not noise"
        line += f", sign test p={p:.2f}: {noise}; middle half of their ratios {low:.2f}-{high:.2f})"
    else:
        line += ": too few for a noise estimate)"
    if way == "http":
        per_request = (ours - sum(statistics.median(t["ours"]) for t in rows)) / len(rows)
        line += f", {per_request:+.1f} ms a request over ours in process"
    return line, ratio >= 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one case per widget, 1 repeat")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats")
    parser.add_argument(
        "--no-notebook", action="store_true", help="leave out the JupyterLab widget's row"
    )
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 7)
    all_cases = cases(args.quick)
    seed_base = 1000  # seeds never used before, here or by the lab: every call is new work

    with lab_server(warm=True) as lab:
        print(
            f"lab: `python -m normlab lab` serving after {lab.serving_s:.1f} s, its start-up "
            f"work (the lessons' live results, the playground's sandbox) done after "
            f"{lab.ready_s:.1f} s"
        )
        waits = learner_waits(lab.base, 2 if args.quick else 5)
        fns = ways(lab.base)
        if not args.quick:  # warm-up: imports, allocator, kernels, the lab's first new runs
            for case in all_cases:
                for fn in fns.values():
                    fn(case, seed_base - 1)
        times, diffs = time_new(all_cases, fns, repeats, seed_base)
        cached = time_cached(lab.base, all_cases, seed_base + repeats - 1, 3 if args.quick else 25)
        notebook = None if args.no_notebook else notebook_row(lab.base, 3 if args.quick else 9)
    lab_errors = list(lab.errors)
    cold: dict[str, tuple[float, int]] = {}
    if not args.quick:
        with lab_server(warm=False) as plain:
            cold = cold_pages(plain.base)
        lab_errors += plain.errors

    same = ", ".join(
        f"{w} " + ("identical" if d == 0 else f"max |diff| {d:.1e}") for w, d in diffs.items()
    )
    print(f"same data (the seed way's numbers against ours, first case, same seed): {same}")
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"new parameter sets: the seed notebook's way, ours in process, ours through the lab "
        f"(loopback HTTP); {torch.get_num_threads()} threads, {repeats} interleaved repeat"
        f"{'s' if repeats > 1 else ''}, medians, load average {load}"
    )
    print_new(all_cases, times, cached)
    if args.quick:
        print("  (--quick: one repeat, no warm-up: first calls pay one-time costs; a smoke test)")
    if notebook is not None:
        print_notebook_row(*notebook)
    passed = report(all_cases, times, cached, waits, cold)
    passed &= notebook is None or not notebook[2]  # no request left 127.0.0.1
    for line in lab_errors:
        print(f"the lab reported: {line}")
    note = " (--quick: one sample each, no warm-up; judge by a full run)" if args.quick else ""
    print(f"verdict: {'PASS' if passed and not lab_errors else 'FAIL'}{note}")
    return 0


def report(
    all_cases: list[Case],
    times: Times,
    cached: dict[str, list[float]],
    waits: list[Wait],
    cold: dict[str, tuple[float, int]],
) -> bool:
    """The learner's waits after the warm start, then one verdict line per target."""
    print("after the warm start, before any other request: first visit, then the median again")
    for w in waits:
        error = "" if w.status == 200 else f"   HTTP {w.status}"
        extra = ""
        if w.what in cold:
            ms, status = cold[w.what]
            extra = f"   (no warm-up: {ms:7.1f} ms{'' if status == 200 else f', HTTP {status}'})"
        print(
            f"  {w.what:28s} first {w.first_ms:7.2f} ms   again {w.again_ms:7.2f} ms{error}{extra}"
        )

    ok_ratio = True
    print("target: seed / ours >= 1.0 for a new setting (ours is the seed's loop: about 1.0)")
    for widget in TRAINING:
        line, ok = ratio_verdict(all_cases, times, widget, "ours")
        http, _ = ratio_verdict(all_cases, times, widget, "http")
        ok_ratio &= ok
        print(f"  {widget:11s} in process {line} -> {'meets' if ok else 'misses'} 1.0")
        print(f"  {'':11s} through HTTP {http}")

    defaults = [w for w in waits if w.what.startswith("answer")]
    answers = [statistics.median(v) for v in cached.values()] + [w.again_ms for w in defaults]
    first = max(w.first_ms for w in defaults)
    ok_cached = max(answers) < CACHED_TARGET_MS and first < CACHED_TARGET_MS
    ok_cached &= all(w.status == 200 for w in defaults)
    print(
        f"target: cached answers under {CACHED_TARGET_MS:g} ms: slowest median {max(answers):.2f}"
        f" ms, slowest first default answer after the warm start {first:.2f} ms -> "
        f"{'meets' if ok_cached else 'misses'}"
    )

    pages = [w for w in waits if w.what.startswith("page")]
    failed = [w.what for w in pages if w.status != 200]
    late = [w.what for w in pages if w.status == 200 and w.first_ms > 2 * w.again_ms + 5.0]
    slowest = max(w.first_ms for w in pages)
    contrast = (
        f"; without the warm-up up to {max(ms for ms, _ in cold.values()):.0f} ms" if cold else ""
    )
    problems = [f"{', '.join(late)} computed on the first visit"] if late else []
    problems += [f"{', '.join(failed)} answered an error"] if failed else []
    verdict = "misses: " + "; ".join(problems) if problems else "meets"
    print(
        f"target: lesson pages computed at start-up (a first visit no slower than 2x + 5 ms a "
        f"later one): slowest first visit {slowest:.1f} ms{contrast} -> {verdict}"
    )
    return ok_ratio and ok_cached and not problems


if __name__ == "__main__":
    sys.exit(main())
