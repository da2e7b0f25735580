"""The training widgets streamed (GET .../stream) beside the finished answer (POST), through HTTP.

Why. A training widget used to show nothing until its run was over: the longest ``bn-lr``
allowed (6 x 128, 500 steps) trains for seconds. Streamed, its curve is drawn from the first frames
while the run goes on. Frames cost something (each is the partial result's figures as JSON, at
most every ``FRAME_S``), so this script measures both what the learner gains and what it costs.

What, per case, through a lab served by ``create_app`` under uvicorn (no warm-up: every run is
computed, with a seed never asked for before), over loopback:

- ``post``: ``POST /api/experiments/NAME`` until its answer (the plain baseline);
- ``first``: ``GET .../stream`` until its first frame (what the learner waits for now);
- ``stream``: the same stream until its ``result`` event, and how many frames came.

Ratios: ``post / first`` (how much sooner something is drawn) and ``stream / post`` (what the
frames cost over the whole run: near 1 means nothing). Repeats are interleaved and the table
shows medians; the load average is printed, since absolute times on a shared machine move.

Usage::

    python benchmarks/widgetstream.py            # 3 repeats
    python benchmarks/widgetstream.py --quick    # 1 repeat, shorter runs
"""

import argparse
import http.client
import itertools
import os
import statistics
import time
import urllib.parse
from typing import Any

from normlab.lab import sse
from widgets import _post_ok, lab_server

SEEDS = itertools.count(1000)  # a seed never used before: no cached answer


def cases(quick: bool) -> list[tuple[str, dict[str, Any]]]:
    scale = 4 if quick else 1
    return [
        ("bn-lr", {"steps": 500 // scale, "hidden_layers": 6, "width": 128}),  # the maxima
        ("init-train", {"steps": 500 // scale, "hidden_layers": 20, "width": 64}),
        ("bn-lr-sweep", {"points": 12, "steps": 150 // scale}),
        ("symmetry", {"steps": 500, "hidden": 64}),
    ]


def post(base: str, name: str, params: dict[str, Any]) -> float:
    ms, _ = _post_ok(f"{base}/api/experiments/{name}", params)
    return ms


def stream(base: str, name: str, params: dict[str, Any]) -> tuple[float, float, int]:
    """(ms to the first frame, ms to the result, frames) of one streamed run."""
    parts = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=600)
    query = urllib.parse.urlencode(params)
    started = time.perf_counter()
    conn.request("GET", f"/api/experiments/{name}/stream?{query}")
    response = conn.getresponse()
    if response.status != 200:
        raise RuntimeError(f"{name} stream answered {response.status}: {response.read()!r}")
    first, frames = None, 0
    try:
        for event, _ in sse.read_events(response.readline):
            ms = (time.perf_counter() - started) * 1e3
            if event == "frame":
                frames += 1
                first = ms if first is None else first
            elif event == "result":
                return (ms if first is None else first), ms, frames
            else:
                raise RuntimeError(f"{name} stream sent {event!r}")
    finally:
        conn.close()
    raise RuntimeError(f"{name} stream ended without a result")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat, shorter runs")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    rows: list[tuple[str, dict[str, Any], list[float]]] = []
    with lab_server(warm=False) as server:
        base = server.base
        post(base, "bn-lr", {"steps": 5, "seed": next(SEEDS)})  # torch's first-call costs
        for name, params in cases(args.quick):
            posts: list[float] = []
            firsts: list[float] = []
            streams: list[float] = []
            frames: list[float] = []
            for _ in range(repeats):  # interleaved: post, then stream, each on a new seed
                posts.append(post(base, name, {**params, "seed": next(SEEDS)}))
                first, whole, n = stream(base, name, {**params, "seed": next(SEEDS)})
                firsts.append(first)
                streams.append(whole)
                frames.append(n)
            med = [statistics.median(v) for v in (posts, firsts, streams, frames)]
            rows.append((name, params, med))
    print(f"load average {os.getloadavg()[0]:.2f}; medians of {repeats}")
    print(
        f"{'case':<44} {'post ms':>9} {'first ms':>9} {'stream ms':>10} {'frames':>7} "
        f"{'post/first':>11} {'stream/post':>12}"
    )
    for name, params, (p, f, s, count) in rows:
        label = name + " " + ",".join(f"{k}={v}" for k, v in params.items())
        times = f"{p:>9.0f} {f:>9.0f} {s:>10.0f} {count:>7.0f}"
        print(f"{label:<44} {times} {p / f:>10.1f}x {s / p:>11.2f}x")


if __name__ == "__main__":
    main()
