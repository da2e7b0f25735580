"""``bn-gradient-explosion``: BatchNorm without skips explodes the gradient, measured.

A batch of :math:`B` rows passes up a stack of :math:`L` blocks ``Linear -> BatchNorm1d ->
activation`` (training mode, at initialization); a random gradient :math:`r` enters at the top,
:math:`\\mathcal{L} = \\sum r \\odot x_L`, and is backpropagated. Going down, every block
multiplies the squared gradient norm :math:`|\\partial\\mathcal{L}/\\partial x_l|^2` by the same
factor (Yang et al. 2019, "A mean field theory of batch normalization"):

.. math::
    \\lambda = \\frac{\\mathbb{E}_z[\\phi'(z)^2]}{\\mathrm{Var}_z[\\phi(z)]},
    \\qquad z \\sim \\mathcal{N}(0, 1).

BatchNorm hands every unit a standard normal :math:`z`; the next block's pre-activations have a
batch variance proportional to :math:`\\mathrm{Var}[\\phi(z)]`, which its BatchNorm divides out of
the gradient on the way back, while the activation keeps :math:`\\mathbb{E}[\\phi'(z)^2]` of it.
The weight scale cancels, so no initialization removes the explosion, and by the Gaussian
Poincaré inequality :math:`\\mathrm{Var}[\\phi] \\le \\mathbb{E}[\\phi'^2]`: :math:`\\lambda > 1`
for every nonlinear :math:`\\phi` (:math:`\\pi/(\\pi-1) \\approx 1.467` for ReLU).

Beside it, three stacks that differ in one thing each:

- the same stack with orthogonal weights: the same :math:`\\lambda` (the weights are not the cause);
- the same blocks with skips, :math:`x_{l} = x_{l-1} + \\phi(\\mathrm{BN}(W x_{l-1}))`: the stream's
  batch variance grows as :math:`v_l = 1 + l\\,\\mathrm{Var}[\\phi]`, so block :math:`l` multiplies
  the gradient by :math:`1 + \\mathbb{E}[\\phi'^2]/v_{l-1}` only: a power of depth, not an
  exponential;
- no BatchNorm, weights :math:`\\mathcal{N}(0, \\sigma_w^2/n)` with :math:`\\sigma_w^2 =
  1/\\mathbb{E}[\\phi(z)^2]` (pre-activations keep variance 1, He's rule for ReLU): the mean-field
  :math:`\\chi_1 = \\mathbb{E}[\\phi'^2]/\\mathbb{E}[\\phi^2]` (Poole et al. 2016), 1 for ReLU.
  BatchNorm divides by the variance instead of the second moment: for ReLU, whose mean is not 0,
  that is what explodes; for tanh (mean 0) the two agree, and the plain stack at this scale is
  chaotic.

These are large-batch, large-width predictions. A batch of :math:`B` adds about :math:`1/B` per
block (exactly :math:`(B-2)/(B-3)` for a linear stack: BatchNorm removes the mean and the scale,
2 of the :math:`B` directions, and the batch's variance estimate has :math:`B - 1` degrees of
freedom); a width :math:`n` shifts it by at most about :math:`0.02\\,B/n + 3/n` (measured:
down for ReLU as :math:`B` nears :math:`n`, up for tanh with Gaussian weights), and the fit
scatters by a few tenths of a percent from seed to seed
(``tests/experiments/test_bn_gradient_explosion.py`` has the numbers).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from normlab import figures as fig
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import fmt, fmt_as
from normlab.theory import BN_GROWTH_CODE, activation_pair, bn_gradient_growth, gauss_expect

LOG_FLOOR = 1e-30
"""A gradient that underflowed to 0 is drawn at this floor of the log axis."""
STACKS = ("bn", "bn-orthogonal", "bn-skip", "plain")


@dataclass(frozen=True)
class Params:
    activation: str = param(
        "relu", "activation phi after every BatchNorm", choices=("relu", "tanh", "linear")
    )
    depth: int = param(32, "blocks L in every stack", min=8, max=64, step=1)
    width: int = param(256, "width n of every layer", min=16, max=512, step=1)
    batch: int = param(128, "rows B in the batch BatchNorm normalizes over", min=8, max=256, step=1)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run bn-gradient-explosion --code` prints) ------------


def make_activation(activation: str) -> nn.Module:
    """The activation module by name."""
    modules = {"relu": nn.ReLU, "tanh": nn.Tanh, "linear": nn.Identity}
    return modules[activation]()


def gauss_moments(activation: str) -> dict[str, float]:
    """E[phi'(z)^2], E[phi(z)] and E[phi(z)^2] for z ~ N(0, 1), by the theory's quadrature."""
    phi, dphi = activation_pair(activation)
    return {
        "dphi2": gauss_expect(lambda u: dphi(u) ** 2),
        "mean": gauss_expect(phi),
        "phi2": gauss_expect(lambda u: phi(u) ** 2),
    }


def predicted_gradients(stack: str, activation: str, depth: int) -> list[float]:
    """|dL/dx_l|^2 / |dL/dx_L|^2 for l = 1 .. L as the large-batch, large-width theory says:
    the product of the per-block factors from the top down to block l + 1."""
    m = gauss_moments(activation)
    variance = m["phi2"] - m["mean"] ** 2  # Var[phi(z)]
    out = [1.0]  # at the top, l = L
    for block in range(depth, 1, -1):  # block reads x_{block - 1}, hands its gradient down
        if stack == "bn-skip":  # the stream's batch variance: the input's 1, plus Var[phi] a block
            factor = 1.0 + m["dphi2"] / (1.0 + (block - 1) * variance)
        elif stack == "plain":
            factor = m["dphi2"] / m["phi2"]  # chi_1 at sigma_w2 = 1 / E[phi^2], where q* = 1
        else:
            factor = bn_gradient_growth(activation)  # Yang et al. 2019
        out.append(out[-1] * factor)
    return out[::-1]  # (L,): l = 1 .. L


class Block(nn.Module):
    """``Linear -> [BatchNorm1d] -> activation``, with or without a skip around it."""

    def __init__(self, width: int, activation: str, batch_norm: bool, skip: bool) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width, bias=False)  # a bias before BatchNorm cancels
        self.norm = nn.BatchNorm1d(width) if batch_norm else nn.Identity()
        self.act = make_activation(activation)
        self.skip = skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch = self.act(self.norm(self.linear(x)))  # (N, n) -> (N, n)
        return x + branch if self.skip else branch


def make_stack(stack: str, activation: str, depth: int, width: int) -> nn.Sequential:
    """The blocks of one stack, their weights drawn for it (BatchNorm at its init, 1 and 0)."""
    blocks = [Block(width, activation, stack != "plain", stack == "bn-skip") for _ in range(depth)]
    m = gauss_moments(activation)
    sigma_w2 = 1.0 / m["phi2"] if stack == "plain" else 1.0  # BatchNorm divides any scale out
    for block in blocks:
        if stack == "bn-orthogonal":
            nn.init.orthogonal_(block.linear.weight)  # W W^T = I
        else:
            nn.init.normal_(block.linear.weight, std=(sigma_w2 / width) ** 0.5)
    return nn.Sequential(*blocks)


def layer_gradients(blocks: nn.Sequential, x: torch.Tensor) -> list[float]:
    """|dL/dx_l|^2 at every block's output x_l, l = 1 .. L, for L = sum(r * x_L), r ~ N(0, 1)."""
    outputs = []
    h = x
    for block in blocks:
        h = block(h)  # (N, n) -> (N, n)
        outputs.append(h)
    r = torch.randn(h.shape).to(h.device)  # (N, n): the random gradient entering at the top
    grads = torch.autograd.grad((r * h).sum(), outputs)  # dL/dx_l for every l, one backward
    return torch.stack([g.double().pow(2).sum() for g in grads]).tolist()  # (L,)


def growth_fit(values: list[float], first: int, last: int) -> float:
    """The factor per block of a least-squares line through log(values) over blocks
    first .. last (counted from 1), as the gradient goes down: exp(-slope)."""
    blocks = np.arange(first, last + 1)
    logs = np.log(np.asarray(values[first - 1 : last]))
    return float(np.exp(-np.polyfit(blocks, logs, 1)[0]))


def bn_gradient_explosion(
    activation: str, depth: int, width: int, batch: int, seed: int, device: str
) -> Iterator[dict[str, Any]]:
    """Every stack's gradient per block, relative to the top's, against the theory.

    Yields the stacks so far after every stack, and last the whole comparison.
    """
    first, last = depth // 4, depth - depth // 4  # the middle half: no end effects
    result: dict[str, Any] = {
        "activation": activation,
        "batch": batch,
        "plain_sigma_w2": 1.0 / gauss_moments(activation)["phi2"],
        "fit": [first, last],
        "stacks": [],
    }
    for stack in ("bn", "bn-orthogonal", "bn-skip", "plain"):
        torch.manual_seed(seed)  # the same input and the same draws for every stack
        x = torch.randn(batch, width).to(device)  # (N, n) ~ N(0, 1)
        blocks = make_stack(stack, activation, depth, width).to(device).train()
        grads = layer_gradients(blocks, x)
        relative = [g / grads[-1] for g in grads]  # (L,): 1 at the top
        theory = predicted_gradients(stack, activation, depth)
        result["stacks"].append(
            {
                "stack": stack,
                "gradients": relative,
                "theory": theory,
                "growth": growth_fit(relative, first, last),
                "theory_growth": growth_fit(theory, first, last),
            }
        )
        yield result  # every stack so far


def stack_name(stack: str) -> str:
    """A stack's name in the tables and the figures."""
    return {
        "bn": "BatchNorm, no skips",
        "bn-orthogonal": "BatchNorm, no skips, orthogonal W",
        "bn-skip": "BatchNorm with skips",
        "plain": "no BatchNorm, no skips",
    }[stack]


def growth_notes(result: dict[str, Any]) -> list[str]:
    """What each row of the growth table means, in words (the numbers are the rows')."""
    activation, b = result["activation"], result["batch"]
    bn = (
        f"{fmt(result['stacks'][0]['theory_growth'])} > 1: Var[φ] < E[φ'²] for every nonlinear "
        "φ (the Gaussian Poincaré inequality), so BatchNorm explodes the gradient "
        "(Yang et al. 2019)"
        if activation != "linear"
        else "For a linear φ, Var[φ] = E[φ'²]: 1, nothing to explode"
    )
    plain = {
        "relu": "He's scale: every pre-activation keeps variance 1 and the gradient its size.",
        "tanh": "tanh's mean is 0, so E[φ²] = Var[φ] and this plain stack grows as fast (it "
        "is chaotic); a smaller σ_w² (the edge of chaos) brings it to 1, while BatchNorm "
        "resets every pre-activation to variance 1 whatever the weights.",
        "linear": "the gradient keeps its size.",
    }[activation]
    finite = (
        f"exactly (B − 2)/(B − 3) − 1 = {100 * ((b - 2) / (b - 3) - 1):.2f}%"
        if activation == "linear"
        else f"about 1/B = {100 / b:.2f}%"
    )
    return [
        "A random gradient enters above the top block L and is backpropagated to the "
        "input; each block multiplies its squared norm by about the factor shown, fitted "
        "over the middle blocks (away from both ends).",
        "BatchNorm, no skips: BatchNorm divides the gradient by the batch std of its input, "
        "which φ left at √Var[φ], while φ' passes E[φ'²] of it; the weights' scale cancels "
        f"(orthogonal weights change nothing). {bn}.",
        "With skips the stream's variance grows by Var[φ] a block, so a branch adds only "
        "E[φ'²] / (1 + l Var[φ]): the gradient grows by a power of the depth, not "
        "exponentially.",
        f"No BatchNorm: weights N(0, σ_w²/n), σ_w² = 1/E[φ²] = {fmt(result['plain_sigma_w2'])}, "
        + plain,
        f"The theory is for a large batch and width. A batch of B = {b} adds {finite} per "
        "block; a width n moves it by at most about 2% · B/n + 3/n.",
    ]


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each stack's growth per block against the theory's, then |dL/dx_l|^2 at a few blocks."""
    first, last = result["fit"]
    stacks = result["stacks"]
    rules = {
        "bn": "E[φ'²] / Var[φ]",
        "bn-orthogonal": "E[φ'²] / Var[φ]",
        "bn-skip": "1 + E[φ'²] / (1 + l Var[φ])",
        "plain": "E[φ'²] / E[φ²]",
    }
    growth = [
        [stack_name(s["stack"]), fmt(s["growth"]), fmt(s["theory_growth"]), rules[s["stack"]]]
        for s in stacks
    ]
    depth = len(stacks[0]["gradients"])
    shown = sorted({1, 2, 4, 8, 16, 24, 32, 48, 64, depth} & set(range(1, depth + 1)))
    per_block = [
        [str(k)]
        + [
            f"{fmt_as(s['gradients'][k - 1], '.4g')} / {fmt_as(s['theory'][k - 1], '.4g')}"
            for s in stacks
        ]
        for k in shown
    ]
    return [
        {
            "title": f"Growth of |∂L/∂x|² per block, going down ({result['activation']}; fit "
            f"over blocks {first} to {last})",
            "columns": ["stack", "measured", "theory", "rule"],
            "rows": growth,
            "notes": growth_notes(result),
        },
        {
            "title": "|∂L/∂x_l|² relative to the top block's (block L = 1)",
            "columns": [
                "block l",
                *(f"{stack_name(s['stack'])}: measured / theory" for s in stacks),
            ],
            "rows": per_block,
            "notes": [],
        },
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class StackGradients:
    stack: str  # one of STACKS
    gradients: list[float]  # (L,): measured |dL/dx_l|^2 / |dL/dx_L|^2, l = 1 .. L
    theory: list[float]  # (L,): predicted, the same ratio
    growth: float  # measured factor per block, fitted over the middle half
    theory_growth: float  # the theory curve's factor, fitted over the same blocks


@dataclass
class BNGradientResult(Result):
    activation: str
    batch: int
    plain_sigma_w2: float  # 1 / E[phi(z)^2]: the plain stack's weights are N(0, sigma_w2 / n)
    fit: list[int]  # [first, last]: the blocks the growth is fitted over
    stacks: list[StackGradients]

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        first, last = self.fit
        window = fig.Band(first, last, axis="x", label="fit", color=fig.GRAY)
        norms, factors = [], []
        for i, s in enumerate(self.stacks):
            color = fig.PALETTE[i % len(fig.PALETTE)]
            blocks = fig.steps(len(s.gradients), start=1)
            norms += [
                fig.Series(
                    stack_name(s.stack),
                    blocks,
                    fig.floored(s.gradients, LOG_FLOOR),
                    "line+markers",
                    color,
                ),
                fig.Series(
                    f"{stack_name(s.stack)} theory",
                    blocks,
                    s.theory,
                    color=color,
                    dash="dash",
                    legend=False,
                ),
            ]
            factors += [
                fig.Series(
                    stack_name(s.stack),
                    blocks[:-1],
                    _ratios(s.gradients),
                    "markers",
                    color,
                    legend=False,
                ),
                fig.Series(
                    f"{stack_name(s.stack)} theory",
                    blocks[:-1],
                    _ratios(s.theory),
                    color=color,
                    dash="dash",
                    legend=False,
                ),
            ]
        left = fig.Panel(
            fig.Axis("block l (the input is below block 1, the loss above block L)"),
            fig.Axis("|∂L/∂x_l|² ÷ |∂L/∂x_L|² (log scale)", scale="log"),
            norms,
            title="Squared gradient norm at each block's output",
            bands=[window],
            note="solid: measured; dashed: theory; shaded: fitted blocks",
        )
        right = fig.Panel(
            fig.Axis("block l"),
            fig.Axis("|∂L/∂x_l|² ÷ |∂L/∂x_(l+1)|²"),
            factors,
            title="Growth factor of each block",
            lines=[fig.Line(1.0, label="no growth")],
            bands=[window],
            note="dots: measured; dashed: theory",
        )
        claim = (
            "BatchNorm without skips explodes it"
            if self.activation != "linear"
            else "a linear φ gives BatchNorm nothing to explode"
        )
        depth = len(self.stacks[0].gradients)
        title = f"A random gradient going down {depth} {self.activation} blocks at initialization"
        if len(self.stacks) < len(STACKS):  # a partial run (a streamed frame): no claim yet
            title += f", so far: {len(self.stacks)} of {len(STACKS)} stacks"
            return [fig.Figure(title, [left, right])]
        return [fig.Figure(f"{title}: {claim}", [left, right])]


def _ratios(values: list[float]) -> list[float | None]:
    """values[l - 1] / values[l]: each block's factor going down (a gap where one is 0)."""
    return [a / b if b > 0 else None for a, b in itertools.pairwise(values)]


EXPERIMENT = Experiment(
    name="bn-gradient-explosion",
    title="BatchNorm's gradient explosion",
    summary="per-block gradient norm of a deep BatchNorm MLP without skips at init, against "
    "Yang et al.'s E[phi'^2]/Var[phi] per block, beside orthogonal, skip and plain stacks",
    params_type=Params,
    result_type=BNGradientResult,
    entry=bn_gradient_explosion,
    tables=tables,
    code=(
        *BN_GROWTH_CODE,
        make_activation,
        gauss_moments,
        predicted_gradients,
        Block,
        make_stack,
        layer_gradients,
        growth_fit,
        bn_gradient_explosion,
        stack_name,
        fmt,
        fmt_as,
        growth_notes,
        tables,
    ),
    cost=Cost(8.0),
    stages=lambda p: len(STACKS),  # a stack at a time
    stage="stack",
)
