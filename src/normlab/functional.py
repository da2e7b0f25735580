r"""The math of normalization layers, written from the formulas with torch primitives.

Each function has the name, signature and semantics of its ``torch.nn.functional`` twin and
agrees with it to float tolerance; none of them calls torch's own normalization kernels.
``batch_norm`` in training mode carries a hand-written backward (the closed-form gradient, in
``_BatchNormFunction`` beside its forward), the other three let autograd differentiate the
primitive ops.

The layers come from four papers:

- Ioffe, S. & Szegedy, C. (2015). *Batch normalization: accelerating deep network training by
  reducing internal covariate shift.* (batch norm)
- Ba, J. L., Kiros, J. R. & Hinton, G. E. (2016). *Layer normalization.* (layer norm)
- Wu, Y. & He, K. (2018). *Group normalization.* (group norm)
- Zhang, B. & Sennrich, R. (2019). *Root mean square layer normalization.* (RMSNorm)

All four normalize :math:`x` by statistics taken over some of its dimensions, then (optionally)
scale by :math:`\gamma` (``weight``) and shift by :math:`\beta` (``bias``); they differ only in
which dimensions the statistics cover:

=============  ===============================================  ==============================
function       statistics over                                  one value per
=============  ===============================================  ==============================
batch_norm     every dimension but ``C`` (dim 1)                channel
layer_norm     the trailing ``normalized_shape`` dimensions     sample (and leading position)
group_norm     each group of ``C / G`` channels (and space)      sample and group
rms_norm       the trailing ``normalized_shape`` dimensions     sample, no centering
=============  ===============================================  ==============================

``batch_norm`` and what it calls use nothing but ``torch`` and ``math``, so their source runs on
its own: ``BATCH_NORM_CODE`` lists those objects in dependency order, for a script that pastes
them (``inspect.getsource``) after ``import math``, ``import torch``, ``from torch import Tensor``.
"""

import math
from typing import Any

import torch

__all__ = ["BATCH_NORM_CODE", "batch_norm", "group_norm", "layer_norm", "rms_norm"]

Tensor = torch.Tensor


def _verify_batch_size(size: list[int]) -> None:
    """Refuse a training batch that holds one value per channel (its variance is 0/0)."""
    values = size[0] * math.prod(size[2:])
    if values == 1:
        raise ValueError(
            f"Expected more than 1 value per channel when training, got input size {size}"
        )


def _update_running_stats(
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    x: torch.Tensor,
    mean: torch.Tensor,
    dims: list[int],
    momentum: float,
) -> None:
    """Move the running estimates toward the batch's, in place, by the momentum rule.

    ``running = (1 - momentum) * running + momentum * batch``. The running variance takes the
    unbiased batch variance of ``x`` over ``dims`` (divide by ``n - 1``), not the biased one that
    normalizes, because it estimates the population's variance for eval. It is measured on
    ``x`` itself, as torch's kernel divides its sum of squares by ``n - 1``: scaling the biased
    one by ``n / (n - 1)`` rounds differently.
    """
    if running_mean is not None:
        running_mean.mul_(1.0 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
    if running_var is not None:
        unbiased = torch.var(x, dims, correction=1)  # (N, C, *) -> (C,): Bessel's correction
        running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)


class _BatchNormFunction(torch.autograd.Function):
    r"""Batch norm with batch statistics: the formula's steps forward, the closed form backward.

    Forward saves only what the backward formula reads: :math:`\hat{x}`, the inverse std
    :math:`1/\sqrt{\sigma^2 + \epsilon}` and :math:`\gamma` (see :func:`batch_norm` for the
    formulas). Backward runs without a graph (``once_differentiable``): its ops are not the
    derivative of anything autograd saw, so a double backward would be silently wrong.

    ``ctx`` is annotated ``"Any"`` in quotes so this source runs where ``typing`` is not imported.

    Examples::

        >>> x = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
        >>> w, b = torch.randn(3, dtype=torch.float64, requires_grad=True), torch.zeros(3)
        >>> f = lambda x, w: _BatchNormFunction.apply(x, w, b, None, None, 0.1, 1e-5)
        >>> torch.autograd.gradcheck(f, (x, w))
        True
    """

    @staticmethod
    def forward(
        ctx: "Any",
        x: torch.Tensor,
        weight: torch.Tensor | None,
        bias: torch.Tensor | None,
        running_mean: torch.Tensor | None,
        running_var: torch.Tensor | None,
        momentum: float,
        eps: float,
    ) -> torch.Tensor:
        dims = [0, *range(2, x.dim())]  # every dim but C: N, and L or H, W
        shape = (-1,) + (1,) * (x.dim() - 2)  # (C,) -> (C, 1, ...) broadcasts over (N, C, *)
        # One reduction for both statistics, as accurate as torch's kernel: a float32 x.mean can
        # be ulps off where the mean is far from 0 in stds, and dx multiplies that by invstd^2.
        var, mean = torch.var_mean(x, dims, correction=0)  # (N, C, *) -> biased, over dims -> (C,)
        invstd = torch.rsqrt(var + eps).view(shape)  # (C,) -> (C, 1, ...)
        xhat = (x - mean.view(shape)) * invstd  # (N, C, *)
        gamma = None if weight is None else weight.view(shape)  # (C, 1, ...)
        y = xhat if gamma is None else xhat * gamma  # (N, C, *)
        y = y if bias is None else y + bias.view(shape)  # (N, C, *)
        _update_running_stats(running_mean, running_var, x, mean, dims, momentum)
        ctx.save_for_backward(xhat, invstd, gamma)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: "Any", dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        xhat, invstd, gamma = ctx.saved_tensors  # (N, C, *), (C, 1, ...), (C, 1, ...) or None
        need_x, need_weight, need_bias = ctx.needs_input_grad[:3]
        dims = [0, *range(2, dy.dim())]  # every dim but C
        shape = invstd.shape  # (C, 1, ...): broadcasts a (C,) vector over (N, C, *)
        n = dy.numel() // dy.shape[1]  # values per channel
        dbeta = dy.sum(dims)  # (N, C, *) -> sum over dims -> (C,)
        dgamma = (dy * xhat).sum(dims)  # (N, C, *) -> (C,)
        dx = None
        if need_x:
            # dx = invstd / n * (n * dxhat - sum(dxhat) - xhat * sum(dxhat * xhat)) with
            # dxhat = dy * gamma. gamma is one number per channel, so it leaves both sums, and
            # what is left in them is dbeta and dgamma: no (N, C, *) dxhat, two sums fewer.
            scale = invstd if gamma is None else invstd * gamma  # (C, 1, ...)
            dx = scale / n * (n * dy - dbeta.view(shape) - xhat * dgamma.view(shape))  # (N, C, *)
        grad_weight = dgamma if need_weight else None
        grad_bias = dbeta if need_bias else None
        return dx, grad_weight, grad_bias, None, None, None, None


def batch_norm(
    input: torch.Tensor,
    running_mean: torch.Tensor | None,
    running_var: torch.Tensor | None,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> torch.Tensor:
    r"""Normalize each channel of ``input`` by its batch (or running) mean and variance.

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    with the statistics of channel ``c`` taken over every dimension but dim 1 (``N``, and ``L`` or
    ``H, W``): :math:`n` values per channel. In training the steps are the formula's: the mean
    :math:`\mu`, the biased variance :math:`\sigma^2`, :math:`\hat{x} = (x - \mu) /
    \sqrt{\sigma^2 + \epsilon}`, then :math:`y = \gamma \hat{x} + \beta`.

    The traps, all as torch does them:

    - **Biased variance to normalize** (divide by :math:`n`), **unbiased variance for the
      running estimate** (divide by :math:`n - 1`).
    - **Momentum rule**: ``running = (1 - momentum) * running + momentum * batch_stat``. This is
      the opposite convention to an optimizer's momentum: ``momentum=0.1`` keeps 90% of the old
      value. ``momentum=None`` (a cumulative average) is the module's job, as in torch: it
      passes ``momentum = 1 / num_batches_tracked``.
    - In training the running buffers are **updated in place** (when given); the output always
      uses the batch statistics. With ``training=False`` the running statistics normalize and the
      buffers are left alone.
    - A training batch with **one value per channel** is refused: its variance is 0/0.

    In training the gradient is the closed form (``_BatchNormFunction.backward``), with
    :math:`d\hat{x} = dy \cdot \gamma` and sums over the :math:`n` values of a channel:

    .. math::
        dx = \frac{1}{n \sqrt{\sigma^2 + \epsilon}}\Big(n\,d\hat{x} - \sum d\hat{x}
            - \hat{x} \sum d\hat{x}\,\hat{x}\Big),\quad
        d\gamma = \sum dy\,\hat{x},\quad
        d\beta = \sum dy

    :math:`\gamma` is constant over a channel, so it comes out of both sums, which are then
    :math:`d\beta` and :math:`d\gamma`; the code computes
    :math:`dx = \frac{\gamma}{n \sqrt{\sigma^2 + \epsilon}}(n\,dy - d\beta - \hat{x}\,d\gamma)`.
    It is once differentiable: a double backward through it raises an error. In eval mode
    autograd differentiates the formula.

    Args:
        input: ``(N, C)``, ``(N, C, L)``, ``(N, C, H, W)`` or any ``(N, C, *)`` tensor.
        running_mean: ``(C,)`` buffer, or ``None`` (required when ``training=False``).
        running_var: ``(C,)`` buffer, or ``None`` (required when ``training=False``).
        weight: :math:`\gamma`, ``(C,)``, or ``None`` for 1.
        bias: :math:`\beta`, ``(C,)``, or ``None`` for 0.
        training: use batch statistics (and update the buffers) instead of the running ones.
        momentum: weight of the batch statistic in the running update.
        eps: added to the variance for numerical stability (must be positive when training).

    Shape:
        - Input: :math:`(N, C, *)`
        - Output: same shape as the input

    Examples::

        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(8, 3) * 5 + 2
        >>> rm, rv = torch.zeros(3), torch.ones(3)
        >>> y = batch_norm(x, rm, rv, training=True)
        >>> y.mean(0).abs().max() < 1e-6, y.var(0, unbiased=False).sub(1).abs().max() < 1e-4
        (tensor(True), tensor(True))
        >>> torch.allclose(rm, 0.1 * x.mean(0)), torch.allclose(rv, 0.9 + 0.1 * x.var(0))
        (True, True)
        >>> y_eval = batch_norm(x, rm, rv, training=False)  # running statistics normalize
        >>> torch.allclose(y_eval, (x - rm) / torch.sqrt(rv + 1e-5))
        True
    """
    if input.dim() < 2:
        raise ValueError(f"expected input of shape (N, C, *), got {input.dim()}D input")
    if training:
        _verify_batch_size(list(input.shape))
        if eps <= 0.0:
            raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
        # torch leaves Function.apply unannotated; it returns forward's tensor.
        out: torch.Tensor = _BatchNormFunction.apply(  # type: ignore[no-untyped-call]
            input, weight, bias, running_mean, running_var, momentum, eps
        )
        return out
    if eps < 0.0:
        raise ValueError(f"batch_norm eps must be non-negative, but got {eps}")
    if running_mean is None or running_var is None:
        raise ValueError("running_mean and running_var must be given when training=False")
    shape = (-1,) + (1,) * (input.dim() - 2)  # (C,) -> (C, 1, ...) to broadcast over (N, C, *)
    scale = torch.rsqrt(running_var + eps)  # (C,)
    if weight is not None:
        scale = scale * weight
    out = (input - running_mean.view(shape)) * scale.view(shape)  # (N, C, *)
    return out if bias is None else out + bias.view(shape)


# What a standalone script needs for batch_norm, in dependency order (see the module docstring).
BATCH_NORM_CODE = (_verify_batch_size, _update_running_stats, _BatchNormFunction, batch_norm)


def _normalized_dims(input: Tensor, normalized_shape: list[int] | tuple[int, ...]) -> list[int]:
    """The trailing dims that ``normalized_shape`` names, after checking they match ``input``."""
    k = len(normalized_shape)
    if k == 0 or tuple(input.shape[input.dim() - k :]) != tuple(normalized_shape):
        raise ValueError(
            f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
            f"[*, {', '.join(str(s) for s in normalized_shape)}], "
            f"but got input of size {list(input.shape)}"
        )
    return list(range(input.dim() - k, input.dim()))


def layer_norm(
    input: Tensor,
    normalized_shape: list[int] | tuple[int, ...],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    r"""Normalize each sample over its trailing ``normalized_shape`` dimensions.

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    The statistics cover the last ``len(normalized_shape)`` dimensions, separately for every
    leading index, so a sample's output does not depend on the rest of the batch and training and
    eval behave the same (no running statistics). The variance is the biased one (divide by the
    number of values), and ``weight``/``bias`` are elementwise, of shape ``normalized_shape``.

    Args:
        input: ``(*, *normalized_shape)`` tensor.
        normalized_shape: the trailing shape to normalize over.
        weight: :math:`\gamma`, of shape ``normalized_shape``, or ``None`` for 1.
        bias: :math:`\beta`, of shape ``normalized_shape``, or ``None`` for 0.
        eps: added to the variance for numerical stability.

    Shape:
        - Input: :math:`(*, \text{normalized\_shape}[0], \ldots)`
        - Output: same shape as the input

    Examples::

        >>> x = torch.arange(6.0).view(2, 3)
        >>> layer_norm(x, (3,))
        tensor([[-1.2247,  0.0000,  1.2247],
                [-1.2247,  0.0000,  1.2247]])
    """
    dims = _normalized_dims(input, normalized_shape)
    mean = input.mean(dims, keepdim=True)  # (*, D...) -> (*, 1...)
    xc = input - mean  # (*, D...)
    var = (xc * xc).mean(dims, keepdim=True)  # biased, two-pass: (*, D...) -> (*, 1...)
    out = xc * torch.rsqrt(var + eps)  # (*, D...)
    if weight is not None:
        out = out * weight  # (*, D...) * (D...)
    if bias is not None:
        out = out + bias
    return out


def group_norm(
    input: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    r"""Normalize each sample over groups of ``C / num_groups`` channels (and all of space).

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    The statistics of sample ``n``, group ``g`` cover channels ``g*C/G .. (g+1)*C/G - 1`` and every
    spatial position; the variance is the biased one. ``num_groups=1`` is layer norm over
    ``(C, *)`` with per-channel affine, ``num_groups=C`` is instance norm. ``weight`` and ``bias``
    are per channel, like batch norm's. Training and eval behave the same.

    Args:
        input: ``(N, C, *)`` tensor.
        num_groups: ``G``, which must divide ``C``.
        weight: :math:`\gamma`, ``(C,)``, or ``None`` for 1.
        bias: :math:`\beta`, ``(C,)``, or ``None`` for 0.
        eps: added to the variance for numerical stability.

    Shape:
        - Input: :math:`(N, C, *)`
        - Output: same shape as the input

    Examples::

        >>> x = torch.tensor([[1.0, 3.0, 10.0, 30.0]])
        >>> group_norm(x, 2)
        tensor([[-1.0000,  1.0000, -1.0000,  1.0000]])
    """
    if input.dim() < 2:
        raise ValueError(f"expected input of shape (N, C, *), got {input.dim()}D input")
    n, c = input.shape[0], input.shape[1]
    if num_groups <= 0 or c % num_groups != 0:
        raise ValueError(
            f"num_channels ({c}) must be divisible by num_groups ({num_groups}), "
            f"use a num_groups that divides {c}"
        )
    _verify_batch_size([n * c // num_groups, num_groups, *input.shape[2:]])
    xg = input.reshape(n, num_groups, -1)  # (N, C, *) -> (N, G, C/G * prod(*))
    mean = xg.mean(2, keepdim=True)  # (N, G, 1)
    xc = xg - mean
    var = (xc * xc).mean(2, keepdim=True)  # biased, two-pass: (N, G, 1)
    out = (xc * torch.rsqrt(var + eps)).view(input.shape)  # (N, C, *)
    shape = (-1,) + (1,) * (input.dim() - 2)  # (C,) -> (C, 1, ...)
    if weight is not None:
        out = out * weight.view(shape)
    if bias is not None:
        out = out + bias.view(shape)
    return out


def rms_norm(
    input: Tensor,
    normalized_shape: list[int] | tuple[int, ...],
    weight: Tensor | None = None,
    eps: float | None = None,
) -> Tensor:
    r"""Scale each sample by the root mean square of its trailing ``normalized_shape`` dims.

    .. math::
        y = \frac{x}{\sqrt{\mathrm{E}[x^2] + \epsilon}} \cdot \gamma

    Unlike layer norm there is no centering (the mean is not subtracted, so this is not a
    variance) and no bias. ``eps=None`` means ``torch.finfo(input.dtype).eps``, as torch does.

    Args:
        input: ``(*, *normalized_shape)`` tensor.
        normalized_shape: the trailing shape to normalize over.
        weight: :math:`\gamma`, of shape ``normalized_shape``, or ``None`` for 1.
        eps: added to the mean square; ``None`` for the machine epsilon of ``input.dtype``.

    Shape:
        - Input: :math:`(*, \text{normalized\_shape}[0], \ldots)`
        - Output: same shape as the input

    Examples::

        >>> rms_norm(torch.tensor([[3.0, -4.0]]), (2,), eps=0.0)
        tensor([[ 0.8485, -1.1314]])
    """
    dims = _normalized_dims(input, normalized_shape)
    if eps is None:
        eps = torch.finfo(input.dtype).eps
    ms = (input * input).mean(dims, keepdim=True)  # (*, D...) -> (*, 1...)
    out = input * torch.rsqrt(ms + eps)  # (*, D...)
    return out if weight is None else out * weight
