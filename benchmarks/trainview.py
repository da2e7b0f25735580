"""The live training view (/train) through a real lab server, beside the seed's way of training.

Why. The seed notebook trains a net in a plain loop and shows its curve once the loop is over;
the lab's /train page streams the run instead, a frame after every step (or every few): the
loss so far, the decision boundary on a 50 x 50 grid and every layer's statistics with the
doctor's labels. A learner then sees something after one step instead of after all of them,
and each frame costs the measurement on top of the step. This script measures both sides.

What, for the default setup (``normlab.trainview.Setup()``), through ``python -m normlab lab``
started as a learner starts it (its warm-up done before anything is timed), over loopback:

- ``open``: from asking for the stream to its first frame (the session built, the points and
  the step-0 frame sent);
- ``play``: from POSTing play to a paused run's control to its first trained frame
  (target: under 150 ms);
- ``fps``: frames a second while playing, one step per frame, at the stream's default cap and
  at its highest (target: 20 or more at the default; every frame holds the boundary and the
  layers' statistics, checked);
- ``to 150``: from play to the frame of step 150, at 10 steps per frame;
- ``seed``: the seed's way, in this process: the same data and net (the view's own plain
  functions), 150 full-batch steps in a plain loop with ``loss.item()`` per step, then the
  finished curve; and ``seed + answer``: the lab's finished-curve widget for the same count,
  ``POST /api/experiments/init-train`` with ``steps=150`` and a seed never used before.

Ratios: the seed way's time to its finished curve over the live view's time to its first
frame (how much sooner a learner sees the run move), and the live view's time to step 150
over the seed way's (what the frames cost). Repeats are interleaved and the tables show
medians; absolute times on a shared machine move from run to run, so the load average is
printed.

Usage::

    python benchmarks/trainview.py            # 5 repeats
    python benchmarks/trainview.py --quick    # 1 repeat, shorter fps windows
"""

import argparse
import dataclasses
import http.client
import os
import statistics
import time
import urllib.parse
from typing import Any

import torch

from normlab import trainview
from normlab.lab import sse
from normlab.lab.trainruns import MAX_FPS
from widgets import _post_ok, lab_server

PLAY_TARGET_MS = 150.0
FPS_TARGET = 20.0
STEPS = 150


class Stream:
    """An open ``GET /api/train/stream``, read one event at a time."""

    def __init__(self, base: str, query: str) -> None:
        parts = urllib.parse.urlsplit(base)
        self.conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=60)
        self.started = time.perf_counter()
        self.conn.request("GET", f"/api/train/stream?{query}")
        self.response = self.conn.getresponse()
        if self.response.status != 200:
            raise RuntimeError(
                f"the stream answered {self.response.status}: {self.response.read()!r}"
            )

        self.events = sse.read_events(self.response.readline)

    def until(self, name: str) -> Any:
        for got, data in self.events:
            if got == name:
                return data
        raise RuntimeError(f"the stream ended before a {name!r} event")

    def close(self) -> None:
        self.conn.close()


def control(base: str, run: dict[str, Any], body: dict[str, Any]) -> None:
    _post_ok(base + run["control"], body)


def _complete(frame: dict[str, Any]) -> bool:
    """A frame with the boundary and every layer's statistics and labels."""
    layers = frame["layers"]
    return (
        len(frame["boundary"]["z"]) == trainview.GRID
        and bool(layers)
        and all("labels" in la and "grad_ratio" in la for la in layers)
        and len(frame["hist"]["act"]) == trainview.Setup().depth
    )


def live(base: str, seed: int, window_s: float) -> dict[str, float]:
    """One run of the default setup (``seed``): open, play, fps at the default and top caps."""
    out: dict[str, float] = {}
    query = urllib.parse.urlencode({"seed": seed})
    stream = Stream(base, query)
    try:
        run = stream.until("run")
        stream.until("frame")
        out["open"] = (time.perf_counter() - stream.started) * 1e3
        stream.until("status")  # paused, ready
        t0 = time.perf_counter()
        control(base, run, {"action": "play"})
        first = stream.until("frame")["a"]
        out["play"] = (time.perf_counter() - t0) * 1e3
        assert first["step"] == 1 and _complete(first), "the first frame is not complete"
        for cap, key in ((30, "fps"), (MAX_FPS, "fps_top")):
            control(base, run, {"fps": cap})
            out[key] = _rate(stream, window_s)
        control(base, run, {"action": "reset"})
        stream.until("reset")
        stream.until("status")
        control(base, run, {"speed": 10, "fps": MAX_FPS})
        t0 = time.perf_counter()
        control(base, run, {"action": "play"})
        while stream.until("frame")["a"]["step"] < STEPS:
            pass
        out["to150"] = (time.perf_counter() - t0) * 1e3
    finally:
        stream.close()
    return out


def _rate(stream: Stream, window_s: float) -> float:
    """Frames a second over ``window_s`` seconds (the first frame after a change skipped)."""
    stream.until("frame")
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < window_s:
        frame = stream.until("frame")["a"]
        assert _complete(frame), "a frame without the boundary or the statistics"
        count += 1
    return count / (time.perf_counter() - t0)


def seed_way(seed: int) -> float:
    """The seed's way, in process: build, 150 plain full-batch steps, then the curve (ms)."""
    values = {**dataclasses.asdict(trainview.Setup()), "seed": seed}
    t0 = time.perf_counter()
    (x, y, _, _), model, opt, _ = trainview.build(**values)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert len(losses) == STEPS
    return (time.perf_counter() - t0) * 1e3


def seed_answer(base: str, seed: int) -> float:
    """The lab's finished-curve widget for the same count of steps: one answer (ms)."""
    ms, _ = _post_ok(f"{base}/api/experiments/init-train", {"steps": STEPS, "seed": seed})
    return ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat, short windows")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 5)
    window = 1.0 if args.quick else 3.0
    times: dict[str, list[float]] = {}
    with lab_server(warm=True) as lab:
        print(
            f"lab: `python -m normlab lab` serving after {lab.serving_s:.1f} s, warmed up "
            f"after {lab.ready_s:.1f} s"
        )
        seed_way(999)  # imports, allocator, kernels
        for r in range(repeats):
            seed = 5000 + r  # never asked for before: no cache anywhere
            for key, value in live(lab.base, seed, window).items():
                times.setdefault(key, []).append(value)
            times.setdefault("seed", []).append(seed_way(seed))
            times.setdefault("seed_answer", []).append(seed_answer(lab.base, seed))
    for line in lab.errors:
        print(f"the lab reported: {line}")
    return report(times, repeats, bool(lab.errors))


def report(times: dict[str, list[float]], repeats: int, errors: bool) -> int:
    med = {k: statistics.median(v) for k, v in times.items()}
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"default setup {trainview.Setup()}")
    print(
        f"{repeats} interleaved repeat{'s' if repeats > 1 else ''}, medians, "
        f"{torch.get_num_threads()} torch threads here, load average {load}"
    )
    rows = [
        ("live: stream asked -> first frame", f"{med['open']:8.1f} ms"),
        ("live: play -> first trained frame", f"{med['play']:8.1f} ms"),
        ("live: frames/s at the default cap (30)", f"{med['fps']:8.1f}"),
        (f"live: frames/s at the top cap ({MAX_FPS})", f"{med['fps_top']:8.1f}"),
        (f"live: play -> frame of step {STEPS} (10 steps/frame)", f"{med['to150']:8.1f} ms"),
        (f"seed: {STEPS} plain steps -> finished curve (in process)", f"{med['seed']:8.1f} ms"),
        (f"seed: init-train steps={STEPS}, one answer (HTTP)", f"{med['seed_answer']:8.1f} ms"),
    ]
    for what, value in rows:
        print(f"  {what:58s} {value}")
    print(
        f"ratio: seed's finished curve / live first frame after play = "
        f"{med['seed'] / med['play']:.1f}x sooner (in process), "
        f"{med['seed_answer'] / med['play']:.1f}x (the lab's one answer)"
    )
    print(
        f"ratio: live to step {STEPS} / seed's {STEPS} plain steps = "
        f"{med['to150'] / med['seed']:.2f} (what the frames and the measurement cost)"
    )
    ok_play = med["play"] < PLAY_TARGET_MS
    ok_fps = med["fps"] >= FPS_TARGET
    print(
        f"target: play -> first frame under {PLAY_TARGET_MS:g} ms: {med['play']:.1f} ms -> "
        f"{'meets' if ok_play else 'misses'}"
    )
    print(
        f"target: {FPS_TARGET:g}+ frames/s with boundary and statistics: {med['fps']:.1f} -> "
        f"{'meets' if ok_fps else 'misses'}"
    )
    print(f"verdict: {'PASS' if ok_play and ok_fps and not errors else 'FAIL'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
