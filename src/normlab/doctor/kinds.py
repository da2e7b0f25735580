"""Layers known by what they do: weight layers, norms, activations, pass-through layers.

torch's and normlab's classes, and layers from other libraries by their family names
(``*RMSNorm``, ``*LayerNorm``, GELU, SiLU).
"""

from __future__ import annotations

import re

import torch
from torch import nn

from normlab import nn as nlnn
from normlab.probe import own_parameters

_WEIGHT_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
_NORMS: tuple[type[nn.Module], ...] = (
    nn.modules.batchnorm._BatchNorm,
    nn.GroupNorm,
    nn.LayerNorm,
    nn.RMSNorm,
    nn.modules.instancenorm._InstanceNorm,
    nlnn._BatchNorm,
    nlnn.LayerNorm,
    nlnn.GroupNorm,
    nlnn.RMSNorm,
)
_POOLS: tuple[type[nn.Module], ...] = (
    nn.modules.pooling._MaxPoolNd,
    nn.modules.pooling._AvgPoolNd,
    nn.modules.pooling._AdaptiveAvgPoolNd,
    nn.modules.pooling._AdaptiveMaxPoolNd,
)
_CHANNEL_FIRST: tuple[type[nn.Module], ...] = (
    nn.modules.conv._ConvNd,
    nn.modules.batchnorm._BatchNorm,
    nn.GroupNorm,
    nn.modules.instancenorm._InstanceNorm,
    nlnn._BatchNorm,
    nlnn.GroupNorm,
    *_POOLS,
)
_PASS_THROUGH: tuple[type[nn.Module], ...] = (
    *_NORMS,
    nn.modules.dropout._DropoutNd,
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
    nn.modules.dropout._DropoutNd,
    nn.Identity,
)


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
