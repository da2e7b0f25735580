"""The doctor judges each layer against what its architecture predicts (normlab.doctor.expect):
anchors, layers feeding norms, residual branches, zero-by-design layers, the stream over depth,
like-for-like gradient ratios; and labels that do not depend on the batch or sequence length."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normlab import doctor, zoo
from tests.calibration import ResidualMLP, encoder48, relu_std1

PROBLEMS = ("vanishing", "exploding", "dead", "saturated", "symmetric", "non-finite")


def _quiet() -> None:
    import transformers

    transformers.logging.set_verbosity_error()


def _ids(batch: int, tokens: int, seed: int = 0, vocab: int = 1000) -> torch.Tensor:
    return torch.randint(vocab, (batch, tokens), generator=torch.Generator().manual_seed(seed))


def distilbert() -> nn.Module:
    _quiet()
    from transformers import DistilBertConfig, DistilBertModel

    torch.manual_seed(0)
    config = DistilBertConfig(
        vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=256, max_position_embeddings=64
    )
    return DistilBertModel(config)


def bert_classifier() -> nn.Module:
    _quiet()
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        max_position_embeddings=64,
    )
    return BertForSequenceClassification(config)


def qwen2(embedding_std: float) -> nn.Module:
    _quiet()
    from transformers import Qwen2Config, Qwen2Model

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=256,
        max_position_embeddings=64,
    )
    model = Qwen2Model(config)
    nn.init.normal_(model.embed_tokens.weight, std=embedding_std)
    return model


@pytest.mark.slow
@pytest.mark.parametrize("build", [distilbert, bert_classifier], ids=["distilbert", "bert-cls"])
def test_labels_do_not_depend_on_sequence_length_or_batch(build: object) -> None:
    """The same model at 8 to 64 tokens and batch 8 to 64 gets the same labels: attention at
    init averages over the tokens (its output shrinks like 1/sqrt(T)), and that branch adds
    into a stream that carries the signal past it."""
    model = build()  # type: ignore[operator]
    seen = set()
    for batch, tokens in [(16, 8), (16, 16), (16, 32), (16, 64), (8, 32), (64, 32)]:
        x = {"input_ids": _ids(batch, tokens)}
        d = doctor.diagnose(model, [x], generator=torch.Generator().manual_seed(0))
        seen.add(tuple(sorted({la.name: tuple(la.labels) for la in d.layers}.items())))
        assert d.problems == [], (batch, tokens, d.verdict)
    assert len(seen) == 1


@pytest.mark.slow
def test_bert_query_and_key_are_compared_with_their_like() -> None:
    """At std-0.02 init a query's gradient is second order (it scales with the keys), far
    under the classifier's; against the last block's query it is of order 1."""
    d = doctor.diagnose(bert_classifier(), {"input_ids": _ids(16, 32)})
    queries = [la for la in d.layers if la.name.endswith("attention.self.query")]
    assert len(queries) == 2 and queries[-1].grad_ratio == 1.0
    assert all(0.01 < la.grad_ratio < 100 for la in queries) and d.problems == []


@pytest.mark.slow
def test_an_embedding_s_own_scale_does_not_flip_the_verdict() -> None:
    """Qwen2 at its std 0.02 and at 0.0099: the embedding starts the scale, norms reset it."""
    verdicts = []
    for std in (0.02, 0.0099):
        d = doctor.diagnose(qwen2(std), {"input_ids": _ids(16, 32)})
        assert d.problems == [], (std, d.verdict)
        verdicts.append({la.name: la.labels for la in d.layers})
    assert verdicts[0] == verdicts[1]


class _RelativeBias(nn.Module):
    """An attention-like block with a relative-position bias table initialized at 0 (T5,
    Swin start their tables small or at 0 and learn them)."""

    def __init__(self) -> None:
        super().__init__()
        self.qk = nn.Linear(32, 64)
        self.bias = nn.Embedding(16, 1)
        nn.init.zeros_(self.bias.weight)
        self.out = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self.qk(x).chunk(2, dim=-1)  # (N, T, 32) each
        positions = torch.arange(x.shape[1])
        relative = (positions[:, None] - positions[None, :]).clamp(-7, 8) + 7  # (T, T)
        scores = q @ k.transpose(1, 2) / 32**0.5 + self.bias(relative).squeeze(-1)
        return x + self.out(scores.softmax(-1) @ x)  # (N, T, 32)


def test_a_parameter_that_is_zero_by_design_is_not_dead() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(_RelativeBias(), nn.LayerNorm(32), nn.Linear(32, 4))
    d = doctor.diagnose(net, torch.randn(8, 16, 32))
    table = next(la for la in d.layers if la.name == "0.bias")
    assert table.role == "zero" and table.dead_frac == 1.0 and table.labels == ["ok"]
    assert d.problems == [], d.verdict
    assert any("all 0, by design" in c for c in table.criteria())


def _depthwise(scale: float) -> nn.Module:
    torch.manual_seed(0)
    dw = nn.Conv2d(16, 16, 7, padding=3, groups=16)
    nn.init.normal_(dw.weight, std=scale)
    nn.init.zeros_(dw.bias)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        dw,
        nn.GroupNorm(1, 16),  # a LayerNorm over the channels and positions
        nn.Conv2d(16, 16, 1),
        nn.GELU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    )


def test_a_layer_feeding_a_norm_is_judged_by_what_the_norm_passes_on() -> None:
    """A depthwise conv whose output goes straight into a norm is divided by its own std
    there: the norm passes on s / sqrt(s^2 + eps) of unit scale, so only a std far under
    sqrt(eps) (1e-5 -> 0.0032; under 1e-2 of unit below s = 3.2e-5) is lost."""
    x = torch.randn(8, 3, 16, 16)
    small = doctor.diagnose(_depthwise(2e-3), x)  # std ~0.005 of the input: the norm restores it
    dw = small.layers[1]
    assert dw.role == "feeds-norm" and dw.scale < doctor.VANISHING and small.problems == []
    assert dw.act_std > 1e-5**0.5
    lost = doctor.diagnose(_depthwise(1e-6), x)  # std ~6e-6: eps swamps it
    assert lost.layers[1].labels == ["vanishing"], lost.verdict
    assert "passes on" in " ".join(lost.layers[1].criteria())


@pytest.mark.parametrize(("seed", "width"), [(0, 64), (1, 128), (2, 256), (3, 512)])
def test_the_std_1_relu_stack_leads_with_its_forward_explosion(seed: int, width: int) -> None:
    """Every layer of the stack explodes from the first on (each multiplies the RMS by about
    sqrt(width / 2)); the gradient ratio that then looks small next to the last layer's is
    the mirror of that, never called vanishing."""
    torch.manual_seed(seed)
    d = doctor.diagnose(relu_std1(16, width), torch.randn(64, width))
    assert d.problems == ["exploding"] and "vanishing" not in d.verdict, d.verdict
    assert d.verdict.startswith("the scale is exploding from model[0] on")
    assert all(la.labels == ["exploding"] for la in d.layers)
    linears = [la for la in d.layers if la.kind == "Linear"]
    for la in linears[:-1]:  # the last one's output ends the segment: no activation after it
        assert la.predicted_gain == pytest.approx((width / 2) ** 0.5, rel=0.05)
        assert la.gain == pytest.approx(la.predicted_gain, rel=0.35)  # finite width: CLT


@pytest.mark.slow
def test_the_deep_post_ln_encoder_and_its_pre_ln_twin() -> None:
    torch.manual_seed(0)
    x = torch.randn(16, 16, 64)
    post = doctor.diagnose(encoder48(False), x)
    assert post.problems == ["exploding"] and post.stream is not None
    assert post.stream.placement == "post" and post.stream.amplification > 10
    assert "post-LN" in post.verdict and any("pre-LN" in s for s in post.suggestions)
    torch.manual_seed(0)
    pre = doctor.diagnose(encoder48(True), x)
    assert pre.problems == [] and pre.stream is not None and pre.stream.placement == "pre"


@pytest.mark.slow
def test_a_deep_pre_ln_stack_without_branch_scaling_and_its_scaled_twin() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 32)
    d = doctor.diagnose(ResidualMLP(), x)
    assert d.problems == ["exploding"] and d.stream is not None and d.stream.label
    growth, predicted = d.stream.growth[-1], d.stream.predicted[-1]
    assert growth > 4 and predicted == pytest.approx(growth, rel=0.3)  # theory vs measured
    assert any("1/sqrt(64)" in s for s in d.suggestions)
    torch.manual_seed(0)
    scaled = doctor.diagnose(ResidualMLP(scaled=True), x)
    assert scaled.problems == [] and scaled.stream is not None
    assert scaled.stream.growth[-1] < 2.5


def test_a_model_with_residual_connections_is_never_told_to_add_them() -> None:
    torch.manual_seed(0)
    blocks: list[nn.Module] = []
    for _ in range(30):
        blocks += [nn.Linear(128, 128), nn.BatchNorm1d(128), nn.ReLU()]
    plain = doctor.diagnose(nn.Sequential(*blocks, nn.Linear(128, 10)), torch.randn(128, 128))
    assert any("add residual connections" in s for s in plain.suggestions), plain.suggestions

    class Skip(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.inner(x)

    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Linear(128, 128)]
    for _ in range(30):
        layers.append(Skip(nn.Sequential(nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 128))))
    d = doctor.diagnose(nn.Sequential(*layers, nn.Linear(128, 10)), torch.randn(128, 128))
    assert not any("add residual" in s for s in d.suggestions), d.suggestions


def test_roles_and_anchors_of_a_pre_ln_transformer() -> None:
    torch.manual_seed(0)
    d = doctor.diagnose(zoo.build("pre-ln"), torch.randn(16, 16, 64))
    roles = {la.name: la for la in d.layers}
    norm = roles["encoder.layers.3.norm1"]
    assert norm.role == "norm" and norm.anchor is None
    ff = roles["encoder.layers.3.linear2"]
    assert ff.role == "branch" and ff.anchor == "encoder.layers.3.norm2"
    assert math.isfinite(ff.branch) and d.problems == []
    assert set(PROBLEMS).isdisjoint(d.problems)


class _DropBranch(nn.Module):
    """A pre-LN residual block whose branch ends in a dropout: ``x + drop(fc(norm(x)))``."""

    def __init__(self, width: int, std: float, p: float) -> None:
        super().__init__()
        self.norm, self.fc, self.drop = nn.LayerNorm(width), nn.Linear(width, width), nn.Dropout(p)
        nn.init.normal_(self.fc.weight, std=std)
        nn.init.zeros_(self.fc.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.fc(self.norm(x)))  # (N, D)


@pytest.mark.parametrize(("p", "training"), [(0.0, True), (0.1, False)], ids=["p0", "eval"])
def test_a_dropout_ending_a_residual_branch_is_on_the_branch(p: float, training: bool) -> None:
    """A dropout at p=0 or in eval mode returns the very tensor the branch's last layer made:
    it is that layer's output under another name, on the branch, and the stream carries the
    signal past it. The branch is small on purpose: std 1e-4 weights over 32 inputs of unit
    scale give 1e-4 * sqrt(32) = 5.7e-4 of the anchor, well under the 0.01 bound, so judged
    as a plain layer it would be labelled vanishing. Its twin, the same dropout after the same
    small layer in a plain stack (no stream past it), is."""
    torch.manual_seed(0)
    width, x = 32, torch.randn(64, 32)
    blocks = [_DropBranch(width, 1e-4, p) for _ in range(2)]
    model = nn.Sequential(nn.Linear(width, width), *blocks, nn.Linear(width, 10)).train(training)
    d = doctor.diagnose(model, x)
    drop = {la.name: la for la in d.layers}["1.drop"]
    assert drop.role == "branch" and drop.scale < doctor.VANISHING, (drop.role, drop.scale)
    assert d.problems == [], d.verdict
    torch.manual_seed(0)
    small = nn.Linear(width, width)
    nn.init.normal_(small.weight, std=1e-4)
    nn.init.zeros_(small.bias)
    plain = nn.Sequential(small, nn.Dropout(p), nn.Linear(width, 10)).train(training)
    twin = {la.name: la for la in doctor.diagnose(plain, x).layers}["1"]
    assert twin.role == "layer" and "vanishing" in twin.labels, (twin.role, twin.labels)


class _SqueezeExcite(nn.Module):
    """``x * sigmoid(W2 relu(W1 avgpool(x) + b1))`` (Hu et al. 2018): the gate reads one
    pooled vector per image."""

    def __init__(self, channels: int, squeezed: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(channels, squeezed, 1))
        self.act = nn.ReLU()
        self.excite = nn.Sequential(nn.Conv2d(squeezed, channels, 1), nn.Sigmoid())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.excite(self.act(self.squeeze(x)))  # (N, C, H, W) * (N, C, 1, 1)


def _se_net(bias: float | None) -> nn.Module:
    torch.manual_seed(0)
    se = _SqueezeExcite(32, 8)
    if bias is not None:
        nn.init.constant_(se.squeeze[1].bias, bias)
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), se)


def test_a_squeeze_excitation_on_alike_images_is_not_dead_but_a_bias_of_minus_5_is() -> None:
    """Noise images pool to nearly one vector (each channel's mean over 32x32 positions moves
    1/32 of its std between images), so each of the gate's units is off or on for the whole
    batch by the draw of its weights, and as often on as off (w and -w are drawn alike): at
    this seed 5 of its 8 units are off (62%, over the 60% bound) and 3 on on every image, so
    62% - 38% = 25% are off beyond chance. Its twin, a bias of -5 under every
    pre-activation, turns all 8 off and none on."""
    x = torch.randn(16, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    d = doctor.diagnose(_se_net(None), x)
    act = {la.name: la for la in d.layers}["3.act"]
    assert act.dead_frac >= doctor.DEAD_FRAC and act.on_frac > 0, (act.dead_frac, act.on_frac)
    assert act.dead_beyond_chance < doctor.DEAD_FRAC and d.problems == [], d.verdict
    dead = doctor.diagnose(_se_net(-5.0), x)
    act = {la.name: la for la in dead.layers}["3.act"]
    assert (act.dead_frac, act.on_frac) == (1.0, 0.0) and act.labels == ["dead"], act.labels


class _Shortcut(nn.Module):
    """A projection shortcut beside a small two-layer path, from one normalized input, joined
    by an add (``proj(h) + b(a(h))``, as a stage's first block of Hiera or a ResNet's
    downsampling block) or, in the twin, by a concatenation."""

    def __init__(self, width: int, add: bool) -> None:
        super().__init__()
        self.add, self.norm, self.proj = add, nn.LayerNorm(width), nn.Linear(width, width)
        self.a, self.b = nn.Linear(width, width), nn.Linear(width, width)
        for layer, std in ((self.a, 0.02), (self.b, 0.01)):
            nn.init.normal_(layer.weight, std=std)
            nn.init.zeros_(layer.bias)
        self.head = nn.Linear(width * (1 if add else 2), 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)  # (N, D)
        small = self.b(self.a(h))  # (N, D)
        join = self.proj(h) + small if self.add else torch.cat([self.proj(h), small], -1)
        return self.head(join)  # (N, 10)


def test_a_path_added_beside_a_projection_shortcut_is_on_a_branch() -> None:
    """Neither path into the add descends from the other, so neither is the stream; the
    shortcut carries the signal past the small path, whose last layer is at about
    0.01 * sqrt(32) * 0.02 * sqrt(32) = 0.0064 of the norm's unit scale (under the 0.01 bound)
    and judged as a branch. Concatenated instead of added, the same layer's output is a
    signal of its own, and vanishing."""
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    d = doctor.diagnose(_Shortcut(32, add=True), x)
    b = {la.name: la for la in d.layers}["b"]
    assert b.role == "branch" and b.scale < doctor.VANISHING and d.problems == [], d.verdict
    torch.manual_seed(0)
    twin = {la.name: la for la in doctor.diagnose(_Shortcut(32, add=False), x).layers}["b"]
    assert twin.role == "layer" and "vanishing" in twin.labels, (twin.role, twin.labels)
