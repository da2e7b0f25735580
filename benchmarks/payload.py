"""Handing a training run to a helper process: ``normlab._payload`` against plain ``pickle``.

What ``train_mlps_fast`` sends for bn-lr's second run (the 4 x 64 MLP, the 200 moons points, the
rate and the step count) and what comes back (150 losses and the trained ``state_dict``), each
way pickled and unpickled with torch's own tensor pickling (``pickle.dumps``, the baseline) and
with ``normlab._payload`` (tensors as raw bytes), interleaved in one process, medians and
ratios. Sending and reading the answer run on the request's critical path (the helper's side
overlaps with the calling thread's run). Absolute times on a shared machine move from run to
run; the ratios within one run are the result.

Usage::

    python benchmarks/payload.py            # 41 repeats of 20 calls
    python benchmarks/payload.py --quick    # 3 repeats: a smoke test
"""

import argparse
import os
import pickle
import statistics
import sys
import time
from collections.abc import Callable

import torch

from normlab import _payload, data
from normlab.experiments import bn_lr

CALLS = 20  # per timing, to lift short calls above the clock's resolution


def cases() -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """Each case: (baseline, ours), both doing the same work."""
    p = bn_lr.Params()
    x, y = data.two_moons()
    net = bn_lr._net(p, False)
    run = (net, x, y, p.lr, p.steps)
    answer = (torch.zeros(p.steps), net.state_dict())
    sent_plain, sent_ours = pickle.dumps(run), _payload.dumps(run)
    back_plain, back_ours = pickle.dumps(answer), _payload.dumps(answer)
    assert all(
        torch.equal(a, b)
        for a, b in zip(
            pickle.loads(sent_plain)[0].state_dict().values(),
            _payload.loads(sent_ours)[0].state_dict().values(),
            strict=True,
        )
    )
    return {
        "send the run (dumps)": (lambda: pickle.dumps(run), lambda: _payload.dumps(run)),
        "helper reads it": (lambda: pickle.loads(sent_plain), lambda: _payload.loads(sent_ours)),
        "helper answers": (lambda: pickle.dumps(answer), lambda: _payload.dumps(answer)),
        "read the answer": (lambda: pickle.loads(back_plain), lambda: _payload.loads(back_ours)),
    }


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn()
    return (time.perf_counter() - t0) / CALLS * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    args = parser.parse_args(argv)
    repeats = 3 if args.quick else 41
    table = cases()
    times: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in table}
    for fns in table.values():  # warm up
        for fn in fns:
            fn()
    for r in range(repeats):
        for name, (plain, ours) in table.items():
            order = [(0, plain), (1, ours)] if r % 2 == 0 else [(1, ours), (0, plain)]
            for i, fn in order:
                times[name][i].append(timed(fn))
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"bn-lr's helper payload, {repeats} interleaved repeats, medians, load {load}")
    print(f"  {'step':22s} {'pickle (ms)':>12s} {'_payload (ms)':>14s} {'ratio':>7s}")
    critical = [0.0, 0.0]
    for name, (plain_ms, ours_ms) in times.items():
        a, b = statistics.median(plain_ms), statistics.median(ours_ms)
        if name in ("send the run (dumps)", "read the answer"):
            critical[0] += a
            critical[1] += b
        print(f"  {name:22s} {a:12.3f} {b:14.3f} {a / b:6.1f}x")
    print(
        f"on the request's critical path (send + read the answer): {critical[0]:.2f} ms -> "
        f"{critical[1]:.2f} ms, {critical[0] / critical[1]:.1f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
