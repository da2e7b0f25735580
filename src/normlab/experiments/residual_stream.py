"""``residual-stream``: where the normalization sits in a residual stack, measured at init.

A batch of token sequences, :math:`x_0 \\sim \\mathcal{N}(0, 1)` per coordinate, runs through
``depth`` transformer-style blocks (an MLP branch, or attention then MLP) with each of six
placements of the normalization: post-LN, pre-LN, peri-LN, DyT, none (every branch scaled by
:math:`1/\\sqrt{\\text{branches}}`) and ReZero. Every weight is :math:`\\mathcal{N}(0,
1/\\mathrm{fan\\_in})` with no biases, and every placement draws the same weights from the same
seed, so the placements differ in nothing else. Per block :math:`l` the run records

- the hidden state's second moment :math:`\\mathbb{E}|x_l|^2/d`, against
  :func:`normlab.theory.residual_stream` (pre-LN: :math:`1 + l s^2 g`, :math:`g = 1/2` for
  Linear-ReLU-Linear; post-LN and ReZero: 1; peri-LN: :math:`1 + l s^2`; none:
  :math:`(1 + s^2 g)^l`; DyT: its own recursion);
- the gradient norm at block :math:`l`'s input, relative to the output's, for the loss
  :math:`\\sum x_L \\odot r` with a fixed random :math:`r`;
- the mean cosine between the tokens of a sequence and the relative distance of the token matrix
  from its best rank-one approximation: rank collapse (Dong, Cordonnier & Loukas 2021; Noci et
  al. 2022), beside a stack of attention layers without skip connections, which collapses to
  rank one doubly exponentially fast.

The code measures, and beside each stack it computes the prediction with the theory's own code
(:data:`normlab.theory.RESIDUAL_CODE`, pasted into the script), which the figure draws dashed.
An attention branch's output second moment depends on how alike the tokens are, so with
attention the theory is given only where it holds anyway: post-LN, ReZero (1) and peri-LN (the
branch's own LayerNorm fixes its output to 1).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab import figures as fig
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import (
    DyT,
    FeedForward,
    ResidualBranch,
    SelfAttention,
    TransformerBlock,
    fmt_as,
    lecun_linear,
)
from normlab.theory import RESIDUAL_CODE, residual_stream

RANK_ONE_FLOOR = 1e-8
"""Rank-one residuals are drawn at least at this floor of the log axis: below it a float32 token
matrix is rank one to its precision (and identical tokens give exactly 0)."""


@dataclass(frozen=True)
class Params:
    block: str = param(
        "mlp",
        "branches of a block: an MLP, or attention then an MLP",
        choices=("mlp", "attention+mlp"),
    )
    d_model: int = param(128, "features d of the residual stream", min=8, max=256, step=1)
    tokens: int = param(16, "tokens per sequence", min=2, max=32, step=1)
    sequences: int = param(4, "sequences in the batch", min=1, max=8, step=1)
    depth: int = param(48, "blocks in the stack", min=1, max=64, step=1)
    scaled_branches: bool = param(
        False, "scale every branch by 1/sqrt(branches), as GPT-2 scales its output projections"
    )
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run residual-stream --code` prints) -----------------


def token_cosine(x: torch.Tensor) -> float:
    """The mean cosine between two different tokens of a sequence, over the batch."""
    u = x / x.norm(dim=-1, keepdim=True)  # (N, T, d): every token of length 1
    gram = u @ u.transpose(-2, -1)  # (N, T, T): cosines, 1 on the diagonal
    t = x.shape[1]
    off_diagonal = gram.sum(dim=(-2, -1)) - t  # (N,): the T * (T - 1) cosines of distinct tokens
    return (off_diagonal / (t * (t - 1))).mean().item()


def rank_one_residual(x: torch.Tensor) -> float:
    """How far the token matrix is from rank one: ``|X - X_1| / |X|`` (Frobenius norms, ``X_1``
    the best rank-one approximation, from the singular values), the largest over the batch."""
    s = torch.linalg.svdvals(x.detach().double())  # (N, min(T, d)), in float64 for the tail
    tail = s[:, 1:].pow(2).sum(dim=-1).sqrt()  # (N,): |X - X_1|
    return (tail / s.pow(2).sum(dim=-1).sqrt()).max().item()


def probe_stack(blocks: list[nn.Module], x0: torch.Tensor, r: torch.Tensor) -> dict[str, Any]:
    """Run ``x0`` through ``blocks``, backpropagate ``loss = (x_L * r).sum()`` and measure every
    block's input (and the output): second moment, gradient norm relative to the output's,
    mean cosine between tokens, rank-one residual."""
    xs = [x0.requires_grad_()]
    for block in blocks:
        xs.append(block(xs[-1]))  # (N, T, d) -> (N, T, d)
    loss = (xs[-1] * r).sum()
    grads = torch.autograd.grad(loss, xs)  # dloss/dx_l for l = 0 .. L
    top = grads[-1].norm().item()  # = |r|
    return {
        "second_moment": [x.detach().pow(2).mean().item() for x in xs],  # E|x_l|^2 / d
        "grad_norm": [g.norm().item() / top for g in grads],
        "cosine": [token_cosine(x.detach()) for x in xs],
        "rank_residual": [rank_one_residual(x) for x in xs],
    }


def attention_without_skips(x0: torch.Tensor, depth: int) -> dict[str, list[float]]:
    """Stack ``depth`` self-attention layers with no skip connection, no norm and no MLP (Dong
    et al.'s pure attention) and measure the tokens' mean cosine and rank-one residual."""
    layers = [SelfAttention(x0.shape[-1]).to(x0.device) for _ in range(depth)]
    x = x0.detach()
    cosine, residual = [token_cosine(x)], [rank_one_residual(x)]
    with torch.no_grad():
        for layer in layers:
            x = layer(x)  # (N, T, d) -> (N, T, d)
            cosine.append(token_cosine(x))
            residual.append(rank_one_residual(x))
    return {"cosine": cosine, "rank_residual": residual}


def predicted(placement: str, depth: int, attention: bool, scale: float) -> list[float] | None:
    """The theory's E|x_l|^2/d for l = 0 .. depth, where it has one (see the module docstring)."""
    if not attention:
        return residual_stream(placement, depth, branch_scale=scale, branch_gain=0.5)
    if placement in ("post", "rezero"):
        return residual_stream(placement, depth)
    if placement == "peri":  # two branches per block, each adding s^2
        return residual_stream("peri", 2 * depth, branch_scale=scale)[::2]
    return None  # an attention branch's gain depends on how alike the tokens are


def compare_placements(
    block: str,
    d_model: int,
    tokens: int,
    sequences: int,
    depth: int,
    scaled_branches: bool,
    seed: int,
    device: str,
) -> Iterator[dict[str, Any]]:
    """Every placement's stack, from the same seed (same input, same weights), then the
    attention stack without skips.

    Yields the stacks so far after every stack, and last the whole comparison.
    """
    attention = block == "attention+mlp"
    branches = depth * (2 if attention else 1)
    result: dict[str, Any] = {"block": block, "stacks": []}
    for placement in ("post", "pre", "peri", "dyt", "none", "rezero"):
        scale = branches**-0.5 if scaled_branches or placement == "none" else 1.0
        torch.manual_seed(seed)
        x0 = torch.randn(sequences, tokens, d_model).to(device)  # (N, T, d): E|x_0|^2/d ~ 1
        blocks: list[nn.Module] = [
            TransformerBlock(d_model, placement, attention, scale).to(device) for _ in range(depth)
        ]
        r = torch.randn(sequences, tokens, d_model).to(device)  # the loss's fixed direction
        result["stacks"].append(
            {
                "placement": placement,
                "branch_scale": scale,
                **probe_stack(blocks, x0, r),
                "theory": predicted(placement, depth, attention, scale),
            }
        )
        yield result  # every stack so far
    torch.manual_seed(seed)
    x0 = torch.randn(sequences, tokens, d_model).to(device)
    result["no_skip"] = attention_without_skips(x0, depth)
    yield result  # the whole comparison


def placement_name(placement: str) -> str:
    """A placement's name in the tables and the figure."""
    return {
        "post": "post-LN",
        "pre": "pre-LN",
        "peri": "peri-LN",
        "dyt": "DyT",
        "none": "no norm, 1/√branches",
        "rezero": "ReZero",
    }[placement]


def block_rows(
    stacks: list[dict[str, Any]], key: str, spec: str, shown: list[int], extra: list[float] | None
) -> list[list[str]]:
    """A row per shown block l: every stack's ``key`` at l in the format ``spec`` (the second
    moment beside its prediction, '-' where there is none), then ``extra`` at l."""
    rows = []
    for i in shown:
        row = [str(i)]
        for s in stacks:
            cell = fmt_as(s[key][i], spec)
            if key == "second_moment":
                cell += " / " + fmt_as(None if s["theory"] is None else s["theory"][i], spec)
            row.append(cell)
        if extra is not None:
            row.append(fmt_as(extra[i], spec))
        rows.append(row)
    return rows


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every stack's second moment (against the theory), gradient norm, token cosine and
    distance from rank one at a few blocks; the last two beside attention without skips."""
    stacks, no_skip = result["stacks"], result["no_skip"]
    depth = len(no_skip["cosine"]) - 1
    shown = sorted({0, 1, 2, 3, 4, 8, 16, 32, 48, 64, depth} & set(range(depth + 1)))
    names = [placement_name(s["placement"]) for s in stacks]
    scales = "; ".join(f"{n} {s['branch_scale']:.4g}" for n, s in zip(names, stacks, strict=True))
    return [
        {
            "title": "Second moment E|x_l|²/d after block l: measured / theory",
            "columns": ["block", *names],
            "rows": block_rows(stacks, "second_moment", ".4g", shown, None),
            "notes": [
                "theory: normlab.theory.residual_stream, dashed in the figure; '-' where an "
                "attention branch's gain depends on the tokens",
                f"branch scale per stack: {scales}",
            ],
        },
        {
            "title": "Gradient norm at block l's input, relative to the output's",
            "columns": ["block", *names],
            "rows": block_rows(stacks, "grad_norm", ".4g", shown, None),
            "notes": [],
        },
        {
            "title": "Mean cosine between tokens",
            "columns": ["block", *names, "attention, no skips"],
            "rows": block_rows(stacks, "cosine", ".4f", shown, no_skip["cosine"]),
            "notes": [],
        },
        {
            "title": "Distance from rank one |X - X₁| / |X| (worst sequence)",
            "columns": ["block", *names, "attention, no skips"],
            "rows": block_rows(stacks, "rank_residual", ".2e", shown, no_skip["rank_residual"]),
            "notes": [],
        },
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class Stack:
    placement: str
    branch_scale: float
    second_moment: list[float]  # (depth + 1,): E|x_l|^2/d, l = 0 (the input) .. depth
    grad_norm: list[float]  # (depth + 1,): |dloss/dx_l| / |dloss/dx_L|
    cosine: list[float]  # (depth + 1,): mean cosine between distinct tokens
    rank_residual: list[float]  # (depth + 1,): |X - X_1| / |X|, worst sequence
    theory: list[float] | None  # (depth + 1,): the predicted E|x_l|^2/d, where there is one


@dataclass
class NoSkip:
    cosine: list[float]  # (depth + 1,)
    rank_residual: list[float]  # (depth + 1,)


@dataclass
class ResidualStreamResult(Result):
    block: str
    stacks: list[Stack]  # a streamed frame's partial run: the stacks so far
    no_skip: NoSkip | None = None  # None until the stacks are done (a partial run)

    @property
    def depth(self) -> int:
        return len(self.stacks[0].second_moment) - 1

    def stack(self, placement: str) -> Stack:
        return next(s for s in self.stacks if s.placement == placement)

    def theory_of(self, placement: str) -> list[float] | None:
        """The predicted E|x_l|^2/d of the ``placement`` stack (``None`` where there is none)."""
        return self.stack(placement).theory

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        """The four panels over the blocks; a partial run (a streamed frame) draws the stacks
        so far, and attention without skips once it has run."""
        blocks = fig.steps(self.depth + 1)
        moment, grads, cosine, rank = [], [], [], []
        for i, s in enumerate(self.stacks):
            theory = s.theory
            color, name = fig.PALETTE[i], placement_name(s.placement)
            moment.append(fig.Series(name, blocks, s.second_moment, "markers", color))
            if theory is not None:
                moment.append(
                    fig.Series(
                        f"{name} theory", blocks, theory, color=color, dash="dash", legend=False
                    )
                )
            grads.append(fig.Series(name, blocks, s.grad_norm, "line+markers", color, legend=False))
            cosine.append(fig.Series(name, blocks, s.cosine, "line+markers", color, legend=False))
            residual = fig.floored(s.rank_residual, RANK_ONE_FLOOR)
            rank.append(fig.Series(name, blocks, residual, "line+markers", color, legend=False))
        if self.no_skip is not None:
            no_skip, black = "attention, no skips", "#000000"
            cosine.append(fig.Series(no_skip, blocks, self.no_skip.cosine, "line+markers", black))
            residual = fig.floored(self.no_skip.rank_residual, RANK_ONE_FLOOR)
            rank.append(fig.Series(no_skip, blocks, residual, "line+markers", black, legend=False))
        return [self._figure(moment, grads, cosine, rank)]

    def _figure(
        self,
        moment: list[fig.Series],
        grads: list[fig.Series],
        cosine: list[fig.Series],
        rank: list[fig.Series],
    ) -> fig.Figure:
        x = fig.Axis("block l")
        panels = [
            fig.Panel(
                x,
                fig.Axis("E|x_l|²/d (log scale)", scale="log"),
                moment,
                title="Hidden-state second moment",
                note="dots: measured; dashed: theory",
            ),
            fig.Panel(
                x,
                fig.Axis("|∂loss/∂x_l| / |∂loss/∂x_L| (log scale)", scale="log"),
                grads,
                title="Gradient norm at each block's input",
            ),
            fig.Panel(x, fig.Axis("mean cosine"), cosine, title="Mean cosine between tokens"),
            fig.Panel(
                x,
                fig.Axis("|X - X₁| / |X| (log scale)", scale="log"),
                rank,
                title="Distance from rank one",
                lines=[fig.Line(1e-3, label="10⁻³")],
                note=f"floor {RANK_ONE_FLOOR:g}: rank one in float32",
            ),
        ]
        kind = "MLP blocks" if self.block == "mlp" else "attention + MLP blocks"
        title = f"{self.depth} {kind} at initialization"
        if self.no_skip is None:  # a partial run: the stacks so far
            last = placement_name(self.stacks[-1].placement)
            title += f", so far: {len(self.stacks)} stacks ({last} last)"
        return fig.Figure(title, panels, columns=2)


EXPERIMENT = Experiment(
    name="residual-stream",
    title="Normalization in a residual stream",
    summary=(
        "per-block second moment, gradient norm and token similarity of transformer-style "
        "stacks with post-LN, pre-LN, peri-LN, DyT, no norm and ReZero, against the theory"
    ),
    params_type=Params,
    result_type=ResidualStreamResult,
    entry=compare_placements,
    tables=tables,
    code=(
        *RESIDUAL_CODE,
        predicted,
        lecun_linear,
        DyT,
        FeedForward,
        SelfAttention,
        ResidualBranch,
        TransformerBlock,
        token_cosine,
        rank_one_residual,
        probe_stack,
        attention_without_skips,
        compare_placements,
        placement_name,
        fmt_as,
        block_rows,
        tables,
    ),
    cost=Cost(15.0),
    stages=lambda p: 6 + 1,  # a stack per placement (post ... ReZero), then attention alone
    stage="stack",
)
