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
"""Every calibration entry, healthy ones first."""
