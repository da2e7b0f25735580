"""The costliest allowed request of every experiment: CPU time and memory against its bound.

Each experiment runs at :meth:`Experiment.maxima` (every number at its
maximum, the costliest choices), as the lab answers it (the run, then its figures, tables,
printed output and JSON: :func:`normlab.lab.runner.answer`), in a fresh process of its own, so
that one run's memory is not another's, with one torch thread (``--threads``): with two
OpenMP threads on a loaded two-core machine a waiting thread spins, and CPU time then measures
the load rather than the run (error-surface at 200 steps: 0.8 s with one thread, 20 s with two
at a load average of 9). It prints, per experiment, the CPU seconds (user + system, every
thread), the peak resident memory above what the process held just before the run (``VmHWM``
after resetting it; torch's allocations are resident memory like any other), the answer's JSON
size, and the declared :class:`Cost`. ``tests/lab/test_maxima.py``
holds a real lab to the same bounds.

Usage::

    python benchmarks/maxima.py                      # every experiment at its maxima
    python benchmarks/maxima.py bn-lr drift          # some of them
    python benchmarks/maxima.py bn-lr --set steps=500 --set width=128
    python benchmarks/maxima.py doctor --choices     # each choice and bool tried in turn
    python benchmarks/maxima.py --quick              # the two cheapest: a smoke test
"""

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

from normlab.experiments import get_experiment, list_experiments


def measure(name: str, params: dict[str, Any]) -> dict[str, float]:
    """CPU seconds and peak MiB above the starting resident memory of one lab answer."""
    from normlab.lab.runner import Runner

    runner = Runner()
    runner.run("linear-scale", {})  # the first run's one-off costs (lazy imports) are not its
    rss = _status_kib("VmRSS")
    try:  # the peak so far := now (Linux 4.0+), so the peak after is this run's
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    before = time.process_time()
    body = runner._body(runner._run(name, params, None))
    cpu = time.process_time() - before
    peak = _status_kib("VmHWM")  # = ru_maxrss, reset with the peak
    return {"cpu_s": cpu, "peak_mib": max(peak - rss, 0) / 1024, "answer_mib": len(body) / 2**20}


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def _child(name: str, params: dict[str, Any], threads: int) -> dict[str, float]:
    """:func:`measure` in a fresh interpreter with ``threads`` torch threads."""
    code = "import json, sys; from maxima import measure; print(json.dumps(measure(*json.loads(sys.argv[1]))))"  # noqa: E501
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps([name, params])],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.abspath(__file__)),
        env={**os.environ, "OMP_NUM_THREADS": str(threads)},
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{name} {params}: failed\n{done.stderr[-2000:]}")
    value: dict[str, float] = json.loads(done.stdout.splitlines()[-1])
    return value


def _variants(name: str) -> list[tuple[str, dict[str, Any]]]:
    """The maxima, then each choice and bool value tried in turn on top of them."""
    experiment = get_experiment(name)
    top = experiment.maxima()
    out = [("maxima", top)]
    for p in experiment.parameters:
        values: tuple[Any, ...] = ()
        if p.kind == "bool":
            values = (False, True)
        elif p.kind == "choice":
            values = p.choices or ()
        out += [(f"{p.name}={v}", {**top, p.name: v}) for v in values if v != top[p.name]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="experiments (default: all)")
    parser.add_argument("--set", action="append", default=[], help="NAME=JSON on top of maxima")
    parser.add_argument("--choices", action="store_true", help="try each choice and bool value")
    parser.add_argument("--quick", action="store_true", help="two cheap experiments only")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    args = parser.parse_args()
    names = args.names or [e.name for e in list_experiments()]
    if args.quick:
        names = ["linear-scale", "two-moons"]
    extra = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    print(
        f"{'experiment':<18} {'setting':<24} {'CPU s':>7} {'peak MiB':>9} {'answer MiB':>10} "
        f"{'bound':>14}"
    )
    total = 0.0
    for name in names:
        cost = get_experiment(name).cost
        rows = _variants(name) if args.choices else [("maxima", get_experiment(name).maxima())]
        for label, params in rows:
            got = _child(name, {**params, **extra}, args.threads)
            total += got["cpu_s"] if label == "maxima" else 0.0
            bound = f"{cost.cpu_s:g} s {cost.mib} MiB"
            over = " OVER" if got["cpu_s"] > cost.cpu_s or got["peak_mib"] > cost.mib else ""
            print(
                f"{name:<18} {label:<24} {got['cpu_s']:7.2f} {got['peak_mib']:9.0f} "
                f"{got['answer_mib']:10.1f} "
                f"{bound:>14}{over}",
                flush=True,
            )
    print(f"total CPU at maxima: {total:.1f} s")


if __name__ == "__main__":
    main()
