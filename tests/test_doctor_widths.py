"""The coordinate check over width (normlab.doctor.widths), in Python and through the CLI.

The models are a small GPT (token and position embeddings, two pre-LN blocks of attention and
MLP, a readout over a fixed vocabulary of 32) at hidden width n, in the standard
parametrization (PyTorch's default init, one Adam rate) and in muP (Tensor Programs V, Table 3,
for Adam, relative to a base width of 64: hidden weights' rate / m and the readout's too, the
readout's init variance ~ 1/n^2, attention scaled 1/d; m = n / 64), written once in ``GPT``, the
file the CLI loads too.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
import math
import statistics
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import nn

from normlab import doctor
from normlab.cli import main
from normlab.doctor.widths import DRIFT, NOISE_Z

GPT = '''
import math

import torch
import torch.nn.functional as F
from torch import nn

BASE, VOCAB, SEQ, HEADS, BLOCKS = 64, 32, 16, 4, 2


class MuLinear(nn.Linear):
    """muP's hidden weight written as a multiplier: W / m with W drawn m times PyTorch's
    default, so that one Adam rate moves W / m by rate / m (Table 3's 1/fan_in rate)."""

    def __init__(self, fan_in, fan_out, m):
        super().__init__(fan_in, fan_out, bias=False)
        self.m = m
        with torch.no_grad():
            self.weight.mul_(m)

    def forward(self, x):
        return F.linear(x, self.weight) / self.m


class MuReadout(MuLinear):
    """The readout / m, drawn sqrt(m) times PyTorch's default: variance 1/(3 n0 m^2) ~ 1/n^2."""

    def __init__(self, fan_in, fan_out, m):
        super().__init__(fan_in, fan_out, m)
        with torch.no_grad():
            self.weight.mul_(m**-0.5)


class Block(nn.Module):
    def __init__(self, n, linear, scale):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(n), nn.LayerNorm(n)
        self.q, self.k, self.v, self.proj = (linear(n, n) for _ in range(4))
        self.fc, self.act, self.fc2 = linear(n, 4 * n), nn.GELU(), linear(4 * n, n)
        self.scale = scale

    def forward(self, x):
        b, t, n = x.shape
        h = self.ln1(x)
        heads = [f(h).view(b, t, HEADS, -1).transpose(1, 2) for f in (self.q, self.k, self.v)]
        att = F.scaled_dot_product_attention(*heads, is_causal=True, scale=self.scale)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, n))
        return x + self.fc2(self.act(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, n, mup=False, multipliers=True):
        super().__init__()
        m, d = n / BASE, n // HEADS
        scale = math.sqrt(BASE // HEADS) / d if mup else d**-0.5  # muP: 1/d, SP's at n0
        if mup and multipliers:
            linear = lambda i, o: MuLinear(i, o, m)
        else:
            linear = lambda i, o: nn.Linear(i, o, bias=False)
        self.tok, self.pos = nn.Embedding(VOCAB, n), nn.Embedding(SEQ, n)
        self.blocks = nn.ModuleList(Block(n, linear, scale) for _ in range(BLOCKS))
        self.ln = nn.LayerNorm(n)
        if mup and multipliers:
            self.head = MuReadout(n, VOCAB, m)
        else:
            self.head = nn.Linear(n, VOCAB, bias=False)
            if mup:  # variance 1/(3 n) * n0/n ~ 1/n^2; its rate comes from the optimizer
                with torch.no_grad():
                    self.head.weight.mul_(m**-0.5)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1]))  # (B, T, n)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))  # (B, T, VOCAB)


def sp(n):
    return GPT(n)


def sp_std002(n):
    model = GPT(n)
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
    return model


def mup(n):
    return GPT(n, mup=True)


def mup_zero_readout(n):
    model = GPT(n, mup=True)
    with torch.no_grad():
        model.head.weight.zero_()
    return model


def mup_rates(n):
    return GPT(n, mup=True, multipliers=False)


def mup_optimizer(model, lr):
    """Table 3's Adam rates: hidden and readout weights lr / m, embeddings and gains lr."""
    m = model.ln.normalized_shape[0] / BASE
    named = model.named_parameters()
    hidden = [p for name, p in named if p.dim() == 2 and not name.startswith(("tok", "pos"))]
    rest = [p for p in model.parameters() if all(p is not h for h in hidden)]
    return torch.optim.Adam([{"params": hidden, "lr": lr / m}, {"params": rest, "lr": lr}])


def wide_output(n):
    return nn.Embedding(VOCAB, n)


def no_width():
    return GPT(64)
'''

WIDTHS = [64, 128, 256]
SEEDS = range(5)
# In SP with Adam every layer whose input has passed a hidden weight's update grows like the
# width; the embeddings (Adam moves each entry by about lr, whatever the width) and the first
# LayerNorm, which reads only them, stay Theta(1).
THETA_ONE_IN_SP = {"tok", "pos", "blocks.0.ln1"}


@pytest.fixture(scope="module")
def gpt_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("widths") / "gpt.py"
    path.write_text(GPT)
    return path


@pytest.fixture(scope="module")
def gpt(gpt_file: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("widths_gpt", gpt_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def token_batches(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + seed)
    return [torch.randint(32, (8, 16), generator=g) for _ in range(3)]  # (B, T) token ids


@functools.cache
def check(gpt: ModuleType, name: str, seed: int = 0) -> doctor.CoordCheck:
    """The check of ``gpt.name`` (with muP's per-layer rates for ``mup_rates``), once per
    session: tests read the same check from different sides and must not change it."""
    optimizer = gpt.mup_optimizer if name == "mup_rates" else None
    batches = token_batches(seed)
    return doctor.coord_check(getattr(gpt, name), WIDTHS, batches, seed=seed, optimizer=optimizer)


@pytest.fixture(scope="module")
def sp_check(gpt: ModuleType) -> doctor.CoordCheck:
    return check(gpt, "sp")


# -- what it flags ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_sp_flags_every_layer_a_hidden_update_reaches(gpt: ModuleType, seed: int) -> None:
    result = check(gpt, "sp", seed)
    names = [layer.name for layer in result.layers]
    assert set(result.flagged) == set(names) - THETA_ONE_IN_SP
    head = next(layer for layer in result.layers if layer.name == "head")
    # PyTorch's default init keeps every size Theta(1) at init; the logits' change grows like
    # n (Adam), at least like SGD's sqrt(n): slope above 0.5 (and above its bound: flagged)
    assert all(layer.init_fit.direction != "grows" for layer in result.layers)
    assert head.change_fit.slope > 0.5 and head.change_fit.direction == "grows"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("form", ["mup", "mup_rates"])
def test_mup_flags_none_at_any_seed(gpt: ModuleType, form: str, seed: int) -> None:
    result = check(gpt, form, seed)
    assert result.flagged == []
    assert "as muP expects" in result.verdict()
    # muP's readout starts at variance ~ 1/n^2: its logits shrink like n^(-1/2) at init
    head = next(layer for layer in result.layers if layer.name == "head")
    assert head.init_fit.direction == "shrinks"
    assert abs(head.init_fit.slope + 0.5) <= head.init_fit.bound


def test_multipliers_and_per_layer_rates_are_the_same_muP(gpt: ModuleType) -> None:
    """W/m moved by Adam at rate lr is W moved at lr/m: the two forms measure alike (Adam's
    eps, 1e-8 against gradients far above it, is the only difference)."""
    a, b = check(gpt, "mup"), check(gpt, "mup_rates")
    for x, y in zip(a.layers, b.layers, strict=True):
        assert x.name == y.name
        torch.testing.assert_close(x.change, y.change, rtol=1e-3, atol=0.0)


def test_fixed_std_init_grows_like_sqrt_width_at_init(gpt: ModuleType) -> None:
    """Entries of std 0.02 reading a LayerNorm's unit-RMS output sum to RMS 0.02 sqrt(n): the
    queries' exponent is 1/2 at init, within the check's own bound."""
    result = check(gpt, "sp_std002")
    q = next(layer for layer in result.layers if layer.name == "blocks.0.q")
    assert q.init_fit.direction == "grows"
    assert abs(q.init_fit.slope - 0.5) <= q.init_fit.bound


def test_standard_error_matches_the_seed_to_seed_spread() -> None:
    """The slope's standard error predicts how far checks from other seeds scatter.

    20 checks of a 4-layer ReLU MLP from disjoint seeds: the slopes' sample sd over their mean
    standard error is 1 if the error is right and under 1 where it is conservative. A sample sd
    of 20 values errs by about 1/sqrt(2 * 19) = 16%: 1.5 is three such errors above 1, and 0.4
    says the bound is not so loose that it would let a real exponent through.
    """

    def mlp(n: int) -> nn.Module:
        layers = [nn.Linear(16, n), nn.ReLU(), nn.Linear(n, n), nn.ReLU(), nn.Linear(n, 64)]
        return nn.Sequential(*layers)

    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(7))  # (64, 16)
    runs = [doctor.coord_check(mlp, [32, 64, 128], x, steps=1, seed=2 * k) for k in range(20)]
    for i, name in enumerate(layer.name for layer in runs[0].layers):
        for which in ("init_fit", "change_fit"):
            fits = [getattr(run.layers[i], which) for run in runs]
            ratio = statistics.stdev(f.slope for f in fits) / statistics.mean(f.se for f in fits)
            assert 0.4 <= ratio <= 1.5, (name, which, ratio)


# -- what it reports -------------------------------------------------------------------------


def test_json_is_strict_and_a_zero_readout_has_no_init_slope(gpt: ModuleType) -> None:
    result = check(gpt, "mup_zero_readout")
    d = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    head = next(layer for layer in d["layers"] if layer["name"] == "head")
    assert head["init"] == [0.0, 0.0, 0.0]
    assert head["init_fit"]["direction"] == "zero" and head["init_fit"]["slope"] is None
    assert head["change_fit"]["direction"] != "grows" and not head["flagged"]
    assert d["widths"] == WIDTHS and d["seeds"] == 2 and d["flagged"] == []
    assert d["bound"] == {"z": NOISE_Z, "drift": DRIFT}
    assert head["expected"] == 0.0


def test_bound_is_z_standard_errors_plus_the_drift(sp_check: doctor.CoordCheck) -> None:
    drift = DRIFT * (64**-0.5 - 256**-0.5) / math.log(4)
    for layer in sp_check.layers:
        fit = layer.change_fit
        assert fit.bound == pytest.approx(NOISE_Z * fit.se + drift, rel=1e-12)
        assert fit.ratio == pytest.approx(layer.change[-1] / layer.change[0], rel=1e-12)


def test_tables_have_a_row_per_layer_and_the_verdicts(sp_check: doctor.CoordCheck) -> None:
    init, change = sp_check.tables()
    assert init["columns"] == (
        "layer",
        "n=64",
        "n=128",
        "n=256",
        "slope",
        "bound",
        "ratio",
        "verdict",
    )
    assert [row[0] for row in change["rows"]] == [layer.name for layer in sp_check.layers]
    verdicts = {row[0]: row[-1] for row in change["rows"]}
    assert verdicts["head"] == "grows" and verdicts["tok"] == "flat"
    assert sp_check.verdict() in change["notes"] and sp_check.verdict() not in init["notes"]


def test_figure_draws_every_layer_and_the_flat_mup_expectation(
    sp_check: doctor.CoordCheck,
) -> None:
    figure = doctor.coord_figure(sp_check).to_dict()
    assert len(figure["panels"]) == 2
    for panel in figure["panels"]:
        assert panel["x"]["scale"] == "log" and panel["y"]["scale"] == "log"
        names = [s["name"] for s in panel["series"]]
        assert names[:-2] == [layer.name for layer in sp_check.layers]
        reference = panel["series"][-2]
        assert reference["name"].startswith("muP") and reference["y"] == [1.0, 1.0, 1.0]
        assert all(s["y"][0] == 1.0 for s in panel["series"][:-2])  # each over its n=64 size
    head = figure["panels"][1]["series"][len(sp_check.layers) - 1]
    assert head["y"][-1] == pytest.approx(sp_check.layers[-1].change_fit.ratio)


# -- what it takes ---------------------------------------------------------------------------


def test_widths_are_sorted_and_checked() -> None:
    assert doctor.check_widths([256, 64, 128]) == [64, 128, 256]
    bad: list[Any] = [[64], [0, 64], [64, 64], [64, 100], [8, 16, 32, 64, 128, 256, 512]]
    bad += [[64, 8192], [4, 64]]
    for widths in bad:
        with pytest.raises(ValueError, match="use 2 to 6 distinct integers in \\[8, 4096\\]"):
            doctor.check_widths(widths)
    for widths in ("64,128", [64.0, 128], [True, 64]):
        with pytest.raises(TypeError, match="widths"):
            doctor.check_widths(widths)


def test_bad_factories_and_settings_are_named(gpt: ModuleType) -> None:
    ids = token_batches(0)
    with pytest.raises(ValueError, match=r"output's shape is .* at width 128"):
        doctor.coord_check(gpt.wide_output, [64, 128], ids)

    def not_a_module(n: int) -> Any:
        return n

    with pytest.raises(TypeError, match=r"factory\(64\) returned int"):
        doctor.coord_check(not_a_module, [64, 128], ids)
    for setting in ({"steps": 0}, {"seeds": 0}, {"lr": -1.0}, {"lr": math.nan}):
        with pytest.raises(ValueError, match=next(iter(setting))):
            doctor.coord_check(gpt.sp, [64, 128], ids, **setting)
    with pytest.raises(ValueError, match="batches is empty"):
        doctor.coord_check(gpt.sp, [64, 128], [])


def test_rng_kept_and_dropout_draws_the_same_masks_at_both_readings() -> None:
    """A dropout on the input, before any weight: training cannot change its output, so its
    change is exactly 0 when both readings draw the same mask; the caller's RNG is left as it
    was."""

    def net(n: int) -> nn.Module:
        return nn.Sequential(nn.Dropout(0.5), nn.Linear(8, n), nn.ReLU(), nn.Linear(n, 32))

    x = torch.randn(32, 8)  # (32, 8)
    state = torch.get_rng_state()
    result = doctor.coord_check(net, [16, 32], x, steps=2)
    assert torch.equal(torch.get_rng_state(), state)
    dropout = result.layers[0]
    assert dropout.change == [0.0, 0.0] and dropout.change_fit.direction == "zero"
    assert min(dropout.init) > 0


# -- the command line ------------------------------------------------------------------------


def run_cli(*argv: str, cwd: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["doctor", *argv])
    return status, out.getvalue(), err.getvalue()


TOKENS = ("--input-shape", "8,16", "--tokens", "32")


def test_cli_prints_both_tables_and_flags_sp(gpt_file: Path) -> None:
    status, out, err = run_cli("gpt.py:sp", "--widths", "64,128,256", *TOKENS, cwd=gpt_file.parent)
    assert status == 0, err
    assert "coordinate size at init" in out and "coordinate size change after 3 Adam steps" in out
    head = next(line for line in out.splitlines() if "│ head " in line and "grows" in line)
    assert "n=256" in out and head


def test_cli_json_for_mup_flags_none(gpt_file: Path) -> None:
    status, out, err = run_cli(
        "gpt.py:mup", "--widths", "256,64,128", "--json", *TOKENS, cwd=gpt_file.parent
    )
    assert status == 0, err
    d = json.loads(out)
    assert d["model"] == "gpt.py:mup" and d["widths"] == WIDTHS and d["flagged"] == []
    assert len(d["layers"]) == 22 and d["steps"] == 3


@pytest.mark.parametrize(
    "widths", ["64", "a,b", "0,64", "64,64", "64,100", "8,16,32,64,128,256,512", "64,8192", ""]
)
def test_cli_bad_widths_exit_2_with_one_line(gpt_file: Path, widths: str) -> None:
    status, out, err = run_cli("gpt.py:sp", "--widths", widths, *TOKENS, cwd=gpt_file.parent)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"normlab: error: --widths {widths!r}: use 2")
    assert "distinct integers in [8, 4096]" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["gpt.py:sp", "--fix", "he"], "--widths runs the coordinate check: give no --fix"),
        (["gpt.py:sp", "--html", "r.html"], "give no --html"),
        (["--log", "run.jsonl"], "give no --log"),
        (["gpt.py:no_width"], "no_width(64) raised TypeError"),
        (["gpt.py:wide_output"], "with --widths: the output's shape is"),
    ],
)
def test_cli_widths_refuses_what_it_cannot_run(gpt_file: Path, argv: list[str], says: str) -> None:
    status, out, err = run_cli(*argv, "--widths", "64,128", *TOKENS, cwd=gpt_file.parent)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and says in err
