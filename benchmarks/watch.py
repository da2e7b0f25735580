"""normlab.watch on a GPT-2 sized model: memory over a long run, and the cost per step.

GPT-2 (12 blocks x 128, from a ``transformers`` config with random init) trains with AdamW on
random token batches; ``normlab.watch(model, every=EVERY, log=...)`` records every EVERY-th
step. Printed at intervals: the process's resident memory (``/proc/self/statm``), the records held
(at most ``keep``) and the log's size. A flat memory line after the ring has filled is the
result. Then the median step time on a recorded step, on the others, and without the watch (a
step outside it after every record, interleaved), side by side in one process.

Usage::

    python benchmarks/watch.py                 # 10,000 steps
    python benchmarks/watch.py --steps 1000    # shorter
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import transformers

from normlab.watching import watch

EVERY, KEEP = 50, 20


def gpt2() -> torch.nn.Module:
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=12, n_embd=128, n_head=4, vocab_size=1000, n_positions=64
    )
    return transformers.GPT2LMHeadModel(config)


def rss_mib() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def step(model: torch.nn.Module, opt: torch.optim.Optimizer, ids: torch.Tensor) -> None:
    opt.zero_grad()
    model(ids, labels=ids).loss.backward()  # the model's own next-token loss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args(argv)
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(1000, (2, 16), generator=torch.Generator().manual_seed(0))  # (N, T)
    print(f"GPT-2 12 x 128, batch {tuple(ids.shape)}, watch every {EVERY} steps, keep {KEEP}")
    times: dict[str, list[float]] = {"plain": [], "recorded": [], "not recorded": []}
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "run.jsonl"
        every = max(args.steps // 10, 1)
        with watch(model, every=EVERY, log=log, keep=KEEP) as w:
            for k in range(args.steps):
                t0 = time.perf_counter()
                step(model, opt, ids)
                record = w.step()
                opt.step()
                kind = "not recorded" if record is None else "recorded"
                times[kind].append(time.perf_counter() - t0)
                if k % every == 0 or k == args.steps - 1:
                    size = log.stat().st_size / 2**20
                    print(
                        f"  step {k:6d}: rss {rss_mib():8.1f} MiB, {len(w.records):3d} records "
                        f"held, log {size:7.2f} MiB"
                    )
                if k % EVERY == EVERY // 2:  # the plain step, between records
                    t0 = time.perf_counter()
                    step(model, opt, ids)
                    opt.step()
                    times["plain"].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items() if v}
    base = med["plain"]
    for kind, ms in med.items():
        print(f"  {kind:13s} median {ms:8.2f} ms  {ms / base:5.2f}x plain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
