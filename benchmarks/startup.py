"""What a new process pays before it answers: the registry's imports, and the /train numbers.

Each measurement is a fresh Python process (``sys.executable``), as ``normlab list``, a lab or a
sweep's worker is; CPU seconds are the child's own (user + system, ``os.wait4``). Interleaved,
baseline then ours, medians and their ratio:

- **imports**: ``import normlab.experiments`` (the registry, what ``normlab list``, the CLI,
  the lab and a sweep's worker import) against the baseline ``import sklearn.datasets,
  normlab.experiments``, which is what every such process imported when :mod:`normlab.data` and
  the training experiments imported scikit-learn at their top;
- **/train numbers**: :func:`normlab.lab.trainlesson.numbers` in a new process with an empty
  answers store (it trains the four cases, as every lab did before the store kept them) against
  one with the store the first filled (it reads them). Both must give the same numbers.

Absolute times on a shared machine move from run to run; the ratios within one run are the
result.

Usage::

    python benchmarks/startup.py            # 5 repeats of each
    python benchmarks/startup.py --quick    # 1 repeat: a smoke test (no timing)
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BASELINE_IMPORT = "import sklearn.datasets, normlab.experiments"
OURS_IMPORT = "import normlab.experiments"
NUMBERS = (
    "import json, sys, torch\n"
    "from normlab.lab.answers import AnswerStore\n"
    "from normlab.lab.trainlesson import numbers\n"
    "torch.set_num_threads(1)  # as normlab lab computes (its --threads default)\n"
    "print(json.dumps(numbers(store=AnswerStore(sys.argv[1])), sort_keys=True))\n"
)


def child(code: str, *args: str) -> tuple[float, str]:
    """Run ``code`` in a new Python process: (its CPU seconds, what it printed). Its usage is
    read with ``wait4``, which reaps it, so Popen is told its exit code."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait
    assert proc.returncode == 0, out
    return usage.ru_utime + usage.ru_stime, out


def ratio_line(what: str, baseline: list[float], ours: list[float]) -> str:
    b, o = statistics.median(baseline), statistics.median(ours)
    return f"  {what:34s} {b:9.2f} {o:9.2f} {b / o:7.1f}x"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repeat: a smoke test")
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else 5
    imports: tuple[list[float], list[float]] = ([], [])
    trained: list[float] = []
    read: list[float] = []
    for _ in range(repeats):
        imports[0].append(child(BASELINE_IMPORT)[0])
        imports[1].append(child(OURS_IMPORT)[0])
        with tempfile.TemporaryDirectory(prefix="normlab-bench-") as folder:
            store = str(Path(folder) / "answers.sqlite3")
            cpu, computed = child(NUMBERS, store)
            trained.append(cpu)
            cpu, again = child(NUMBERS, store)
            read.append(cpu)
            assert again == computed, "the numbers read from the store differ"
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"a new process's CPU seconds (median of {repeats}), baseline vs ours, load {load}")
    print(f"  {'':34s} {'baseline':>9s} {'ours':>9s} {'ratio':>8s}")
    print(ratio_line("import the registry", *imports))
    print(ratio_line("/train numbers (empty vs filled)", trained, read))
    print("  (the /train rows include the registry's imports of each process)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
