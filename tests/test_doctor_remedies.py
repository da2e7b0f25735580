"""The doctor's remedies and the checked advice: the margin a cure must clear, the re-diagnosis
it must pass, the zoo's failures and their measured cures, and never a change the model has."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
import torch
from torch import nn

from normlab import doctor, init, zoo
from normlab.cli import main
from normlab.doctor import Advice, Trial
from tests.calibration import ENTRIES, ResidualMLP

BATCH = 64


def batches(shape: tuple[int, ...], steps: int = 2, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for _ in range(steps)]


def state(net: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in net.state_dict().items()}


class Shift(nn.Module):
    """Adds a fixed offset to the first ``dead`` units: a cause of dead units no initializer
    reaches (the offset is a buffer, not a bias)."""

    def __init__(self, width: int, dead: int, by: float) -> None:
        super().__init__()
        offset = torch.cat([torch.full((dead,), by), torch.zeros(width - dead)])
        self.register_buffer("offset", offset)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.offset  # (N, width)


def shifted(by: float) -> nn.Sequential:
    """10 ReLU layers at std 1.0 (exploding), 48 of the first layer's 64 units shifted by ``by``."""
    g = torch.Generator().manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(32, 64), Shift(64, 48, by), nn.ReLU()]
    for _ in range(8):
        layers += [nn.Linear(64, 64), nn.ReLU()]
    net = nn.Sequential(*layers, nn.Linear(64, 10))
    for m in net:
        if isinstance(m, nn.Linear):
            init.normal_(m.weight, 0.0, 1.0, generator=g)
            init.zeros_(m.bias)
    return net


class Block(nn.Module):
    """``x + W2 relu(W1 LN(x))``: He for W1 (ReLU follows), He with gain 1 for W2."""

    def __init__(self, width: int, g: torch.Generator) -> None:
        super().__init__()
        self.ln, self.fc1, self.act = nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU()
        self.fc2 = nn.Linear(width, width)
        init.kaiming_normal_(self.fc1.weight, nonlinearity="relu", generator=g)
        init.kaiming_normal_(self.fc2.weight, nonlinearity="linear", generator=g)
        init.zeros_(self.fc1.bias)
        init.zeros_(self.fc2.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.ln(x))))  # (N, width)


def residual_mlp(blocks: int = 64, width: int = 128, scale: float = 1.0) -> nn.Sequential:
    """A pre-LN residual MLP, its output the stream itself; ``scale`` multiplies each W2."""
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        net = nn.Sequential(*[Block(width, g) for _ in range(blocks)])
    with torch.no_grad():
        for block in net:
            block.fc2.weight.mul_(scale)
    return net


def encoder(norm_first: bool, layers: int = 48) -> nn.TransformerEncoder:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(
            64, 4, 256, dropout=0.0, batch_first=True, norm_first=norm_first
        )
        final = nn.LayerNorm(64) if norm_first else None
        return nn.TransformerEncoder(layer, layers, norm=final, enable_nested_tensor=False)


# -- the margin -----------------------------------------------------------------------------------


def test_the_same_model_on_both_sides_is_never_a_cure() -> None:
    net = zoo.build("vanishing-tanh")
    t = doctor.trial(net, net, batches((BATCH, 32)), steps=10, seeds=3)
    # the same weights, batches and targets, on the same kernels: bit for bit the same runs
    assert t.before == t.after and t.gains == [0.0, 0.0, 0.0]
    assert not t.lowered and not dataclasses.replace(t, flagged=[]).cured
    assert "not a cure" in t.words() and "lowered the loss" not in t.words()


def synthetic(after: list[float], before: list[float] | None = None) -> Trial:
    return Trial(100, [1, 2, 3], before or [1.0, 1.1, 0.95], after, flagged=[])


def test_a_cure_must_beat_the_seed_to_seed_spread_on_every_seed() -> None:
    base = [1.0, 1.1, 0.95]  # spread ln(1.1 / 0.95) = 0.147
    tiny = synthetic([b * (1 - 1e-6) for b in base])  # the 1e-6 lower loss
    assert all(d > 0 for d in tiny.gains) and not tiny.lowered and not tiny.cured
    within = synthetic([b * 0.9 for b in base])  # gain ln(1 / 0.9) = 0.105 < 0.147
    assert not within.lowered and "within the seed-to-seed spread" in within.words()
    beyond = synthetic([b * 0.5 for b in base])  # gain ln 2 = 0.69 > 0.147
    assert beyond.lowered and beyond.cured and "lowered the loss 2x" in beyond.words()
    assert beyond.spread == pytest.approx(math.log(1.1 / 0.95), rel=1e-12)
    one_worse = synthetic([0.3, 0.3, 1.0])  # mean gain 0.83, but one seed got worse
    assert not one_worse.lowered and "did not fall on every seed" in one_worse.words()
    steady = synthetic([0.97] * 3, before=[1.0] * 3)  # spread 0, gain 0.03 < ln(1/0.95)
    assert not steady.lowered
    diverged = synthetic([0.5] * 3, before=[math.inf, 1.0, 1.0])  # a diverged run is the worst
    assert diverged.gains[0] == math.inf and diverged.spread == 0.0 and diverged.lowered


def test_a_lower_loss_with_the_problem_still_there_is_no_cure() -> None:
    lowered = synthetic([0.5, 0.55, 0.475])
    still = dataclasses.replace(lowered, flagged=["dead", "vanishing"])
    assert still.lowered and not still.cured
    assert still.words().endswith(
        "but the re-diagnosis still flags dead, vanishing: not a cure, keep the model as built"
    )
    unchecked = dataclasses.replace(lowered, flagged=None)
    assert not unchecked.cured and "was not re-diagnosed" in unchecked.words()
    d = unchecked.to_dict()
    assert d["cured"] is False and d["lowered"] is True and d["flagged"] is None


def test_lsuv_is_no_cure_while_the_re_diagnosis_still_says_dead() -> None:
    """The issue's case: LSUV fixes the exploding scale, so the loss falls by orders, but the
    units an offset of -100 kills stay dead: not a cure."""
    g = torch.Generator().manual_seed(0)
    xs = batches((BATCH, 32))
    exam = doctor.examine(shifted(-100.0), xs, fix="lsuv", generator=g, trial_steps=30)
    assert exam.after is not None and exam.trial is not None
    assert "dead" in exam.before.problems and "dead" in exam.after.problems
    assert exam.trial.lowered and all(a < 1e-6 * b for a, b in zip(
        exam.trial.after, exam.trial.before, strict=True
    ))  # fmt: skip  # std 1.0 over 10 layers: the given loss is ~1e12, LSUV's ~0.3
    assert not exam.trial.cured and "dead" in (exam.trial.flagged or [])
    assert "still flags dead" in exam.trial.words()


def test_a_problem_the_fix_brings_bars_a_cure() -> None:
    """At -10 the offset kills the units only on most inputs (the std-1.0 layer before it spreads
    them ~5.7); LSUV's unit variance makes them dead on every input: a new problem."""
    g = torch.Generator().manual_seed(0)
    xs = batches((BATCH, 32))
    exam = doctor.examine(shifted(-10.0), xs, fix="lsuv", generator=g, trial_steps=30)
    assert exam.after is not None and exam.trial is not None
    assert "dead" not in exam.before.problems and "dead" in exam.after.problems
    assert exam.trial.lowered and not exam.trial.cured and exam.trial.flagged == ["dead"]


# -- the zoo's failures: advise ------------------------------------------------------------------

CURES = [("vanishing-tanh", "xavier"), ("exploding-relu", "he"), ("dead-relu", "zero-bias")]


@pytest.mark.parametrize(("name", "remedy"), CURES)
def test_each_zoo_failure_gets_a_measured_cure(name: str, remedy: str) -> None:
    g = torch.Generator().manual_seed(0)
    xs = batches(zoo.input_shape(name, BATCH))
    net = zoo.build(name)
    weights = state(net)
    d = doctor.diagnose(net, xs, generator=g)
    (advice,) = doctor.advise(net, xs, d, generator=g, remedies=[remedy])
    t = advice.trial
    assert advice.remedy == remedy and advice.cured and advice.after == []
    assert len(t.before) == len(t.after) == doctor.TRIAL_SEEDS == len(t.seeds)
    assert all(a < b for a, b in zip(t.after, t.before, strict=True))
    assert f"as given, {t.after[0]:.4g}" in t.words() and "a cure" in advice.line()
    assert all(torch.equal(v, net.state_dict()[k]) for k, v in weights.items())  # untouched


def test_he_initialized_layers_are_not_told_he() -> None:
    """dead-relu's layers are He-initialized: its cure is the bias, and He is never named."""
    g = torch.Generator().manual_seed(0)
    xs = batches((BATCH, 32))
    net = zoo.build("dead-relu")
    d = doctor.diagnose(net, xs, generator=g)
    for name in ("he", "xavier"):  # 64x64 layers: Xavier's relu std is He's
        assert (doctor.why_not(name, net, xs[0], d) or "").startswith("the model has it already")
    advice = doctor.advise(net, xs, d, generator=g, steps=30)
    tried = [a.remedy for a in advice]
    assert "he" not in tried and "xavier" not in tried and tried[0] == "zero-bias"
    assert doctor.why_not("he", zoo.build("exploding-relu"), xs[0]) is None  # std 1.0 is not He


def test_zero_bias_resets_only_the_negative_biases_of_the_dead_units() -> None:
    xs = batches((BATCH, 32))
    net = zoo.build("dead-relu")
    d = doctor.diagnose(net, xs)
    made = doctor.remedy("zero-bias", net, xs[0], d)
    bias, was = made.model[3][0].bias, net[3][0].bias  # zoo.DEAD_LAYER's Linear
    assert torch.equal(bias, was.clamp(min=0)) and bool((was < 0).any())
    assert "model[3][0] (56 of 64, min -10)" in made.words
    changed = [k for k, v in made.model.state_dict().items() if not torch.equal(v, state(net)[k])]
    assert changed == ["3.0.bias"]


@pytest.mark.slow
def test_layernorm_is_tried_on_the_deep_batchnorm_stack_and_measured_no_cure() -> None:
    """What happens, measured: LayerNorm removes the gradient trend the doctor flags, but the
    30 LayerNorm + ReLU layers without skips map every input alike (the examples' cosine at the
    last layer goes from ~0.3 to ~0.97) and fit nothing (loss ~1.0, the target's variance),
    while the BatchNorm stack fits the proxy to ~1e-3 under Adam: not a cure, and said so."""
    g = torch.Generator().manual_seed(0)
    xs = batches((BATCH, 32))
    net = zoo.build("deep-batchnorm")
    d = doctor.diagnose(net, xs, generator=g)
    assert "exploding" in d.problems
    (advice,) = doctor.advise(net, xs, d, generator=g, seeds=2, steps=50, remedies=["layernorm"])
    assert advice.remedy == "layernorm" and "exploding" not in advice.after
    assert not advice.cured and all(
        a > 10 * b for a, b in zip(advice.trial.after, advice.trial.before, strict=True)
    )  # the given stack learns the proxy; its LayerNorm twin stays near the target's variance
    assert "did not fall on every seed" in advice.line()


@pytest.mark.slow
def test_a_final_norm_cures_the_deep_pre_ln_residual_mlp() -> None:
    """The failure set's 64 unscaled pre-LN blocks whose head reads the stream as it is: the
    diagnosis flags the stream by itself, and a LayerNorm before the head is the cure (measured
    over 4 seeds of 100 steps on two input draws: 0.40-1.28 as given, 0.10-0.13 with the norm;
    here 2 seeds of 50 steps: 0.79-0.88 and 0.52-0.61, log gain 0.40 over a spread of 0.10);
    branches scaled by 1/sqrt(64) are not (0.55-0.83: better on one draw, worse on the other)."""
    g = torch.Generator().manual_seed(0)
    xs = batches((BATCH, 32), steps=4)
    net = ResidualMLP()
    d = doctor.diagnose(net, xs, generator=g)
    assert d.problems == ["exploding"] and d.stream is not None and d.stream.raw_end
    assert any("the final-norm remedy" in s for s in d.suggestions), d.suggestions
    (advice,) = doctor.advise(net, xs, d, generator=g, seeds=2, steps=50, remedies=["final-norm"])
    assert advice.cured, advice.line()
    assert "put a LayerNorm before model.head" in advice.words
    normed = doctor.remedy("final-norm", net, xs[0], d).model
    again = doctor.diagnose(normed, xs, generator=g)
    assert again.problems == [] and again.stream is not None and not again.stream.raw_end
    assert doctor.why_not("final-norm", normed, xs[0], again) is not None


def test_a_final_norm_on_a_model_whose_output_is_the_stream() -> None:
    """A stack that returns its stream as it is gets the norm on its output."""
    g = torch.Generator().manual_seed(0)
    xs = batches((16, 128))
    net = residual_mlp(blocks=8)
    d = doctor.diagnose(net, xs, generator=g)
    assert d.stream is not None and d.stream.raw_end and d.stream.readers[-1] == "<output>"
    done = doctor.remedy("final-norm", net, xs[0], d)
    assert "before the model's output" in done.words
    y = done.model(xs[0])  # (16, 128): unit scale over the features
    torch.testing.assert_close(y.mean(-1), torch.zeros(16), atol=1e-5, rtol=0)
    assert torch.equal(net(xs[0]), residual_mlp(blocks=8)(xs[0]))  # the model as it was


@pytest.mark.slow
def test_branch_scale_is_no_cure_when_the_stream_ends_in_a_norm() -> None:
    """Why a pre-LN stream is labelled only when its end is read raw: the same blocks with a
    final LayerNorm before the head grow the stream as much, and scaling their branches makes
    the proxy loss worse on every seed (2 seeds of 50 Adam steps: 0.67-0.71 as given, 0.97-1.05
    scaled, which has learnt nothing of the unit-variance target; at 100 steps 0.16-0.21 and
    0.91-0.93). The diagnosis finds nothing; the remedy is tried as if the growth were flagged."""
    g = torch.Generator().manual_seed(0)
    xs = batches((BATCH, 32), steps=4)
    net = ResidualMLP(final_norm=True)
    d = doctor.diagnose(net, xs, generator=g)
    assert d.problems == [] and d.stream is not None and d.stream.growth[-1] > 4
    named = dataclasses.replace(d, problems=["exploding"])  # as the growth alone would flag it
    (advice,) = doctor.advise(
        net, xs, named, generator=g, seeds=2, steps=50, remedies=["branch-scale"]
    )
    assert not advice.cured
    assert all(a > b for a, b in zip(advice.trial.after, advice.trial.before, strict=True))


@pytest.mark.slow
def test_pre_ln_cures_the_48_layer_post_ln_encoder() -> None:
    """Measured: 40 Adam steps leave the post-LN stack at 1.78 on both seeds; its pre-LN twin
    (the same weights, norm_first=True, a final LayerNorm) is at 1.04-1.10 (log gain 0.51,
    spread 0.002), and the gap only widens after (100 steps: 1.60-1.61 and 0.28-0.32). The 48
    layers are what makes the post-LN stall; 40 steps are enough to see it. A warm-up over the
    first 25 of 100 steps does not help (1.66): see the report of issue 30."""
    g = torch.Generator().manual_seed(0)
    xs = batches((8, 16, 64))
    net = encoder(norm_first=False)
    d = doctor.diagnose(net, xs, generator=g)
    flagged = d if d.problems else dataclasses.replace(d, problems=["exploding"])
    (advice,) = doctor.advise(net, xs, flagged, generator=g, seeds=2, steps=40, remedies=["pre-ln"])
    assert advice.cured, advice.line()
    assert "add a final LayerNorm to model" in advice.words


# -- never what the model has --------------------------------------------------------------------


def test_no_remedy_is_offered_for_what_the_model_has() -> None:
    x = torch.randn(16, 16, 64)
    assert doctor.why_not("pre-ln", zoo.build("pre-ln"), x) == (
        "the model is pre-LN already (norm_first=True)"
    )
    assert doctor.why_not("pre-ln", zoo.build("post-ln"), x) is None
    post = doctor.why_not("branch-scale", zoo.build("post-ln"), x) or ""
    assert post.endswith("the branches are scaled already, or the stream is normalized")
    stream = torch.randn(16, 128)
    scaled = residual_mlp(blocks=16, scale=1 / 4)  # 1/sqrt(16)
    assert (doctor.why_not("branch-scale", scaled, stream) or "").startswith("its stream grows")
    assert doctor.why_not("branch-scale", residual_mlp(blocks=16), stream) is None
    flat = torch.randn(16, 32)
    assert doctor.why_not("layernorm", zoo.build("exploding-relu"), flat) == (
        "the model has no BatchNorm1d"
    )
    assert doctor.why_not("warmup", zoo.build("exploding-relu"), flat) is not None
    assert doctor.why_not("zero-bias", zoo.build("exploding-relu"), flat) == "no layer is dead"
    with pytest.raises(ValueError, match=r"remedy 'pre-ln' does not apply: the model is pre-LN"):
        doctor.remedy("pre-ln", zoo.build("pre-ln"), x)
    with pytest.raises(ValueError, match=r"remedy 'fixup' not known, use one of \('zero-bias'"):
        doctor.why_not("fixup", zoo.build("pre-ln"), x)


def test_layernorm_replaces_only_batch_norms_on_flat_inputs() -> None:
    seq = nn.Sequential(nn.Conv1d(4, 8, 3), nn.BatchNorm1d(8), nn.ReLU())
    assert doctor.why_not("layernorm", seq, torch.randn(8, 4, 10)) == (
        "its BatchNorm1d layers normalize (N, C, L) inputs, not (N, C) ones"
    )
    net = zoo.build("exploding-relu", norm="batch")  # normlab's BatchNorm1d after each Linear
    x = torch.randn(16, 32)
    made = doctor.remedy("layernorm", net, x)
    kinds = ("LayerNorm", "BatchNorm1d")
    norms = [type(m).__name__ for m in made.model.modules() if type(m).__name__ in kinds]
    assert norms == ["LayerNorm"] * 20 and "replace 20 BatchNorm1d" in made.words
    given = [type(m).__name__ for m in net.modules() if type(m).__name__ in kinds]
    assert given == ["BatchNorm1d"] * 20  # the given model is as it was


def test_pre_ln_switches_the_layers_and_adds_the_final_norm_of_their_stack() -> None:
    net = zoo.build("post-ln")
    made = doctor.remedy("pre-ln", net, torch.randn(4, 16, 64))
    layers = list(made.model.encoder.layers)
    assert len(layers) == 12 and all(m.norm_first for m in layers)
    assert isinstance(made.model.encoder.norm, nn.LayerNorm) and net.encoder.norm is None
    assert not any(m.norm_first for m in net.encoder.layers)  # the given model is as it was
    loose = nn.Sequential(*encoder(False, layers=2).layers)  # in no TransformerEncoder
    words = doctor.remedy("pre-ln", loose, torch.randn(4, 16, 64)).words
    assert words.endswith("2 layer(s) sit in no TransformerEncoder/Decoder: add a final LayerNorm")


def test_every_remedy_returns_a_copy_and_leaves_the_model_as_given() -> None:
    cases = [
        ("he", zoo.build("exploding-relu"), torch.randn(16, 32)),
        ("lsuv", zoo.build("exploding-relu"), torch.randn(16, 32)),
        ("branch-scale", residual_mlp(blocks=8), torch.randn(16, 128)),
        ("layernorm", zoo.build("deep-batchnorm"), torch.randn(16, 32)),
        ("pre-ln", zoo.build("post-ln"), torch.randn(4, 16, 64)),
    ]
    for name, net, x in cases:
        before = state(net)
        made = doctor.remedy(name, net, x, generator=torch.Generator().manual_seed(0))
        assert made.model is not net and made.warmup == 0.0, name
        assert all(torch.equal(v, net.state_dict()[k]) for k, v in before.items()), name
        after = state(made.model)  # pre-ln: the same weights, one more norm
        assert after.keys() != before.keys() or any(
            not torch.equal(v, after[k]) for k, v in before.items()
        ), name
    warm = doctor.remedy("warmup", zoo.build("post-ln"), torch.randn(4, 16, 64))
    assert warm.warmup == doctor.remedies.WARMUP and "schedule change" in warm.words


def test_advise_refuses_a_model_too_large_to_train_copies_of() -> None:
    net = zoo.build("deep-batchnorm")  # 1.99M parameters
    xs = batches((BATCH, 32))
    d = doctor.diagnose(net, xs)
    with pytest.raises(ValueError, match=r"has 1,9\d\d,\d{3} parameters, more than 1,000,000"):
        doctor.advise(net, xs, d, max_params=1_000_000)
    assert doctor.check_cost(net) is None
    healthy = dataclasses.replace(d, problems=[])
    assert doctor.advise(net, xs, healthy) == []  # nothing to try: nothing is trained
    with pytest.raises(ValueError, match=r"seeds=1 not allowed, use an integer in \[2, 10\]"):
        doctor.advise(net, xs, d, seeds=1)


# -- the suggestions that stand ------------------------------------------------------------------


def advice_for(remedy: str, cured: bool) -> Advice:
    t = synthetic([0.5, 0.55, 0.475] if cured else [1.0, 1.1, 0.95])
    return Advice(remedy, "changed", ["dead"], t, [])


def test_a_suggestion_whose_remedy_is_not_a_cure_is_not_made() -> None:
    suggestions = [
        "reset the biases to 0: the zero-bias remedy",
        "re-initialize by He (--fix he)",
        "use pre-LN or a warm-up: the pre-ln and warmup remedies",
        "add residual connections around the blocks",
    ]
    advice = [advice_for("zero-bias", True), advice_for("he", False), advice_for("pre-ln", True)]
    assert doctor.checked(suggestions, advice) == [suggestions[0], suggestions[3]]
    assert doctor.named(suggestions[2]) == ["pre-ln", "warmup"]  # warmup untried: dropped


# -- the command line ------------------------------------------------------------------------------

ZOO = f"{zoo.__file__}:dead_relu"
QUICK = ["--input-shape", "64,32", "--check-seeds", "2", "--check-steps", "30"]


def test_the_cli_shows_the_checked_advice_of_a_flagged_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["doctor", ZOO, *QUICK]) == 0
    out = capsys.readouterr().out
    assert "Advice checked in training (30 Adam steps on a proxy task, 2 seeds)" in out
    assert "zero-bias" in out and "cure" in out
    assert main(["doctor", ZOO, *QUICK, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    first = d["advice"][0]
    assert first["remedy"] == "zero-bias" and len(first["trial"]["before"]) == 2
    assert d["advice_note"] is None and {a["remedy"] for a in d["advice"]}.isdisjoint({"he"})
    assert main(["doctor", ZOO, "--input-shape", "64,32", "--no-check", "--json"]) == 0
    assert "advice" not in json.loads(capsys.readouterr().out)


BAD_CHECKS = [
    (["--check-seeds", "1"], "--check-seeds: '1' is not allowed, use an integer in [2, 10]"),
    (["--check-steps", "5000"], "'5000' is not allowed, use an integer in [10, 1000]"),
    (["--check-steps", "x"], "argument --check-steps: 'x' is not allowed"),
    (["--no-check", "--check-seeds", "3"], "--check-seeds sets the training checks: give no"),
]


@pytest.mark.parametrize(("flags", "message"), BAD_CHECKS)
def test_bad_check_options_exit_2_with_one_line(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", ZOO, "--input-shape", "64,32", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_the_cli_s_check_ranges_are_the_library_s() -> None:
    from normlab import cli
    from normlab.doctor import training

    assert cli.CHECK_SEEDS == (training.MIN_SEEDS, training.MAX_SEEDS)
    assert cli.CHECK_STEPS == (training.MIN_STEPS, training.MAX_STEPS)


# -- the deep sigmoid and BatchNorm stacks: tanh, shallower --------------------------------------


def sigmoid_stack(depth: int = 16, width: int = 128) -> nn.Sequential:
    """tests/calibration.py's sigmoid_deep at any size: Xavier's std, a Linear head."""
    g = torch.Generator().manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.Sigmoid()]
    net = nn.Sequential(*layers, nn.Linear(width, 10))
    for m in net:
        if isinstance(m, nn.Linear):
            init.xavier_normal_(m.weight, generator=g)
            init.zeros_(m.bias)
    return net


def bn_stack(depth: int, width: int = 128) -> nn.Sequential:
    """zoo.deep_batchnorm at any depth and width: blocks Linear -> BatchNorm1d -> ReLU, a head."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        blocks = [nn.Sequential(nn.Linear(32, width), nn.BatchNorm1d(width), nn.ReLU())]
        blocks += [
            nn.Sequential(nn.Linear(width, width), nn.BatchNorm1d(width), nn.ReLU())
            for _ in range(depth - 1)
        ]
        return nn.Sequential(*blocks, nn.Linear(width, 10))


def assert_cure(advice: Advice) -> None:
    """A cure, and its numbers say so: lower on every seed, by more than the given model's
    seed-to-seed spread (the gain is a log ratio; the spread the range of the logs)."""
    t = advice.trial
    assert advice.cured and advice.after == [], advice.line()
    assert all(a < b for a, b in zip(t.after, t.before, strict=True))
    assert t.gain > t.spread and "a cure" in advice.line()


SIGMOIDS = [("zoo", lambda: zoo.build("vanishing-sigmoid"), 32), ("16x128", sigmoid_stack, 128)]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "build", "width"), SIGMOIDS)
def test_tanh_cures_the_deep_sigmoid_stacks(name: str, build: Any, width: int) -> None:
    """Measured, 3 seeds of 100 Adam steps: the zoo's 20 x 64 stack 0.97-1.07 as given, 0.022-
    0.032 with tanh (log gain 3.65, spread 0.094); the 16 x 128 one 0.95-1.08 and 1e-4 to
    1.6e-4 (gain 8.9, spread 0.12). Checked here over 50 steps: 0.97-1.09 and 0.19-0.20 (gain
    1.67, spread 0.11); 0.97-1.09 and 0.002-0.003 (gain 5.9, spread 0.11). The xavier and
    orthogonal remedies keep sigmoid's slope of 1/4 and leave it at ~1.0 (issue 30's report)."""
    g = torch.Generator().manual_seed(0)
    xs = batches((BATCH, width))
    net = build()
    d = doctor.diagnose(net, xs, generator=g)
    assert "vanishing" in d.problems
    (advice,) = doctor.advise(net, xs, d, generator=g, steps=50, remedies=["tanh"])
    assert_cure(advice)
    assert "replace 16 hidden nn.Sigmoid" in advice.words or name == "zoo"


def test_tanh_swaps_only_hidden_sigmoids_and_the_layers_feeding_them() -> None:
    net = nn.Sequential(sigmoid_stack(3, 16), nn.Sigmoid())  # a probability at the output
    x = torch.randn(8, 16)
    made = doctor.remedy("tanh", net, x, generator=torch.Generator().manual_seed(0))
    acts = [type(m).__name__ for m in made.model.modules() if isinstance(m, nn.Sigmoid | nn.Tanh)]
    assert acts == ["Tanh"] * 3 + ["Sigmoid"] and "replace 3 hidden nn.Sigmoid" in made.words
    changed = {k for k, v in made.model.state_dict().items() if not torch.equal(v, state(net)[k])}
    assert changed == {"0.0.weight", "0.2.weight", "0.4.weight"}  # biases were 0; head as was
    w = made.model[0][0].weight  # Xavier with tanh's gain: std 5/3 * sqrt(2 / 32) = 0.417
    assert float(w.detach().std()) == pytest.approx(5 / 3 * (2 / 32) ** 0.5, rel=0.25)  # 256: 4%


class Gated(nn.Module):
    """A squeeze-excite-style gate: the sigmoid's output multiplies another signal."""

    def __init__(self) -> None:
        super().__init__()
        self.value, self.gate, self.sigmoid = nn.Linear(16, 16), nn.Linear(16, 16), nn.Sigmoid()
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.value(x) * self.sigmoid(self.gate(x)))  # (N, 16) -> (N, 4)


def test_tanh_never_touches_a_gate_or_a_model_without_sigmoids() -> None:
    x = torch.randn(8, 16)
    assert (doctor.why_not("tanh", Gated(), x) or "").startswith("its nn.Sigmoid layers are no")
    assert doctor.why_not("tanh", zoo.build("vanishing-tanh"), torch.randn(8, 32)) == (
        "the model has no nn.Sigmoid"
    )


@pytest.mark.slow
def test_shallower_cures_the_deep_batchnorm_stack() -> None:
    """Measured, 3 seeds of 100 Adam steps: 7.4e-5 to 1.2e-4 as given, 3.2e-6 to 6.3e-6 with 11
    of its 29 alike blocks (log gain 3.1, spread 0.47), re-diagnosed healthy; checked here over
    50 steps: 0.022-0.040 as given, 7e-4 with 11 blocks (log gain 3.7, spread 0.60). Residual
    connections around the blocks were no cure here: 1.0e-4 -> 1.7e-4 unscaled, and with the
    branches scaled by 1/sqrt(L) 2.5x lower at 30 layers but 2x higher at 20 (issue 30)."""
    g = torch.Generator().manual_seed(0)
    xs = batches((BATCH, 32))
    net = zoo.build("deep-batchnorm")
    d = doctor.diagnose(net, xs, generator=g)
    assert "exploding" in d.problems and d.trend is not None
    (advice,) = doctor.advise(net, xs, d, generator=g, steps=50, remedies=["shallower"])
    assert_cure(advice)
    # 1.22x per block: floor(ln 10 / ln 1.22) = 11 blocks kept of the 29 that keep their shape
    assert "18 of 29 (model[12] to model[29])" in advice.words, advice.words


def test_shallower_is_never_offered_without_a_sustained_trend() -> None:
    """A 10-block BatchNorm stack grows its gradient 1.22^9 = 6x, under the trend's 100x: no
    sustained trend, healthy, and no advice; the deep one's copy keeps its first blocks."""
    xs = batches((BATCH, 32))
    g = torch.Generator().manual_seed(0)
    short = bn_stack(10)
    d = doctor.diagnose(short, xs, generator=g)
    assert d.problems == [] and doctor.advise(short, xs, d, generator=g) == []
    assert doctor.why_not("shallower", short, xs[0], d) == (
        "the diagnosis has no sustained depth trend of the gradient"
    )
    assert doctor.why_not("shallower", zoo.build("exploding-relu"), xs[0]) is not None
    deep = bn_stack(30)
    d = doctor.diagnose(deep, xs, generator=g)
    made = doctor.remedy("shallower", deep, xs[0], d)
    kept = len(made.model) - 2  # the stem block and the head
    assert 8 <= kept <= 14 and len(deep) == 31  # ~11 at 1.22x a block; the given is as it was
    assert all(torch.equal(v, deep.state_dict()[k]) for k, v in made.model.state_dict().items()
               if not k.startswith(f"{kept + 1}."))  # fmt: skip  # the kept blocks as they were


# -- the calibration set's failures: each one's own diagnosis, and a measured cure ----------------

CALIBRATION_CURES = {
    "relu-std1": "he",
    "tanh-std1": "xavier",
    "relu-std001": "he",
    "bias-minus5": "zero-bias",
    "constant-conv": "he",
    "embedding-std10": "lsuv",
    "sigmoid-deep": "tanh",
}
"""A remedy per failure of :data:`tests.calibration.ENTRIES` whose cure no other test checks
(measured over all remedies, ``doctor.advise`` at its defaults: these cure; the embedding's is
LSUV alone, which rescales the tanh layers' weights to the std-10 input they get)."""
CURED_ELSEWHERE = {
    "encoder48-post": test_pre_ln_cures_the_48_layer_post_ln_encoder,
    "residual-mlp": test_a_final_norm_cures_the_deep_pre_ln_residual_mlp,
    "zoo:deep-batchnorm": test_shallower_cures_the_deep_batchnorm_stack,
    "zoo:vanishing-sigmoid": test_tanh_cures_the_deep_sigmoid_stacks,
    "zoo:vanishing-tanh": test_each_zoo_failure_gets_a_measured_cure,
    "zoo:exploding-relu": test_each_zoo_failure_gets_a_measured_cure,
    "zoo:dead-relu": test_each_zoo_failure_gets_a_measured_cure,
}
"""The failures whose cure another test here checks (``zoo:symmetric``'s: test_calibration)."""


def test_every_calibration_failure_has_a_cure_checked() -> None:
    failures = {e.name for e in ENTRIES if e.truth}
    checked = set(CALIBRATION_CURES) | set(CURED_ELSEWHERE) | {"zoo:symmetric"}
    assert failures == checked  # a new failure needs its cure checked


@pytest.mark.slow
@pytest.mark.parametrize(("name", "remedy"), CALIBRATION_CURES.items())
def test_each_calibration_failure_gets_a_measured_cure_from_its_own_diagnosis(
    name: str, remedy: str
) -> None:
    """The diagnosis as the doctor makes it (not a label put in its place), and the advice at
    the training check's defaults (3 seeds of 100 Adam steps): a cure, lower on every seed."""
    (entry,) = [e for e in ENTRIES if e.name == name]
    g = torch.Generator().manual_seed(0)
    xs = [entry.inputs(g) for _ in range(2)]
    net = entry.build()
    d = doctor.diagnose(net, xs, generator=g, output=entry.output)
    assert set(entry.truth) <= set(d.problems), d.problems
    (advice,) = doctor.advise(net, xs, d, generator=g, output=entry.output, remedies=[remedy])
    assert_cure(advice)
