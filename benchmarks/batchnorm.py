"""BatchNorm1d forward+backward: normlab's hand-written backward against torch's native kernel.

Three versions of the same layer in training mode, timed in one process, interleaved (each repeat
runs all three, in rotating order), and reported as median times and ratios to torch's:

- ``torch.nn.BatchNorm1d``: torch's native kernel, the baseline;
- ``normlab.nn.BatchNorm1d``: statistics and outputs from torch primitives, closed-form backward;
- plain autograd: mean/var/elementwise ops, differentiated by autograd.

Absolute times on a shared machine move from run to run; the ratios within one run are the
result. The load average is printed so a noisy run can be told apart.

Usage::

    python benchmarks/batchnorm.py            # (4096, 1024) float32, 50 repeats
    python benchmarks/batchnorm.py --quick    # (512, 256), 5 repeats: a smoke test
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
from torch import nn

import normlab.nn


class PlainBatchNorm1d(nn.Module):
    """Batch norm as a user would write it; autograd differentiates every primitive op."""

    running_mean: torch.Tensor  # buffers, declared for type checkers as torch's modules do
    running_var: torch.Tensor

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1) -> None:
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(0)  # (N, C) -> (C,)
        var = x.var(0, unbiased=False)  # (N, C) -> (C,)
        with torch.no_grad():
            n = x.shape[0]
            self.running_mean.lerp_(mean, self.momentum)
            self.running_var.lerp_(var * n / (n - 1), self.momentum)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def make_step(module: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> Callable[[], None]:
    """One training step's worth of the layer: forward, then the gradients of x, weight, bias."""
    params = [x, *module.parameters()]

    def step() -> None:
        out = module(x)
        torch.autograd.grad(out, params, dy)

    return step


def check_agreement(ours: nn.Module, theirs: nn.Module, x: torch.Tensor, dy: torch.Tensor) -> str:
    """Outputs and input gradients at default float32 tolerances; parameter gradients looser."""
    a, b = ours(x), theirs(x)
    ga = torch.autograd.grad(a, [x, *ours.parameters()], dy)
    gb = torch.autograd.grad(b, [x, *theirs.parameters()], dy)
    torch.testing.assert_close(a, b)  # default float32: rtol 1.3e-6, atol 1e-5
    torch.testing.assert_close(ga[0], gb[0])
    # dgamma and dbeta are sums of N products: float32 summation order alone moves them by
    # about sqrt(N) * 6e-8 * |terms|, so compare them at a tolerance that grows with N.
    tol = 1e-6 * x.shape[0] ** 0.5 * 10
    for g, h in zip(ga[1:], gb[1:], strict=True):
        torch.testing.assert_close(g, h, rtol=tol, atol=tol)
    diff = max((a - b).abs().max().item(), (ga[0] - gb[0]).abs().max().item())
    return f"agree with torch: max |y|, |dx| difference {diff:.1e}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="(512, 256), 5 repeats")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats")
    args = parser.parse_args(argv)
    n, c = (512, 256) if args.quick else (4096, 1024)
    repeats = args.repeats or (5 if args.quick else 50)

    torch.manual_seed(0)
    x = torch.randn(n, c, requires_grad=True)
    dy = torch.randn(n, c)
    modules: dict[str, nn.Module] = {
        "torch.nn.BatchNorm1d (native kernel)": nn.BatchNorm1d(c),
        "normlab.nn.BatchNorm1d (hand backward)": normlab.nn.BatchNorm1d(c),
        "plain autograd (mean/var/elementwise)": PlainBatchNorm1d(c),
    }
    names = list(modules)
    agreement = check_agreement(modules[names[1]], modules[names[0]], x, dy)
    steps = {name: make_step(m, x, dy) for name, m in modules.items()}
    for step in steps.values():  # warm up allocator and kernels
        step()

    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % 3 :] + names[: r % 3]:  # rotate the order
            t0 = time.perf_counter()
            steps[name]()
            times[name].append(time.perf_counter() - t0)

    med = {name: statistics.median(ts) for name, ts in times.items()}
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"BatchNorm1d forward+backward, ({n}, {c}) float32, {torch.get_num_threads()} threads, "
        f"{repeats} interleaved repeats, load average {load}"
    )
    print(agreement)
    for name in names:
        print(
            f"  {name:40s} median {med[name] * 1e3:8.2f} ms   min {min(times[name]) * 1e3:8.2f} ms"
        )
    base = med[names[0]]
    print(
        f"ratio ours/torch {med[names[1]] / base:.2f}x, autograd/torch {med[names[2]] / base:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
