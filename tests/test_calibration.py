"""The doctor on the calibration suite (tests/calibration.py): no false alarm on a healthy real
architecture, the right label on every known failure, and the depth trends it must see."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normlab import doctor, zoo
from normlab.doctor.graph import trace
from normlab.doctor.kinds import _is_norm
from tests.calibration import ENTRIES, Entry, gpt2, hf_resnet, llama, relu_std1

PROBLEMS = ("vanishing", "exploding", "dead", "saturated", "symmetric")
SEEDS = (0, 1)


def examine(entry: Entry, seed: int, steps: int = 2) -> doctor.Diagnosis:
    torch.manual_seed(seed)  # the architecture's own init draws from the global RNG
    model = entry.build()
    g = torch.Generator().manual_seed(seed)
    batches = [entry.inputs(g) for _ in range(steps)]
    return doctor.diagnose(model, batches, generator=g, output=entry.output)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("entry", [e for e in ENTRIES if not e.truth], ids=lambda e: e.name)
def test_no_false_alarm_on_a_healthy_model(entry: Entry, seed: int) -> None:
    d = examine(entry, seed)
    flagged = [(la.name, la.labels) for la in d.layers if set(la.labels) & set(PROBLEMS)]
    assert d.problems == [] and flagged == [], (entry.why, d.verdict)
    assert d.verdict.startswith("healthy") and len(d.layers) >= 2


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.truth], ids=lambda e: e.name)
def test_every_failure_gets_its_label_and_a_verdict_naming_it(entry: Entry, seed: int) -> None:
    d = examine(entry, seed)
    for label in entry.truth:
        assert label in d.problems, (entry.why, d.verdict)
        word = "identical" if label == "symmetric" else label
        assert word in d.verdict


@pytest.mark.parametrize("width", [64, 256])
def test_the_std_1_relu_stack_is_exploding_never_vanishing(width: int) -> None:
    torch.manual_seed(0)
    d = doctor.diagnose(relu_std1(16, width), torch.randn(64, width))
    assert "exploding" in d.problems and "vanishing" not in d.problems, d.verdict
    grads = [la.grad_std for la in d.layers]
    assert grads[0] > 1e6 * grads[-1]  # the gradient grows on its way back: exploding, too


def test_deep_batchnorm_relu_growth_is_yang_s_pi_over_pi_minus_1() -> None:
    """The fitted squared growth per layer at width 1000, batch 256 is within 10% of
    pi / (pi - 1) = 1.4669 (Yang et al. 2019); no single layer crosses a bound."""
    torch.manual_seed(0)
    blocks: list[nn.Module] = []
    for _ in range(30):
        blocks += [nn.Linear(1000, 1000), nn.BatchNorm1d(1000), nn.ReLU()]
    net = nn.Sequential(*blocks, nn.Linear(1000, 10))
    d = doctor.diagnose(net, [torch.randn(256, 1000), torch.randn(256, 1000)])
    assert d.trend is not None and d.trend.sustained and d.trend.blocks == 30
    assert d.trend.factor**2 == pytest.approx(math.pi / (math.pi - 1), rel=0.1)
    assert all(la.grad_ratio <= doctor.GRAD_EXPLODING for la in d.layers if la.grad_ratio > 0)
    assert "exploding" in d.problems and "squared" in d.verdict
    assert any("(the shallower remedy)" in s for s in d.suggestions)
    assert not any("kaiming" in s or "He (" in s for s in d.suggestions)  # it has He already


def test_depth_ten_batchnorm_is_not_flagged() -> None:
    torch.manual_seed(0)
    blocks: list[nn.Module] = []
    for _ in range(10):
        blocks += [nn.Linear(256, 256), nn.BatchNorm1d(256), nn.ReLU()]
    d = doctor.diagnose(nn.Sequential(*blocks, nn.Linear(256, 10)), torch.randn(128, 256))
    assert d.trend is not None and not d.trend.sustained and d.problems == []


@pytest.mark.parametrize("seed", SEEDS)
def test_post_ln_and_pre_ln_are_told_apart_by_their_gradient_trend(seed: int) -> None:
    trends = {}
    for name in ("post-ln", "pre-ln"):
        g = torch.Generator().manual_seed(seed)
        xs = [torch.randn(zoo.input_shape(name, 64), generator=g) for _ in range(2)]
        d = doctor.diagnose(zoo.build(name, seed), xs, generator=g)
        assert (
            d.trend is not None and d.trend.blocks == 12 and d.trend.grouped_by.endswith("layers")
        )
        trends[name] = d.trend
    assert trends["pre-ln"].factor > 1.05 and trends["pre-ln"].r2 > 0.7  # grows toward the input
    assert trends["post-ln"].factor < 1.02  # no growth toward the input
    assert trends["pre-ln"].factor - trends["post-ln"].factor > 0.05


def test_token_ids_are_judged_against_the_embedding() -> None:
    """Token ids have no scale: the embeddings start it, and every layer is judged against
    them or the norm nearest upstream, never against the ids."""
    entry = next(e for e in ENTRIES if e.name == "gpt2")
    d = examine(entry, 0)
    roles = {la.name: la.role for la in d.layers}
    assert d.input_std == 1.0 and d.layers[0].name.endswith("wte")
    assert roles["transformer.wte"] == roles["transformer.wpe"] == "embedding"
    assert all(la.anchor != "" for la in d.layers)  # nothing judged against the ids
    assert {roles[la.name] for la in d.layers if la.name.endswith("ln_1")} == {"norm"}
    assert any("token" in n or "no scale" in n for n in d.notes)
    c_proj = [la for la in d.layers if la.name.endswith("attn.c_proj")]
    assert len(c_proj) == 12 and all(math.isfinite(la.grad_ratio) for la in c_proj)  # Conv1D


def test_layer_scale_branches_are_recognised_as_intentional() -> None:
    entry = next(e for e in ENTRIES if e.name == "convnext")
    d = examine(entry, 0, steps=1)
    scaled = [la for la in d.layers if la.scaled_by is not None]
    assert scaled and all(la.scaled_by.endswith("layer_scale_parameter") for la in scaled)
    assert any(la.name.endswith("drop_path") for la in scaled)  # right after the scaling
    assert any("on purpose" in n for n in d.notes)
    head = d.layers[-1]
    assert head.name.endswith("classifier") and head.grad_ratio == 1.0 and not head.scaled_by


def test_rezero_branches_are_recognised_and_an_unscaled_collapse_is_not() -> None:
    class Block(nn.Module):
        def __init__(self, alpha: float) -> None:
            super().__init__()
            self.f = nn.Sequential(nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 32))
            self.alpha = nn.Parameter(torch.tensor(alpha))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.alpha * self.f(x)  # ReZero (Bachlechner et al. 2021) at alpha 0

    torch.manual_seed(0)
    net = nn.Sequential(*[Block(0.0) for _ in range(4)], nn.Linear(32, 3))
    d = doctor.diagnose(net, torch.randn(64, 32))
    inner = [la for la in d.layers if ".f." in la.name]
    assert inner and all(la.scaled_by and la.scaled_by.endswith("alpha") for la in inner)
    assert d.problems == []  # their zero gradient is the design, not a vanishing one

    torch.manual_seed(0)
    for p in (b.f[2].weight for b in net[:4]):
        nn.init.normal_(p, std=1e-6)  # no parameter scales them: the branch's last layer does
    with torch.no_grad():
        for b in net[:4]:
            b.alpha.fill_(1.0)
    d = doctor.diagnose(net, torch.randn(64, 32))
    # a branch whose last layer starts near 0 is a branch that starts small (zero-init of a
    # block's last layer, Fixup, SkipInit): judged as a branch, its weights' ratio is its own
    assert all(la.scaled_by is None for la in d.layers) and d.problems == [], d.verdict
    # (block 0 adds into the raw input, which is no layer: its branch is not recognised)
    assert {la.role for la in d.layers if ".f." in la.name and la.name[0] != "0"} == {"branch"}


def test_llama_s_norms_and_activations_are_known() -> None:
    torch.manual_seed(0)
    model = llama()
    d = doctor.diagnose(model, torch.randint(1000, (8, 16)))
    assert d.problems == []
    graph = trace(model, torch.randint(1000, (8, 16)))
    norms = [n for n, m in graph.order if type(m).__name__ == "LlamaRMSNorm"]
    assert norms and all(_is_norm(dict(graph.order)[n]) for n in norms)
    gate = next(n for n, _ in graph.order if n.endswith("layers.0.mlp.gate_proj"))
    assert graph.follows(gate)[0] == "relu"  # SiLU: the ReLU family's gain


def test_a_compiled_model_is_examined_through_its_original_module() -> None:
    torch.manual_seed(0)
    net = zoo.build("exploding-relu")
    compiled = torch.compile(net, backend="eager")
    x = torch.randn(zoo.input_shape("exploding-relu", 32))
    compiled(x)  # it has run: compiled code that calls no module hooks
    d = doctor.diagnose(compiled, x)
    assert d.problems[0] == "exploding" and len(d.layers) == 41
    assert any("torch.compile" in n for n in d.notes)


def test_an_argmax_output_or_no_layer_is_refused_not_called_healthy() -> None:
    class Argmax(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).argmax(dim=-1)

    with pytest.raises(doctor.CannotDiagnose, match=r"carries no gradient.*argmax"):
        doctor.diagnose(Argmax(), torch.randn(16, 8))

    class Bypass(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin.forward(x)  # the module's hooks never run

    with pytest.raises(doctor.CannotDiagnose, match="no layer of the model ran"):
        doctor.diagnose(Bypass(), torch.randn(16, 8))
    with torch.no_grad(), pytest.raises(doctor.CannotDiagnose, match="no_grad"):
        doctor.diagnose(zoo.build("resnet"), torch.randn(4, 3, 16, 16))


def test_model_outputs_are_read_by_field() -> None:
    torch.manual_seed(0)
    model = gpt2()
    ids = torch.randint(1000, (4, 16))
    d = doctor.diagnose(model, ids)  # a CausalLMOutput: its logits
    assert d.layers[-1].name == "lm_head"
    with pytest.raises(doctor.ModelOutputError, match="'nope' is not one of them"):
        doctor.diagnose(model, ids, output="nope")


def test_an_error_in_the_backward_pass_is_the_model_s() -> None:
    class Boom(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
            raise ValueError("no gradients on Tuesdays")

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return Boom.apply(self.lin(x))

    with pytest.raises(doctor.ModelInputError, match="backward pass raised ValueError: no grad"):
        doctor.diagnose(Net(), torch.randn(8, 4))


CURES = [
    ("vanishing-tanh", "xavier"),
    ("exploding-relu", "he"),
    ("dead-relu", "he"),
    ("symmetric", "he"),
]


@pytest.mark.parametrize(("name", "method"), CURES)
def test_a_fix_that_cures_shows_the_lower_loss_in_training(name: str, method: str) -> None:
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(zoo.input_shape(name, 64), generator=g) for _ in range(2)]
    exam = doctor.examine(zoo.build(name), xs, fix=method, generator=g)
    assert exam.after is not None and exam.after.healthy
    assert exam.trial is not None and exam.trial.cured and exam.trial.steps == doctor.TRIAL_STEPS
    assert exam.trial.after[-1] < exam.trial.before[-1] and "lowered the loss" in exam.trial.words()


def test_a_fix_that_does_not_help_is_not_called_a_cure() -> None:
    # Xavier on 20 sigmoid layers keeps the vanishing gradient (see the doctor lesson)
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(zoo.input_shape("vanishing-sigmoid", 64), generator=g) for _ in range(2)]
    exam = doctor.examine(zoo.build("vanishing-sigmoid"), xs, fix="xavier", generator=g)
    assert exam.trial is not None and not exam.trial.cured
    assert exam.trial.words().endswith("not a cure, keep the model as built")


@pytest.mark.slow
@pytest.mark.parametrize("method", ["he"])  # the case
def test_llama_is_not_told_to_reinitialize_and_a_forced_fix_is_measured(method: str) -> None:
    torch.manual_seed(0)
    model = llama()
    ids = torch.randint(1000, (16, 32), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(0)
    # the trial is measured, not judged here: its shortest (2 seeds of 10 steps) says it as well
    exam = doctor.examine(model, [ids, ids], fix=method, generator=g, trial_steps=10, seeds=2)
    assert exam.before.suggestions == [
        "nothing to change: the initialization suits this model on this input"
    ]
    assert (
        exam.fix is not None
        and (
            "model.embed_tokens",
            "Embedding layer: only Linear and Conv1d/2d/3d are re-initialized",
        )
        in exam.fix.skipped
    )
    assert exam.trial is not None and exam.trial.steps == 10 and len(exam.trial.seeds) == 2
    verdict = exam.trial.words()
    assert exam.trial.cured == ("lowered the loss" in verdict)  # said as measured, either way


def test_gpt2_s_tied_head_and_conv1d_layers_are_left_with_a_reason() -> None:
    torch.manual_seed(0)
    model = gpt2()
    ids = torch.randint(1000, (4, 16))
    wte = model.transformer.wte.weight.detach().clone()
    with pytest.raises(ValueError, match=r"lm_head: its weight is tied to 'transformer.wte"):
        doctor.fix(model, "he", ids)
    assert torch.equal(model.transformer.wte.weight, wte)  # the embedding is untouched
    report = doctor.fix(model, "he", ids, tied=True)  # told: the head (and so wte) is redrawn
    assert report.layers == ["lm_head"] and not torch.equal(model.transformer.wte.weight, wte)
    assert all("Conv1D layer" in why for name, why in report.skipped if ".attn." in name)


def test_positional_keyword_and_in_place_inputs() -> None:
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.head = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 2)

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.head(torch.tanh(self.a(x)) * mask + self.b(x))

    torch.manual_seed(0)
    x, mask = torch.randn(32, 8), torch.ones(32, 8)
    positional = doctor.diagnose(Two(), [(x, mask), (x, mask)])
    keyword = doctor.diagnose(Two(), {"x": x, "mask": mask})
    assert positional.steps == 2 and keyword.steps == 1 and positional.input_shape == [32, 8]
    assert [la.name for la in keyword.layers] == ["a", "b", "head"]
    with pytest.raises(doctor.ModelInputError, match=r"input of shape \{x: \(32, 8\)\}"):
        doctor.diagnose(Two(), {"x": x})  # the mask is missing: the model's own error

    net = nn.Sequential(nn.Dropout(0.1, inplace=True), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    d = doctor.diagnose(net, torch.randn(32, 8))  # changes its input in place: allowed
    assert d.layers[0].kind == "Dropout" and doctor.fix(net, "he", torch.randn(32, 8)).layers
    with pytest.raises(ValueError, match="lsuv feeds the model one tensor"):
        doctor.fix(Two(), "lsuv", (x, mask))


class Residual(nn.Module):
    def __init__(self, width: int, branch_std: float | None) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)
        if branch_std is not None:
            nn.init.normal_(self.fc2.weight, std=branch_std)  # no parameter scales it: judged
            nn.init.zeros_(self.fc2.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(x)))


def residual_stack(branch_std: float | None) -> nn.Sequential:
    torch.manual_seed(0)
    blocks = [Residual(32, branch_std) for _ in range(4)]
    return nn.Sequential(nn.Linear(16, 32), *blocks, nn.Linear(32, 2))


def test_a_small_residual_branch_is_a_design() -> None:
    """A branch that starts small (its last layer at std 1e-7, as ReZero or SkipInit start at
    0) adds into a stream that carries the signal past it, and its last layer's weights get a
    large relative gradient: not vanishing."""
    x = torch.randn(64, 16)
    healthy = doctor.diagnose(residual_stack(None), x)
    ends = {la.name: la for la in healthy.layers if math.isfinite(la.branch)}
    assert set(ends) == {"1.fc2", "2.fc2", "3.fc2", "4.fc2"}  # read with the stream by the next
    assert healthy.problems == [] and all(0.05 < la.branch < 5 for la in ends.values())
    assert {la.role for la in ends.values()} == {"branch"}

    small = doctor.diagnose(residual_stack(1e-7), x)
    assert small.problems == [], small.verdict
    assert all(la.branch < 1e-4 for la in small.layers if la.name.endswith("fc2"))


def test_the_model_s_own_loss_can_drive_the_backward_pass() -> None:
    torch.manual_seed(0)
    model = gpt2()
    ids = torch.randint(1000, (8, 16), generator=torch.Generator().manual_seed(0))
    d = doctor.diagnose(model, {"input_ids": ids, "labels": ids}, output="loss")
    assert d.problems == [] and any("own loss" in n for n in d.notes)
    assert all(math.isfinite(la.grad_std) for la in d.layers if la.name.endswith("c_attn"))


def _mobilenet_v2() -> nn.Module:
    from transformers import MobileNetV2Config, MobileNetV2Model

    # depthwise 3x3 convolutions: 9 weights per channel shared over every position, so their
    # gradient ratio grows with the image's positions (the case that made this one exploding)
    return MobileNetV2Model(MobileNetV2Config(depth_multiplier=0.35, image_size=64))


@pytest.mark.slow
@pytest.mark.parametrize("build", [hf_resnet, _mobilenet_v2], ids=["resnet", "mobilenet_v2"])
def test_labels_do_not_depend_on_image_size_or_batch(build: object) -> None:
    """The same convolutional model on images of 32 to 128 pixels a side, batch 8 to 32, gets
    the same labels (none: both train as built)."""
    torch.manual_seed(0)
    model = build()  # type: ignore[operator]
    seen = set()
    for batch, side in [(8, 32), (8, 64), (8, 128), (32, 64)]:
        g = torch.Generator().manual_seed(side)
        x = torch.randn(batch, 3, side, side, generator=g)  # (N, C, H, W)
        d = doctor.diagnose(model, x, generator=torch.Generator().manual_seed(0))
        seen.add(tuple(sorted({la.name: tuple(la.labels) for la in d.layers}.items())))
        assert d.problems == [], (batch, side, d.verdict)
    assert len(seen) == 1
