"""``residual-stream``: the measured residual streams against normlab.theory, and the blocks.

Finite width. Every block adds a branch whose ReLU has a non-zero mean, so part of its output is
one vector shared by every token; that shared part does not average out over the batch, and a
single run's E|x_l|^2/d wanders around the prediction by a relative standard deviation of about
``SPREAD / sqrt(d)``: 0.5-0.8 / sqrt(d) measured over 8-16 seeds at d = 64, 128, 256 for pre-LN,
peri-LN and DyT, depth 48, 16 x 8 tokens (the cross term 2<x_l, f_l>/d alone gives 0.45 / sqrt(d)),
and 0.16-0.28 / sqrt(d) for the 1/sqrt(L)-scaled stack without norm. The tests compare a mean
over ``S`` seeds, whose spread is that over sqrt(S), and allow 4 of those standard deviations.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import pytest
import torch

from normlab.experiments import run_experiment
from normlab.experiments.residual_stream import (
    attention_without_skips,
    probe_stack,
    rank_one_residual,
    token_cosine,
)
from normlab.models import DyT, FeedForward, ResidualBranch, SelfAttention, TransformerBlock
from normlab.theory import residual_stream

SPREAD = {"pre": 0.8, "peri": 0.8, "dyt": 0.8, "none": 0.3}
"""A single run's relative standard deviation of E|x_l|^2/d around the theory, times sqrt(d)
(the largest measured, rounded up: see the module docstring)."""


@functools.cache
def stack(
    placement: str,
    depth: int,
    d: int,
    seed: int,
    attention: bool = False,
    scale: float = 1.0,
    tokens: int = 16,
    sequences: int = 8,
) -> dict:
    """One placement's stack as ``compare_placements`` builds it, measured by its own code.

    Computed once per file and shared (no test changes it): the pre-LN acceptance reads the
    second moments of the eight 48 x 256 stacks whose gradients the gradient test reads."""
    torch.manual_seed(seed)
    x0 = torch.randn(sequences, tokens, d)
    blocks: list[torch.nn.Module] = [
        TransformerBlock(d, placement, attention, scale) for _ in range(depth)
    ]
    r = torch.randn(sequences, tokens, d)
    return probe_stack(blocks, x0, r)


def relative_errors(placement: str, depth: int, d: int, seeds: int, at: list[int]) -> list[float]:
    """The seed-mean of E|x_l|^2/d over the prediction, minus 1, at each block of ``at``."""
    scale = depth**-0.5 if placement == "none" else 1.0
    theory = residual_stream(placement, depth, branch_scale=scale)  # type: ignore[arg-type]
    runs = [stack(placement, depth, d, seed, scale=scale)["second_moment"] for seed in range(seeds)]
    return [sum(m[k] for m in runs) / seeds / theory[k] - 1.0 for k in at]


# -- the acceptance: pre-LN grows as 1 + l/2 ------------------------------------------------------


@pytest.mark.slow
def test_a_pre_ln_mlp_stack_grows_as_one_plus_l_over_two() -> None:
    """E|x_l|^2/d = 1 + l/2 (branch gain 1/2: Linear -> ReLU -> Linear, Var(W) = 1/fan_in).

    d = 256, 8 seeds: the mean's relative spread is 0.8 / sqrt(256) / sqrt(8) = 1.8%, so 10% is
    5.6 of its standard deviations; each single run stays within 4 of its own, 20%."""
    d, seeds = 256, 8
    runs = [stack("pre", 48, d, seed)["second_moment"] for seed in range(seeds)]
    for k in (16, 48):
        expected = 1 + k / 2  # the formula itself, not read from normlab.theory
        mean = sum(m[k] for m in runs) / seeds
        assert abs(mean / expected - 1) < 0.10, (k, mean)
        assert all(abs(m[k] / expected - 1) < 4 * SPREAD["pre"] / math.sqrt(d) for m in runs)
    assert residual_stream("pre", 48)[16] == 9.0 and residual_stream("pre", 48)[48] == 25.0


@pytest.mark.parametrize("placement", ["pre", "peri", "dyt", "none"])
@pytest.mark.parametrize(("d", "depth"), [(32, 8), (64, 24)])
def test_every_growing_placement_follows_its_theory_at_other_widths_and_depths(
    placement: str, d: int, depth: int
) -> None:
    """pre-LN 1 + l/2, peri-LN 1 + l, DyT its recursion, no norm (1 + 1/(2L))^l, over 6 seeds:
    within 4 standard deviations of the seed-mean, 4 * SPREAD / sqrt(d) / sqrt(6)."""
    seeds = 6
    tolerance = 4 * SPREAD[placement] / math.sqrt(d) / math.sqrt(seeds)
    errors = relative_errors(placement, depth, d, seeds, [depth // 2, depth])
    assert max(abs(e) for e in errors) < tolerance, (errors, tolerance)


@pytest.mark.slow
def test_dyt_follows_its_own_recursion_not_pre_ln_s() -> None:
    """DyT squashes instead of dividing by the measured scale: its stream grows more slowly than
    pre-LN's, and as the recursion m += g E[tanh(0.5 sqrt(m) z)^2] says (d = 128, 6 seeds:
    tolerance 4 * 0.8 / sqrt(128) / sqrt(6) = 11.5%)."""
    depth, seeds, d = 48, 6, 128
    dyt = residual_stream("dyt", depth)
    assert dyt[-1] < 0.5 * residual_stream("pre", depth)[-1]
    runs = [stack("dyt", depth, d, seed)["second_moment"] for seed in range(seeds)]
    for k in (8, 24, 48):
        mean = sum(m[k] for m in runs) / seeds
        assert abs(mean / dyt[k] - 1) < 4 * SPREAD["dyt"] / math.sqrt(d) / math.sqrt(seeds)
        assert mean < 0.75 * (1 + k / 2)  # well below pre-LN's line


# -- the placements that hold the stream at 1 ----------------------------------------------------


@pytest.mark.parametrize("attention", [False, True])
@pytest.mark.parametrize("d", [8, 32, 128])
def test_post_ln_holds_the_stream_at_one(attention: bool, d: int) -> None:
    """LayerNorm divides by sqrt(var + eps), so each token's second moment is var/(var + eps) =
    1 - eps/var: 1e-4 = 10 eps allows a token variance down to 0.1 (a post-LN sum has about
    1.5; the largest deficit measured is 1.8e-5, at d = 8); float32 adds ~1e-7."""
    m = stack("post", 24, d, seed=1, attention=attention, sequences=2)["second_moment"]
    assert all(abs(v - 1) < 1e-4 for v in m[1:]), m
    assert residual_stream("post", 24) == [1.0] * 25


@pytest.mark.parametrize("attention", [False, True])
def test_rezero_is_the_identity_at_initialization(attention: bool) -> None:
    """alpha = 0: x + 0 * f(x) is x bit for bit, so every block's statistics are the input's,
    whose second moment is 1 within 5 standard deviations of a mean of N T d squares,
    5 * sqrt(2 / (N T d))."""
    n, t, d = 8, 16, 64
    run = stack("rezero", 16, d, seed=2, attention=attention, tokens=t, sequences=n)
    m = run["second_moment"]
    assert m == [m[0]] * 17 and run["grad_norm"] == [1.0] * 17
    assert abs(m[0] - 1) < 5 * math.sqrt(2 / (n * t * d))
    assert residual_stream("rezero", 16) == [1.0] * 17


@pytest.mark.parametrize("depth", [4, 32])
def test_no_norm_with_one_over_sqrt_l_branches_stays_bounded(depth: int) -> None:
    """(1 + 1/(2L))^L < e^(1/2) for an MLP stack; with attention each block also adds at most
    its input's second moment (a convex combination of values: Jensen), so at most e^(3/4).
    Measured on 3 seeds, d = 64: within 4 single-run deviations, 4 * 0.3 / sqrt(64) = 15%."""
    d, tolerance = 64, 1 + 4 * SPREAD["none"] / math.sqrt(64)
    mlp = residual_stream("none", depth, branch_scale=depth**-0.5)
    assert max(mlp) < math.exp(0.5)
    for seed in range(3):
        m = stack("none", depth, d, seed, scale=depth**-0.5, sequences=4)["second_moment"]
        assert max(m) < math.exp(0.5) * tolerance
        scale = (2 * depth) ** -0.5
        both = stack("none", depth, d, seed, attention=True, scale=scale, sequences=4)
        assert max(both["second_moment"]) < math.exp(0.75) * tolerance


# -- gradients ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_pre_ln_gradients_grow_toward_the_input() -> None:
    """Backward through x + f(LN(x)) adds |J^T g|^2 = g_f |g|^2 / m_l (LayerNorm divides by
    the stream's scale, the branch's gain is 1/2), so |g_l|^2 = |g_{l+1}|^2 (1 + 1/(2 + l)),
    which telescopes to |g_l| / |g_L| = sqrt((L + 2) / (l + 2)): 5 at the input of 48 blocks.

    The derivation drops the two directions LayerNorm projects out and the correlation of a
    gradient with the weights it passed through: measured +3.6% at d = 128, below 1% at
    d = 256 (8 seeds; a single run's spread 3%); 5% at d = 256 is 4 of the mean's 1.1%."""
    depth, seeds = 48, 8
    runs = [stack("pre", depth, 256, seed)["grad_norm"] for seed in range(seeds)]
    for k in (0, 16):
        mean = sum(g[k] for g in runs) / seeds
        assert abs(mean / math.sqrt((depth + 2) / (k + 2)) - 1) < 0.05, (k, mean)


# -- rank collapse --------------------------------------------------------------------------------


@pytest.mark.parametrize(("d", "tokens"), [(8, 2), (8, 32), (16, 64), (64, 8), (256, 32)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_attention_without_skips_collapses_to_rank_one_by_layer_four(
    d: int, tokens: int, seed: int
) -> None:
    """Dong et al. (2021): pure attention loses rank doubly exponentially: a residual r becomes
    about r^2 per layer once small. Measured 0.5-0.8 after one layer, 2e-2-0.5 after two, at
    most 1.1e-3 after three, and at float32's floor (~1e-7) after four, in every case here: 1e-3
    at layer four leaves four orders of magnitude."""
    torch.manual_seed(seed)
    x0 = torch.randn(2, tokens, d)
    run = attention_without_skips(x0, 6)
    assert run["rank_residual"][0] > 0.1  # the input is far from rank one
    assert run["rank_residual"][4] < 1e-3, run["rank_residual"]
    assert run["cosine"][4] > 1 - 1e-3  # every token points the same way


def test_skip_connections_keep_the_rank_and_post_ln_loses_it() -> None:
    """With a skip around it, attention adds to each token rather than replacing it: pre-LN's
    tokens stay far from rank one after 48 blocks (residual 0.28 measured at d = 64), as do
    those of every MLP stack (tokens never mix). post-LN renormalizes the sum x + attn(x) at
    every block, so the mixing compounds: its residual falls to 1e-3 by block 24."""
    pre = stack("pre", 48, 64, seed=0, attention=True, sequences=4)["rank_residual"]
    post = stack("post", 24, 64, seed=0, attention=True, sequences=4)["rank_residual"]
    assert pre[-1] > 0.1 and post[-1] < 0.01 < 0.1 < post[0]


def test_the_rank_and_cosine_probes_read_like_their_definitions() -> None:
    same = torch.ones(3, 5, 4)  # every token equal: rank one, cosine 1
    assert rank_one_residual(same) < 1e-15 and abs(token_cosine(same) - 1) < 1e-6
    basis = torch.eye(4).expand(2, 4, 4)  # orthonormal tokens: cosine 0, residual sqrt(3/4)
    assert abs(token_cosine(basis)) < 1e-7
    assert abs(rank_one_residual(basis) - math.sqrt(3 / 4)) < 1e-12
    opposite = torch.tensor([[[1.0, 0.0], [-1.0, 0.0]]])  # cosine -1, still rank one
    assert token_cosine(opposite) == -1.0 and rank_one_residual(opposite) < 1e-15


# -- the experiment -------------------------------------------------------------------------------


def test_the_experiment_runs_every_placement_from_the_same_weights() -> None:
    r = run_experiment("residual-stream", depth=6, d_model=16, tokens=4, sequences=2)
    assert [s.placement for s in r.stacks] == ["post", "pre", "peri", "dyt", "none", "rezero"]
    assert all(len(s.second_moment) == len(s.grad_norm) == 7 for s in r.stacks)
    # the same seed draws the same input for every placement
    assert len({s.second_moment[0] for s in r.stacks}) == 1
    assert r.stack("none").branch_scale == 6**-0.5 and r.stack("pre").branch_scale == 1.0
    (figure,) = r.figures()
    dashed = [s.name for s in figure.panels[0].series if s.dash == "dash"]
    assert len(dashed) == 6  # a prediction beside every placement of an MLP stack


def test_with_attention_the_theory_is_drawn_only_where_it_holds() -> None:
    r = run_experiment(
        "residual-stream", block="attention+mlp", depth=5, d_model=16, tokens=4, sequences=2
    )
    (figure,) = r.figures()
    dashed = [s.name for s in figure.panels[0].series if s.dash == "dash"]
    assert dashed == ["post-LN theory", "peri-LN theory", "ReZero theory"]
    assert r.stack("none").branch_scale == 10**-0.5  # 1/sqrt(2L): two branches a block
    peri = r.theory_of("peri")
    assert peri == [1.0 + 2 * k for k in range(6)]  # each LayerNorm'd branch adds 1


def test_scaled_branches_scale_every_placement_but_rezero_s_gate() -> None:
    r = run_experiment("residual-stream", depth=8, d_model=16, tokens=4, scaled_branches=True)
    assert {s.branch_scale for s in r.stacks} == {8**-0.5}
    assert r.theory_of("pre")[-1] == pytest.approx(1.5)  # 1 + L * (1/L) * 1/2


def test_a_streamed_run_draws_the_stacks_run_so_far() -> None:
    """Every stack is a step of its progress and a frame: a partial run draws the placements
    so far, its title says how far, and attention without skips comes last, in the whole run."""
    calls: list[tuple[int, int]] = []
    partials: list[Any] = []
    final = run_experiment(
        "residual-stream",
        **STREAMING,
        progress=lambda done, total: calls.append((done, total)),
        live=lambda partial: partials.append(partial()),
    )
    assert calls == [(k, 7) for k in range(1, 8)]  # six placements, then attention alone
    (second,) = partials[1].figures()
    assert second.title.endswith("so far: 2 stacks (pre-LN last)")
    assert [s.name for s in second.panels[0].series if s.dash != "dash"] == ["post-LN", "pre-LN"]
    assert "attention, no skips" not in {s.name for s in partials[5].figures()[0].panels[2].series}
    assert partials[-1].to_dict() == final.to_dict() and "so far" not in final.figures()[0].title
    assert "attention, no skips" in {s.name for s in final.figures()[0].panels[2].series}


# -- the blocks (normlab.models) --------------------------------------------------------------


def test_dyt_is_gamma_tanh_alpha_x_plus_beta() -> None:
    dyt = DyT(3)
    assert dyt.alpha.item() == 0.5 and dyt.weight.tolist() == [1.0] * 3
    with torch.no_grad():
        dyt.alpha.fill_(2.0)
        dyt.weight.copy_(torch.tensor([1.0, 2.0, 3.0]))
        dyt.bias.copy_(torch.tensor([0.5, 0.0, -1.0]))
    x = torch.randn(4, 3)
    expected = torch.tensor([1.0, 2.0, 3.0]) * torch.tanh(2.0 * x) + torch.tensor([0.5, 0.0, -1.0])
    torch.testing.assert_close(dyt(x), expected, rtol=0, atol=0)
    assert {n for n, _ in dyt.named_parameters()} == {"alpha", "weight", "bias"}


def test_the_feed_forward_branch_has_gain_one_half() -> None:
    """E|f(x)|^2 / E|x|^2 = 1/2 at initialization; over 4096 tokens of width 256, one draw of
    the weights wanders by about sqrt(2/256) (the Linear's norm), well inside 0.1."""
    torch.manual_seed(0)
    x = torch.randn(4096, 256)
    assert abs(FeedForward(256, 1024)(x).pow(2).mean().item() / x.pow(2).mean().item() - 0.5) < 0.1


def test_a_block_has_its_norms_where_its_placement_puts_them() -> None:
    def norms(placement: str) -> list[str]:
        b = ResidualBranch(torch.nn.Identity(), 4, placement)
        return [type(m).__name__ for m in (b.norm_in, b.norm_out, b.norm_after)]

    assert norms("post") == ["Identity", "Identity", "LayerNorm"]
    assert norms("pre") == ["LayerNorm", "Identity", "Identity"]
    assert norms("peri") == ["LayerNorm", "LayerNorm", "Identity"]
    assert norms("dyt") == ["DyT", "Identity", "Identity"]
    assert norms("none") == norms("rezero") == ["Identity", "Identity", "Identity"]
    assert ResidualBranch(torch.nn.Identity(), 4, "rezero").gate is not None
    with pytest.raises(ValueError, match=r"placement 'mid' not supported, use one of \['post'"):
        ResidualBranch(torch.nn.Identity(), 4, "mid")
    block = TransformerBlock(8, "pre", attention=True)
    assert [type(b.branch) for b in block.branches] == [SelfAttention, FeedForward]
    assert len(TransformerBlock(8, "pre", attention=False).branches) == 1


# -- what the registry-wide tests expect of it (tests/experiments/expectations.py) --------------


# Settings beyond the defaults its script also runs at (tests/test_script.py; the first is
# its notebook's).
SCRIPT_SETTINGS = [
    {"block": "attention+mlp", "depth": 6, "d_model": 32, "scaled_branches": True},
    {"depth": 10, "tokens": 4, "sequences": 2, "d_model": 16, "seed": 3},
]


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"depth": 2, "d_model": 8, "tokens": 3, "sequences": 1}


# What grows in its streamed result (the stacks, one placement after another), and how many
# partials STREAMING gives before the last yield: one a stack, six (attention alone is last).
CURVE = (lambda d: [s["placement"] for s in d["stacks"]], 6)


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP)."""
    # post-LN pins the stream at 1, pre-LN's grows; attention alone collapses
    return (
        round(d["stacks"][0]["second_moment"][-1], 3) == 1.0
        and d["stacks"][1]["second_moment"][-1] > 20
        and d["no_skip"]["rank_residual"][4] < 1e-3
    )
