"""The playground's Run: the warm sandbox against a fresh interpreter per run.

Three snippets (trivial, a torch op, a torch optimizer's step), each run both ways in one
process, interleaved (each repeat runs both ways, in alternating order), reported as medians and
ratios; the first repeat's answers must be the same both ways:

- baseline: ``subprocess.run([sys.executable, "-c", code])``, a fresh interpreter that imports
  whatever the code needs, with no containment at all;
- ours: :meth:`normlab.lab.sandbox.Sandbox.run`, a fork of the warm fork server (torch, numpy,
  matplotlib and normlab already imported) in fresh namespaces, with its own uid and limits,
  timed from the call to the result (what ``POST /api/run`` adds is JSON and HTTP).

The target is 5x for the torch snippets; the trivial one shows what containment costs when
there is no import to save. The fork server's start-up (once per lab) is printed separately.
Absolute times on a shared machine move from run to run; the ratios within one run are the
result. The load average is printed so a noisy run can be told apart.

Usage::

    python benchmarks/playground.py             # 15 repeats
    python benchmarks/playground.py --quick     # 3 repeats: a smoke test
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

from normlab.lab.sandbox import Sandbox

SNIPPETS = {
    "print(1)": "print(1)",
    "torch randn": "import torch; print(torch.randn(3, 3).sum())",
    # what a learner's training loop does first: a torch optimizer (its first use imports
    # torch._dynamo, ~2 s, unless the fork server has)
    "torch SGD": (
        "import torch\n"
        "torch.manual_seed(0)\n"
        "net = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "net(torch.randn(8, 2)).square().mean().backward()\n"
        "opt.step()\n"
        "print(net.weight.sum().item())"
    ),
}
TARGET = 5.0  # for the torch snippets


def plain(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 15)

    with Sandbox() as sandbox:
        t0 = time.perf_counter()
        first = sandbox.run("print('warm')")
        startup = time.perf_counter() - t0
        assert first.status == "ok", first.stderr

        def ours(code: str) -> str:
            result = sandbox.run(code)
            assert result.status == "ok", result.stderr
            return result.stdout

        ways = {"subprocess": plain, "sandbox": ours}
        times: dict[tuple[str, str], list[float]] = {(s, w): [] for s in SNIPPETS for w in ways}
        answers: dict[str, dict[str, str]] = {s: {} for s in SNIPPETS}
        for r in range(repeats):
            for snippet, code in SNIPPETS.items():
                order = list(ways) if r % 2 == 0 else list(ways)[::-1]
                for way in order:
                    t = time.perf_counter()
                    out = ways[way](code)
                    times[(snippet, way)].append(time.perf_counter() - t)
                    answers[snippet].setdefault(way, out.strip())
        for both in answers.values():  # the same answer both ways (torch: the same form)
            assert len({o.split("(")[0] for o in both.values()}) == 1, both

    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"playground Run: fresh interpreter vs warm sandbox, {repeats} interleaved repeats, "
        f"medians, load average {load}"
    )
    print(f"fork server start-up (once per lab, imports included): {startup:.2f} s")
    print(f"  {'snippet':12s} {'subprocess (ms)':>16s} {'sandbox (ms)':>13s} {'ratio':>7s}")
    ratios = {}
    for snippet in SNIPPETS:
        base = statistics.median(times[(snippet, "subprocess")]) * 1e3
        mine = statistics.median(times[(snippet, "sandbox")]) * 1e3
        ratios[snippet] = base / mine
        print(f"  {snippet:12s} {base:16.1f} {mine:13.1f} {ratios[snippet]:6.2f}x")
    torch_snippets = [s for s in SNIPPETS if s.startswith("torch")]
    ok = all(ratios[s] >= TARGET for s in torch_snippets)
    faster = ", ".join(f"{s} {ratios[s]:.1f}x" for s in torch_snippets)
    print(f"verdict: {'PASS' if ok else 'FAIL'} (faster: {faster}; target {TARGET:g}x)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
