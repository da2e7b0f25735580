"""64 same-shape ``bn-lr`` configurations: one after another here, and as Ray tasks.

Two rows, side by side in one run, on the same grid (``lr`` 0.1 to 3 in 32 geometric steps x
2 seeds, BatchNorm on, the default 4x64 MLP, 150 steps):

- **in process, one after another**: ``run_one`` per configuration (the baseline);
- **Ray, local instance**: the grid's groups through :func:`normlab.sweep.distributed.run_on_ray`
  on a local Ray instance with this machine's CPUs (``--cpus``), chunks by the default rule
  (about two tasks per CPU), each task one CPU with one torch thread.

Besides each row's wall time and its ratio to the baseline, it prints what Ray itself costs:
starting the local instance (once per sweep), and its overhead per task, the wall time of
tasks that do nothing (``--noop`` of them, one configuration each, on the same workers) divided
by their number: what a task adds beside its compute, to weigh against a task of seconds. The
workers are warmed first (one real task each: a worker's first task imports torch and normlab),
so the Ray row is a sweep on a running cluster; the start-up is printed on its own line.

It checks that both rows give the same results (same machine, one thread each: equal floats).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/sweep_ray.py             # 64 configurations
    OMP_NUM_THREADS=1 python benchmarks/sweep_ray.py --seeds 1 --steps 20   # a quick look
"""

from __future__ import annotations

import argparse
import os
import time

from normlab.sweep import Config, Grid, Group, Outcome, groups_of
from normlab.sweep.distributed import chunk_size, import_ray, run_on_ray, split
from normlab.sweep.engine import run_one


def _noop(group: Group) -> list[Outcome]:
    """A task that runs nothing: what is left of its time is Ray's."""
    return []


def _grid(seeds: int, steps: int) -> list[Config]:
    axes = ["lr=0.1:3:32", "batch_norm=true", f"steps={steps}"]
    return Grid.parse("bn-lr", axes, seeds=seeds).configs()


def one_after_another(configs: list[Config]) -> tuple[float, dict[str, Outcome]]:
    run_one(configs[0])  # the first run's one-off costs (lazy imports) are no configuration's
    start = time.perf_counter()
    outcomes = {c.id: run_one(c) for c in configs}
    return time.perf_counter() - start, outcomes


def on_ray(configs: list[Config], noop: int) -> tuple[float, dict[str, Outcome], float]:
    """The sweep's wall time through Ray, its outcomes, and Ray's overhead per task."""
    groups = groups_of(configs)
    list(run_on_ray(split(groups, 1)[:2], chunk=1))  # warm the two first workers' imports
    start = time.perf_counter()
    outcomes = {o.config_id: o for o in run_on_ray(groups)}
    wall = time.perf_counter() - start
    empty = split(groups, 1)[:noop]
    start = time.perf_counter()
    list(run_on_ray(empty, chunk=1, runner=_noop))
    return wall, outcomes, (time.perf_counter() - start) / len(empty)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=2, help="seeds per lr (32 lrs): default 2")
    parser.add_argument("--steps", type=int, default=150, help="training steps: default 150")
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="Ray's CPUs")
    parser.add_argument("--noop", type=int, default=64, help="no-op tasks timed: default 64")
    args = parser.parse_args()
    configs = _grid(args.seeds, args.steps)
    n = len(configs)
    print(f"{n} bn-lr configurations, {args.steps} steps; OMP_NUM_THREADS=1; {args.cpus} CPUs")

    base, expected = one_after_another(configs)
    ray = import_ray()
    start = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    started = time.perf_counter() - start
    try:
        wall, got, per_task = on_ray(configs, min(args.noop, n))
    finally:
        ray.shutdown()
    tasks = len(split(groups_of(configs), chunk_size(n, args.cpus)))
    same = {k: o.result for k, o in got.items()} == {k: o.result for k, o in expected.items()}

    print(f"{'path':36} {'seconds':>8} {'per config':>11} {'speed-up':>9}")
    print(f"{'in process, one after another':36} {base:8.2f} {base / n:10.3f}s {1:8.2f}x")
    row = f"Ray, local instance ({tasks} tasks)"
    print(f"{row:36} {wall:8.2f} {wall / n:10.3f}s {base / wall:8.2f}x")
    print(f"Ray start (ray.init, once a sweep): {started:.2f} s")
    print(f"Ray overhead per task (no-op tasks, {args.cpus} workers): {per_task * 1e3:.1f} ms")
    print(f"same results on both paths: {same}")
    if not same:
        raise SystemExit("the Ray row's results differ from the in-process ones")


if __name__ == "__main__":
    main()
