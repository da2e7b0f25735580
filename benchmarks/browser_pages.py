"""Chromium's CPU per lesson page load: a page in a fresh context, as the browser tests' ``page``
fixture opened each before, against a new page in the kept lab context they use now
(``tests/browser/labpage.LabContext``: one context, its storage and cache cleared after each page,
a kept page holding the site's renderer process under ``--process-per-site``).

One Chromium and one lab (``normlab lab --no-warm``, its answers computed by a first load, so
both sides read the same cached runs). Each load goes to the lesson and waits until every widget
has drawn. CPU is that of every Chromium process, the renderers that have ended included (their
time is in their parent's ``cutime``), read from ``/proc``. Interleaved rounds, medians, ratio.

Usage::

    python benchmarks/browser_pages.py            # 3 rounds of 4 loads each way
    python benchmarks/browser_pages.py --quick    # 1 round of 1 load: a smoke test (no timing)
"""

import argparse
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.sync_api import ViewportSize, sync_playwright

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "browser"))
from lab_traces import ALL_SETTLED  # type: ignore[import-not-found]
from labpage import (  # type: ignore[import-not-found]
    CHROMIUM,
    CHROMIUM_ARGS,
    LabContext,
    free_port,
    serving,
)

LESSON = "/lessons/initialization"
VIEWPORT: ViewportSize = {"width": 1280, "height": 900}  # as the tests' pages


def chromium_cpu_s() -> float:
    """CPU seconds of every Chromium process this one started, ended renderers included."""
    stats: dict[int, tuple[int, str, int]] = {}  # pid -> (parent, name, own + reaped ticks)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # it ended meanwhile
                continue
            name, rest = text.split("(", 1)[1].rsplit(")", 1)
            f = rest.split()
            stats[int(entry)] = (int(f[1]), name, sum(int(t) for t in f[11:15]))
    tree, grown = {os.getpid()}, True
    while grown:
        more = {p for p, (parent, _, _) in stats.items() if parent in tree} - tree
        tree |= more
        grown = bool(more)
    ticks = sum(stats[p][2] for p in tree if stats[p][1].startswith("chrom"))
    return ticks / os.sysconf("SC_CLK_TCK")


def per_load(load: Callable[[], None], n: int) -> float:
    """Chromium's CPU seconds per call of ``load``, over ``n`` calls."""
    before = chromium_cpu_s()
    for _ in range(n):
        load()
    return (chromium_cpu_s() - before) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one load each way, no timing")
    quick = parser.parse_args().quick
    rounds, loads = (1, 1) if quick else (3, 4)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cli = [sys.executable, "-m", "normlab", "lab", "--port", str(port), "--no-warm"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        env["XDG_DATA_HOME"] = tmp
        with serving(cli, f"{base}/api/experiments", Path(tmp) / "lab.log", env):
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            kept = LabContext(browser.new_context(viewport=VIEWPORT))
            kept.keep()

            def show(page: Any) -> None:
                page.goto(base + LESSON)
                page.wait_for_function(ALL_SETTLED)

            def fresh() -> None:
                context = browser.new_context(viewport=VIEWPORT)
                show(context.new_page())
                context.close()

            def in_kept() -> None:
                show(kept.context.new_page())
                kept.forget()

            fresh()  # the lab computes the lesson's runs once, for both sides
            baseline, ours = [], []
            for _ in range(rounds):
                baseline.append(per_load(fresh, loads))
                ours.append(per_load(in_kept, loads))
            browser.close()
    b, o = statistics.median(baseline), statistics.median(ours)
    print(f"Chromium CPU per load of {LESSON}, median of {rounds} rounds of {loads}:")
    print(f"  fresh context (baseline): {b:.2f} s")
    print(f"  kept lab context (ours):  {o:.2f} s")
    print(f"  ratio baseline / ours:    {b / o:.2f}x")


if __name__ == "__main__":
    main()
