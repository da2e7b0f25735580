"""A sweep of same-shape ``bn-lr`` configurations: one after another against batched.

64 configurations of the default shape (4 hidden blocks of 64 units, 150 steps, two moons):
16 learning rates from 0.05 to 3.0 x 2 inits x 2 seeds, ``batch_norm`` alternating. Each
configuration trains two nets (with and without BN), and no two configurations share one, so
every row trains the same 128 nets:

- one after another: ``run_experiment("bn-lr", **params)`` per configuration, what a sweep of an
  experiment that cannot batch does;
- batched in one process: the experiment's ``batched`` entry, one call for all 64 (every net
  without BN stacked in one ``torch.func.vmap`` forward/backward per step, every net with BN in
  another);
- through a local Ray instance (when Ray is installed): what ``normlab sweep --ray auto`` does,
  the sweep's groups as Ray tasks (:func:`normlab.sweep.distributed.run_on_ray`). The 64 share
  one shape, so they are one batched group and one task (a batched group is never cut: cut, its
  numbers change), on one CPU with one torch thread: this row is the batched one plus what Ray
  costs; a sweep over several shapes spreads its groups over the CPUs. The instance starts in
  the warm-up (its start-up, with a first batched call on every worker, is printed on its own
  line: once a sweep); after the table, Ray's overhead per task: the wall time of as many tasks
  that do nothing, one configuration each, divided by their number (what a task adds beside its
  compute, to weigh against a task of seconds). Its results come back as the store keeps them
  (``Result.to_dict()``: a non-finite loss as None), read back here as NaN.

Each row prints its wall time, its time per configuration and its speed-up over the first row
(the goal: 5x or more), and the same for the CPU time of this process (all its threads): on a
shared machine the wall time also counts other processes' turns, the CPU time does not (a row
whose work runs in other processes, as Ray's workers, shows only its wall time's meaning). A
row is a name and a function from the configurations to their result dicts (:data:`ROWS`), so
another way to run them (a Ray cluster) is one more entry. The batched
results are checked against the first row's: how many losses are bit-identical, how many curves
stay within float32 rounding of the run alone at every step, and where the others leave it (a
chaotic run, as at lr 2.0, amplifies a rounding difference step by step; the tolerance and the
chaos are measured in ``tests/experiments/test_bn_lr_batched.py``).

Absolute times on a shared machine move from run to run; the ratio within one run is the result.
The thread count and the load average are printed so a noisy run can be told apart.

Usage::

    python benchmarks/sweep.py                 # 64 configurations, 150 steps
    python benchmarks/sweep.py --quick         # 8 configurations, 20 steps: a smoke test
    python benchmarks/sweep.py --device cuda   # the same on the GPU
"""

import argparse
import importlib.util
import itertools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from normlab.experiments import get_experiment, params_dict, run_experiment
from normlab.sweep import Config, Group, Outcome, config_id, groups_of
from normlab.sweep.distributed import import_ray, run_on_ray

NAME = "bn-lr"
LRS = [0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.7, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0]
QUICK_LRS = [0.1, 2.0]  # a calm rate and the notebook's chaotic one
INITS = ["default", "he"]
SEEDS = [0, 1]

RTOL = 199 * 2.0**-24  # (N - 1) u: a 200-term float32 mean summed in another order

Run = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def configs(lrs: list[float], steps: int, device: str) -> list[dict[str, Any]]:
    """Full parameter dicts (every declared parameter, validated), ``batch_norm`` alternating."""
    experiment = get_experiment(NAME)
    grid = itertools.product(lrs, INITS, SEEDS)
    return [
        params_dict(
            experiment.make_params(
                {"lr": lr, "init": init, "seed": seed, "steps": steps, "device": device}
                | {"batch_norm": k % 2 == 1}
            )
        )
        for k, (lr, init, seed) in enumerate(grid)
    ]


def one_after_another(cs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each configuration through the registry, as a sweep runs one that cannot batch."""
    return [run_experiment(NAME, **c).data() for c in cs]


def batched(cs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """All configurations in one call of the experiment's batched entry, as the sweep engine
    calls it (keeping the caller's random state, as ``run_experiment`` does)."""
    batched_entry = get_experiment(NAME).batched
    assert batched_entry is not None
    devices = [torch.cuda.current_device()] if cs[0]["device"] == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        return batched_entry(cs)


RAY: dict[str, float] = {}  # the Ray row's own figures: its start-up, its overhead per task


def on_ray(cs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sweep's groups as tasks on a local Ray instance (started at the first call)."""
    ray = import_ray()
    if not ray.is_initialized():
        start = time.perf_counter()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        # and a first batched call on every worker (imports, allocator): a group a worker, each
        # of its own width
        pairs = configs(LRS[:1], 2, cs[0]["device"])[:2]
        widths = range(2, 2 + min(os.cpu_count() or 1, 64))
        _ray_results([c | {"width": w} for w in widths for c in pairs])
        RAY["start_s"] = time.perf_counter() - start
    return _ray_results(cs)


def _ray_results(cs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cells = [Config(NAME, c, config_id(NAME, c)) for c in cs]
    outcomes = {o.config_id: o for o in run_on_ray(groups_of(cells))}
    return [_losses_as_floats(outcomes[c.id]) for c in cells]


def _losses_as_floats(outcome: Outcome) -> dict[str, Any]:
    """The loss curves of a stored result (``to_dict()``: a non-finite float as None) as floats."""
    assert outcome.result is not None, outcome.error
    nan = float("nan")
    return {k: [nan if v is None else v for v in outcome.result[k]] for k in CURVES}


def _noop(group: Group) -> list[Outcome]:
    """A Ray task that runs nothing: what is left of its time is Ray's."""
    return []


def ray_overhead_per_task(cs: list[dict[str, Any]]) -> float:
    """Seconds per task of ``len(cs)`` no-op tasks, one configuration each."""
    cells = [Config(NAME, c, config_id(NAME, c)) for c in cs]
    start = time.perf_counter()
    list(run_on_ray([Group(NAME, (cell,)) for cell in cells], runner=_noop))
    return (time.perf_counter() - start) / len(cells)


CURVES = ("losses", "contrast_losses")

ROWS: dict[str, Run] = {
    "one after another": one_after_another,
    "batched in one process": batched,
}
if importlib.util.find_spec("ray") is not None:  # pip install 'normlab[ray]'
    ROWS["through local Ray"] = on_ray


def curves(results: list[dict[str, Any]]) -> torch.Tensor:
    """``(configs, 2, steps)``: every configuration's two loss curves, float64."""
    return torch.tensor([[r["losses"], r["contrast_losses"]] for r in results], dtype=torch.float64)


def agreement(ours: list[dict[str, Any]], ref: list[dict[str, Any]]) -> str:
    """How close ``ours`` is to ``ref``: the bit-identical losses, and the curves that stay
    within RTOL of ``ref`` at every step (the others: from which step they leave it)."""
    a, b = curves(ours), curves(ref)
    same = ((a == b) | (a.isnan() & b.isnan())).double().mean().item()
    both_diverged = ~a.isfinite() & ~b.isfinite()
    close = ((a - b).abs() <= RTOL * b.abs()) | both_diverged  # (configs, 2, steps)
    stays = close.all(-1).flatten()
    leaves = (~close).double().argmax(-1).flatten()[~stays]  # the first step off, per curve
    lrs = torch.tensor([r["lr"] for r in ref]).repeat_interleave(2)[~stays]  # (curves,)
    text = (
        f"{same:.0%} of losses bit-identical; {int(stays.sum())} of {stays.numel()} curves"
        f" within {RTOL:.2e} relative at every step"
    )
    if leaves.numel():
        text += (
            f"; the others (lr {lrs.min().item():g} to {lrs.max().item():g}) leave it at step"
            f" {int(leaves.min())} at the earliest, median {int(leaves.median())}"
        )
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 configurations, 20 steps")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    args = parser.parse_args(argv)
    lrs, steps = (QUICK_LRS, 20) if args.quick else (LRS, 150)
    cs = configs(lrs, steps, args.device)
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"{len(cs)} {NAME} configurations, {steps} steps, {args.device},"
        f" {torch.get_num_threads()} torch threads, load average {load}"
    )
    for run in ROWS.values():  # warm up: lazy imports, the allocator, the kernels
        run(configs(lrs[:1], 2, args.device)[:2])
    results: dict[str, list[dict[str, Any]]] = {}
    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    for name, run in ROWS.items():
        start, start_cpu = time.perf_counter(), time.process_time()
        results[name] = run(cs)
        wall[name] = time.perf_counter() - start
        cpu[name] = time.process_time() - start_cpu
    base = next(iter(ROWS))
    print(
        f"{'':26s}{'wall s':>9s}{'per config':>12s}{'speed-up':>10s}{'CPU s':>9s}{'speed-up':>10s}"
    )
    for name in ROWS:
        elsewhere = name == "through local Ray"  # its work is the workers' CPU, not this one's
        cpu_cols = (
            f"{'-':>9s}{'-':>10s}"
            if elsewhere
            else f"{cpu[name]:9.2f}{cpu[base] / cpu[name]:9.1f}x"
        )
        print(
            f"  {name:24s}{wall[name]:9.2f}{wall[name] / len(cs):12.3f}"
            f"{wall[base] / wall[name]:9.1f}x{cpu_cols}"
        )
    for name in list(ROWS)[1:]:
        print(f"{name} vs {base}: {agreement(results[name], results[base])}")
    if "start_s" in RAY:  # the same batched group, in a Ray task: the same numbers
        ray_vs = agreement(results["through local Ray"], results["batched in one process"])
        print(f"through local Ray vs batched in one process: {ray_vs}")
        per_task = ray_overhead_per_task(cs)
        import_ray().shutdown()
        print(
            f"Ray: the local instance started in {RAY['start_s']:.2f} s (once a sweep);"
            f" overhead per task {per_task * 1e3:.1f} ms ({len(cs)} no-op tasks,"
            f" {os.cpu_count()} CPUs)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
