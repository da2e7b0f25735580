"""``edge-of-chaos``: the mean-field phase diagram of a deep stack, measured cell by cell.

A stack of ``depth`` layers of width :math:`n`, :math:`h^l = W^l \\phi(h^{l-1}) + b^l`, with
:math:`W^l_{ij} \\sim \\mathcal{N}(0, \\sigma_w^2 / n)` and :math:`b^l_i \\sim \\mathcal{N}(0,
\\sigma_b^2)`. The notebook's variance argument, taken one layer at a time for any activation, is
the *length map* (Poole et al. 2016, "Exponential expressivity in deep neural networks through
transient chaos"):

.. math::
    q^l = \\sigma_w^2\\, \\mathbb{E}_z\\big[\\phi(\\sqrt{q^{l-1}} z)^2\\big] + \\sigma_b^2,
    \\qquad z \\sim \\mathcal{N}(0, 1),

which settles at a fixed point :math:`q^*`. Two inputs at correlation :math:`c` move by the
correlation map :math:`c^l = (\\sigma_w^2\\, \\mathbb{E}[\\phi(u_1)\\phi(u_2)] + \\sigma_b^2) /
q^l`, and a tiny perturbation's squared norm grows by :math:`\\chi_1 = \\sigma_w^2\\,
\\mathbb{E}[\\phi'(\\sqrt{q^*} z)^2]` per layer: :math:`\\chi_1 < 1` is the ordered phase (inputs
merge, gradients vanish), :math:`\\chi_1 > 1` the chaotic one, :math:`\\chi_1 = 1` the edge of
chaos. Correlations reach their fixed point :math:`c^*` over :math:`\\xi_c = -1 / \\ln \\chi_c`
layers, and a stack trains while its depth is below about :math:`6 \\xi_c` (Schoenholz et al.
2017, "Deep information propagation").

For every cell of a grid of :math:`(\\sigma_w^2, \\sigma_b^2)` this experiment *measures* on a real
stack of width :math:`n`, over the layers past the first fifth (where the length has settled):
the length :math:`q` (mean squared pre-activation of two inputs), and :math:`\\chi_1` as the
growth :math:`|J_l \\delta|^2 / |\\delta|^2` of a tiny perturbation :math:`\\delta` through the
layer's Jacobian :math:`J_l = W^l \\mathrm{diag}(\\phi'(h^{l-1}))`, averaged over every direction
of :math:`\\delta`: :math:`\\|J_l\\|_F^2 / n`. It also measures the two inputs' correlation after
the last layer. It then trains a narrow stack of the same depth per cell on the two moons,
every cell at once, and draws the predicted critical line and the edges of the band
:math:`6 \\xi_c > L` over the measurements.

Every cell shares the same standard normal draws :math:`Z^l, \\beta^l` (common random numbers):
cell :math:`(\\sigma_w^2, \\sigma_b^2)` has :math:`W^l = \\sqrt{\\sigma_w^2 / n}\\, Z^l` and
:math:`b^l = \\sqrt{\\sigma_b^2}\\, \\beta^l`. Each cell is still an exact draw of its own
ensemble; the cells differ by their variances alone, so the heat map is smooth where the theory
is, and one matmul per layer carries a whole row of the grid.

On the sweep engine the grid is a sweep of ``chaos-cell``, one cell per configuration (``normlab
sweep chaos-cell --grid sigma_w2=... --grid sigma_b2=...``): from the same seed it measures each
cell's chi_1 and correlation as this experiment does, and grows past this grid's bounds, with
seeds, depths and a store that resumes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab import figures as fig
from normlab.data import two_moons
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import draw_stack, fmt, fmt_as, input_pair, propagate
from normlab.theory import activation_pair, gelu_grad
from normlab.train import train, train_step

LOSS_CEILING = 1.0
"""A final training loss above this (a diverged run included) is drawn at it; ln 2 is chance."""
CHI_SHOWN = 1.5
"""ln chi_1 is coloured over [-1.5, 1.5]: white is chi_1 = 1, the edge of chaos."""


@dataclass(frozen=True)
class Params:
    activation: str = param(
        "tanh", "the stack's activation", choices=("tanh", "erf", "relu", "linear")
    )
    sigma_w2_min: float = param(
        0.5, "smallest weight variance sigma_w^2 of the grid", min=0.1, max=5.9, step=0.05
    )
    sigma_w2_max: float = param(
        5.0,
        "largest weight variance of the grid",
        min=0.2,
        max=6.0,
        step=0.05,
        follows=(">", "sigma_w2_min"),
    )
    w_points: int = param(10, "weight variances in the grid (columns)", min=2, max=20, step=1)
    sigma_b2_min: float = param(
        0.0, "smallest bias variance sigma_b^2 of the grid", min=0.0, max=0.99, step=0.01
    )
    sigma_b2_max: float = param(
        0.25,
        "largest bias variance of the grid",
        min=0.01,
        max=1.0,
        step=0.01,
        follows=(">", "sigma_b2_min"),
    )
    b_points: int = param(
        6, "bias variances in the grid (rows; 1: sigma_b2_min alone)", min=1, max=20, step=1
    )
    sigma_w2: float = param(
        1.76, "weight variance of the cell followed layer by layer", min=0.1, max=6.0, step=0.01
    )
    sigma_b2: float = param(
        0.05, "bias variance of the cell followed layer by layer", min=0.0, max=1.0, step=0.01
    )
    depth: int = param(30, "layers of every stack (measured and trained)", min=2, max=50, step=1)
    width: int = param(512, "width n of the measured stacks", min=16, max=1000, step=1)
    q0: float = param(1.0, "the inputs' length |x|^2 / n", min=0.01, max=4.0, step=0.01)
    c0: float = param(0.6, "the two inputs' correlation", min=-0.99, max=0.99, step=0.01)
    train_width: int = param(32, "width of the trained stacks", min=4, max=32, step=1)
    steps: int = param(20, "SGD steps of every cell's training run", min=1, max=20, step=1)
    lr: float = param(0.1, "learning rate of the training runs", min=0.001, max=1.0, step=0.001)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run edge-of-chaos --code` prints) --------------------


def crossing(xs: list[float], ys: list[float], rising: bool = True) -> float | None:
    """The first x where ``ys`` passes through 1 going up (down when not ``rising``), linearly
    interpolated between the two points around it; None where it never does."""
    for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:], strict=False):
        if (y0 < 1.0 <= y1) if rising else (y1 < 1.0 <= y0):
            return x0 + (1.0 - y0) * (x1 - x0) / (y1 - y0)
    return None


# The theory: the same maps in float64, Gaussian expectations by quadrature.


def gauss_rule() -> tuple[torch.Tensor, torch.Tensor]:
    """Nodes z and weights w, ``(64,)`` each, with sum w f(z) = E[f(z)], z ~ N(0, 1): the
    midpoints of 64 equal steps over [-8, 8] (the mass beyond 8 standard deviations is 1e-15),
    weighted by the density. For a smooth f the error falls exponentially with the step (1e-4
    at most here, tanh at q = 6), and no node sits on ReLU's kink at 0: its step derivative is
    split evenly, and its kinked maps are off by 2e-3 at most."""
    edges = torch.linspace(-8.0, 8.0, 65, dtype=torch.float64)  # (65,)
    z = (edges[1:] + edges[:-1]) / 2  # (64,): the midpoints
    w = torch.exp(-0.5 * z * z)  # (64,): the density, up to its constant
    return z, w / w.sum()


def gauss_expect(f: Callable[[torch.Tensor], torch.Tensor], q: torch.Tensor) -> torch.Tensor:
    """E[f(sqrt(q) z)] for every length of ``q`` ``(...,)``."""
    z, w = gauss_rule()  # (P,), (P,)
    return (w * f(q.sqrt().unsqueeze(-1) * z)).sum(-1)  # (..., P) -> (...,)


def pair_expect(
    f: Callable[[torch.Tensor], torch.Tensor],
    g: Callable[[torch.Tensor], torch.Tensor],
    q: torch.Tensor,
    c: torch.Tensor,
) -> torch.Tensor:
    """E[f(u1) g(u2)], u1 = sqrt(q) z1, u2 = sqrt(q) (c z1 + sqrt(1 - c^2) z2), for every
    ``(q, c)`` pair ``(...,)``."""
    z, w = gauss_rule()  # (P,), (P,)
    ww = w.view(-1, 1) * w.view(1, -1)  # (P, P): the weight of (z1, z2)
    root_q, c = q.sqrt()[..., None, None], c[..., None, None]  # (..., 1, 1)
    u1 = root_q * z.view(-1, 1)  # (..., P, 1)
    u2 = root_q * (c * z.view(-1, 1) + (1.0 - c * c).clamp(min=0.0).sqrt() * z.view(1, -1))
    return (ww * f(u1) * g(u2)).sum((-2, -1))  # (..., P, P) -> (...,)


def length_map(activation: str, q: torch.Tensor, sigma_w2: Any, sigma_b2: Any) -> torch.Tensor:
    """One layer of the variance argument: q -> sigma_w2 E[phi(sqrt(q) z)^2] + sigma_b2."""
    phi, _ = activation_pair(activation)
    return sigma_w2 * gauss_expect(lambda u: phi(u) ** 2, q) + sigma_b2


def correlation_map(
    activation: str, c: torch.Tensor, q: torch.Tensor, sigma_w2: Any, sigma_b2: Any
) -> torch.Tensor:
    """One layer of the correlation map of two inputs of length q and correlation c."""
    phi, _ = activation_pair(activation)
    covariance = sigma_w2 * pair_expect(phi, phi, q, c) + sigma_b2
    return covariance / length_map(activation, q, sigma_w2, sigma_b2)


def fixed_length(activation: str, sigma_w2: torch.Tensor, sigma_b2: torch.Tensor) -> torch.Tensor:
    """q* of every (sigma_w2, sigma_b2) pair: where the length map crosses the diagonal,
    by bisection on log q within [1e-12, 1e12] (an end: lengths die out, or grow for good)."""
    lo, hi = torch.full_like(sigma_w2, 1e-12), torch.full_like(sigma_w2, 1e12)
    for _ in range(64):
        mid = (lo * hi).sqrt()
        grows = length_map(activation, mid, sigma_w2, sigma_b2) > mid  # below q*
        lo, hi = torch.where(grows, mid, lo), torch.where(grows, hi, mid)
    return (lo * hi).sqrt()


def chi(activation: str, q: torch.Tensor, c: torch.Tensor, sigma_w2: Any) -> torch.Tensor:
    """sigma_w2 E[phi'(u1) phi'(u2)]: chi_1 at c = 1, chi_c at c*."""
    _, dphi = activation_pair(activation)
    return sigma_w2 * pair_expect(dphi, dphi, q, c)


def mean_field(activation: str, sigma_w2: torch.Tensor, sigma_b2: torch.Tensor) -> dict[str, Any]:
    """q*, chi_1, c* and xi_c of every (sigma_w2, sigma_b2) pair ``(...,)``.

    The correlation map's slope at c is chi_c q / q_next (chi_c itself at a finite q*; where
    lengths die out or grow for good it tends to 1, and correlations settle slower than any
    exponential). c* is 1 unless that slope at c = 1 exceeds 1 (chaos); then it is the fixed
    point below 1, found by Newton's method from c = 0 (the map is convex on [0, 1], so the
    steps climb to c* without overshooting it).
    """
    q = fixed_length(activation, sigma_w2, sigma_b2)
    ones = torch.ones_like(q)
    q_next = length_map(activation, q, sigma_w2, sigma_b2)  # q* again, or the next length
    chi_1 = chi(activation, q, ones, sigma_w2)
    c = torch.zeros_like(q)
    for _ in range(10):
        gap = correlation_map(activation, c, q, sigma_w2, sigma_b2) - c  # >= 0 below c*
        slope = chi(activation, q, c, sigma_w2) * q / q_next - 1.0  # < 0 below c*
        c = (c - gap / slope.clamp(max=-1e-12)).clamp(max=1.0)
    c_star = torch.where(chi_1 * q / q_next > 1.0 + 1e-6, c, ones)  # 1e-6: rounding
    slope = chi(activation, q, c_star, sigma_w2) * q / q_next  # at c*: chi_c
    xi_c = torch.where(slope < 1.0 - 1e-6, -1.0 / slope.clamp(max=1.0 - 1e-6).log(), math.inf)
    q_star = torch.where(q > 1e11, math.inf, torch.where(q < 1e-11, 0.0, q))  # the ends
    return {"q_star": q_star, "chi_1": chi_1, "c_star": c_star, "xi_c": xi_c}


def critical_sigma_w2(activation: str, sigma_b2: torch.Tensor) -> torch.Tensor:
    """The weight variance where chi_1 = 1, for every bias variance of ``sigma_b2`` ``(rows,)``.

    The critical line is drawn by its fixed-point length q: chi_1 = 1 asks for sigma_w2 =
    1 / E[phi'(sqrt(q) z)^2], and q being the fixed point asks for sigma_b2 = q - sigma_w2
    E[phi(sqrt(q) z)^2], which grows with q; bisection on log q in [1e-12, 10] finds each
    row's (10: far above the lengths of sigma_b2 <= 1). ReLU's and the identity's E[phi'^2]
    is the same at every q: one sigma_w2 for every sigma_b2.
    """
    phi, dphi = activation_pair(activation)
    lo, hi = torch.full_like(sigma_b2, 1e-12), torch.full_like(sigma_b2, 10.0)
    for _ in range(64):
        q = (lo * hi).sqrt()
        sigma_w2 = 1.0 / gauss_expect(lambda u: dphi(u) ** 2, q)
        below = q - sigma_w2 * gauss_expect(lambda u: phi(u) ** 2, q) < sigma_b2
        lo, hi = torch.where(below, q, lo), torch.where(below, hi, q)
    return 1.0 / gauss_expect(lambda u: dphi(u) ** 2, (lo * hi).sqrt())


def follow_cell(
    activation: str,
    stack: list[tuple[torch.Tensor, torch.Tensor]],
    x: torch.Tensor,
    sigma_w2: float,
    sigma_b2: float,
    q0: float,
    c0: float,
) -> dict[str, Any]:
    """One cell layer by layer: measured (alone through the shared stack), and the theory's
    length, correlation and growth after each layer, from the inputs' q0 and c0."""
    sw, sb = (torch.tensor([v], device=x.device) for v in (sigma_w2, sigma_b2))  # (1,): one cell
    m = propagate(activation, stack, x, sw, sb)
    q, c, one = (torch.tensor(v, dtype=torch.float64) for v in (q0, c0, 1.0))
    theory: dict[str, list[float]] = {"q_theory": [], "c_theory": [], "growth_theory": []}
    for _ in stack:
        theory["growth_theory"].append(float(chi(activation, q, one, sigma_w2)))  # phi' below
        q, c = (
            length_map(activation, q, sigma_w2, sigma_b2),
            correlation_map(activation, c, q, sigma_w2, sigma_b2),  # at the layer below's q
        )
        theory["q_theory"].append(float(q))
        theory["c_theory"].append(float(c))
    mf = mean_field(activation, sw.cpu().double(), sb.cpu().double())
    return {
        "sigma_w2": sigma_w2,
        "sigma_b2": sigma_b2,
        **{k: m[k][0].tolist() for k in ("q", "c", "growth")},  # (depth,) each
        **theory,
        **{k: float(v) for k, v in mf.items()},  # q_star, chi_1, c_star, xi_c
    }


def predictions(
    activation: str, sigma_w2s: list[float], sigma_b2s: list[float], depth: int
) -> dict[str, Any]:
    """The theory over the grid: the critical sigma_w2 of every row (and along a finer line of
    sigma_b2), chi_1 of every cell, whether depth < 6 xi_c (trainable), and where each row's
    band begins and ends (depth / (6 xi_c) passes through 1 between two columns)."""
    rows, cols = len(sigma_b2s), len(sigma_w2s)
    sw = torch.tensor(sigma_w2s, dtype=torch.float64).repeat(rows)  # (rows * cols,)
    sb = torch.tensor(sigma_b2s, dtype=torch.float64).repeat_interleave(cols)  # (rows * cols,)
    mf = mean_field(activation, sw, sb)
    ratio = (depth / (6.0 * mf["xi_c"])).view(rows, cols)  # below 1: inside the band
    points = 41 if rows > 1 else 1  # a smooth critical line
    line_b2 = torch.linspace(sigma_b2s[0], sigma_b2s[-1], points, dtype=torch.float64)
    return {
        "critical": critical_sigma_w2(activation, sb[::cols]).tolist(),
        "critical_line": {
            "sigma_b2": line_b2.tolist(),
            "sigma_w2": critical_sigma_w2(activation, line_b2).tolist(),
        },
        "theory_chi_1": mf["chi_1"].view(rows, cols).tolist(),
        "trainable": (ratio < 1.0).tolist(),
        "band": [
            [crossing(sigma_w2s, r, rising=False), crossing(sigma_w2s, r, rising=True)]
            for r in ratio.tolist()
        ],
    }


class CellStacks(nn.Module):
    """One MLP 2 -> ``width`` (``depth`` layers, the activation after each) -> 1 per cell, all run
    at once: layer k's weights are one ``(cells, fan_in, fan_out)`` tensor drawn
    N(0, sigma_w2 / fan_in) per cell, its biases ``(cells, 1, fan_out)`` drawn N(0, sigma_b2)."""

    def __init__(
        self,
        activation: str,
        depth: int,
        width: int,
        sigma_w2: torch.Tensor,
        sigma_b2: torch.Tensor,
    ) -> None:
        super().__init__()
        self.phi, _ = activation_pair(activation)
        cells = sigma_w2.shape[0]
        fan_ins, fan_outs = [2] + [width] * depth, [width] * depth + [1]
        self.weights, self.biases = nn.ParameterList(), nn.ParameterList()
        for fan_in, fan_out in zip(fan_ins, fan_outs, strict=True):
            w_std = (sigma_w2 / fan_in).sqrt().view(cells, 1, 1)  # (cells, 1, 1)
            b_std = sigma_b2.sqrt().view(cells, 1, 1)
            self.weights.append(nn.Parameter(torch.randn(cells, fan_in, fan_out) * w_std))
            self.biases.append(nn.Parameter(torch.randn(cells, 1, fan_out) * b_std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.expand(len(self.weights[0]), *x.shape)  # (N, 2) -> (cells, N, 2)
        for k, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.baddbmm(b, h, w)  # (cells, N, in) @ (cells, in, out) + (cells, 1, out)
            if k < len(self.weights) - 1:
                h = self.phi(h)
        return h.squeeze(-1).t()  # (cells, N, 1) -> (N, cells): one logit per cell


def train_cells(
    activation: str,
    depth: int,
    width: int,
    sigma_w2: torch.Tensor,
    sigma_b2: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    steps: int,
    lr: float,
) -> list[float]:
    """Train one stack per cell, every cell at once, with full-batch SGD; each one's final
    loss on the training points."""
    cells = sigma_w2.shape[0]
    net = CellStacks(activation, depth, width, sigma_w2, sigma_b2).to(x.device)
    targets = y.expand(-1, cells)  # (N, 1) -> (N, cells): every cell learns the same labels
    # train()'s loss is the mean over every cell's logits: 1/cells of each cell's own mean
    # loss, so the rate times cells gives every cell the very step it would take alone
    for _ in train(net, x, targets, lr * cells, steps):
        pass
    with torch.no_grad():
        loss = F.binary_cross_entropy_with_logits(net(x), targets, reduction="none")  # (N, cells)
    return loss.mean(0).tolist()  # (cells,)


def mean_losses(losses: list[float], inside: list[bool]) -> list[float | None]:
    """The mean final loss of the cells inside the band and of those outside (None: no cell);
    a diverged run (nan) counts as an infinite loss."""
    means: list[float | None] = []
    for side in (True, False):
        picked = [
            math.inf if math.isnan(v) else v
            for v, i in zip(losses, inside, strict=True)
            if i == side
        ]
        means.append(sum(picked) / len(picked) if picked else None)
    return means


def edge_of_chaos(
    activation: str,
    sigma_w2_min: float,
    sigma_w2_max: float,
    w_points: int,
    sigma_b2_min: float,
    sigma_b2_max: float,
    b_points: int,
    sigma_w2: float,
    sigma_b2: float,
    depth: int,
    width: int,
    q0: float,
    c0: float,
    train_width: int,
    steps: int,
    lr: float,
    seed: int,
    device: str,
) -> Iterator[dict[str, Any]]:
    """Measure q, c and chi_1 on every cell of the grid, one row (one sigma_b2) at a time, then
    the followed cell layer by layer, beside the theory; then train every cell's stack of
    ``depth`` layers on the two moons, all cells at once.

    Yields the result so far after every row measured and after the theory (to draw it while
    the cells train), and last the whole run.
    """
    torch.manual_seed(seed)
    x = input_pair(width, q0, c0).to(device)  # (2, n)
    stack = draw_stack(depth, width, device)
    sigma_w2s = torch.linspace(sigma_w2_min, sigma_w2_max, w_points, dtype=torch.float64).tolist()
    sigma_b2s = torch.linspace(sigma_b2_min, sigma_b2_max, b_points, dtype=torch.float64).tolist()
    row_w2 = torch.tensor(sigma_w2s, device=device)  # (cols,): the sigma_w2 of a row's cells
    result: dict[str, Any] = {
        "activation": activation,
        "depth": depth,
        "sigma_w2s": sigma_w2s,
        "sigma_b2s": sigma_b2s,
        "cell": None,  # the followed cell, after the grid's rows
        **{key: [] for key in ("chi_1", "q", "c", "crossings", "losses", "band_losses")},
    }
    settled = depth // 5  # averaged over layers settled + 1 ... depth: the length has settled
    for sb2 in sigma_b2s:  # a row: every sigma_w2 at this sigma_b2, through one matmul a layer
        m = propagate(activation, stack, x, row_w2, torch.full_like(row_w2, sb2))
        chi_1 = m["growth"][:, settled:].mean(1).tolist()  # (cols,)
        result["chi_1"].append(chi_1)
        result["q"].append(m["q"][:, settled:].mean(1).tolist())
        result["c"].append(m["c"][:, -1].tolist())  # after the last layer
        result["crossings"].append(crossing(sigma_w2s, chi_1))
        yield result
    result["cell"] = follow_cell(activation, stack, x, sigma_w2, sigma_b2, q0, c0)
    result.update(predictions(activation, sigma_w2s, sigma_b2s, depth))
    yield result
    del stack  # the shared draws are done with: their memory goes before the training
    x_train, y_train = two_moons(n_samples=64, device=device)  # (64, 2), (64, 1)
    result["train_points"] = x_train.shape[0]
    sw = row_w2.repeat(b_points)  # (cells,): row after row
    sb = torch.tensor(sigma_b2s, device=device).repeat_interleave(w_points)  # (cells,)
    losses = train_cells(activation, depth, train_width, sw, sb, x_train, y_train, steps, lr)
    for r, inside in enumerate(result["trainable"]):
        row = losses[r * w_points : (r + 1) * w_points]
        result["losses"].append(row)
        result["band_losses"].append(mean_losses(row, inside))
    yield result


def mean(values: list[float | None]) -> float | None:
    """The mean; None where a value is missing (a JSON copy holds None for an overflowed one)."""
    present = [v for v in values if v is not None]
    return sum(present) / len(values) if len(present) == len(values) else None


def cell_table(result: dict[str, Any]) -> dict[str, Any]:
    """The followed cell, measured against the mean-field theory, over its settled layers."""
    cell, depth = result["cell"], result["depth"]
    settled = depth // 5  # the layers past the first fifth: q and chi_1 have reached q*
    layers = f"layers {settled + 1}-{depth}"
    rows = [
        [f"q* (mean of {layers})", fmt(mean(cell["q"][settled:])), fmt(cell["q_star"])],
        [f"chi_1 (mean growth, {layers})", fmt(mean(cell["growth"][settled:])), fmt(cell["chi_1"])],
        [f"c after layer {depth}", fmt(cell["c"][-1]), fmt(cell["c_theory"][-1])],
    ]
    return {
        "title": f"The cell sigma_w2 = {cell['sigma_w2']:g}, sigma_b2 = {cell['sigma_b2']:g}, "
        "layer by layer",
        "columns": ["", "measured", "mean-field theory"],
        "rows": rows,
        "notes": [f"theory: c* {fmt(cell['c_star'])}, xi_c {fmt_as(cell['xi_c'], '.4g')}"],
    }


def edge_table(result: dict[str, Any]) -> dict[str, Any]:
    """Where each row's measured chi_1 crosses 1, against critical_sigma_w2; every cell's chi_1
    in the notes."""
    rows = []
    for sb2, found, predicted in zip(
        result["sigma_b2s"], result["crossings"], result["critical"], strict=True
    ):
        gap = "" if found is None else f"{100 * (found / predicted - 1):+.1f}%"
        shown = "never" if found is None else fmt(found)
        rows.append([fmt(sb2, 3), shown, fmt(predicted), gap])
    grid = [f"sigma_w2: {' '.join(fmt(v, 2) for v in result['sigma_w2s'])}"] + [
        f"sigma_b2 {fmt(sb2, 3)} chi_1: {' '.join(fmt(v, 2) for v in row)}"
        for sb2, row in zip(result["sigma_b2s"], result["chi_1"], strict=True)
    ]
    return {
        "title": "The edge of chaos: where the measured chi_1 crosses 1",
        "columns": ["sigma_b2", "measured sigma_w2", "critical_sigma_w2", "difference"],
        "rows": rows,
        "notes": grid,
    }


def training_table(result: dict[str, Any]) -> dict[str, Any]:
    """Each row's band 6 xi_c > depth and the mean final loss inside and outside it; every
    cell's final loss in the notes."""
    depth, rows = result["depth"], []
    for sb2, (lo, hi), (inside, outside) in zip(
        result["sigma_b2s"], result["band"], result["band_losses"], strict=True
    ):
        rows.append([fmt(sb2, 3), fmt(lo, 3), fmt(hi, 3), fmt(inside), fmt(outside)])
    losses = [
        f"sigma_b2 {fmt(sb2, 3)} loss: {' '.join(fmt(v, 2) for v in row)}"
        for sb2, row in zip(result["sigma_b2s"], result["losses"], strict=True)
    ]
    return {
        "title": f"Training at depth {depth}: the band 6 xi_c > {depth} and the final loss",
        "columns": ["sigma_b2", "band from", "band to", "mean loss inside", "outside"],
        "rows": rows,
        "notes": ["-: the band goes past the grid's end (or the row has no such cell)", *losses],
    }


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The followed cell against the theory, where chi_1 crosses 1 row by row, and training."""
    return [cell_table(result), edge_table(result), training_table(result)]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class FollowedCell:
    sigma_w2: float
    sigma_b2: float
    q: list[float]  # (depth,): measured mean squared pre-activation after each layer
    c: list[float]  # (depth,): measured correlation of the two inputs
    growth: list[float]  # (depth,): measured |J_l|_F^2 / n, the mean perturbation growth
    q_theory: list[float]  # (depth,): the length map from q0
    c_theory: list[float]  # (depth,): the correlation map from c0
    growth_theory: list[float]  # (depth,): sigma_w2 E[phi'^2] at the length of the layer below
    q_star: float
    chi_1: float
    c_star: float
    xi_c: float


@dataclass
class CriticalLine:
    sigma_b2: list[float]
    sigma_w2: list[float]  # chi_1 = 1 at each sigma_b2


@dataclass
class EdgeOfChaosResult(Result):
    activation: str
    depth: int
    sigma_w2s: list[float]  # (cols,)
    sigma_b2s: list[float]  # (rows,)
    cell: FollowedCell | None  # None until the grid's rows are measured
    chi_1: list[list[float]]  # (rows measured, cols): mean perturbation growth, settled layers
    q: list[list[float]]  # (rows measured, cols): mean squared pre-activation, settled layers
    c: list[list[float]]  # (rows measured, cols): correlation after the last layer
    crossings: list[float | None]  # (rows measured,): sigma_w2 where chi_1 crosses 1
    losses: list[list[float]]  # (rows trained, cols): final training loss
    band_losses: list[list[float | None]]  # (rows trained, 2): mean loss inside, outside
    train_points: int = 0  # points of the two moons every cell trains on
    critical: list[float] = field(default_factory=list)  # (rows,): predicted critical sigma_w2
    critical_line: CriticalLine | None = None
    theory_chi_1: list[list[float]] = field(default_factory=list)  # (rows, cols)
    trainable: list[list[bool]] = field(default_factory=list)  # (rows, cols): depth < 6 xi_c
    band: list[list[float | None]] = field(default_factory=list)  # (rows, 2): its two edges

    def tables(self) -> list[Table]:
        assert self.cell is not None  # a finished run's
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        return [self._phase_figure(), self._cell_figure(), self._training_figure()]

    def _grid(self, rows: Sequence[Sequence[float | None]]) -> list[list[float | None]]:
        """A heat map's rows: those measured so far, then gaps."""
        gap: list[float | None] = [None] * len(self.sigma_w2s)
        done: list[list[float | None]] = [list(r) for r in rows]
        return done + [gap] * (len(self.sigma_b2s) - len(rows))

    def _theory_lines(self) -> list[fig.Series]:
        if self.critical_line is None:
            return []
        line = self.critical_line
        return [
            fig.Series(
                "critical line chi_1 = 1 (theory)",
                line.sigma_w2,
                line.sigma_b2,
                "line" if len(line.sigma_b2) > 1 else "markers",
                color="#000000",
                dash="dash",
                width=2.0,
            )
        ]

    def _phase_figure(self) -> fig.Figure:
        x, y = self.sigma_w2s, self.sigma_b2s
        log_chi = [[math.log(v) if v > 0 else -math.inf for v in row] for row in self.chi_1]
        shown = [[max(-CHI_SHOWN, min(CHI_SHOWN, v)) for v in row] for row in log_chi]
        found = [(w, b) for w, b in zip(self.crossings, y, strict=False) if w is not None]
        measured_edge = fig.Series(
            "chi_1 = 1 measured (per row)",
            [w for w, _ in found],
            [b for _, b in found],
            "markers",
            color="#000000",
            marker="diamond",
            marker_size=8,
        )
        chi_map = fig.Series(
            "ln chi_1 measured",
            x,
            y,
            "heatmap",
            z=self._grid(shown),
            colorscale="RdBu_r",
            zlimits=(-CHI_SHOWN, CHI_SHOWN),
        )
        c_map = fig.Series(
            f"c after layer {self.depth}", x, y, "heatmap", z=self._grid(self.c), zlimits=(0, 1)
        )
        axes = (fig.Axis("sigma_w^2 (weight variance x width)"), fig.Axis("sigma_b^2"))
        chi_panel = fig.Panel(
            *axes,
            [chi_map, *self._theory_lines(), measured_edge],
            title="measured ln chi_1 (blue: ordered, red: chaotic)",
            note="dashed: the theory's line; diamonds: measured chi_1 = 1",
        )
        c_panel = fig.Panel(
            *axes,
            [c_map, *self._theory_lines()],
            title=f"measured correlation of two inputs after {self.depth} layers",
            note=f"the inputs start at c = {self.params.get('c0', '')}",
        )
        return fig.Figure(
            f"The phase diagram of a deep {self.activation} stack, measured cell by cell",
            [chi_panel, c_panel],
            columns=1,
            height=4.0,
        )

    def _cell_figure(self) -> fig.Figure:
        cell = self.cell
        panels = []
        for key, label in (("q", "length q_l"), ("c", "correlation c_l"), ("growth", "chi")):
            series = []
            if cell is not None:  # measured after the grid's rows
                measured, theory = getattr(cell, key), getattr(cell, f"{key}_theory")
                layers = fig.steps(len(measured), start=1)
                series = [
                    fig.Series("measured", layers, measured, "line+markers", fig.BLUE),
                    fig.Series("theory", layers, theory, color="#000000", dash="dash"),
                ]
            panels.append(
                fig.Panel(
                    fig.Axis("layer l"),
                    fig.Axis(label if key != "growth" else "perturbation growth |J_l|_F^2 / n"),
                    series,
                    lines=[fig.Line(1.0)] if key != "q" else [],
                )
            )
        sw2, sb2 = self.params.get("sigma_w2", ""), self.params.get("sigma_b2", "")
        return fig.Figure(
            f"The cell sigma_w2 = {sw2}, sigma_b2 = {sb2}, layer by layer: measured against "
            "the length and correlation maps",
            panels,
            height=3.4,
        )

    def _training_figure(self) -> fig.Figure:
        x, y = self.sigma_w2s, self.sigma_b2s
        z = self._grid([fig.clipped(row, LOSS_CEILING) for row in self.losses])
        series: list[fig.Series] = [
            fig.Series(
                f"final loss after {self.params.get('steps', '')} steps",
                x,
                y,
                "heatmap",
                z=z,
                colorscale="RdBu_r",
                zlimits=(0.0, LOSS_CEILING),
            )
        ]
        for side, name in ((0, "ordered"), (1, "chaotic")):
            edge = [
                (b[side], sb2) for b, sb2 in zip(self.band, y, strict=False) if b[side] is not None
            ]
            if not edge:  # this side of the band lies past the grid
                continue
            series.append(
                fig.Series(
                    f"6 xi_c = {self.depth}, {name} side (theory)",
                    [w for w, _ in edge],
                    [sb2 for _, sb2 in edge],
                    "line+markers",
                    color="#000000",
                    dash="dash",
                    width=2.0,
                )
            )
        panel = fig.Panel(
            fig.Axis("sigma_w^2"),
            fig.Axis("sigma_b^2"),
            series,
            note=f"between the dashed lines depth {self.depth} < 6 xi_c; ln 2 = 0.69 is chance",
        )
        return fig.Figure(
            f"Trainability at depth {self.depth}: a short SGD run per cell on the two moons",
            [panel],
            height=4.6,
        )


EXPERIMENT = Experiment(
    name="edge-of-chaos",
    title="The edge of chaos",
    summary="the measured phase diagram of a deep stack (chi_1, correlations, trainability) "
    "over a grid of weight and bias variances, against mean-field theory",
    params_type=Params,
    result_type=EdgeOfChaosResult,
    entry=edge_of_chaos,
    tables=tables,
    code=(
        gelu_grad,  # what normlab.theory.activation_pair refers to
        activation_pair,
        input_pair,
        draw_stack,
        propagate,
        crossing,
        gauss_rule,
        gauss_expect,
        pair_expect,
        length_map,
        correlation_map,
        fixed_length,
        chi,
        mean_field,
        critical_sigma_w2,
        follow_cell,
        predictions,
        CellStacks,
        two_moons,
        train_step,
        train,
        train_cells,
        mean_losses,
        edge_of_chaos,
        fmt,
        fmt_as,
        mean,
        cell_table,
        edge_table,
        training_table,
        tables,
    ),
    cost=Cost(14.0),  # 9.8 s measured at the maxima, one thread (benchmarks/maxima.py)
    heaviest={"activation": "tanh"},  # tanh costs more than relu or linear
    total_steps=lambda p: p.steps,
)
