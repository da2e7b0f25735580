"""Batch norm forward+backward in training mode: normlab's closed-form backward against autograd.

Three versions of ``batch_norm(x, running_mean, running_var, weight, bias, training=True)``,
timed in one process, interleaved (each repeat runs all three, in rotating order), at the lab's
own shape (200, 64) and a large one (4096, 1024), float32:

- ``torch.nn.functional.batch_norm``: torch's fused native kernel, for reference;
- the plain formula through autograd: the ops of normlab's forward (``torch.var_mean`` for the
  mean and biased variance, normalize, scale and shift, the running update), every one
  differentiated by autograd;
- ``normlab.functional.batch_norm``: the same forward, the closed-form backward.

The result is the ratio ``formula / ours`` of the median times: 1.0 or more means the
closed-form backward is no slower than leaving the formula to autograd. Absolute times on a
shared machine move from run to run; the ratios within one run are the result. The load
average is printed so a noisy run can be told apart.

Usage::

    python benchmarks/batchnorm.py            # both shapes, 50 repeats
    python benchmarks/batchnorm.py --quick    # both shapes, 5 repeats: a smoke test
"""

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as tF

from normlab import functional

# (N, C) and how many steps one timed sample runs: enough that a sample of the small shape
# is not mostly timer and loop overhead.
SHAPES = [((200, 64), 20), ((4096, 1024), 1)]

BatchNorm = Callable[..., torch.Tensor]


def formula_batch_norm(
    x: torch.Tensor,
    running_mean: torch.Tensor,
    running_var: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Training-mode batch norm of an ``(N, C)`` batch in normlab's forward ops, left to autograd.

    ``training`` is there for the common call signature; this is always the training formula.
    """
    n = x.shape[0]
    var, mean = torch.var_mean(x, 0, correction=0)  # biased: (N, C) -> (C,), (C,)
    with torch.no_grad():  # the momentum rule, with the unbiased variance
        running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        running_var.mul_(1 - momentum).add_(var * (n / (n - 1)), alpha=momentum)
    xhat = (x - mean) * torch.rsqrt(var + eps)  # (N, C)
    return xhat * weight + bias


CONTENDERS: dict[str, BatchNorm] = {
    "torch F.batch_norm (native kernel)": tF.batch_norm,
    "formula through autograd": formula_batch_norm,
    "normlab batch_norm (closed form)": functional.batch_norm,
}


def make_step(fn: BatchNorm, x: torch.Tensor, dy: torch.Tensor) -> Callable[[], None]:
    """One training step's worth of the layer: forward, then the gradients of x, weight, bias."""
    c = x.shape[1]
    weight = torch.ones(c, requires_grad=True)
    bias = torch.zeros(c, requires_grad=True)
    running_mean, running_var = torch.zeros(c), torch.ones(c)

    def step() -> None:
        out = fn(x, running_mean, running_var, weight, bias, training=True)
        torch.autograd.grad(out, [x, weight, bias], dy)

    return step


def outputs(fn: BatchNorm, x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``y`` and ``dx`` of one training step with unit weight and zero bias."""
    c = x.shape[1]
    y = fn(x, torch.zeros(c), torch.ones(c), torch.ones(c), torch.zeros(c), training=True)
    (dx,) = torch.autograd.grad(y, [x], dy)
    return y.detach(), dx


def check_agreement(x: torch.Tensor, dy: torch.Tensor) -> str:
    """Ours and the formula against torch: outputs and input gradients at float32 tolerance."""
    ref = outputs(tF.batch_norm, x, dy)
    diffs = []
    for fn in (formula_batch_norm, functional.batch_norm):
        got = outputs(fn, x, dy)
        for a, b in zip(got, ref, strict=True):
            torch.testing.assert_close(a, b)  # default float32: rtol 1.3e-6, atol 1e-5
        diffs.append(max((a - b).abs().max().item() for a, b in zip(got, ref, strict=True)))
    return f"max |y|, |dx| difference to torch: formula {diffs[0]:.1e}, ours {diffs[1]:.1e}"


def time_shape(n: int, c: int, inner: int, repeats: int) -> dict[str, float]:
    """Median seconds per step of each contender at ``(n, c)``, interleaved."""
    torch.manual_seed(0)
    x = torch.randn(n, c, requires_grad=True)
    dy = torch.randn(n, c)
    print(f"({n}, {c}): {check_agreement(x, dy)}")
    steps = {name: make_step(fn, x, dy) for name, fn in CONTENDERS.items()}
    for step in steps.values():  # warm up allocator and kernels
        step()
    names = list(steps)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        k = r % len(names)
        for name in names[k:] + names[:k]:  # rotate the order
            t0 = time.perf_counter()
            for _ in range(inner):
                steps[name]()
            times[name].append((time.perf_counter() - t0) / inner)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 repeats: a smoke test")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats")
    args = parser.parse_args(argv)
    repeats = args.repeats or (5 if args.quick else 50)
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"batch_norm forward+backward, training, float32, {torch.get_num_threads()} threads, "
        f"{repeats} interleaved repeats, load average {load}"
    )
    results = {(n, c): time_shape(n, c, inner, repeats) for (n, c), inner in SHAPES}
    torch_name, formula_name, ours_name = CONTENDERS
    print(f"{'median ms per step':40s}" + "".join(f"{f'({n}, {c})':>16s}" for n, c in results))
    for name in CONTENDERS:
        print(f"  {name:38s}" + "".join(f"{med[name] * 1e3:16.3f}" for med in results.values()))
    ratios = [med[formula_name] / med[ours_name] for med in results.values()]
    print(
        f"{'ratio formula / ours (>= 1.0: no slower)':40s}" + "".join(f"{x:16.2f}" for x in ratios)
    )
    ratios = [med[ours_name] / med[torch_name] for med in results.values()]
    print(f"{'ratio ours / torch kernel':40s}" + "".join(f"{x:16.2f}" for x in ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
