"""A new lab's lesson pages: computed (an empty answers store) against read (a filled one).

Two labs on one fresh store file, as ``normlab lab`` started twice on one machine: the first
computes each lesson's live numbers as it serves the lesson's page (and writes them to the
store), the second reads them (:mod:`normlab.lab.answers`). Each page must be the same bytes
from both: a stored answer is what a fresh run gives. CPU seconds (this process's, all
threads) and wall seconds per page, side by side, with their ratio; then the store's size once
every lesson is in it (what :data:`normlab.lab.answers.MAX_BYTES` must hold).

Usage::

    python benchmarks/answers_store.py            # every lesson (a whole warm-up)
    python benchmarks/answers_store.py --quick    # the first lesson: a smoke test
"""

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

with warnings.catch_warnings():  # starlette warns about its httpx-based client on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from normlab.lab.app import create_app, use_threads
from normlab.lab.lessons import LESSONS, Lesson

LAB = "http://127.0.0.1"  # the lab answers loopback Host names only


def serve(store: Path, db: Path, lessons: list[Lesson]) -> list[tuple[str, float, float]]:
    """A new lab on ``store`` serving ``lessons`` once each: (page, CPU s, wall s) each."""
    out = []
    with TestClient(create_app(db_path=db, answers=store), base_url=LAB) as client:
        for lesson in lessons:
            cpu, wall = time.process_time(), time.perf_counter()
            r = client.get(lesson.url)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            assert r.status_code == 200, r.text[-2000:]
            out.append((r.text, cpu, wall))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the first lesson only")
    args = parser.parse_args(argv)
    use_threads(1)  # as normlab lab computes (its --threads default)
    lessons = [LESSONS[0]] if args.quick else list(LESSONS)
    with tempfile.TemporaryDirectory(prefix="normlab-bench-") as folder:
        store, db = Path(folder) / "answers.sqlite3", Path(folder) / "progress.sqlite3"
        cold = serve(store, db, lessons)
        filled = serve(store, db, lessons)
        size = sum(f.stat().st_size for f in Path(folder).glob("answers.sqlite3*"))
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"a new lab's lesson pages, empty store vs filled store, load {load}")
    print(
        f"  {'lesson':28s} {'CPU empty':>10s} {'filled':>8s} {'ratio':>7s}"
        f" {'wall empty':>11s} {'filled':>8s} {'ratio':>7s}"
    )
    for lesson, (page, c0, w0), (again, c1, w1) in zip(lessons, cold, filled, strict=True):
        assert again == page, f"{lesson.slug}: the page from stored answers differs"
        print(
            f"  {lesson.slug:28s} {c0:10.3f} {c1:8.3f} {c0 / c1:6.1f}x"
            f" {w0:11.3f} {w1:8.3f} {w0 / w1:6.1f}x"
        )
    c0, c1 = sum(t[1] for t in cold), sum(t[1] for t in filled)
    w0, w1 = sum(t[2] for t in cold), sum(t[2] for t in filled)
    print(
        f"  {'all':28s} {c0:10.3f} {c1:8.3f} {c0 / c1:6.1f}x {w0:11.3f} {w1:8.3f} {w0 / w1:6.1f}x"
    )
    print(f"  (seconds a page) the store's file once filled: {size / 2**20:.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
