"""normlab.watch: its cost per training step next to the plain loop, and its memory over a long run.

**Cost.** Three small models train with AdamW, each in one process, side by side:

- an MLP: 8 x (Linear 256 + ReLU) and a Linear head, batch 128 of 256 features;
- a CNN: ``normlab.zoo``'s ResNet-style net (conv + BatchNorm2d, 2 residual blocks), batch 64 of
  3 x 16 x 16;
- a transformer: GPT-2 (4 blocks x 128, 4 heads, from a ``transformers`` config with random
  init), batch 8 x 64 tokens, its own next-token loss.

Each model has seven copies with the same weights: the plain loop (zero_grad, forward, loss,
backward, step); the loop under ``normlab.watch(model, every=1)``, under ``every=10``
(``w.step()`` between backward and ``opt.step()``), and under ``every=1`` with
``sample_size=None`` (every element read, as :func:`normlab.doctor.diagnose` reads it); the
loop under the watch's probes alone (``ActivationProbe`` with the doctor's statistics on a
sample of each output, as the watch sets it, and ``GradientProbe``, stepped each step): what
measuring costs before the record is made (the judgement, the norms, the dicts); and two floors
of any design that hooks each module: a forward hook hanging a gradient hook, doing nothing,
and the same reading 4 statistics of each output with one host copy (the least a label needs).

A round runs 10 steps of each copy, the copies in rotating order; a ratio is paired, the median
over rounds of a copy's round time over the plain copy's in the same round, so that a change in
the machine's speed between rounds (other work, another core) cancels out. Target: every=1
within 1.3x of plain. Printed too: what every-step watching adds per probed module and step, in
microseconds (the cost is per layer, so a model whose layers each compute less than about 3
times that is over the target).

``--profile every=1`` prints cProfile's top functions of the watched loop (where the time goes).

**Memory** (``--memory``): GPT-2 (12 blocks x 128) trains with AdamW on random token batches
under ``watch(model, every=50, log=..., keep=20)``. Printed at intervals: the process's resident
memory (``/proc/self/statm``), the records held (at most ``keep``) and the log's size. A flat
memory line after the ring has filled is the result.

Usage::

    python benchmarks/watch.py                     # cost, 20 rounds of 10 steps
    python benchmarks/watch.py --rounds 5          # shorter
    python benchmarks/watch.py --threads 1 --cpu-time   # steadier on a busy machine
    python benchmarks/watch.py --mlp-only --width 1024  # the same MLP with 16x the work a layer
    python benchmarks/watch.py --profile 1         # where every-step watching spends its time
    python benchmarks/watch.py --memory --steps 10000
"""

import argparse
import copy
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers
from torch import nn

from normlab import doctor, zoo
from normlab.probe import SAMPLE_SIZE, ActivationProbe, GradientProbe, select_modules
from normlab.watching import watch

STEPS = 10  # per round and copy: every=10 records once a round
TARGET = 1.3  # watch every step / plain
PROBES = "probes alone"  # the doctor's probe settings, stepped each step: no record made
HOOKS = "no-op hooks"  # the floor: a forward hook and a gradient hook per module, doing nothing
FOUR = "4 stats hooks"  # the floor with the least a label needs: 4 statistics, one host copy
EXACT = "every=1, exact"  # sample_size=None: every element, as the doctor reads it
Loss = Callable[[nn.Module], torch.Tensor]
Clock = Callable[[], float]


def gpt2(layers: int) -> nn.Module:
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=layers, n_embd=128, n_head=4, vocab_size=1000, n_positions=64
    )
    return transformers.GPT2LMHeadModel(config)


def models(width: int = 256, batch: int = 128) -> list[tuple[str, nn.Module, Loss]]:
    """(name, model, loss of one batch) for the MLP (``width``, ``batch``), the CNN and the
    transformer."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(width, width), nn.ReLU()]
    mlp = nn.Sequential(*layers, nn.Linear(width, 10))
    x = torch.randn(batch, width, generator=g)  # (N, D)
    images = torch.randn(zoo.input_shape("resnet", 64), generator=g)  # (N, 3, 16, 16)
    ids = torch.randint(1000, (8, 64), generator=g)  # (N, T)
    return [
        (f"MLP 8 x {width}, batch {batch}", mlp, lambda m: m(x).square().mean()),
        ("CNN zoo.resnet", zoo.build("resnet"), lambda m: m(images).square().mean()),
        ("GPT-2 4 x 128", gpt2(4), lambda m: m(ids, labels=ids).loss),
    ]


def _floor_hook(stats: bool) -> Callable[[nn.Module, object, object], None]:
    """A forward hook that hangs a no-op hook on its output's gradient and, with ``stats``,
    reads 4 statistics of the output (mean, std, the fraction of units 0 on every example,
    the largest magnitude) with one host copy: the least any per-module hook design pays."""

    def hook(module: nn.Module, args: object, out: object) -> None:
        if not isinstance(out, torch.Tensor):
            return
        if stats:
            y = out.detach()
            units = (y == 0).flatten(0, -2).all(0).float().mean()  # (units,) -> ()
            torch.stack([y.mean(), y.std(), units, y.abs().amax()]).tolist()
        if out.requires_grad:
            out.register_hook(lambda g: None)

    return hook


class Loop:
    """One copy of a model, its optimizer and (maybe) its watch, run ``STEPS`` steps a call;
    ``every=0``: the watch's probes alone, stepped each step (what a record is made from);
    ``floor``: instead of a watch, :func:`_floor_hook` on every probed module (``"stats"``:
    with its 4 statistics)."""

    def __init__(
        self,
        model: nn.Module,
        loss: Loss,
        every: int | None,
        sample_size: int | None = SAMPLE_SIZE,
        floor: str | None = None,
    ) -> None:
        self.model, self.loss = copy.deepcopy(model), loss
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.after: Callable[[], object] = lambda: None
        if floor is not None:
            for _, m in select_modules(self.model):
                m.register_forward_hook(_floor_hook(floor == "stats"))
        if every == 0:
            settings = {**doctor.probe_settings(self.model), "sample_size": SAMPLE_SIZE}
            probes = [
                ActivationProbe(self.model, **settings, keep=1).__enter__(),
                GradientProbe(self.model, keep=1).__enter__(),
            ]
            self.after = lambda: [p.step() for p in probes]  # type: ignore[func-returns-value]
        elif every is not None:
            w = watch(self.model, every=every, keep=20, sample_size=sample_size)
            self.after = w.__enter__().step

    def __call__(self) -> None:
        for _ in range(STEPS):
            self.opt.zero_grad(set_to_none=True)
            self.loss(self.model).backward()
            self.after()
            self.opt.step()


def rounds_of(loops: dict[str, Loop], rounds: int, clock: Clock) -> dict[str, list[float]]:
    """Each loop's time in each round, the loops in rotating order, after a warm-up round."""
    names = list(loops)
    for loop in loops.values():
        loop()  # warm-up: allocator, kernels, the probes' buffers
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        shift = r % len(names)
        for n in names[shift:] + names[:shift]:
            t0 = clock()
            loops[n]()
            times[n].append(clock() - t0)
    return times


def cost(
    rounds: int, clock: Clock, width: int = 256, batch: int = 128, mlp_only: bool = False
) -> list[tuple[str, float, float, float]]:
    """Print each model's median step times and paired ratios; return (name, every=1 ratio,
    every=10 ratio, microseconds every=1 adds per probed module and step)."""
    out = []
    for name, model, loss in models(width, batch)[: 1 if mlp_only else None]:
        loops = {"plain": Loop(model, loss, None), PROBES: Loop(model, loss, 0)}
        loops |= {f"every={k}": Loop(model, loss, k) for k in (1, 10)}
        loops[EXACT] = Loop(model, loss, 1, sample_size=None)
        loops[HOOKS] = Loop(model, loss, None, floor="noop")
        loops[FOUR] = Loop(model, loss, None, floor="stats")
        times = rounds_of(loops, rounds, clock)
        print(f"\n{name}: {STEPS} steps a round, {rounds} rounds")
        ratio = {}
        for n, ts in times.items():
            ratio[n] = statistics.median(t / b for t, b in zip(ts, times["plain"], strict=True))
            ms = statistics.median(ts) * 1e3 / STEPS
            print(f"  {n:14s} median {ms:8.2f} ms a step   {ratio[n]:5.2f}x plain")
        modules = len(select_modules(model))
        pairs = zip(times["every=1"], times["plain"], strict=True)
        added = statistics.median(t - b for t, b in pairs) / STEPS / modules * 1e6
        print(f"  every=1 adds {added:.0f} us per probed module ({modules}) and step")
        out.append((name, ratio["every=1"], ratio["every=10"], added))
    return out


def profile(every: int) -> None:
    """cProfile of the watched loops (``every``), 30 steps of each model after a warm-up."""
    for name, model, loss in models():
        loop = Loop(model, loss, every)
        loop()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3):
            loop()
        prof.disable()
        print(f"\n{name}, watch every={every}: 30 steps")
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)


def rss_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def memory(steps: int) -> None:
    """Resident memory, records held and the log's size over ``steps`` watched steps."""
    every_, keep = 50, 20
    model = gpt2(12)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(1000, (2, 16), generator=torch.Generator().manual_seed(0))  # (N, T)
    print(f"GPT-2 12 x 128, batch {tuple(ids.shape)}, watch every {every_} steps, keep {keep}")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.jsonl"
        every = max(steps // 10, 1)
        with watch(model, every=every_, log=log, keep=keep) as w:
            for k in range(steps):
                opt.zero_grad()
                model(ids, labels=ids).loss.backward()  # the model's own next-token loss
                w.step()
                opt.step()
                if k % every == 0 or k == steps - 1:
                    size = log.stat().st_size / 2**20
                    print(
                        f"  step {k:6d}: rss {rss_mib():8.1f} MiB, {len(w.records):3d} records "
                        f"held, log {size:7.2f} MiB"
                    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument(
        "--cpu-time", action="store_true", help="process CPU time instead of wall time"
    )
    parser.add_argument("--profile", type=int, default=None, metavar="EVERY", help="cProfile")
    parser.add_argument("--memory", action="store_true", help="the long memory run instead")
    parser.add_argument("--steps", type=int, default=10_000, help="steps of the memory run")
    parser.add_argument("--width", type=int, default=256, help="the MLP's width")
    parser.add_argument("--batch", type=int, default=128, help="the MLP's batch")
    parser.add_argument("--mlp-only", action="store_true", help="measure the MLP alone")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.memory:
        memory(args.steps)
        return 0
    if args.profile is not None:
        profile(args.profile)
        return 0
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    clock = time.process_time if args.cpu_time else time.perf_counter
    what = "process CPU time" if args.cpu_time else "wall time"
    threads = torch.get_num_threads()
    print(f"normlab.watch cost: {threads} threads, {what}, load average {load}")
    results = cost(args.rounds, clock, args.width, args.batch, args.mlp_only)
    print()
    for name, r1, r10, added in results:
        verdict = "within" if r1 <= TARGET else "OVER"
        print(
            f"verdict, {name}: every=1 {r1:.2f}x, every=10 {r10:.2f}x plain: "
            f"{verdict} the {TARGET}x target (every=1 adds {added:.0f} us per module and step)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
