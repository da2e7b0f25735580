"""Rendering a lab answer: FastAPI's way for a returned dict against the Runner's JSON bytes.

For each seed widget's answer at one setting (what the lab sends: the result's ``to_dict()`` with
its ``figures``, ``tables`` and printed ``output``, :func:`normlab.lab.runner.answer`),
interleaved in one process, medians and ratios:

- FastAPI (the baseline, what the experiment route did on every request, cached answers too):
  ``jsonable_encoder`` walks the dict, then ``JSONResponse`` renders it;
- new answer: ``Runner``'s rendering of an entry, once (``json.dumps`` with Starlette's
  settings);
- cached answer: an entry already rendered, whose bytes are sent as they are.

This times the rendering alone, not a request (``benchmarks/widgets.py`` times whole cached
requests through a real server). Absolute times on a shared machine move from run to run; the
ratios within one run are the result.

Usage::

    python benchmarks/answers.py            # 41 repeats of 20 calls
    python benchmarks/answers.py --quick    # 1 repeat of 1 call: a smoke test (no timing)
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

from normlab.experiments import get_experiment, run_experiment
from normlab.lab.runner import Runner, _Entry, answer

_body = Runner()._body  # renders an entry's JSON once (an entry outside its cache: not counted)
CALLS = 20  # per timing, to lift short calls above the clock's resolution
WIDGETS: dict[str, dict[str, Any]] = {  # one setting of each seed widget
    "bn-lr": {"batch_norm": True, "lr": 1.7},
    "init-train": {"method": "xavier"},
    "symmetry": {"random_init": True},
    "variance": {"gains": [1.07], "depth": 30},
}


def _entry(value: dict[str, Any]) -> _Entry:
    future: Future[dict[str, Any]] = Future()
    future.set_result(value)
    return _Entry(future=future)


def _fastapi(value: dict[str, Any]) -> bytes:
    return bytes(JSONResponse(jsonable_encoder(value)).body)


def _new(value: dict[str, Any]) -> bytes:
    return _body(_entry(value))


def cases() -> dict[str, tuple[Callable[[], bytes], ...]]:
    """Each widget: (FastAPI's rendering, a new entry's, a cached entry's), all the same bytes."""
    table: dict[str, tuple[Callable[[], bytes], ...]] = {}
    for name, params in WIDGETS.items():
        value = answer(get_experiment(name), run_experiment(name, **params))
        cached = _entry(value)
        assert _body(cached) == _new(value) == _fastapi(value)
        table[name] = (partial(_fastapi, value), partial(_new, value), partial(_body, cached))
    return table


def timed(fn: Callable[[], object], calls: int = CALLS) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat of 1 call")
    args = parser.parse_args(argv)
    repeats, calls = (1, 1) if args.quick else (41, CALLS)
    table = cases()
    times: dict[str, tuple[list[float], list[float], list[float]]] = {
        name: ([], [], []) for name in table
    }
    for r in range(repeats):
        for name, fns in table.items():
            order = list(range(len(fns)))
            order = order[r % len(order) :] + order[: r % len(order)]  # rotate the order
            for i in order:
                times[name][i].append(timed(fns[i], calls))
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"rendering a lab answer, {repeats} interleaved repeats, medians, load {load}")
    print(
        f"  {'widget':11s} {'FastAPI (ms)':>13s} {'new (ms)':>9s} {'ratio':>7s}"
        f" {'cached (ms)':>12s} {'ratio':>8s}"
    )
    for name, (base, new, again) in times.items():
        a, b, c = (statistics.median(t) for t in (base, new, again))
        print(f"  {name:11s} {a:13.3f} {b:9.3f} {a / b:6.1f}x {c:12.4f} {a / c:7.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
