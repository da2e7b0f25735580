r"""A sweep of same-shape ``bn-lr`` configurations: one after another against batched.

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

After the table, the compute floor, measured in the same run: the matmul FLOPs of training all
the rows' nets for all steps (forward :math:`2 N \cdot \mathrm{in} \cdot \mathrm{out}` per
Linear for the :math:`N = 200` samples; backward twice that, the input's gradient and the
weight's, less the input's gradient of the first Linear, which the data does not need), and this
process's matmul throughput at the batched path's own shapes (``torch.bmm`` on the ``(K, N, in)
@ (K, in, out)`` products ``vmap`` runs for the K stacked nets, and the two backward ones, timed
at the benchmark's thread count, the least of a few runs). FLOPs over throughput is the least
time any batched path at those shapes could take here; the first row's time over it, the largest
speed-up batching can reach on this machine; and the floor over the batched row's time, the
share of that row that is matmul. Left out: BatchNorm, ReLU, the loss and the SGD update, each
of which passes over a block's ``N x width`` values, :math:`1 / (6 \cdot \mathrm{width})` of
the block's matmul FLOPs a pass (0.26% at width 64), but memory-bound, so they take far more
than their FLOPs' share of the time: the floor is a bound, not a prediction. For scale, the
throughput of one square 512 x 512 matmul is printed too, with the time and speed-up it would
give: a bound for any layout, which products of ``width``-wide matrices do not reach.

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
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from normlab.data import two_moons
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


# -- the compute floor ------------------------------------------------------------------------

Product = tuple[tuple[int, int, int], tuple[int, int, int]]  # (K, m, n) @ (K, n, p)


def products(k: int, c: dict[str, Any]) -> list[Product]:
    """The batched matrix products of one training step of ``k`` stacked nets of ``c``'s shape,
    as ``vmap`` runs them (``torch.bmm``): per Linear ``in -> out``, the forward ``(K, N, in) @
    (K, in, out)``, the weight's gradient ``(K, out, N) @ (K, N, in)`` and, but for the first
    Linear (the data needs no gradient), the input's ``(K, N, out) @ (K, out, in)``."""
    n = two_moons()[0].shape[0]  # N: every net's full batch
    dims = [2] + [c["width"]] * c["hidden_layers"] + [1]  # 2 -> width -> ... -> width -> 1
    out: list[Product] = []
    for j, (i, o) in enumerate(itertools.pairwise(dims)):
        out += [((k, n, i), (k, i, o)), ((k, o, n), (k, n, i))]
        if j > 0:
            out.append(((k, n, o), (k, o, i)))
    return out


def flops(products: list[Product]) -> int:
    """Multiply-adds counted as 2: ``2 K m n p`` for ``(K, m, n) @ (K, n, p)``."""
    return sum(2 * a[0] * a[1] * a[2] * b[2] for a, b in products)


def matmul_seconds(products: list[Product], device: str, repeats: int = 5) -> float:
    """The least time, of ``repeats`` (after one to warm up), of every product once, on random
    inputs into preallocated outputs."""
    operands = [(torch.randn(a, device=device), torch.randn(b, device=device)) for a, b in products]
    outs = [torch.empty(a[0], a[1], b[2], device=device) for a, b in products]
    best = math.inf
    for _ in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for (a, b), out in zip(operands, outs, strict=True):
            torch.bmm(a, b, out=out)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def floor(cs: list[dict[str, Any]], wall: dict[str, float]) -> list[str]:
    """The compute floor of training ``cs`` (see the module's docstring), against the rows."""
    c, steps, device = cs[0], cs[0]["steps"], cs[0]["device"]
    step = products(len(cs), c)  # no two configurations share a net: K = len(cs) per call
    calls = 2 * steps  # every step, one stacked call without BN and one with BN
    total = calls * flops(step)
    least = calls * matmul_seconds(step, device)
    square = [((1, 512, 512), (1, 512, 512))]
    peak = flops(square) / matmul_seconds(square, device)
    base, fast = wall["one after another"], wall["batched in one process"]
    return [
        f"floor: {total / 1e9:.1f} GFLOP of matmuls ({2 * len(cs)} nets x {steps} steps; not"
        f" counted: BN, ReLU, loss, SGD, few FLOPs (a pass over a block's values:"
        f" {1 / (6 * c['width']):.2%} of its matmuls) but memory-bound)",
        f"  torch.bmm at the batched shapes, {torch.get_num_threads()} threads:"
        f" {total / least / 1e9:.1f} GFLOP/s -> {least:.2f} s at least; one after another /"
        f" floor = {base / least:.1f}x at most; matmul is {least / fast:.0%} of the batched row",
        f"  a square 512 x 512 matmul: {peak / 1e9:.1f} GFLOP/s -> {total / peak:.2f} s,"
        f" {base * peak / total:.1f}x: the bound for any layout, not one the"
        f" {c['width']}-wide products reach",
    ]


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
    for line in floor(cs, wall):
        print(line)
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
