r"""Exercises closing lesson 3, ``initialization``: symmetry, the variance argument, Xavier, He.

The code exercise is the seed notebook's first, derive He's factor of 2, asked so that the
factor has to be derived rather than copied: for activations the lesson never shows, drawn
fresh for every attempt. The learner writes

- ``kept_fraction(activation)``, which *measures* :math:`\kappa = \mathbb{E}[f(z)^2] /
  \mathbb{E}[z^2]` for :math:`z \sim \mathcal{N}(0, 1)` by sampling;
- ``init_std(fan_in, kept)``, the std of the weights that keeps the pre-activation variance
  steady, :math:`\sqrt{1 / (\kappa\, n)}`, from :math:`\mathrm{Var}(z') = n\,\mathrm{Var}(w)\,
  \kappa\,\mathrm{Var}(z)`.

The sandbox probe (:func:`normlab.lab.sandbox.exercise_child.probe_he_derivation`) only calls
them and reports the numbers. The server judges them (:func:`judge_he_derivation`): every measured
fraction is within :data:`KEPT_RTOL` of the exact one, the std scales like :math:`1/\sqrt{n}`
and :math:`1/\sqrt{\kappa}`, holds the variance of a 40-layer stack of each activation within a
band (:func:`stack_variances`), and gives :math:`\kappa\,n\,\sigma^2 = 1`.
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch

from normlab import init, theory
from normlab.lab.lessons.exercise import (
    Check,
    Choice,
    ChoiceExercise,
    CodeExercise,
    Exercise,
    NumberExercise,
    Trap,
    Verdict,
    run_checks,
)
from normlab.lab.sandbox.exercise_child import Activation

LESSON = "initialization"

# -- the He code exercise ----------------------------------------------------------------------

STACK_WIDTH = 512
STACK_DEPTH = 40
STACK_BATCH = 64
BAND = 3.0
"""Every layer's pre-activation variance must stay within [1/BAND, BAND] x layer 1's.

Measured while writing this check (width 512, batch 64, seed 0): with the exact std, the 40
layers of ReLU stay within [0.64, 1.18] x layer 1 (within [0.35, 1.64] over seeds 0-5), and
those of the other activations the check draws likewise; a kept fraction measured 1% off (the
most :data:`KEPT_RTOL` lets through) moves the last layer by 1.01**40 = 1.5 at most. A per-layer
factor of 0.95 or 1.05 leaves the band; factors closer to 1 are left to the last check."""

KEPT_RTOL = 0.01
r"""A measured kept fraction passes within 1% (relative) of the exact :math:`(s_+^2 + s_-^2)/2`.

The estimate :math:`\hat\kappa = \overline{f(z)^2} / \overline{z^2}` from :math:`m` samples has
relative sd :math:`\sqrt{\mathrm{Var}(f(z)^2 - \kappa z^2) / m} / \kappa = \sqrt{3/m}\,
|s_+^2 - s_-^2| / (s_+^2 + s_-^2) \le \sqrt{3/m}` (delta method; :math:`f(z)^2 - \kappa z^2 =
\pm z^2 (s_+^2 - s_-^2)/2`, and :math:`\mathbb{E}[z^4] = 3`). With the million samples the
prompt asks for that is 0.17%, so 1% is 5.8 sd (a right answer fails about once in 10**8 per
activation); with 10**5 samples it is 0.55%. A fraction copied from ReLU, 0.5, is at least 3.8%
off for a leaky ReLU of slope 0.2 or more, :math:`a^2 / (1 + a^2)`."""

STD_RTOL = 1e-4
"""``kept * fan_in * init_std(fan_in, kept)**2`` must be 1 within 0.01% (float32 arithmetic is
~1e-7; any other constant, 1.01 included, is off by far more)."""

HE_CHECKS = (
    "kept_fraction and init_std are functions",
    "kept_fraction measures what each activation keeps",
    "init_std returns a positive number",
    "it scales like 1/sqrt(fan_in)",
    "it makes up for the kept fraction",
    f"it holds the variance of a {STACK_DEPTH}-layer stack of each activation",
    "it is the std the variance argument gives",
)


def stack_variances(
    std: float,
    activation: Any = torch.relu,
    *,
    width: int = STACK_WIDTH,
    depth: int = STACK_DEPTH,
    batch: int = STACK_BATCH,
    seed: int = 0,
) -> list[float]:
    r"""Variance of the pre-activations :math:`z_k = h_{k-1} W_k^\top` of a deep stack.

    :math:`h_0 \sim \mathcal{N}(0, 1)`, :math:`W_k \sim \mathcal{N}(0, \mathrm{std}^2)` of
    shape (width, width), :math:`h_k = f(z_k)` with ``activation`` as :math:`f`, no biases.
    Each layer multiplies the variance by about :math:`n\,\mathrm{std}^2\,\kappa`.

    >>> v = stack_variances(math.sqrt(2 / 64), width=64, depth=3, batch=32)
    >>> len(v)
    3
    """
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, width, generator=g)  # (B, W)
    out = []
    for _ in range(depth):
        w = torch.randn(width, width, generator=g) * std  # (W_out, W_in)
        z = h @ w.t()  # (B, W) @ (W, W) -> (B, W)
        out.append(z.var().item())
        h = activation(z)
    return out


def kept_exact(spec: dict[str, Any]) -> float:
    r""":math:`\kappa = \mathbb{E}[f(z)^2] / \mathbb{E}[z^2] = (s_+^2 + s_-^2) / 2` for
    :math:`z \sim \mathcal{N}(0, 1)`: each half of a symmetric :math:`z` holds half of
    :math:`\mathbb{E}[z^2]`, and is scaled by its slope."""
    pos, neg = float(spec["pos"]), float(spec["neg"])
    return (pos**2 + neg**2) / 2


def kept_if_variance(spec: dict[str, Any]) -> float:
    r"""The wrong turn :math:`\mathrm{Var}(f(z))`: :math:`\kappa - \mathbb{E}[f(z)]^2`, with
    :math:`\mathbb{E}[f(z)] = (s_+ - s_-)/\sqrt{2\pi}`."""
    mean = (float(spec["pos"]) - float(spec["neg"])) / math.sqrt(2 * math.pi)
    return kept_exact(spec) - mean**2


def he_args(rng: random.Random) -> dict[str, Any]:
    """Activations to measure (ReLU, and a leaky ReLU, a scaled ReLU and |z| with fresh
    slopes), and the ``(fan_in, kept)`` to call ``init_std`` on: 1 and fresh pairs (n, 4n), each
    with a fresh kept, a quarter of it, and 1."""
    a = round(rng.uniform(0.2, 0.6), 2)
    c = round(rng.uniform(1.3, 2.0), 2)
    activations = [
        {"name": "relu", "pos": 1.0, "neg": 0.0},
        {"name": f"leaky_relu(slope={a:g})", "pos": 1.0, "neg": a},
        {"name": f"scaled_relu(scale={c:g})", "pos": c, "neg": 0.0},
        {"name": "abs", "pos": 1.0, "neg": -1.0},
    ]
    pairs = sorted({rng.randrange(2, 1000) for _ in range(2)})
    kept = round(rng.uniform(0.2, 0.9), 3)
    fan_ins = sorted({1, *pairs, *(4 * n for n in pairs)})
    calls = [[n, k] for n in fan_ins for k in (kept, kept / 4, 1.0)]
    return {
        "activations": activations,
        "width": STACK_WIDTH,
        "pairs": pairs,
        "kept": kept,
        "calls": calls,
    }


def _gave(call: str, value: object) -> str:
    """``"init_std(1, 0.5) gave str 'x'"``, or ``"... raised ValueError: ..."``."""
    text = str(value)
    return f"{call} {text}" if text.startswith("raised ") else f"{call} gave {text}"


def _measured_check(args: dict[str, Any], report: dict[str, Any]) -> Check:
    """Check 2: every measured fraction within :data:`KEPT_RTOL` of :func:`kept_exact`."""
    specs = args["activations"]

    def measured() -> str | None:
        kept = report["kept"]
        for spec, k in zip(specs, kept, strict=True):
            if not isinstance(k, float):
                return _gave(f"kept_fraction({spec['name']})", k)
            if not (math.isfinite(k) and k > 0):
                return f"kept_fraction({spec['name']}) = {k!r}; a ratio of mean squares is > 0"
        wrong = [
            (spec, k)
            for spec, k in zip(specs, kept, strict=True)
            if not math.isclose(k, kept_exact(spec), rel_tol=KEPT_RTOL)
        ]
        if not wrong:
            return None
        if len(set(kept)) == 1:
            return (
                f"kept_fraction gave {kept[0]:.4g} for every activation "
                f"({', '.join(s['name'] for s in specs)}), but they keep different fractions: "
                "measure the one you are given. Sample z = torch.randn(10**6) and compare "
                "the mean of activation(z)**2 with the mean of z**2"
            )
        spec, k = wrong[0]
        exact = kept_exact(spec)
        said = (
            f"kept_fraction({spec['name']}) = {k:.4g}, but {spec['name']} keeps {exact:.4g} of "
            f"E[z**2] ({abs(k / exact - 1):.1%} off; the check allows {KEPT_RTOL:.0%})"
        )
        if math.isclose(k, kept_if_variance(spec), rel_tol=KEPT_RTOL):
            return (
                f"{said}. That is Var(f(z)): the next layer's variance is fan_in * Var(w) "
                "times the mean square E[f(z)**2] of its inputs, not their variance (an "
                "activation's output need not have mean 0)"
            )
        if abs(k / exact - 1) < 10 * KEPT_RTOL:
            return f"{said}. Close: is your sample large enough? Use a million draws"
        return f"{said}. Measure E[activation(z)**2] / E[z**2] with z ~ N(0, 1)"

    return HE_CHECKS[1], measured


def _std_checks(args: dict[str, Any], report: dict[str, Any]) -> list[Check]:
    """Checks 3-5: ``init_std`` is positive, and goes like ``fan_in**-0.5`` and ``kept**-0.5``."""
    calls = args["calls"]
    values = report.get("std", [None] * len(calls))
    std = {(n, k): v for (n, k), v in zip(calls, values, strict=True)}
    k0 = args["kept"]

    def positive() -> str | None:
        for (n, k), v in std.items():
            if not isinstance(v, float):
                return _gave(f"init_std({n}, {k:g})", v)
            if not (math.isfinite(v) and v > 0):
                return f"init_std({n}, {k:g}) = {v!r}; a std must be a positive, finite number"
        return None

    def fan_in() -> str | None:
        for n in args["pairs"]:
            ratio = std[4 * n, k0] / std[n, k0]
            if not math.isclose(ratio, 0.5, rel_tol=1e-6):
                return (
                    f"init_std({4 * n}, {k0:g}) / init_std({n}, {k0:g}) = {ratio:.4g}; "
                    "quadrupling the fan-in should halve the std (it goes like 1/sqrt(fan_in))"
                )
        return None

    def kept() -> str | None:
        n = args["pairs"][0]
        ratio = std[n, k0 / 4] / std[n, k0]
        if math.isclose(ratio, 2.0, rel_tol=1e-6):
            return None
        said = f"init_std({n}, {k0 / 4:g}) / init_std({n}, {k0:g}) = {ratio:.4g}"
        if math.isclose(ratio, 1.0, rel_tol=1e-6):
            return (
                f"{said}: your std ignores `kept`, so it fits one activation at most (a "
                "constant 2 fits ReLU only). Redo the variance argument with a layer whose "
                "activation keeps `kept` of E[z**2]"
            )
        if ratio < 1:
            return (
                f"{said}: your std shrinks as kept does, but an activation that keeps less "
                "needs larger weights to make up for what it drops"
            )
        return (
            f"{said}; quartering kept should double the std: the weights' variance makes up "
            "for kept, and a std is the square root of a variance"
        )

    return list(zip(HE_CHECKS[2:5], (positive, fan_in, kept), strict=True))


def _stack_check(args: dict[str, Any], report: dict[str, Any]) -> Check:
    """Check 6: a deep stack of each activation, with the learner's std for their own kept."""

    def stack() -> str | None:
        runs = zip(args["activations"], report["kept"], report["stack_std"], strict=True)
        for spec, k, std in runs:
            if not isinstance(std, float):
                return _gave(f"init_std({STACK_WIDTH}, {k:.4g})", std)
            v = stack_variances(std, Activation(spec))
            factor = STACK_WIDTH * std**2 * kept_exact(spec)
            for layer, vk in enumerate(v, 1):
                ratio = vk / v[0]
                if not (math.isfinite(ratio) and 1 / BAND <= ratio <= BAND):
                    return (
                        f"in a {STACK_DEPTH}-layer stack of {spec['name']} (width "
                        f"{STACK_WIDTH}) with init_std({STACK_WIDTH}, {k:.4g}) = {std:.4g}, "
                        f"the pre-activation variance went from {v[0]:.3g} at layer 1 to "
                        f"{vk:.3g} at layer {layer}, outside [1/{BAND:g}, {BAND:g}] x layer 1's: "
                        f"each layer multiplies it by about {factor:.3g}"
                    )
        return None

    return HE_CHECKS[5], stack


def judge_he_derivation(args: dict[str, Any], report: dict[str, Any]) -> Verdict:
    """(On the server.) The seven checks of ``he-derivation``, from the probe's report."""
    functions: dict[str, str] = report.get("functions", {})

    def defined() -> str | None:
        for name in ("kept_fraction", "init_std"):
            state = functions.get(name, "missing")
            if state == "missing":
                return f"your code defines no `{name}`"
            if state != "ok":
                return f"`{name}` is not a function"
        return None

    def exact() -> str | None:
        for (n, k), v in zip(args["calls"], report["std"], strict=True):
            factor = k * n * v**2
            if not math.isclose(factor, 1.0, rel_tol=STD_RTOL):
                return (
                    f"kept * fan_in * init_std(fan_in, kept)**2 = {factor:.5g} for fan_in {n}, "
                    f"kept {k:g}: close enough for the stacks, but the variance argument "
                    f"asks for exactly 1 (to {STD_RTOL:g})"
                )
        return None

    checks: list[Check] = [
        (HE_CHECKS[0], defined),
        _measured_check(args, report),
        *_std_checks(args, report),
        _stack_check(args, report),
        (HE_CHECKS[6], exact),
    ]
    relu, relu_std = report.get("kept", [None])[0], report.get("stack_std", [None])[0]
    if not (isinstance(relu, float) and isinstance(relu_std, float)):  # a check fails first
        relu = relu_std = math.nan
    factor = STACK_WIDTH * relu_std**2
    return run_checks(
        checks,
        f"You measured that ReLU keeps {relu:.4f} of E[z**2], and your std for it at fan-in "
        f"{STACK_WIDTH} gives fan_in * std**2 = {factor:.4f}: He's factor, derived.",
        explanation=HE_EXPLANATION,
    )


HE_EXPLANATION = (
    r"Why: with independent zero-mean weights, a layer gives \(\mathrm{Var}(z') = "
    r"n\,\mathrm{Var}(w)\,\mathbb{E}[f(z)^2] = n\,\mathrm{Var}(w)\,\kappa\,\mathrm{Var}(z)\), "
    r"\(\kappa = \mathbb{E}[f(z)^2]/\mathbb{E}[z^2]\) the fraction the activation keeps, so "
    r"the variance holds when \(n\,\mathrm{Var}(w) = 1/\kappa\). A ReLU zeroes the negative "
    r"half of a symmetric \(z\) and keeps \(\kappa = 1/2\): \(n\,\mathrm{Var}(w) = 2\), He's "
    r"\(w \sim \mathcal{N}(0, 2/n)\). A leaky ReLU of slope \(a\) keeps \((1 + a^2)/2\), which "
    r"is why `torch.nn.init.calculate_gain('leaky_relu', a)` is \(\sqrt{2/(1 + a^2)}\)."
)


HE_STARTER = '''\
import math

import torch


def kept_fraction(activation):
    """E[activation(z)**2] / E[z**2] for z ~ N(0, 1), measured on a million samples.
    `activation` is a function of a tensor, like torch.relu."""
    return 1.0  # your turn: measure it


def init_std(fan_in, kept):
    """Std of N(0, std**2) weights for a layer with `fan_in` inputs, each the output of an
    activation that keeps the fraction `kept` of E[z**2]; it keeps Var(z) steady."""
    # With no activation (kept = 1), fan_in * std**2 = 1 keeps the variance steady.
    # What must change when the activation keeps only part of E[z**2]?
    return math.sqrt(1.0 / fan_in)


# Try both on a deep ReLU stack before you submit.
kept = kept_fraction(torch.relu)
print(f"kept_fraction(relu) = {kept:.4f}")
torch.manual_seed(0)
h = torch.randn(256, 512)
for layer in range(1, 21):
    z = h @ (torch.randn(512, 512) * init_std(512, kept)).T
    h = torch.relu(z)
    if layer % 5 == 0:
        print(f"layer {layer}: Var(z) = {z.var():.4g}")
'''

# -- the checked questions ---------------------------------------------------------------------

_GAIN, _DEPTH = 1.1, 20
_FAN_IN, _FAN_OUT = 256, 128


def _variance_after_depth() -> float:
    return theory.linear_variance(_GAIN, _DEPTH)[-1]


def _variance_with_gain_not_squared() -> float:
    return _GAIN**_DEPTH


def _xavier_bound() -> float:
    """Xavier's uniform bound, ``gain * sqrt(6 / (fan_in + fan_out))`` with the linear gain."""
    return init.calculate_gain("linear") * math.sqrt(6.0 / (_FAN_IN + _FAN_OUT))


def _xavier_std() -> float:
    return math.sqrt(2.0 / (_FAN_IN + _FAN_OUT))


EXERCISES: tuple[Exercise, ...] = (
    ChoiceExercise(
        id="init-constant-symmetry",
        lesson=LESSON,
        prompt=(
            "Every weight of a small ReLU network starts at the same constant 0.1, biases at 0. "
            "It trains 30 steps with Adam, which gives every weight a step size of its own, "
            "from that weight's gradient history. How do two hidden units of the first layer "
            "compare then?"
        ),
        choices=(
            Choice(
                "They have drifted apart: Adam scales each weight's step by that weight's own "
                "gradient history.",
                "It does, but the two units' histories are the same: every row reaches both "
                "units through identical weights, so they get the same gradients at every "
                "step, the same running averages, and the same steps.",
            ),
            Choice(
                "They are still identical: same outputs, gradients and updates.",
                "Right. Symmetric units get symmetric gradients, so the symmetry is never "
                "broken, and the layer acts like a single unit. Random init breaks it.",
                correct=True,
            ),
            Choice(
                "Both are exactly 0: constant weights cannot learn at all.",
                "They do learn (the weights move), just in lockstep; the symmetry demo shows "
                "both weights changing by the same amount.",
            ),
            Choice(
                "They differ only by the learning rate's rounding error.",
                "The lesson's run measures their largest difference over all steps: 0 exactly, "
                "not a rounding error.",
            ),
        ),
    ),
    NumberExercise(
        id="init-variance-after-depth",
        lesson=LESSON,
        prompt=(
            "A linear stack (no activation) has weights with std g/sqrt(n), n the fan-in, and "
            f"takes inputs of variance 1. With gain g = {_GAIN:g}, what is the activation "
            f"variance after k = {_DEPTH} layers?"
        ),
        expected=_variance_after_depth,
        rel_tol=0.005,
        solution=(
            "Right: {expected} = g^(2k). Each layer multiplies the variance by n Var(w) = g^2."
        ),
        hint="Each layer multiplies the variance by n Var(w); what is that for std g/sqrt(n)?",
        traps=(
            Trap(
                _variance_with_gain_not_squared,
                "That is g^k. Variance scales with the square of the weights: each layer "
                "multiplies it by n Var(w) = g^2, so k layers give g^(2k).",
            ),
        ),
    ),
    NumberExercise(
        id="init-xavier-bound",
        lesson=LESSON,
        prompt=(
            "Xavier's uniform initializer draws weights from U(-a, a). What is a for a layer "
            f"with fan_in {_FAN_IN} and fan_out {_FAN_OUT}?"
        ),
        expected=_xavier_bound,
        rel_tol=0.001,
        digits=5,
        solution="Right: a = sqrt(6 / (fan_in + fan_out)) = {expected}.",
        hint="Xavier targets Var(w) = 2 / (fan_in + fan_out); what a gives U(-a, a) that variance?",
        traps=(
            Trap(
                _xavier_std,
                "That is the std Xavier targets, sqrt(2 / (fan_in + fan_out)). A uniform "
                "U(-a, a) has variance a^2 / 3, so the bound is sqrt(3) times the std.",
            ),
        ),
    ),
    CodeExercise(
        id="he-derivation",
        lesson=LESSON,
        prompt=(
            "Derive He's initialization, for any activation. Write `kept_fraction(activation)`, "
            "which measures by sampling (a million draws of z ~ N(0, 1); the check allows "
            f"{KEPT_RTOL:.0%}) the fraction E[f(z)**2] / E[z**2] of the mean square that an "
            "activation f passes on. Then redo the variance argument with that fraction: write "
            "`init_std(fan_in, kept)`, the std of zero-mean normal weights that keeps the "
            "pre-activation variance steady through a deep stack of such layers. The check "
            "measures activations drawn fresh for each attempt, not only ReLU, calls "
            f"`init_std` on several fan-ins and fractions, and builds {STACK_DEPTH}-layer stacks "
            f"of width {STACK_WIDTH} with your std for each activation."
        ),
        starter=HE_STARTER,
        probe="he_derivation",
        make_args=he_args,
        judge=judge_he_derivation,
        checks=HE_CHECKS,
        wall_s=30.0,
    ),
)
