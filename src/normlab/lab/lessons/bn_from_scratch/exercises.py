r"""Exercises closing lesson 4, ``bn-from-scratch``: BatchNorm's conventions, its backward, and
whether a good initializer alone can stand in for it at a high learning rate.

Two code exercises, the seed notebook's second and third:

- ``bn-backward``: the learner writes ``batchnorm_backward(dy, x, gamma, eps=1e-5)`` returning
  :math:`(\partial L/\partial x, \partial L/\partial\gamma, \partial L/\partial\beta)`. The probe
  calls it on float64 batches drawn fresh for the submission (one with a variance small enough
  that leaving out :math:`\epsilon` shows) and counts any use of autograd; the server compares
  the gradients with autograd through ``torch.nn.functional.batch_norm``.
- ``init-vs-bn``: the learner trains the lesson's MLP at learning rate 2.0, once He-initialized
  without BatchNorm and once with BatchNorm, and says whether BatchNorm still helps. The server
  recomputes both runs with the lab's experiments, checks that the learner's loss curves are
  those runs, and judges the conclusion from its own curves.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from normlab.experiments import run_experiment
from normlab.lab.lessons.exercise import (
    Check,
    Choice,
    ChoiceExercise,
    CodeExercise,
    Exercise,
    Verdict,
    run_checks,
)
from normlab.lab.sandbox.exercise_child import case_tensors

LESSON = "bn-from-scratch"

# -- bn-backward -------------------------------------------------------------------------------

EPS = 1e-5
ATOL, RTOL = 1e-6, 1e-5
"""A learner's gradient matches if ``|theirs - autograd| <= ATOL + RTOL * |autograd|`` everywhere.

The inputs are float64 and a right formula kept in float64 agrees to ~1e-12. Casting to float32
does not pass: on the batch shifted by 200 stds, ``x - mean`` keeps only ~1e-5 of relative
precision there, and ``dgamma`` ends up ~2e-4 off. Leaving out eps is 5% off on that batch."""

# (rows, features, scale, shift): a tiny batch, a shifted one, one whose variance (1e-4) is
# close enough to eps that a formula without eps is 5% off.
_CASES = ((4, 3, 1.0, 0.0), (16, 5, 3.0, 5.0), (64, 8, 0.01, -2.0))

BACKWARD_CHECKS = (
    "batchnorm_backward is a function",
    "it returns (dx, dgamma, dbeta) with the right shapes",
    "it computes the gradients without autograd",
    "grad of beta matches autograd",
    "grad of gamma matches autograd",
    "grad of x matches autograd",
)


def backward_args(rng: random.Random) -> dict[str, Any]:
    """Fresh seeds for the three batches of one submission."""
    return {
        "cases": [
            {"n": n, "d": d, "scale": scale, "shift": shift, "seed": rng.randrange(2**31)}
            for n, d, scale, shift in _CASES
        ]
    }


def autograd_reference(
    x: torch.Tensor, gamma: torch.Tensor, dy: torch.Tensor, eps: float = EPS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dgamma, dbeta)`` by autograd through torch's own training-mode batch norm."""
    x = x.detach().clone().requires_grad_()
    gamma = gamma.detach().clone().requires_grad_()
    beta = torch.zeros_like(gamma, requires_grad=True)
    y = F.batch_norm(x, None, None, gamma, beta, training=True, eps=eps)  # (N, D)
    dx, dgamma, dbeta = torch.autograd.grad(y, (x, gamma, beta), dy)
    return dx, dgamma, dbeta


def judge_backward(args: dict[str, Any], report: dict[str, Any]) -> Verdict:
    """(On the server.) The six checks of ``bn-backward``, from the probe's report."""
    cases: list[dict[str, Any]] = report.get("cases", [])
    shapes = [(c["n"], c["d"]) for c in args["cases"]]

    def defined() -> str | None:
        if not report.get("defined"):
            return "your code defines no `batchnorm_backward`"
        if not report.get("callable"):
            return "`batchnorm_backward` is not a function"
        return None

    def returns() -> str | None:
        for (n, d), case in zip(shapes, cases, strict=True):
            where = f"for x of shape ({n}, {d})"
            if "error" in case:
                return f"{where} it raised {case['error']}"
            if "shape_error" in case:
                return f"{where} {case['shape_error']}"
            want = {"dx": [n, d], "dgamma": [d], "dbeta": [d]}
            for name, shape in want.items():
                got = case["grads"][name]["shape"]
                if got != shape:
                    return f"{where} {name} has shape {tuple(got)}, expected {tuple(shape)}"
        return None

    def by_hand() -> str | None:
        calls = sum(case["autograd_calls"] for case in cases)
        if calls:
            return (
                f"it called autograd ({calls} time{'s' if calls > 1 else ''}); write the "
                "three gradients from the chain rule, the check compares them with autograd"
            )
        return None

    def matches(index: int, name: str, label: str) -> Callable[[], str | None]:
        def check() -> str | None:
            for k, ((n, d), spec, case) in enumerate(
                zip(shapes, args["cases"], cases, strict=True), 1
            ):
                x, gamma, dy = case_tensors(spec)
                want = autograd_reference(x, gamma, dy)[index].flatten()
                got = torch.tensor(case["grads"][name]["values"], dtype=torch.float64)
                diff = (got - want).abs()
                if not bool((diff <= ATOL + RTOL * want.abs()).all()):
                    return (
                        f"for x of shape ({n}, {d}) (batch {k} of {len(shapes)}), the grad of "
                        f"{label} differs from autograd by {diff.max().item():.3g} (max abs), "
                        f"tolerance {ATOL:g} + {RTOL:g} x |autograd|"
                    )
            return None

        return check

    checks: list[Check] = list(
        zip(
            BACKWARD_CHECKS,
            (
                defined,
                returns,
                by_hand,
                matches(2, "dbeta", "beta"),
                matches(1, "dgamma", "gamma"),
                matches(0, "dx", "x"),
            ),
            strict=True,
        )
    )
    return run_checks(
        checks,
        "The three gradients agree with autograd on every batch, the one with a variance near "
        "eps included: BatchNorm is differentiable, and its backward is a few batch sums.",
        explanation=BACKWARD_EXPLANATION,
    )


BACKWARD_EXPLANATION = (
    r"The closed form, column by column, with \(\sigma = \sqrt{\sigma_B^2 + \varepsilon}\) and "
    r"\(\hat{x}_i = (x_i - \mu_B)/\sigma\): "
    r"\[ \frac{\partial L}{\partial \beta} = \sum_j dy_j, \qquad "
    r"\frac{\partial L}{\partial \gamma} = \sum_j dy_j\,\hat{x}_j, \qquad "
    r"\frac{\partial L}{\partial x_i} = \frac{\gamma}{N\sigma}\Big(N\,dy_i - \sum_j dy_j "
    r"- \hat{x}_i \sum_j dy_j\,\hat{x}_j\Big) \]"
    r"The first term is the path through \(\hat{x}_i\) alone; \(-\sum_j dy_j\) comes through "
    r"the mean, which every row shares, and \(-\hat{x}_i \sum_j dy_j\,\hat{x}_j\) through the "
    r"variance. So \(\partial L/\partial x\) sums to zero over the batch and is uncorrelated "
    r"with \(\hat{x}\): a step along it cannot move the batch's mean or spread, which the "
    r"normalization would undo anyway."
)


BACKWARD_STARTER = '''\
import torch


def batchnorm_backward(dy, x, gamma, eps=1e-5):
    """Gradients of y = gamma * x_hat + beta, x_hat = (x - mean) / sqrt(var + eps), where mean
    and the biased var are taken over the batch (dim 0). Shapes: x and dy (N, D), gamma (D,).
    Return (dx, dgamma, dbeta), shaped like x, gamma and gamma."""
    n = x.shape[0]
    mu = x.mean(0)                            # (D,)
    var = x.var(0, unbiased=False)            # (D,)
    inv_std = 1.0 / torch.sqrt(var + eps)     # (D,)
    x_hat = (x - mu) * inv_std                # (N, D)
    dbeta = torch.zeros_like(gamma)           # your turn
    dgamma = torch.zeros_like(gamma)          # your turn
    dx = torch.zeros_like(x)                  # your turn: mind that mu and var depend on x
    return dx, dgamma, dbeta


# Compare with autograd yourself before you submit.
torch.manual_seed(0)
x = torch.randn(8, 3, dtype=torch.float64, requires_grad=True)
gamma = torch.rand(3, dtype=torch.float64, requires_grad=True)
beta = torch.zeros(3, dtype=torch.float64, requires_grad=True)
dy = torch.randn(8, 3, dtype=torch.float64)
y = torch.nn.functional.batch_norm(x, None, None, gamma, beta, training=True)
y.backward(dy)
with torch.no_grad():
    mine = batchnorm_backward(dy, x, gamma)
for name, g, ref in zip(("dx", "dgamma", "dbeta"), mine, (x.grad, gamma.grad, beta.grad)):
    print(name, "max abs diff from autograd:", (g - ref).abs().max().item())
'''

# -- init-vs-bn --------------------------------------------------------------------------------

LR, STEPS, HIDDEN, WIDTH, SEED = 2.0, 150, 4, 64, 0
COMPARED_STEPS = 20
CURVE_RTOL = 1e-3
"""The learner's curves must match the recomputed ones over the first steps, to 0.1%. At this
rate training amplifies rounding, so later steps of an independent (equally right) loop drift
apart; an eager loop with torch's own BatchNorm stays within 3e-5 for the first 20 steps."""

COMPARE_CHECKS = (
    "he_losses, bn_losses and bn_still_helps are set",
    "he_losses is the He-initialized run without BatchNorm",
    "bn_losses is the run with BatchNorm",
    "bn_still_helps is True or False",
    "the conclusion follows from the two curves",
)


@functools.lru_cache(maxsize=1)
def reference_curves() -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The two runs, recomputed by the lab's experiments: ``(he_losses, bn_losses)``."""
    common: dict[str, Any] = {
        "hidden_layers": HIDDEN,
        "width": WIDTH,
        "lr": LR,
        "steps": STEPS,
        "seed": SEED,
    }
    he = run_experiment("init-train", method="he", **common).to_dict()["losses"]
    bn = run_experiment("bn-lr", batch_norm=True, **common).to_dict()["losses"]
    # to_dict() writes a diverged loss as None; keep it a float (nan) here
    return tuple(_nan_if_none(v) for v in he), tuple(_nan_if_none(v) for v in bn)


def _nan_if_none(v: float | None) -> float:
    return math.nan if v is None else float(v)


def _trains(curve: tuple[float, ...]) -> bool:
    """Stable training: every loss finite, and the last ten below the first loss."""
    tail = curve[-10:]
    return all(math.isfinite(v) for v in curve) and sum(tail) / len(tail) < curve[0]


def bn_still_helps(he: tuple[float, ...], bn: tuple[float, ...]) -> bool:
    """The conclusion the curves support: BN trains stably, and He alone does not (or ends at
    a loss at least twice BN's)."""
    if not _trains(bn):
        return False
    if not _trains(he):
        return True
    return sum(bn[-10:]) < 0.5 * sum(he[-10:])


def _describe(curve: tuple[float, ...]) -> str:
    bad = next((i for i, v in enumerate(curve) if not math.isfinite(v)), None)
    if bad is not None:
        highest = max((v for v in curve[:bad]), default=math.nan)
        return f"is non-finite from step {bad} on (after reaching {highest:.3g})"
    return f"goes from {curve[0]:.3g} to {curve[-1]:.3g} (highest {max(curve):.3g})"


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=CURVE_RTOL, abs_tol=1e-6)


def judge_compare(args: dict[str, Any], report: dict[str, Any]) -> Verdict:
    """(On the server.) The five checks of ``init-vs-bn``, from the probe's report."""
    he, bn = reference_curves()
    truth = bn_still_helps(he, bn)

    def present() -> str | None:
        missing = report.get("missing", [])
        return f"your code does not set {', '.join(missing)}" if missing else None

    def curve(name: str, reference: tuple[float, ...]) -> Callable[[], str | None]:
        def check() -> str | None:
            mine = report[name]
            if isinstance(mine, str):
                return f"{name} is {mine}"
            if len(mine) != len(reference):
                return f"{name} has {len(mine)} losses, one per step of {STEPS} steps expected"
            for t in range(COMPARED_STEPS):
                if not _same(mine[t], reference[t]):
                    return (
                        f"step {t}: {name} says {mine[t]:.6g}, the recomputed run "
                        f"{reference[t]:.6g} (the first {COMPARED_STEPS} steps must agree within "
                        f"{CURVE_RTOL:.1%}); train with the settings of the exercise"
                    )
            return None

        return check

    def boolean() -> str | None:
        value = report["bn_still_helps"]
        return None if isinstance(value, bool) else f"bn_still_helps is {value}"

    summary = (
        f"At learning rate {LR:g}, the He-initialized net without BatchNorm {_describe(he)}; "
        f"with BatchNorm the loss {_describe(bn)}."
    )

    def conclusion() -> str | None:
        if report["bn_still_helps"] == truth:
            return None
        return f"{summary} bn_still_helps = {report['bn_still_helps']} does not follow from that"

    checks: list[Check] = list(
        zip(
            COMPARE_CHECKS,
            (
                present,
                curve("he_losses", he),
                curve("bn_losses", bn),
                boolean,
                conclusion,
            ),
            strict=True,
        )
    )
    why = (
        " A good initializer sets the scale at step 0 only; BatchNorm measures and resets it "
        "on every step, however far the weights move."
        if truth
        else ""
    )
    return run_checks(checks, summary + why)


COMPARE_STARTER = f"""\
from normlab.experiments import run_experiment

# The initialization lesson trains with the experiment "init-train" (no BatchNorm, a choice
# of initializer); this lesson's learning-rate widget is "bn-lr". `normlab list` shows the
# parameters of both.
he = run_experiment("init-train", method="he", hidden_layers={HIDDEN}, width={WIDTH}, lr={LR:g},
                    steps={STEPS})
he_losses = he.losses
print("He, no BatchNorm: first loss", he_losses[0], "last", he_losses[-1])

bn_losses = []          # your turn: the run with BatchNorm

bn_still_helps = None   # True or False, from what the two curves show
"""


EXERCISES: tuple[Exercise, ...] = (
    ChoiceExercise(
        id="bn-variance-conventions",
        lesson=LESSON,
        prompt=(
            "A from-scratch BatchNorm normalizes each column with `x.var(0)` and feeds the same "
            "`x.var(0)` to `running_var`. On batches of 4 rows, its `running_var` matches "
            "`torch.nn.BatchNorm1d`'s but its outputs do not. What should each step use?"
        ),
        choices=(
            Choice(
                "The unbiased variance (divide by N - 1) for both, as it does: the outputs "
                "differ only by eps.",
                "eps is 1e-5; the outputs differ by far more. `x.var(0)` divides by N - 1, while "
                "the normalization divides by N: that is the variance the output's std of 1 is "
                "measured with.",
            ),
            Choice(
                "The biased variance (divide by N) for both: `x.var(0)` is wrong in both places.",
                "Then running_var, which matched, would stop matching: the running estimate is "
                "fed the unbiased variance (N - 1), the one `x.var(0)` computes.",
            ),
            Choice(
                "Biased (divide by N) to normalize, unbiased (divide by N - 1) for running_var, "
                "as it already does there.",
                "Right. `x.var(0)` divides by N - 1, so its outputs came out sqrt(3/4) times "
                "torch's for 4 rows. The batch is normalized by its own spread (divide by N), "
                "while running_var estimates the spread of all the data, for which N - 1 is "
                "the unbiased estimate.",
                correct=True,
            ),
            Choice(
                "Unbiased (divide by N - 1) to normalize, and biased (divide by N) for "
                "running_var.",
                "The other way round: N to normalize, N - 1 for the running estimate, which "
                "is why running_var already matched.",
            ),
        ),
    ),
    ChoiceExercise(
        id="bn-linear-bias",
        lesson=LESSON,
        prompt=(
            "In a block `Linear -> BatchNorm1d -> ReLU` in training mode, what does the "
            "`Linear` layer's bias change in the block's output?"
        ),
        choices=(
            Choice(
                "Nothing: subtracting the batch mean removes any constant added to a column.",
                "Right. beta does the bias's job after the normalization, which is why such a "
                "Linear is often built with bias=False; its gradient is exactly zero anyway.",
                correct=True,
            ),
            Choice(
                "It shifts every output by the bias, as in any Linear layer, and so moves "
                "where the ReLU cuts.",
                "It would, without the BatchNorm. The batch mean includes the bias, so "
                "subtracting the mean removes it again.",
            ),
            Choice(
                "It rescales each column, which BatchNorm then undoes.",
                "A bias shifts, it does not rescale; and the shift is what the mean "
                "subtraction removes.",
            ),
            Choice(
                "It decides which units the ReLU lets through: a negative bias keeps a unit "
                "below zero.",
                "It would without the BatchNorm; here the mean subtraction cancels it before "
                "the ReLU sees anything.",
            ),
        ),
    ),
    CodeExercise(
        id="bn-backward",
        lesson=LESSON,
        prompt=(
            "Show that BatchNorm is differentiable: work out the gradients of "
            "`y = gamma * x_hat + beta` (batch statistics, biased variance) with respect to "
            "beta, gamma and x, and write `batchnorm_backward(dy, x, gamma, eps=1e-5)` returning "
            "`(dx, dgamma, dbeta)`. The check compares them with autograd on fresh float64 "
            f"batches (keep that precision), within {ATOL:g} + {RTOL:g} x |autograd|, and "
            "without autograd being used inside your function."
        ),
        starter=BACKWARD_STARTER,
        probe="batchnorm_backward",
        make_args=backward_args,
        judge=judge_backward,
        checks=BACKWARD_CHECKS,
        wall_s=30.0,
    ),
    CodeExercise(
        id="init-vs-bn",
        lesson=LESSON,
        prompt=(
            "Can a good initializer alone match BatchNorm at a high learning rate? Train the "
            f"lessons' MLP ({HIDDEN} hidden ReLU layers of {WIDTH} units, two moons, full-batch "
            f"SGD, seed {SEED}) at learning rate {LR:g} for {STEPS} steps, twice: He-initialized "
            "without BatchNorm, and with BatchNorm and the default initialization. Put the loss "
            "of every step in `he_losses` and `bn_losses`, and set `bn_still_helps` to True or "
            "False from what the curves show. The check recomputes both runs and compares "
            f"their first {COMPARED_STEPS} steps with yours."
        ),
        starter=COMPARE_STARTER,
        probe="compare",
        make_args=lambda rng: {},
        judge=judge_compare,
        checks=COMPARE_CHECKS,
        wall_s=60.0,
    ),
)
