"""The edge-of-chaos grid: batched against one cell at a time, and how soon its first row is drawn.

Why. The ``edge-of-chaos`` experiment measures every cell of a grid of weight and bias variances
on a real stack (``normlab.models.propagate``). A row of the grid's cells
shares the stack's standard normal draws (each cell scales them by its own variances), so one
matmul per layer carries the whole row: ``(cells, 2, n) @ (n, n)``. The plain way, each cell
alone through the same draws, asks for the same arithmetic in ``cells`` times as many small
operations. And the lab streams the grid row by row, so a learner should see the first row of a
large grid at once, not after the whole run.

What, in one process:

1. The grid (20 x 20 cells, depth 50, width 256, tanh), on the same draws (made once, outside
   the timings), three ways, in paired rounds (each round runs all three, in rotating order):

   - ``rows``: the experiment's way, one row (20 cells) through one matmul a layer, 20 rows;
   - ``grid``: all 400 cells through one matmul a layer;
   - ``one at a time``: each of the 400 cells alone through the same layers (the baseline).

   A ratio is paired: the median over rounds of the two ways' times in the same round (a change
   in the machine's speed between rounds cancels). Goal: one at a time / rows >= 5. The numbers
   of the three ways agree (checked before timing: float32 rounding only). For scale, the cost of
   drawing the stack once, and of a stack of its own per cell (timed on one row's 20 cells).

2. The first streamed row through a lab (``create_app`` under uvicorn on 127.0.0.1, in its own
   process, no warm-up, a seed never asked for before so nothing is cached): ``GET
   /api/experiments/edge-of-chaos/stream`` for that grid until its first ``frame`` (goal: <= 150
   ms on a quiet machine), and until its ``result``; against ``POST`` of the same request until
   its answer (what a widget that waited for the answer would show first). The training is cut
   to one step (``steps=1``): the rows come before it.

Absolute times on a shared machine move from run to run; the ratios within one run are the
result. The load average is printed so that a noisy run can be told apart.

Usage::

    python benchmarks/theory.py            # 7 rounds, 5 streamed runs
    python benchmarks/theory.py --quick    # 2 rounds, 2 streamed runs: a smoke test
"""

import argparse
import itertools
import os
import statistics
import time
from collections.abc import Callable

import torch

from normlab import models
from widgets import _post_ok, lab_server
from widgetstream import stream

ROWS, COLS, DEPTH, WIDTH = 20, 20, 50, 256
GRID = {
    "sigma_w2_min": 0.5,
    "sigma_w2_max": 5.0,
    "w_points": COLS,
    "sigma_b2_min": 0.0,
    "sigma_b2_max": 1.0,
    "b_points": ROWS,
    "depth": DEPTH,
    "width": WIDTH,
    "steps": 1,
}
SEEDS = itertools.count(7000)  # a seed never used before: no cached answer

Stack = list[tuple[torch.Tensor, torch.Tensor]]


def ways(stack: Stack, x: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """The three ways of measuring the grid; each returns chi_1 of every cell, (rows, cols)."""
    sw2 = torch.linspace(GRID["sigma_w2_min"], GRID["sigma_w2_max"], COLS)  # (cols,)
    sb2 = torch.linspace(GRID["sigma_b2_min"], GRID["sigma_b2_max"], ROWS)  # (rows,)

    def chi(m: dict[str, torch.Tensor]) -> torch.Tensor:
        return m["growth"][:, DEPTH // 5 :].mean(1)  # as the experiment averages it

    def rows() -> torch.Tensor:
        return torch.stack(
            [chi(models.propagate("tanh", stack, x, sw2, torch.full_like(sw2, b))) for b in sb2]
        )

    def grid() -> torch.Tensor:
        cells = models.propagate("tanh", stack, x, sw2.repeat(ROWS), sb2.repeat_interleave(COLS))
        return chi(cells).view(ROWS, COLS)

    def one_at_a_time() -> torch.Tensor:
        out = torch.empty(ROWS, COLS)
        for i, b in enumerate(sb2):
            for j, w in enumerate(sw2):
                out[i, j] = chi(models.propagate("tanh", stack, x, w.view(1), b.view(1)))[0]
        return out

    return {"rows": rows, "grid": grid, "one at a time": one_at_a_time}


def time_grid(rounds: int) -> None:
    torch.manual_seed(0)
    x = models.input_pair(WIDTH, 1.0, 0.6)
    t0 = time.perf_counter()
    stack = models.draw_stack(DEPTH, WIDTH, "cpu")
    draw_ms = (time.perf_counter() - t0) * 1e3
    contenders = ways(stack, x)
    results = {name: fn() for name, fn in contenders.items()}  # a warm-up, and the check
    base = results["one at a time"]
    diffs = {n: ((r - base).abs() / base.abs()).max().item() for n, r in results.items()}
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:  # rotate the order
            t0 = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - t0)
    own_ms = _own_stacks_ms(x)
    print(
        f"grid {ROWS} x {COLS} cells, depth {DEPTH}, width {WIDTH}, tanh; "
        f"{torch.get_num_threads()} torch threads; median of {rounds} paired rounds"
    )
    print(f"{'way':<16} {'ms':>9} {'one at a time / way':>20} {'max rel. diff of chi_1':>23}")
    for name in names:
        paired = [a / b for a, b in zip(times["one at a time"], times[name], strict=True)]
        ms = statistics.median(times[name]) * 1e3
        print(f"{name:<16} {ms:>9.1f} {statistics.median(paired):>19.1f}x {diffs[name]:>23.1e}")
    goal = statistics.median(
        a / b for a, b in zip(times["one at a time"], times["rows"], strict=True)
    )
    print(f"goal: one at a time / rows >= 5x: {'met' if goal >= 5 else 'NOT met'} ({goal:.1f}x)")
    print(
        f"for scale: drawing the shared stack once {draw_ms:.1f} ms; a stack of its own per "
        f"cell, drawn and run one at a time: {own_ms * ROWS * COLS / 1e3:.1f} s for the grid "
        f"(timed on {COLS} cells)"
    )


def _own_stacks_ms(x: torch.Tensor) -> float:
    """Milliseconds per cell when every cell draws its own stack and runs alone."""
    t0 = time.perf_counter()
    for w in torch.linspace(GRID["sigma_w2_min"], GRID["sigma_w2_max"], COLS):
        stack = models.draw_stack(DEPTH, WIDTH, "cpu")
        models.propagate("tanh", stack, x, w.view(1), torch.tensor([0.05]))
    return (time.perf_counter() - t0) * 1e3 / COLS


def time_first_row(repeats: int) -> None:
    firsts, wholes, posts, counts = [], [], [], []
    with lab_server(warm=False) as server:
        url = f"{server.base}/api/experiments/edge-of-chaos"
        _post_ok(url, {"depth": 2, "width": 16, "w_points": 2, "b_points": 1, "steps": 1})
        for _ in range(repeats):  # interleaved: stream, then post, each on a new seed
            first, whole, frames = stream(
                server.base, "edge-of-chaos", {**GRID, "seed": next(SEEDS)}
            )
            firsts.append(first)
            wholes.append(whole)
            counts.append(frames)
            posts.append(_post_ok(url, {**GRID, "seed": next(SEEDS)})[0])
    first, whole, post = (statistics.median(v) for v in (firsts, wholes, posts))
    print(f"\nthrough a lab on 127.0.0.1 (median of {repeats}), the same grid, steps=1:")
    print(
        f"first row {first:.0f} ms (goal <= 150: {'met' if first <= 150 else 'NOT met'}); "
        f"whole stream {whole:.0f} ms in {statistics.median(counts):.0f} frames; "
        f"POST {post:.0f} ms: the first row {post / first:.1f}x sooner"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds, 2 streamed runs")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    time_grid(2 if args.quick else 7)
    time_first_row(2 if args.quick else 5)


if __name__ == "__main__":
    main()
