r"""Normalization layers as ``nn.Module``\ s, drop-in for torch's.

``BatchNorm1d``, ``BatchNorm2d``, ``LayerNorm``, ``GroupNorm`` and ``RMSNorm`` take torch's
constructor arguments, register torch's parameter and buffer names (so their ``state_dict`` keys
are torch's and load either way with ``strict=True``), and behave as torch's in train and eval
mode; each ``forward`` calls :mod:`normlab.functional`, where the math lives.

The layers come from four papers:

- Ioffe, S. & Szegedy, C. (2015). *Batch normalization: accelerating deep network training by
  reducing internal covariate shift.*
- Ba, J. L., Kiros, J. R. & Hinton, G. E. (2016). *Layer normalization.*
- Wu, Y. & He, K. (2018). *Group normalization.*
- Zhang, B. & Sennrich, R. (2019). *Root mean square layer normalization.*
"""

from typing import Any

import torch
from torch import nn

from normlab import functional as F
from normlab import init

__all__ = ["BatchNorm1d", "BatchNorm2d", "GroupNorm", "LayerNorm", "RMSNorm"]

Tensor = torch.Tensor
_Shape = int | list[int] | tuple[int, ...] | torch.Size


def _as_shape(normalized_shape: _Shape) -> tuple[int, ...]:
    if isinstance(normalized_shape, int):
        return (normalized_shape,)
    return tuple(int(s) for s in normalized_shape)


def _add_affine(
    module: nn.Module, shape: tuple[int, ...], affine: bool, bias: bool, factory: dict[str, Any]
) -> None:
    """Register ``weight`` (and ``bias`` when asked) of ``shape``, or ``None`` for each, as torch's
    layers do: the names and ``None`` entries make the ``state_dict`` keys match torch's."""
    weight = nn.Parameter(torch.empty(shape, **factory)) if affine else None
    module.register_parameter("weight", weight)
    module.register_parameter(
        "bias", nn.Parameter(torch.empty(shape, **factory)) if affine and bias else None
    )


def _reset_affine(module: nn.Module) -> None:
    """``weight`` to 1 and ``bias`` to 0, where they exist."""
    weight, bias = getattr(module, "weight", None), getattr(module, "bias", None)
    if weight is not None:
        init.ones_(weight)
    if bias is not None:
        init.zeros_(bias)


class _BatchNorm(nn.Module):
    """Parameters, buffers and forward shared by ``BatchNorm1d`` and ``BatchNorm2d``."""

    _version = 2  # torch's: version 2 added num_batches_tracked
    _ranks: tuple[int, ...] = ()
    _expected = ""

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        self.weight: nn.Parameter | None
        self.bias: nn.Parameter | None
        _add_affine(self, (num_features,), affine, bias, factory)
        self.running_mean: Tensor | None
        self.running_var: Tensor | None
        self.num_batches_tracked: Tensor | None
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features, **factory))
            self.register_buffer("running_var", torch.ones(num_features, **factory))
            self.register_buffer(
                "num_batches_tracked", torch.tensor(0, dtype=torch.long, device=device)
            )
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        """Set the running mean to 0, the running variance to 1 and the batch count to 0."""
        if self.running_mean is not None:
            self.running_mean.zero_()
        if self.running_var is not None:
            self.running_var.fill_(1)
        if self.num_batches_tracked is not None:
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        """Reset the running statistics and set ``weight`` to 1 and ``bias`` to 0."""
        self.reset_running_stats()
        _reset_affine(self)

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, bias={self.bias is not None}, "
            f"track_running_stats={self.track_running_stats}"
        )

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() not in self._ranks:
            raise ValueError(
                f"{type(self).__name__} expected {self._expected} input, "
                f"got {input.dim()}D input of shape {tuple(input.shape)}"
            )
        if input.shape[1] != self.num_features:
            raise ValueError(
                f"{type(self).__name__}({self.num_features}) expected {self.num_features} "
                f"channels in dim 1, got input of shape {tuple(input.shape)}"
            )

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        # Checkpoints older than version 2 lack num_batches_tracked: start the count at 0.
        version = local_metadata.get("version")
        key = prefix + "num_batches_tracked"
        if (version is None or version < 2) and self.track_running_stats and key not in state_dict:
            state_dict[key] = torch.tensor(0, dtype=torch.long)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def forward(self, input: Tensor) -> Tensor:
        self._check_input_dim(input)
        # momentum=None: a cumulative average, the k-th batch weighs 1/k.
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        # Batch statistics in training, and in eval when there are no running buffers.
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        # Buffers are handed over to be updated only in training with tracking on.
        update = not self.training or self.track_running_stats
        return F.batch_norm(
            input,
            self.running_mean if update else None,
            self.running_var if update else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )


class BatchNorm1d(_BatchNorm):
    r"""Batch normalization over a 2-D ``(N, C)`` or 3-D ``(N, C, L)`` input.

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    Mean and variance are per channel, over ``N`` (and ``L``). In training the batch statistics
    normalize and the running estimates are updated; in eval the running estimates normalize.

    The traps, all as torch does them:

    - **Biased variance** (divide by ``n``) **to normalize**, **unbiased** (divide by ``n - 1``)
      **for the running estimate**.
    - **Momentum rule**: ``running = (1 - momentum) * running + momentum * batch_stat``, so
      ``momentum=0.1`` keeps 90% of the old value. ``momentum=None`` is a cumulative average:
      batch ``k`` (counted by ``num_batches_tracked``) weighs ``1 / k``.
    - ``track_running_stats=False`` keeps no buffers (they are ``None``) and normalizes with batch
      statistics in eval too.
    - A training batch with **one value per channel** raises ``ValueError``; eval with batch 1 is
      fine when running statistics are tracked.

    Args:
        num_features: ``C``, the number of channels.
        eps: added to the variance for numerical stability. Default: 1e-5
        momentum: weight of the batch statistic in the running update, or ``None`` for a
            cumulative average. Default: 0.1
        affine: learn a per-channel :math:`\gamma` (``weight``) and :math:`\beta` (``bias``).
            Default: ``True``
        track_running_stats: keep ``running_mean``, ``running_var`` and ``num_batches_tracked``.
            Default: ``True``
        device: device of the parameters and buffers.
        dtype: dtype of the parameters and buffers.
        bias: (keyword only) learn :math:`\beta` when ``affine``. Default: ``True``

    Shape:
        - Input: :math:`(N, C)` or :math:`(N, C, L)`
        - Output: same shape as the input

    Examples::

        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> norm = BatchNorm1d(3)
        >>> x = torch.randn(4, 3) * 10
        >>> y = norm(x)
        >>> norm.running_mean.round(decimals=2), norm.num_batches_tracked
        (tensor([ 0.5300, -0.2800, -1.0300]), tensor(1))
        >>> y.mean(0).abs().max() < 1e-6
        tensor(True)
        >>> norm
        BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
    """

    _ranks = (2, 3)
    _expected = "2D (N, C) or 3D (N, C, L)"


class BatchNorm2d(_BatchNorm):
    r"""Batch normalization over a 4-D ``(N, C, H, W)`` input.

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    Mean and variance are per channel, over ``N``, ``H`` and ``W``. Everything else, traps
    included (biased variance to normalize, unbiased for the running estimate, the momentum rule,
    ``momentum=None`` as a cumulative average), is as in :class:`BatchNorm1d`.

    Args:
        num_features: ``C``, the number of channels.
        eps: added to the variance for numerical stability. Default: 1e-5
        momentum: weight of the batch statistic in the running update, or ``None`` for a
            cumulative average. Default: 0.1
        affine: learn a per-channel :math:`\gamma` and :math:`\beta`. Default: ``True``
        track_running_stats: keep the running buffers. Default: ``True``
        device: device of the parameters and buffers.
        dtype: dtype of the parameters and buffers.
        bias: (keyword only) learn :math:`\beta` when ``affine``. Default: ``True``

    Shape:
        - Input: :math:`(N, C, H, W)`
        - Output: same shape as the input

    Examples::

        >>> norm = BatchNorm2d(2)
        >>> y = norm(torch.randn(4, 2, 5, 5) * 3 + 1)
        >>> y.shape, y.mean((0, 2, 3)).abs().max() < 1e-6
        (torch.Size([4, 2, 5, 5]), tensor(True))
    """

    _ranks = (4,)
    _expected = "4D (N, C, H, W)"


class LayerNorm(nn.Module):
    r"""Layer normalization over the trailing ``normalized_shape`` dimensions of each sample.

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    The statistics are per sample (biased variance), so there are no running buffers and train
    and eval behave the same. :math:`\gamma` and :math:`\beta` are elementwise, of shape
    ``normalized_shape`` (not per channel as in batch norm).

    Args:
        normalized_shape: the trailing shape to normalize over; an int means ``(int,)``.
        eps: added to the variance for numerical stability. Default: 1e-5
        elementwise_affine: learn :math:`\gamma` (and :math:`\beta`). Default: ``True``
        bias: learn :math:`\beta` when ``elementwise_affine``. Default: ``True``
        device: device of the parameters.
        dtype: dtype of the parameters.

    Shape:
        - Input: :math:`(N, *)`, ending in ``normalized_shape``
        - Output: same shape as the input

    Examples::

        >>> norm = LayerNorm((2, 2), bias=False)
        >>> norm(torch.tensor([[[1.0, 3.0], [5.0, 7.0]]]))
        tensor([[[-1.3416, -0.4472],
                 [ 0.4472,  1.3416]]], grad_fn=<MulBackward0>)
        >>> norm
        LayerNorm((2, 2), eps=1e-05, elementwise_affine=True, bias=False)
    """

    def __init__(
        self,
        normalized_shape: _Shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight: nn.Parameter | None
        self.bias: nn.Parameter | None
        _add_affine(self, self.normalized_shape, elementwise_affine, bias, factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set ``weight`` to 1 and ``bias`` to 0."""
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, "
            f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}"
        )


class GroupNorm(nn.Module):
    r"""Group normalization: each sample normalized over groups of ``C / num_groups`` channels.

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    The statistics of a sample and group cover the group's channels and all spatial positions
    (biased variance); there are no running buffers, so train and eval behave the same.
    :math:`\gamma` and :math:`\beta` are per channel. ``num_channels`` must be divisible by
    ``num_groups`` (``ValueError`` otherwise).

    Args:
        num_groups: ``G``, the number of groups.
        num_channels: ``C``, the number of channels.
        eps: added to the variance for numerical stability. Default: 1e-5
        affine: learn a per-channel :math:`\gamma` and :math:`\beta`. Default: ``True``
        device: device of the parameters.
        dtype: dtype of the parameters.
        bias: (keyword only) learn :math:`\beta` when ``affine``. Default: ``True``

    Shape:
        - Input: :math:`(N, C, *)`
        - Output: same shape as the input

    Examples::

        >>> norm = GroupNorm(2, 4)
        >>> norm(torch.tensor([[1.0, 3.0, 10.0, 30.0]]))
        tensor([[-1.0000,  1.0000, -1.0000,  1.0000]], grad_fn=<AddBackward0>)
        >>> norm
        GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)
    """

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if num_groups <= 0 or num_channels % num_groups != 0:
            raise ValueError(
                f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})"
            )
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        self.weight: nn.Parameter | None
        self.bias: nn.Parameter | None
        _add_affine(self, (num_channels,), affine, bias, factory)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set ``weight`` to 1 and ``bias`` to 0."""
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.num_groups}, {self.num_channels}, eps={self.eps}, "
            f"affine={self.affine}, bias={self.bias is not None}"
        )


class RMSNorm(nn.Module):
    r"""Root-mean-square normalization over the trailing ``normalized_shape`` dimensions.

    .. math::
        y = \frac{x}{\sqrt{\mathrm{E}[x^2] + \epsilon}} \cdot \gamma

    No centering and no bias: only the scale of each sample is fixed. ``eps=None`` means
    ``torch.finfo(input.dtype).eps``, decided at call time from the input's dtype, as torch does.

    Args:
        normalized_shape: the trailing shape to normalize over; an int means ``(int,)``.
        eps: added to the mean square, or ``None`` for the input dtype's machine epsilon.
            Default: ``None``
        elementwise_affine: learn :math:`\gamma`. Default: ``True``
        device: device of the parameter.
        dtype: dtype of the parameter.

    Shape:
        - Input: :math:`(N, *)`, ending in ``normalized_shape``
        - Output: same shape as the input

    Examples::

        >>> norm = RMSNorm(2)
        >>> norm(torch.tensor([[3.0, -4.0]]))
        tensor([[ 0.8485, -1.1314]], grad_fn=<MulBackward0>)
        >>> norm
        RMSNorm((2,), eps=None, elementwise_affine=True)
    """

    def __init__(
        self,
        normalized_shape: _Shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight: nn.Parameter | None
        weight = torch.empty(self.normalized_shape, device=device, dtype=dtype)
        self.register_parameter("weight", nn.Parameter(weight) if elementwise_affine else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Set ``weight`` to 1."""
        _reset_affine(self)

    def forward(self, input: Tensor) -> Tensor:
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )
