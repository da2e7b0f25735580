"""Example models for :mod:`normlab.doctor`: one healthy network, and one for each failure it names.

Each factory takes a ``seed`` (and the MLPs a ``norm``) and returns a ready ``nn.Module`` in
training mode; :data:`MODELS` lists them by name with the shape of one input example. Layers are
built by ``torch.nn`` inside a forked RNG seeded with ``seed`` (so a model is reproducible and the
global RNG is left as it was), then the weights that make each model what it is are drawn by
:mod:`normlab.init` from a generator seeded the same way.

==============  =========================================================  ====================
name            what it is                                                 the doctor should say
==============  =========================================================  ====================
resnet          ResNet-style CNN, BatchNorm2d after every conv, residuals  ok everywhere
vanishing-tanh  30 x (Linear 64 -> tanh), weights N(0, 0.01^2)             vanishing
exploding-relu  20 x (Linear 64 -> ReLU), weights N(0, 1)                  exploding
vanishing-      20 x (Linear 64 -> sigmoid), torch's default init          vanishing (the
sigmoid                                                                    gradient), below
                                                                           the last layers
dead-relu       8 He-initialized ReLU layers; layer 4's bias is -10 on     dead at layer 4
                56 of its 64 units
symmetric       6 x (Linear 64 -> tanh), every weight 1/fan_in, bias 0     symmetric
transformer     2 TransformerEncoder layers (d_model 32) and a mean-pool   no vanishing or
                head                                                       exploding
deep-batchnorm  30 x (Linear 256 -> BatchNorm1d -> ReLU), torch's init     exploding: a steady
                                                                           gradient growth
                                                                           (Yang et al. 2019)
post-ln         12 post-LN TransformerEncoder layers (d_model 64), head    healthy; no trend
                                                                           toward the input
pre-ln          the same with ``norm_first=True``                          healthy; its ratio
                                                                           grows ~1.09x per
                                                                           layer toward the
                                                                           input
lstm            one LSTM (hidden 32) and a Linear head on the last step    no vanishing or
                                                                           exploding
==============  =========================================================  ====================

The dead layer keeps an eighth of its units alive on purpose: with every unit dead, everything
after it would be constant, and the lesson (a bias that pushed the pre-activation below zero for
every input) would drown in what follows from it.

The MLP models take ``norm`` (``"none"``, ``"batch"`` or ``"layer"``): a normlab
``BatchNorm1d`` or ``LayerNorm`` after each hidden Linear, before its activation. The CNN already
normalizes, and the transformer and the LSTM have their own structure, so they take no ``norm``.

>>> net = build("exploding-relu")
>>> net(torch.zeros(input_shape("exploding-relu", 4))).shape
torch.Size([4, 10])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from normlab import init
from normlab import nn as nlnn

MLP_IN = 32
MLP_WIDTH = 64
CLASSES = 10
NORMS = ("none", "batch", "layer")
DEAD_LAYER = 4  # 1-based hidden layer of dead-relu whose bias is pushed far negative
DEAD_UNITS = 56  # of MLP_WIDTH: units of that layer that never fire
DEAD_BIAS = -10.0


@contextmanager
def _seeded(seed: int) -> Iterator[torch.Generator]:
    """Build inside a forked global RNG (torch's default inits draw from it); restore it after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield torch.Generator().manual_seed(seed)


def _norm(norm: str, width: int) -> list[nn.Module]:
    if norm == "none":
        return []
    if norm == "batch":
        return [nlnn.BatchNorm1d(width)]
    if norm == "layer":
        return [nlnn.LayerNorm(width)]
    raise ValueError(f"norm {norm!r} not supported, use one of {NORMS}")


def _mlp(depth: int, act: type[nn.Module], norm: str) -> nn.Sequential:
    """``depth`` blocks ``Linear(64) -> [norm] -> act``, then ``Linear(64, CLASSES)``."""
    blocks: list[nn.Module] = []
    d = MLP_IN
    for _ in range(depth):
        blocks.append(nn.Sequential(nn.Linear(d, MLP_WIDTH), *_norm(norm, MLP_WIDTH), act()))
        d = MLP_WIDTH
    blocks.append(nn.Linear(d, CLASSES))
    return nn.Sequential(*blocks)


DEEP_BN_DEPTH, DEEP_BN_WIDTH = 30, 256


def deep_batchnorm(seed: int = 0) -> nn.Sequential:
    r"""30 blocks ``Linear(256) -> BatchNorm1d -> ReLU`` at torch's default init, then a head.

    Every layer's output is normalized, so the forward scale holds; the gradient does not: in a
    BatchNorm + ReLU stack its squared size grows by :math:`\pi / (\pi - 1) \approx 1.47` per
    layer on the way back (Yang et al., 2019, "A mean field theory of batch normalization"),
    whatever the initializer, and at this depth the first layers barely train.
    """
    with _seeded(seed):
        blocks: list[nn.Module] = []
        d = MLP_IN
        for _ in range(DEEP_BN_DEPTH):
            w = DEEP_BN_WIDTH
            blocks.append(nn.Sequential(nn.Linear(d, w), nn.BatchNorm1d(w), nn.ReLU()))
            d = w
        blocks.append(nn.Linear(d, CLASSES))
        return nn.Sequential(*blocks)


def _linears(net: nn.Module) -> list[nn.Linear]:
    return [m for m in net.modules() if isinstance(m, nn.Linear)]


def vanishing_tanh(seed: int = 0, norm: str = "none") -> nn.Sequential:
    """30 tanh layers whose weights are N(0, 0.01^2): each layer shrinks the scale ~12x.

    With width 64, :math:`\\sqrt{64} \\cdot 0.01 = 0.08` is the per-layer gain near zero, where
    tanh is the identity.
    """
    with _seeded(seed) as g:
        net = _mlp(30, nn.Tanh, norm)
        for layer in _linears(net):
            init.normal_(layer.weight, 0.0, 0.01, generator=g)
            init.zeros_(layer.bias)
    return net


def exploding_relu(seed: int = 0, norm: str = "none") -> nn.Sequential:
    """20 ReLU layers whose weights are N(0, 1): each layer grows the scale ~5.7x.

    With width 64, :math:`\\sqrt{64 / 2} = 5.66` is the per-layer gain (ReLU halves the second
    moment).
    """
    with _seeded(seed) as g:
        net = _mlp(20, nn.ReLU, norm)
        for layer in _linears(net):
            init.normal_(layer.weight, 0.0, 1.0, generator=g)
            init.zeros_(layer.bias)
    return net


def vanishing_sigmoid(seed: int = 0, norm: str = "none") -> nn.Sequential:
    r"""20 sigmoid layers as ``nn.Linear`` initializes them: the gradient dies on its way back.

    Every output keeps a std near 0.07 around sigmoid's 0.5, so the forward scale looks sound.
    Backward, each layer multiplies the gradient by :math:`W^T` (std
    :math:`1/\sqrt{3 \cdot 64}` from torch's ``kaiming_uniform_(a=sqrt(5))``, so about
    :math:`1/\sqrt{3}` in scale) and by sigmoid's slope, at most 1/4: about 0.14 a layer, so
    the first layer's weights get a relative gradient near :math:`10^{-17}` of the last one's.
    """
    with _seeded(seed):
        return _mlp(20, nn.Sigmoid, norm)


def dead_relu(seed: int = 0, norm: str = "none") -> nn.Sequential:
    """8 He-initialized ReLU layers; layer :data:`DEAD_LAYER`'s bias kills most of its units.

    The bias is :data:`DEAD_BIAS` on the first :data:`DEAD_UNITS` units, about seven standard
    deviations below the pre-activation's scale, so they output 0 for every input.
    """
    with _seeded(seed) as g:
        net = _mlp(8, nn.ReLU, norm)
        for layer in _linears(net):
            init.kaiming_normal_(layer.weight, nonlinearity="relu", generator=g)
            init.zeros_(layer.bias)
        block = net[DEAD_LAYER - 1]
        assert isinstance(block, nn.Sequential)
        dead = block[0]
        assert isinstance(dead, nn.Linear)
        with torch.no_grad():
            dead.bias[:DEAD_UNITS] = DEAD_BIAS
    return net


def symmetric(seed: int = 0, norm: str = "none") -> nn.Sequential:
    """6 tanh layers with every weight ``1 / fan_in`` and every bias 0: all units identical.

    The scale holds (each unit averages its inputs), so the only fault is the symmetry: every
    unit of a layer computes the same value and receives the same gradient. ``seed`` is accepted
    for a uniform interface; nothing here is random.
    """
    with _seeded(seed):
        net = _mlp(6, nn.Tanh, norm)
        for layer in _linears(net):
            init.constant_(layer.weight, 1.0 / layer.in_features)
            init.zeros_(layer.bias)
    return net


class _BasicBlock(nn.Module):
    """conv-BN-ReLU-conv-BN plus a shortcut (1x1 conv + BN when the shape changes), then ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        # No module for an identity shortcut: an empty Sequential would count as a leaf layer.
        self.shortcut: nn.Sequential | None = None
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )
        self.relu2 = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu1(self.bn1(self.conv1(x)))  # (N, C_out, H', W')
        skip = x if self.shortcut is None else self.shortcut(x)  # (N, C_out, H', W')
        out: torch.Tensor = self.relu2(self.bn2(self.conv2(h)) + skip)
        return out


def resnet(seed: int = 0) -> nn.Sequential:
    """A small ResNet-style CNN on (N, 3, 16, 16): stem, two residual blocks, pool, Linear head.

    Every conv is followed by ``nn.BatchNorm2d``, so the scale is reset after each one whatever
    torch's default conv init does.
    """
    with _seeded(seed):
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            _BasicBlock(8, 8, stride=1),
            _BasicBlock(8, 16, stride=2),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, CLASSES),
        )


class _TransformerClassifier(nn.Module):
    def __init__(self, d_model: int, classes: int) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model,
            nhead=4,
            dim_feedforward=2 * d_model,
            dropout=0.0,
            activation=nn.ReLU(),  # a module, so the doctor sees it (F.relu would be invisible)
            batch_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(x)  # (N, T, D)
        logits: torch.Tensor = self.head(h.mean(dim=1))  # (N, T, D) -> (N, D) -> (N, classes)
        return logits


class _Encoder(nn.Module):
    def __init__(self, d_model: int, layers: int, norm_first: bool) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model,
            nhead=4,
            dim_feedforward=4 * d_model,
            dropout=0.0,
            activation=nn.GELU(),
            batch_first=True,
            norm_first=norm_first,
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()  # pre-LN's final norm
        self.head = nn.Linear(d_model, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.encoder(x))  # (N, T, D)
        logits: torch.Tensor = self.head(h.mean(dim=1))  # (N, D) -> (N, classes)
        return logits


def post_ln(seed: int = 0) -> nn.Module:
    """12 post-LN encoder layers (d_model 64), LayerNorm after each residual add, on (N, 16, 64).

    The original Transformer's order: each add is normalized at once, so the stream keeps a
    fixed scale and no layer's gradient grows toward the input; near the output it is largest
    (Xiong et al., 2020, "On layer normalization in the Transformer architecture"), which is
    why post-LN wants a learning-rate warm-up.
    """
    with _seeded(seed):
        return _Encoder(64, 12, norm_first=False)


def pre_ln(seed: int = 0) -> nn.Module:
    """The same 12 layers pre-LN (``norm_first=True``: LayerNorm at the start of each branch)
    and a final LayerNorm. The stream is never normalized, and grows with depth, so a later
    branch moves it less: the weights' gradient ratio grows toward the input, about 1.09x per
    layer here (early layers get the larger gradients, as Shleifer et al., 2021, "NormFormer",
    measured), mild enough to train without warm-up (Xiong et al., 2020)."""
    with _seeded(seed):
        return _Encoder(64, 12, norm_first=True)


def transformer(seed: int = 0) -> nn.Module:
    """Two ``nn.TransformerEncoderLayer`` (d_model 32, 4 heads, post-norm) on (N, 12, 32)."""
    with _seeded(seed):
        return _TransformerClassifier(32, CLASSES)


class _LSTMClassifier(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)  # (N, T, H)
        logits: torch.Tensor = self.head(out[:, -1])  # last step: (N, H) -> (N, classes)
        return logits


def lstm(seed: int = 0) -> nn.Module:
    """One ``nn.LSTM`` (hidden 32) over (N, 12, 8) and a Linear head on its last step."""
    with _seeded(seed):
        return _LSTMClassifier(8, 32, CLASSES)


@dataclass(frozen=True)
class ZooModel:
    """A zoo entry: how to build it, what one input example looks like, what is wrong with it."""

    name: str
    factory: Callable[..., nn.Module]
    example_shape: tuple[int, ...]  # one input without the batch dimension
    summary: str
    takes_norm: bool


MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel("resnet", resnet, (3, 16, 16), "ResNet-style CNN with BatchNorm2d", False),
        ZooModel(
            "vanishing-tanh", vanishing_tanh, (MLP_IN,), "30 tanh layers, weights std 0.01", True
        ),
        ZooModel(
            "exploding-relu", exploding_relu, (MLP_IN,), "20 ReLU layers, weights std 1.0", True
        ),
        ZooModel(
            "vanishing-sigmoid",
            vanishing_sigmoid,
            (MLP_IN,),
            "20 sigmoid layers, torch's default init",
            True,
        ),
        ZooModel("dead-relu", dead_relu, (MLP_IN,), "ReLU MLP, layer 4 biased far negative", True),
        ZooModel("symmetric", symmetric, (MLP_IN,), "tanh MLP, every weight constant", True),
        ZooModel("transformer", transformer, (12, 32), "2-layer TransformerEncoder", False),
        ZooModel("lstm", lstm, (12, 8), "LSTM classifier", False),
        ZooModel("deep-batchnorm", deep_batchnorm, (MLP_IN,), "30 BatchNorm + ReLU layers", False),
        ZooModel("post-ln", post_ln, (16, 64), "12-layer post-LN TransformerEncoder", False),
        ZooModel("pre-ln", pre_ln, (16, 64), "12-layer pre-LN TransformerEncoder", False),
    )
}


def _entry(name: str) -> ZooModel:
    if name not in MODELS:
        raise ValueError(f"model {name!r} not in the zoo, use one of {list(MODELS)}")
    return MODELS[name]


def build(name: str, seed: int = 0, norm: str = "none") -> nn.Module:
    """The zoo model ``name`` built from ``seed``; ``norm`` only for the MLP models."""
    entry = _entry(name)
    if entry.takes_norm:
        return entry.factory(seed, norm)
    if norm != "none":
        mlps = [m.name for m in MODELS.values() if m.takes_norm]
        raise ValueError(f"norm {norm!r}: model {name!r} takes no norm, only {mlps} do")
    return entry.factory(seed)


def input_shape(name: str, batch: int) -> tuple[int, ...]:
    """The shape of a batch of ``batch`` inputs for the zoo model ``name``."""
    return (batch, *_entry(name).example_shape)
