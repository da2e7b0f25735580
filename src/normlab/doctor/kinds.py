"""Layers known by what they do: weight layers, norms, activations, pass-through layers.

torch's and normlab's classes, and layers from other libraries by their family names
(``*RMSNorm``, ``*LayerNorm``, GELU, SiLU).
"""

from __future__ import annotations

import math
import re

import torch
from torch import nn

from normlab import nn as nlnn
from normlab.init import WEIGHT_LAYERS
from normlab.probe import own_parameters

_WEIGHT_LAYERS = WEIGHT_LAYERS  # the layers an initializer scales: a fan-in weight
# torch's public classes, each tuple every torch.nn class of one private base (``_BatchNorm``,
# ``_ConvNd``, ...: tests/test_doctor.py checks that none is missing); the quantized ones that
# also derive from those bases are refused before a model runs
_BATCH_NORMS: tuple[type[nn.Module], ...] = (
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
    nn.LazyBatchNorm1d,
    nn.LazyBatchNorm2d,
    nn.LazyBatchNorm3d,
    nlnn.BatchNorm1d,
    nlnn.BatchNorm2d,
)
_INSTANCE_NORMS: tuple[type[nn.Module], ...] = (
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
    nn.LazyInstanceNorm1d,
    nn.LazyInstanceNorm2d,
    nn.LazyInstanceNorm3d,
)
_CONVS: tuple[type[nn.Module], ...] = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
)  # the lazy ones derive from these
_DROPOUTS: tuple[type[nn.Module], ...] = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)
_NORMS: tuple[type[nn.Module], ...] = (
    *_BATCH_NORMS,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.RMSNorm,
    *_INSTANCE_NORMS,
    nlnn.LayerNorm,
    nlnn.GroupNorm,
    nlnn.RMSNorm,
)
_POOLS: tuple[type[nn.Module], ...] = (
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.MaxPool3d,
    nn.AvgPool1d,
    nn.AvgPool2d,
    nn.AvgPool3d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveAvgPool2d,
    nn.AdaptiveAvgPool3d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
    nn.AdaptiveMaxPool3d,
)
_CHANNEL_FIRST: tuple[type[nn.Module], ...] = (
    *_CONVS,
    *_BATCH_NORMS,
    nn.GroupNorm,
    *_INSTANCE_NORMS,
    nlnn.GroupNorm,
    *_POOLS,
)
_PASS_THROUGH: tuple[type[nn.Module], ...] = (
    *_NORMS,
    *_DROPOUTS,
    nn.Identity,
    nn.Flatten,
    *_POOLS,
)
_RELU_LIKE = (nn.ReLU, nn.ReLU6, nn.ELU, nn.CELU, nn.GELU, nn.SiLU, nn.Mish, nn.Softplus)
_TANH_LIKE = (nn.Tanh, nn.Hardtanh, nn.Softsign)
_SIGMOID_LIKE = (nn.Sigmoid, nn.Hardsigmoid)
_ELEMENTWISE = (
    *_RELU_LIKE,
    *_TANH_LIKE,
    *_SIGMOID_LIKE,
    nn.LeakyReLU,
    nn.PReLU,
    nn.RReLU,
    nn.SELU,
    *_DROPOUTS,
    nn.Identity,
)


def fans(weight: torch.Tensor) -> tuple[int, int]:
    r"""A weight's fan-in and fan-out, as ``torch.nn.init`` computes them (torch has no public
    function for it). For a weight of shape :math:`(n_\text{out}, n_\text{in}, k_1, \dots)`:

    .. math::
        \text{fan\_in} = n_\text{in} \prod_i k_i, \qquad \text{fan\_out} = n_\text{out} \prod_i k_i

    >>> fans(torch.empty(16, 3, 5, 5))
    (75, 400)
    """
    if weight.dim() < 2:
        raise ValueError(f"a weight of 2+ dimensions has fans, got shape {tuple(weight.shape)}")
    receptive = math.prod(weight.shape[2:])  # 1 for a Linear's (out, in)
    return weight.shape[1] * receptive, weight.shape[0] * receptive


_NORM_NAME = re.compile(r"(RMS|Layer|Group|Batch|Instance)Norm")  # LlamaRMSNorm, T5LayerNorm
_RELU_NAME = re.compile(r"GELU|SiLU|Swish|Mish|(?<!Leaky)ReLU")  # GELUActivation, SiLUActivation


def _is_norm(module: nn.Module) -> bool:
    """A normalization layer: torch's and normlab's, or one named like them (HF's RMSNorms)."""
    return isinstance(module, _NORMS) or bool(_NORM_NAME.search(type(module).__name__))


def _is_elementwise(module: nn.Module) -> bool:
    """An activation, dropout or identity: torch's, or an activation named like one."""
    return isinstance(module, _ELEMENTWISE) or _named_activation(module) is not None


def _passes(module: nn.Module) -> bool:
    """Leaves the data's structure alone: norms, dropout, pooling, reshapes, identity."""
    return isinstance(module, _PASS_THROUGH) or _is_norm(module)


def _named_activation(module: nn.Module) -> str | None:
    """The ``calculate_gain`` name of an activation known only by its class name."""
    name = type(module).__name__
    if next(module.parameters(False), None) is not None or next(module.children(), None):
        return None  # a layer with weights or sub-layers is not an activation
    if _RELU_NAME.search(name):
        return "relu"
    if "Tanh" in name:
        return "tanh"
    return "sigmoid" if "Sigmoid" in name else None


def _is_weight(module: nn.Module, p: torch.Tensor) -> bool:
    """A weight: a matrix or kernel of 2+ dimensions that mixes its inputs: any of a Linear,
    conv or embedding (a regression head's (1, D) too); elsewhere, one with 2+ dimensions over 1
    (a per-channel scale stored (1, C, 1) for broadcasting, as Snake's, is no weight)."""
    if p.dim() < 2:
        return False
    return isinstance(module, (*_WEIGHT_LAYERS, nn.Embedding)) or (
        sum(size > 1 for size in p.shape) >= 2
    )


def _has_weight(module: nn.Module) -> bool:
    """A weight layer: parameters of its own with 2+ dimensions (Linear, convs, HF's Conv1D;
    a weight-normed conv's direction too: :func:`normlab.probe.own_parameters`)."""
    return any(_is_weight(module, p) for p in own_parameters(module))


def _nonlinearity(module: nn.Module) -> tuple[str, float | None]:
    """The ``calculate_gain`` name (and slope) for an activation module; linear when unknown."""
    if isinstance(module, nn.LeakyReLU):
        return "leaky_relu", module.negative_slope
    if isinstance(module, nn.PReLU):
        return "leaky_relu", float(module.weight.detach().mean())
    if isinstance(module, nn.RReLU):
        return "leaky_relu", (module.lower + module.upper) / 2
    if isinstance(module, _RELU_LIKE):
        return "relu", None
    if isinstance(module, _TANH_LIKE):
        return "tanh", None
    if isinstance(module, _SIGMOID_LIKE):
        return "sigmoid", None
    return _named_activation(
        module
    ) or "linear", None  # SELU included: self-normalizing nets want variance 1/fan_in
