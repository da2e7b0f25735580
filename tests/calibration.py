"""The doctor's calibration suite: real architectures and known failures, each with what is true
of it and why.

Every entry builds its model from a config with random init (Hugging Face ``transformers`` models
too: never a download) and draws its input batches from one seed. ``truth`` is what a careful
practitioner knows about the model at that init: ``()`` for healthy (it trains as built), else
the labels the doctor must give. The zoo's entries live in :mod:`normlab.zoo`; the ones here need
``transformers`` (a test dependency) or exist only to pin a reported case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from normlab import zoo

VOCAB, TOKENS, BATCH = 1000, 32, 16


@dataclass(frozen=True)
class Entry:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator], torch.Tensor]  # one batch
    truth: tuple[str, ...]  # () healthy, else the labels the doctor must give
    why: str
    source: str
    output: str | None = None  # the ModelOutput field the doctor reads


def _tokens(g: torch.Generator) -> torch.Tensor:
    return torch.randint(VOCAB, (BATCH, TOKENS), generator=g)  # (N, T) token ids


def _images(g: torch.Generator) -> torch.Tensor:
    return torch.randn(BATCH, 3, 64, 64, generator=g)  # (N, C, H, W)


def _quiet() -> None:
    import transformers

    transformers.logging.set_verbosity_error()  # config notes about token ids of small vocabs


def gpt2() -> nn.Module:
    _quiet()
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=12, n_embd=128, n_head=4, vocab_size=VOCAB, n_positions=TOKENS)
    return GPT2LMHeadModel(config)


def bert() -> nn.Module:
    _quiet()
    from transformers import BertConfig, BertModel

    config = BertConfig(
        num_hidden_layers=6,
        hidden_size=128,
        num_attention_heads=4,
        intermediate_size=512,
        vocab_size=VOCAB,
        max_position_embeddings=TOKENS,
    )
    return BertModel(config)


def llama() -> nn.Module:
    _quiet()
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        num_hidden_layers=6,
        hidden_size=128,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=344,
        vocab_size=VOCAB,
        max_position_embeddings=TOKENS,
    )
    return LlamaForCausalLM(config)


def hf_resnet() -> nn.Module:
    _quiet()
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(
        embedding_size=32,
        hidden_sizes=[32, 64, 128, 256],
        depths=[2, 2, 2, 2],
        layer_type="basic",
        num_labels=10,
    )
    return ResNetForImageClassification(config)


def convnext() -> nn.Module:
    _quiet()
    from transformers import ConvNextConfig, ConvNextForImageClassification

    config = ConvNextConfig(hidden_sizes=[32, 64, 128, 256], depths=[2, 2, 2, 2], num_labels=10)
    return ConvNextForImageClassification(config)


def relu_std1(depth: int = 16, width: int = 256) -> nn.Sequential:
    """A ReLU stack with every weight drawn at std 1.0: each layer multiplies the scale by about
    sqrt(width / 2) = 11 forward, and the gradient as much on its way back."""
    layers: list[nn.Module] = []
    for _ in range(depth):
        linear = nn.Linear(width, width)
        nn.init.normal_(linear.weight, std=1.0)
        layers += [linear, nn.ReLU()]
    return nn.Sequential(*layers)


def _stack(
    depth: int, width: int, act: type[nn.Module], std: float, bias: float = 0.0
) -> nn.Module:
    """``depth`` x (Linear(width) -> act), weights N(0, std^2), biases ``bias``, and a head."""
    layers: list[nn.Module] = []
    for _ in range(depth):
        linear = nn.Linear(width, width)
        nn.init.normal_(linear.weight, std=std)
        nn.init.constant_(linear.bias, bias)
        layers += [linear, act()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def tanh_std1() -> nn.Module:
    """10 tanh layers at weight std 1.0: pre-activations of std sqrt(128) pin tanh at +-1."""
    return _stack(10, 128, nn.Tanh, 1.0)


def relu_small() -> nn.Module:
    """10 ReLU layers at weight std 0.01: each keeps sqrt(128 / 2) * 0.01 = 0.08 of the scale."""
    return _stack(10, 128, nn.ReLU, 0.01)


def sigmoid_deep() -> nn.Module:
    """16 sigmoid layers at Xavier's std: the slope 1/4 shrinks the gradient 4x a layer back."""
    return _stack(16, 128, nn.Sigmoid, (2 / 256) ** 0.5)


def bias_minus5() -> nn.Module:
    """6 He-initialized ReLU layers; the third's bias is -5, under every pre-activation."""
    net = _stack(6, 128, nn.ReLU, (2 / 128) ** 0.5)
    nn.init.constant_(net[4].bias, -5.0)
    return net


def _smooth_images(g: torch.Generator) -> torch.Tensor:
    """16 images of 3 x 16 x 16 whose power is at low spatial frequencies, as natural images'
    is: noise on a 4 x 4 grid, bilinearly upsampled, at std about 1. White noise would not do
    for a net that pools globally: each pooled feature then varies between images by about
    1/16 of its pixels' std (256 positions averaged), and no net fits per-image targets from
    that in the training check's 100 steps, healthy or not."""
    grid = torch.randn(16, 3, 4, 4, generator=g)  # (N, C, 4, 4)
    up = nn.functional.interpolate(grid, size=16, mode="bilinear", align_corners=False)
    return up / up.std()  # (N, C, 16, 16)


def constant_conv() -> nn.Module:
    """Three convs whose every weight is 0.05: every channel computes the same value."""
    layers: list[nn.Module] = []
    for c_in in (3, 16, 16):
        conv = nn.Conv2d(c_in, 16, 3, padding=1)
        nn.init.constant_(conv.weight, 0.05)
        nn.init.zeros_(conv.bias)
        layers += [conv, nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


class _Embedded(nn.Module):
    def __init__(self, std: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 64)
        nn.init.normal_(self.embed.weight, std=std)
        self.mlp = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        self.head = nn.Linear(64, 10)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.mlp(self.embed(ids))  # (N, T) -> (N, T, 64), per token
        return self.head(h.mean(dim=1))  # (N, T, 64) -> (N, 64) -> (N, 10)


def embedding_std10() -> nn.Module:
    """Token ids -> an embedding at std 10 (nn.Embedding's default is 1) -> a tanh MLP."""
    return _Embedded(10.0)


class ResidualMLP(nn.Module):
    """Pre-LN residual MLP: ``x + s * W2 relu(W1 LN(x))``, He in the branch, ``blocks`` deep,
    and a linear head; ``scaled`` multiplies each branch by 1/sqrt(blocks) (Depth-muP);
    ``final_norm`` puts a LayerNorm before the head (as GPT-2's ``ln_f``), else the head reads
    the stream as it is."""

    def __init__(
        self, blocks: int = 64, width: int = 128, scaled: bool = False, final_norm: bool = False
    ) -> None:
        super().__init__()
        self.inp = nn.Linear(32, width)
        self.blocks = nn.ModuleList()
        for _ in range(blocks):
            block = nn.Sequential(
                nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width)
            )
            nn.init.kaiming_normal_(block[1].weight, nonlinearity="relu")
            nn.init.normal_(block[3].weight, std=width**-0.5)
            nn.init.zeros_(block[1].bias)
            nn.init.zeros_(block[3].bias)
            self.blocks.append(block)
        self.scale = blocks**-0.5 if scaled else 1.0
        self.norm = nn.LayerNorm(width) if final_norm else None
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)  # (N, 32) -> (N, width)
        for block in self.blocks:
            h = h + self.scale * block(h)
        return self.head(self.norm(h) if self.norm is not None else h)


def encoder48(pre: bool) -> nn.Module:
    """48 ``nn.TransformerEncoderLayer`` (d_model 64, 4 heads), post-LN or pre-LN."""
    return zoo._Encoder(64, 48, norm_first=pre)


def _zoo(name: str, truth: tuple[str, ...], why: str, source: str) -> Entry:
    return Entry(
        f"zoo:{name}",
        lambda: zoo.build(name),
        lambda g: torch.randn(zoo.input_shape(name, 64), generator=g),
        truth,
        why,
        source,
    )


HF = "transformers 5.23, built from its config with random init"
ENTRIES = [
    Entry(
        "gpt2",
        gpt2,
        _tokens,
        (),
        "GPT-2 at its standard init (N(0, 0.02), residual projections scaled by 1/sqrt(2L)) "
        "trains (issue 16: AdamW takes the 12 x 128 model's loss from 6.9 to 5.4 in 200 steps)",
        f"Radford et al. 2019; {HF}",
    ),
    Entry(
        "bert",
        bert,
        _tokens,
        (),
        "BERT's post-LN encoder trains as built",
        f"Devlin et al. 2019; {HF}",
        "last_hidden_state",
    ),
    Entry(
        "llama",
        llama,
        _tokens,
        (),
        "a small Llama (RMSNorm, SiLU gated MLP, pre-norm) trains as built; the doctor must "
        "know RMSNorm and SiLU by what they are",
        f"Touvron et al. 2023; {HF}",
    ),
    Entry(
        "hf-resnet",
        hf_resnet,
        _images,
        (),
        "ResNet with BatchNorm after each conv",
        f"He et al. 2016; {HF}",
    ),
    Entry(
        "convnext",
        convnext,
        _images,
        (),
        "ConvNeXt scales each residual branch by a layer-scale parameter of 1e-6 on purpose: "
        "branches start silent and learn to speak",
        f"Liu et al. 2022 (layer scale: Touvron et al. 2021, CaiT); {HF}",
    ),
    _zoo("resnet", (), "BatchNorm after every conv, identity shortcuts", "He et al. 2016"),
    _zoo("transformer", (), "two post-LN encoder layers", "Vaswani et al. 2017"),
    _zoo("lstm", (), "one LSTM layer and a head", "Hochreiter & Schmidhuber 1997"),
    _zoo("post-ln", (), "12 post-LN encoder layers train (with warm-up)", "Xiong et al. 2020"),
    _zoo("pre-ln", (), "12 pre-LN encoder layers train", "Xiong et al. 2020"),
    _zoo(
        "vanishing-tanh",
        ("vanishing",),
        "weights N(0, 0.01^2): x0.08 per layer",
        "Glorot & Bengio 2010",
    ),
    _zoo("exploding-relu", ("exploding",), "weights N(0, 1): x5.7 per layer", "He et al. 2015"),
    _zoo(
        "vanishing-sigmoid",
        ("vanishing",),
        "20 sigmoid layers: the slope 1/4 shrinks the gradient on its way back",
        "Glorot & Bengio 2010",
    ),
    _zoo("dead-relu", ("dead",), "a bias of -10 switches 56 of 64 units off", "Lu et al. 2019"),
    _zoo(
        "symmetric",
        ("symmetric",),
        "constant weights: every unit the same",
        "Goodfellow et al. 2016, 8.4",
    ),
    _zoo(
        "deep-batchnorm",
        ("exploding",),
        "30 BatchNorm + ReLU layers: the squared gradient grows pi/(pi-1) per layer on its way "
        "back; it does not train (issue 16 measured accuracy 0.37 with SGD, 0.24 with Adam, "
        "against 0.95 at depth 10)",
        "Yang et al. 2019, 'A mean field theory of batch normalization'",
    ),
    Entry(
        "relu-std1",
        relu_std1,
        lambda g: torch.randn(64, 256, generator=g),
        ("exploding",),
        "16 ReLU layers with weights at std 1.0: the scale and the gradient explode (gradient "
        "std from 0.03 at the last layer to 1e10 and more at the first); never 'vanishing'",
        "He et al. 2015",
    ),
]
ENTRIES += [
    Entry(
        "encoder48-pre",
        lambda: encoder48(True),
        lambda g: torch.randn(16, 16, 64, generator=g),
        (),
        "the pre-LN twin of the 48-layer post-LN encoder learns in 100 AdamW steps (issue 30)",
        "Xiong et al. 2020",
    ),
    Entry(
        "residual-mlp-scaled",
        lambda: ResidualMLP(scaled=True),
        lambda g: torch.randn(64, 32, generator=g),
        (),
        "64 pre-LN blocks with branches scaled by 1/sqrt(64): the stream keeps its scale",
        "Yang et al. 2023 (Depth-muP)",
    ),
    Entry(
        "residual-mlp-final-norm",
        lambda: ResidualMLP(final_norm=True),
        lambda g: torch.randn(64, 32, generator=g),
        (),
        "64 pre-LN blocks, branches not scaled, a final LayerNorm before the head: the stream "
        "grows ~5x by design and every norm reads it at unit scale; it fits the proxy to "
        "0.06-0.17 in 100 Adam steps, and with its branches scaled by 1/sqrt(64) only to "
        "0.74-0.90 (8 seeds, two input draws)",
        "Xiong et al. 2020",
    ),
    Entry(
        "tanh-std1",
        tanh_std1,
        lambda g: torch.randn(64, 128, generator=g),
        ("saturated",),
        "tanh at weight std 1.0: pinned at +-1, its slope ~0",
        "Glorot & Bengio 2010",
    ),
    Entry(
        "relu-std001",
        relu_small,
        lambda g: torch.randn(64, 128, generator=g),
        ("vanishing",),
        "ReLU at weight std 0.01: x0.08 per layer",
        "He et al. 2015",
    ),
    Entry(
        "sigmoid-deep",
        sigmoid_deep,
        lambda g: torch.randn(64, 128, generator=g),
        ("vanishing",),
        "16 sigmoid layers: the gradient shrinks ~4x per layer on its way back",
        "Glorot & Bengio 2010",
    ),
    Entry(
        "bias-minus5",
        bias_minus5,
        lambda g: torch.randn(64, 128, generator=g),
        ("dead",),
        "a bias of -5 below every pre-activation switches the layer's units off",
        "Lu et al. 2019",
    ),
    Entry(
        "constant-conv",
        constant_conv,
        _smooth_images,
        ("symmetric",),
        "constant conv weights: every channel identical",
        "Goodfellow et al. 2016, 8.4",
    ),
    Entry(
        "embedding-std10",
        embedding_std10,
        _tokens,
        ("saturated",),
        "an embedding at std 10 drives the tanh layers after it onto their flat ends",
        "Glorot & Bengio 2010",
    ),
    Entry(
        "encoder48-post",
        lambda: encoder48(False),
        lambda g: torch.randn(16, 16, 64, generator=g),
        ("exploding",),
        "48 post-LN layers do not learn in 100 AdamW steps even with warm-up (issue 30); the "
        "update's effect on the output grows with depth",
        "Liu et al. 2020; Xiong et al. 2020",
    ),
    Entry(
        "residual-mlp",
        ResidualMLP,
        lambda g: torch.randn(64, 32, generator=g),
        ("exploding",),
        "64 pre-LN blocks, branches not scaled, the head reading the stream as it is: the "
        "output grows with the stream (~5x); a LayerNorm before the head cut its proxy loss "
        "from 0.40-1.28 to 0.10-0.13 (4 seeds, two input draws; issue 30: branches scaled by "
        "1/sqrt(64), 1.27 to 0.73)",
        "Yang et al. 2023 (Depth-muP)",
    ),
]
"""Every calibration entry, healthy ones first."""
