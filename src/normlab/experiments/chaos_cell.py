r"""``chaos-cell``: one cell of the mean-field phase diagram, measured and trained.

One deep stack, :math:`h^l = W^l \phi(h^{l-1}) + b^l` with :math:`W^l_{ij} \sim \mathcal{N}(0,
\sigma_w^2 / n)` and :math:`b^l_i \sim \mathcal{N}(0, \sigma_b^2)`, at one point
:math:`(\sigma_w^2, \sigma_b^2)` of the phase diagram that ``edge-of-chaos`` maps whole. Two inputs
of length :math:`q_0` and correlation :math:`c_0` go through a stack of width :math:`n`; after
each layer the run measures their length :math:`q^l`, their correlation :math:`c^l` and the growth
of a tiny perturbation, :math:`\|J_l\|_F^2 / n` with :math:`J_l = W^l
\mathrm{diag}(\phi'(h^{l-1}))`, whose mean over the settled layers (past the first fifth) is the
measured :math:`\chi_1`. Beside them stand the mean-field predictions (Poole et al. 2016,
"Exponential expressivity in deep neural networks through transient chaos"): the length and
correlation maps layer by layer, :math:`q^*`, :math:`\chi_1 = \sigma_w^2\,
\mathbb{E}[\phi'(\sqrt{q^*} z)^2]`, :math:`c^*` and the correlation depth :math:`\xi_c`. Then a
narrow stack of the same depth and variances trains on the two moons with full-batch SGD: it
should train while its depth is below about :math:`6 \xi_c` (Schoenholz et al. 2017, "Deep
information propagation").

A sweep of this experiment over :math:`(\sigma_w^2, \sigma_b^2)` is the edge-of-chaos grid on the
sweep engine (``normlab sweep chaos-cell --grid sigma_w2=0.5:5:10 --grid sigma_b2=0:0.25:6``),
with its heat maps of ``chi_1`` and of the final loss; a sweep over ``sigma_w2`` and ``depth`` is
Schoenholz et al.'s trainability picture. Every cell of one seed shares its standard normal draws
(the measured stack's, and the trained stack's, drawn from the seed again): cells differ by their
variances alone, as ``edge-of-chaos``'s do, so the maps are smooth where the theory is. The
cells of a sweep that share everything but their variances and learning rate run together
(:func:`chaos_cell_batched`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from normlab import figures as fig
from normlab.data import two_moons
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import GaussianStack, draw_stack, fmt, fmt_as, input_pair, propagate
from normlab.theory import (
    MEAN_FIELD_CODE,
    activation_pair,
    c_trajectory,
    gauss_expect,
    mean_field,
    q_trajectory,
)
from normlab.train import train, train_stacked, train_step

LOSS_CEILING = 1.0
"""A training loss above this (a diverged run included) is drawn at it; ln 2 is chance."""


@dataclass(frozen=True)
class Params:
    activation: str = param("tanh", "the stack's activation", choices=("tanh", "erf", "linear"))
    sigma_w2: float = param(
        1.76, "weight variance sigma_w^2 (weights N(0, sigma_w^2 / n))", min=0.1, max=6.0, step=0.01
    )
    sigma_b2: float = param(
        0.05, "bias variance sigma_b^2 (biases N(0, sigma_b^2))", min=0.0, max=1.0, step=0.01
    )
    depth: int = param(30, "layers of both stacks (measured and trained)", min=2, max=50, step=1)
    width: int = param(512, "width n of the measured stack", min=16, max=1000, step=1)
    q0: float = param(1.0, "the inputs' length |x|^2 / n", min=0.01, max=4.0, step=0.01)
    c0: float = param(0.6, "the two inputs' correlation", min=-0.99, max=0.99, step=0.01)
    train_width: int = param(32, "width of the trained stack", min=4, max=64, step=1)
    steps: int = param(20, "SGD steps of the training run", min=1, max=200, step=1)
    lr: float = param(0.1, "learning rate of the training run", min=0.001, max=1.0, step=0.001)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run chaos-cell --code` prints) -----------------------


def theory_of(
    activation: str, sigma_w2: float, sigma_b2: float, depth: int, q0: float, c0: float
) -> dict[str, Any]:
    """The mean-field predictions: q*, chi_1, c*, xi_c and the trainable depth 6 xi_c, and layer
    by layer the length and correlation maps from (q0, c0) and the growth sigma_w2 E[phi'^2]
    at the length of the layer below."""
    _, dphi = activation_pair(activation)
    mf = mean_field(activation, sigma_w2, sigma_b2)
    q_theory = q_trajectory(activation, q0, depth, sigma_w2, sigma_b2)  # (depth,)
    below = [q0, *q_theory[:-1]]  # (depth,): the length of each layer's input
    growth = [sigma_w2 * gauss_expect(lambda u: dphi(u) ** 2, q) for q in below]
    return {
        "q_star": mf.q_star,
        "chi_1_theory": mf.chi_1,
        "c_star": mf.c_star,
        "xi_c": mf.xi_c,
        "trainable_depth": 6.0 * mf.xi_c,
        "q_theory": q_theory,
        "c_theory": c_trajectory(activation, c0, q0, depth, sigma_w2, sigma_b2),  # (depth,)
        "growth_theory": growth,  # (depth,)
    }


def measured(m: dict[str, torch.Tensor], k: int, depth: int) -> dict[str, Any]:
    """Cell ``k`` of :func:`propagate`'s measurements: per layer q, c and the perturbation
    growth, and chi_1, the growth's mean over the settled layers (past the first fifth)."""
    settled = depth // 5
    growth = m["growth"][k]  # (depth,)
    return {
        "q": m["q"][k].tolist(),
        "c": m["c"][k].tolist(),
        "growth": growth.tolist(),
        "chi_1": growth[settled:].mean().item(),
    }


def chaos_cell(
    activation: str,
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
    """Measure one cell's stack layer by layer against the mean-field theory, then train a
    narrow stack of the same depth and variances on the two moons.

    Yields the result after the measurement and after every training step, and last the whole
    run.
    """
    torch.manual_seed(seed)
    x = input_pair(width, q0, c0).to(device)  # (2, n)
    stack = draw_stack(depth, width, device)  # the standard normal draws, per layer
    sw, sb = (torch.tensor([v], device=device) for v in (sigma_w2, sigma_b2))  # (1,): one cell
    m = propagate(activation, stack, x, sw, sb)  # (1, depth) each
    result: dict[str, Any] = {
        "activation": activation,
        "sigma_w2": sigma_w2,
        "sigma_b2": sigma_b2,
        "depth": depth,
        **measured(m, 0, depth),
        **theory_of(activation, sigma_w2, sigma_b2, depth, q0, c0),
        "losses": [],
    }
    yield result
    x_train, y_train = two_moons(n_samples=64, device=device)  # (64, 2), (64, 1)
    torch.manual_seed(seed)  # the trained stack's draws: every cell of this seed shares them
    net = GaussianStack(activation, depth, train_width, sigma_w2, sigma_b2).to(device)
    for loss in train(net, x_train, y_train, lr, steps):
        result["losses"].append(loss)
        yield result
    yield result  # the whole run


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The cell measured against the theory, and its training run."""
    depth, settled = result["depth"], result["depth"] // 5
    tail = f"layers {settled + 1}-{depth}"
    q_settled = sum(result["q"][settled:]) / (depth - settled)
    losses = result["losses"]
    trains = "<" if result["trainable_depth"] > depth else ">="
    verdict = "predicted to train" if trains == "<" else "predicted not to train"
    return [
        {
            "title": f"sigma_w2 = {result['sigma_w2']:g}, sigma_b2 = {result['sigma_b2']:g}: "
            "measured against mean-field theory",
            "columns": ["", "measured", "mean-field theory"],
            "rows": [
                [f"chi_1 (mean growth, {tail})", fmt(result["chi_1"]), fmt(result["chi_1_theory"])],
                [f"q (mean of {tail})", fmt(q_settled), fmt(result["q_star"])],
                [f"c after layer {depth}", fmt(result["c"][-1]), fmt(result["c_theory"][-1])],
            ],
            "notes": [
                f"theory: c* {fmt(result['c_star'])}, xi_c {fmt_as(result['xi_c'], '.4g')}, "
                f"depth {depth} {trains} 6 xi_c = {fmt_as(result['trainable_depth'], '.4g')}: "
                + verdict
            ],
        },
        {
            "title": f"Training a depth-{depth} stack on the two moons",
            "columns": ["steps", "first loss", "last loss"],
            "rows": [[str(len(losses)), fmt(losses[0]), fmt(losses[-1])]] if losses else [],
            "notes": ["ln 2 = 0.6931 is chance"],
        },
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class ChaosCellResult(Result):
    activation: str
    sigma_w2: float
    sigma_b2: float
    depth: int
    q: list[float]  # (depth,): measured mean squared pre-activation after each layer
    c: list[float]  # (depth,): measured correlation of the two inputs after each layer
    growth: list[float]  # (depth,): measured |J_l|_F^2 / n, the mean perturbation growth
    chi_1: float  # the measured growth's mean over the settled layers
    q_star: float
    chi_1_theory: float
    c_star: float
    xi_c: float  # inf where correlations settle slower than any exponential
    trainable_depth: float  # 6 xi_c
    q_theory: list[float]  # (depth,): the length map from q0
    c_theory: list[float]  # (depth,): the correlation map from c0
    growth_theory: list[float]  # (depth,): sigma_w2 E[phi'^2] at the length of the layer below
    losses: list[float]  # (steps so far,): the training loss before each update

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        layers = fig.steps(self.depth, start=1)
        panels = []
        for key, label in (("q", "length q_l"), ("c", "correlation c_l"), ("growth", "chi")):
            measured_series = fig.Series("measured", layers, getattr(self, key), "line+markers")
            theory = fig.Series(
                "theory", layers, getattr(self, f"{key}_theory"), color="#000000", dash="dash"
            )
            axis = label if key != "growth" else "perturbation growth |J_l|_F^2 / n"
            lines = [fig.Line(1.0)] if key != "q" else []
            panels.append(
                fig.Panel(
                    fig.Axis("layer l"), fig.Axis(axis), [measured_series, theory], lines=lines
                )
            )
        curve = fig.Series(
            "training loss", fig.steps(len(self.losses)), fig.clipped(self.losses, LOSS_CEILING)
        )
        panels.append(
            fig.Panel(
                fig.Axis("SGD step"),
                fig.Axis(f"BCE loss (clipped at {LOSS_CEILING:g})", limits=(0.0, LOSS_CEILING)),
                [curve],
                lines=[fig.Line(math.log(2.0), label="chance")],
            )
        )
        return [
            fig.Figure(
                f"A depth-{self.depth} {self.activation} stack at sigma_w2 = {self.sigma_w2:g}, "
                f"sigma_b2 = {self.sigma_b2:g}: measured against mean-field theory, then trained",
                panels,
                height=3.4,
            )
        ]


# -- batched: the cells of a sweep in one process (the sweep engine's path) ----------------------
#
# Not in the script: a learner's script runs one cell, the plain code above. Cells that share
# everything but their variances and learning rate share their draws: one propagate call
# measures all of them (a matmul a layer for every cell, as edge-of-chaos measures a row), and
# their trained stacks train together in one train_stacked call.


def batch_key(params: Mapping[str, Any]) -> tuple[Any, ...]:
    """The cells that may run together: those with equal keys (``sigma_w2``, ``sigma_b2`` and
    ``lr`` may differ; they live in the per-cell scales and the per-net rates)."""
    names = ("activation", "depth", "width", "q0", "c0", "train_width", "steps", "seed", "device")
    return tuple(params[n] for n in names)


def chaos_cell_batched(configs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Run many ``chaos-cell`` configurations of one :func:`batch_key` together: the dict
    :func:`chaos_cell` yields last for each, in order, to float32 rounding (a batched kernel
    may add a sum's terms in another order)."""
    if not configs:
        return []
    keys = {batch_key(c) for c in configs}
    if len(keys) != 1:
        raise ValueError(f"configs must share one batch_key, got {sorted(keys, key=str)}")
    activation, depth, width, q0, c0, train_width, steps, seed, device = keys.pop()
    torch.manual_seed(seed)
    x = input_pair(width, q0, c0).to(device)  # (2, n)
    stack = draw_stack(depth, width, device)
    sw, sb = (
        torch.tensor([c[k] for c in configs], device=device) for k in ("sigma_w2", "sigma_b2")
    )
    m = propagate(activation, stack, x, sw, sb)  # (cells, depth) each
    x_train, y_train = two_moons(n_samples=64, device=device)
    nets = []
    for c in configs:
        torch.manual_seed(seed)  # as chaos_cell draws its trained stack
        nets.append(GaussianStack(activation, depth, train_width, c["sigma_w2"], c["sigma_b2"]))
    lrs = torch.tensor([c["lr"] for c in configs], device=device)  # (cells,)
    curves = train_stacked([n.to(device) for n in nets], x_train, y_train, lrs, steps)
    return [
        {
            "activation": activation,
            "sigma_w2": c["sigma_w2"],
            "sigma_b2": c["sigma_b2"],
            "depth": depth,
            **measured(m, k, depth),
            **theory_of(activation, c["sigma_w2"], c["sigma_b2"], depth, q0, c0),
            "losses": curve,
        }
        for k, (c, curve) in enumerate(zip(configs, curves, strict=True))
    ]


EXPERIMENT = Experiment(
    name="chaos-cell",
    title="One cell of the phase diagram",
    summary="a deep stack at one (sigma_w2, sigma_b2): measured chi_1, length and correlation "
    "against mean-field theory, and whether it trains (sweep it for the edge-of-chaos grid)",
    params_type=Params,
    result_type=ChaosCellResult,
    entry=chaos_cell,
    tables=tables,
    code=(
        *MEAN_FIELD_CODE,
        input_pair,
        draw_stack,
        propagate,
        GaussianStack,
        two_moons,
        train_step,
        train,
        theory_of,
        measured,
        chaos_cell,
        fmt,
        fmt_as,
        tables,
    ),
    cost=Cost(6.0),  # 2.3 s measured at the maxima (erf), one thread
    heaviest={"activation": "erf"},  # its Gaussian expectations cost the most
    total_steps=lambda p: p.steps,
    batched=chaos_cell_batched,
    batch_key=batch_key,
    sweep_values=("chi_1", "chi_1_theory"),  # a sweep's heat map of the measured and predicted
)
