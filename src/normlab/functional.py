r"""The math of normalization layers, written from the formulas with torch primitives.

Each function has the name, signature and semantics of its ``torch.nn.functional`` twin and
agrees with it to float tolerance; none of them calls torch's own normalization kernels.
``batch_norm`` in training mode carries a hand-written backward (the closed-form gradient), the
other three let autograd differentiate the primitive ops.

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
"""

import math
from collections.abc import Callable
from typing import Any, cast

import torch
from torch.autograd.function import once_differentiable

__all__ = ["batch_norm", "group_norm", "layer_norm", "rms_norm"]

Tensor = torch.Tensor


def _verify_batch_size(size: list[int]) -> None:
    """Refuse a training batch that holds one value per channel (its variance is 0/0)."""
    values = size[0] * math.prod(size[2:])
    if values == 1:
        raise ValueError(
            f"Expected more than 1 value per channel when training, got input size {size}"
        )


# BLAS accumulates a matrix-vector product in order, so its rounding error grows like the square
# root of the length; summing runs of at most this many rows and then the run totals keeps it
# ~8x smaller at N = 4096.
_SUM_ROWS = 512
# Every pass walks the batch in blocks of rows of about this size. A block's temporaries (the
# centered values, their squares or products with dy) then stay in cache, and never cost a trip
# to memory: a (4096, 1024) float32 forward + backward moves 8 tensors' worth of bytes, about
# what torch's fused kernel moves, where whole-tensor temporaries moved 19.
_BLOCK_BYTES = 1 << 21
# Channels whose mean is at most this many stds from 0 are not centered before the output and
# the gradient (see _BatchNormTrain.forward).
_NEAR_ZERO = 2.0


class _Blocks:
    """The row blocks of an ``(N, C)`` or ``(N, C, M)`` tensor, with what summing them needs.

    ``sum_into(t, out)`` writes the per-channel sum of one block ``t`` (``(m, C[, M])``) into
    ``out`` (``(C,)``) with one or two matrix-vector products: ``ones @ t`` is one BLAS pass over
    ``t``, the cheapest reduction over the leading dim on a CPU, on one thread. ``scratch`` holds
    two block-sized temporaries.
    """

    def __init__(self, x3: Tensor) -> None:
        n = x3.shape[0]
        row_bytes = max(1, x3[0].numel() * x3.element_size())
        rows = max(1, min(_SUM_ROWS, _BLOCK_BYTES // row_bytes, n))
        self.slices = [slice(i, min(i + rows, n)) for i in range(0, n, rows)]
        self.ones = x3.new_ones(rows)  # (rows,)
        self.ones_m = x3.new_ones(x3.shape[2]) if x3.dim() == 3 else None  # (M,)
        self.scratch = x3.new_empty((2, rows, *x3.shape[1:]))  # (2, rows, C[, M])

    def parts(self, k: int, c: int, like: Tensor) -> Tensor:
        """``(k, blocks, C)``: room for ``k`` sums per block."""
        return like.new_empty((k, len(self.slices), c))

    def sum_into(self, t: Tensor, out: Tensor) -> None:
        if self.ones_m is not None:  # (m, C, M) -> (m*C, M) @ ones(M) -> (m, C)
            m, c, k = t.shape
            t = torch.mv(t.reshape(m * c, k), self.ones_m).view(m, c)
        torch.mv(t.t(), self.ones[: t.shape[0]], out=out)  # (m, C) -> ones(m) @ t -> (C,)


class _BatchNormTrain(torch.autograd.Function):
    """Batch norm with batch statistics and the closed-form backward.

    Like torch's kernel it saves only the input and per-channel vectors, and it walks the batch
    in cache-sized blocks of rows (see ``_BLOCK_BYTES``): forward reads ``x`` twice (the shifted
    sums; the output) and backward reads ``x`` and ``dy`` twice (the two sums; the gradient).
    Where a pass needs centered values, each block is centered again in cache, which costs
    arithmetic, not memory traffic.
    """

    @staticmethod
    def forward(
        ctx: Any,  # carries the row blocks (and their scratch) to backward
        x: Tensor,
        weight: Tensor | None,
        bias: Tensor | None,
        running_mean: Tensor | None,
        running_var: Tensor | None,
        momentum: float,
        eps: float,
    ) -> Tensor:
        n, c = x.shape[0], x.shape[1]
        m = x[0, 0].numel()  # values per sample and channel (L, or H*W)
        x3 = x.reshape(n, c) if x.dim() == 2 else x.reshape(n, c, m)  # (N, C) or (N, C, M)
        shape = (c,) if x3.dim() == 2 else (c, 1)  # a (C,) vector broadcast against x3
        count = n * m
        blocks = _Blocks(x3)
        parts = blocks.parts(2, c, x3)  # per-block sums of x - K and its squares, (2, B, C)
        centered, squares = blocks.scratch.unbind(0)  # (rows, C[, M]) each

        # Shifted moments: sum x - K and its squares, then correct for the shift: mu = mean - K.
        # K is 0 where the first block says the data sits near 0 (one op less per block), else
        # that block's mean. With |mu| below the std, m2 below loses no digits; a batch whose
        # first block is not typical (sorted data) gets a second pass centered on its mean.
        first, cpu = blocks.slices[0], x3.device.type == "cpu"
        head = x3[first]  # (m, C[, M])
        blocks.sum_into(head, parts[0, 0])
        blocks.sum_into(torch.mul(head, head, out=squares[: first.stop]), parts[1, 0])
        n0 = count // n * first.stop
        mean0 = parts[0, 0] / n0  # (C,)
        # |mean| <= std / 2 in every channel of the first block: mean^2 * 4 * n <= n * var
        near = cpu and bool((mean0 * mean0 * 4 * n0 <= parts[1, 0] - mean0 * parts[0, 0]).all())
        shift: Tensor | None = None if near else mean0.view(shape)  # K, (C,) or (C, 1)
        for attempt in range(2):
            for q, sl in enumerate(blocks.slices):
                if q == 0 and attempt == 0 and shift is None:
                    continue  # summed above
                rows = sl.stop - sl.start
                xc = x3[sl] if shift is None else torch.sub(x3[sl], shift, out=centered[:rows])
                blocks.sum_into(xc, parts[0, q])
                blocks.sum_into(torch.mul(xc, xc, out=squares[:rows]), parts[1, q])
            mu = parts[0].sum(0) / count  # mean - K, (C,)
            m2 = parts[1].sum(0) - mu * mu * count  # sum((x - mean)^2), (C,)
            if len(blocks.slices) == 1 or bool((mu * mu * count <= m2).all()):
                break
            shift = mu.view(shape) if shift is None else shift + mu.view(shape)
        mean = mu if shift is None else shift.view(c) + mu  # (C,)
        invstd = torch.rsqrt(m2 / count + eps)  # biased variance normalizes

        if running_mean is not None:  # EMA of the mean
            running_mean.mul_(1.0 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
        if running_var is not None:  # EMA of the *unbiased* variance
            unbiased = (m2 / (count - 1)).to(running_var.dtype)
            running_var.mul_(1.0 - momentum).add_(unbiased, alpha=momentum)

        # From here on x is taken relative to a center: K, or 0 where K is 0 or every channel's
        # mean is within _NEAR_ZERO stds of 0 (then x * scale carries at most that many ulps
        # more than xc * scale, and each pass skips the centering op). offset = mean - center.
        # On a GPU that test would cost a host sync: there K stays the center.
        center, offset = shift, mu  # (C,)
        if shift is None or (cpu and bool((mean.abs() * invstd).max() <= _NEAR_ZERO)):
            center, offset = None, mean

        # y = (xc - offset) * scale + beta = xc * scale + lift
        scale = invstd if weight is None else weight * invstd  # (C,)
        lift = -offset * scale if bias is None else torch.addcmul(bias, offset, scale, value=-1)
        if center is None:
            y3 = torch.addcmul(lift.view(shape), x3, scale.view(shape))  # (N, C[, M])
        else:
            y3 = torch.empty_like(x3)  # (N, C[, M]), block by block
            for sl in blocks.slices:
                xc = torch.sub(x3[sl], center, out=centered[: sl.stop - sl.start])
                torch.addcmul(lift.view(shape), xc, scale.view(shape), out=y3[sl])

        ctx.blocks, ctx.centered = blocks, center is not None
        saved = (x3, offset, invstd, *(() if center is None else (center,)))
        ctx.save_for_backward(*saved, *(() if weight is None else (weight,)))
        return y3.view(x.shape)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dy: Tensor) -> tuple[Tensor | None, ...]:
        x3, offset, invstd, *rest = ctx.saved_tensors
        center = rest.pop(0) if ctx.centered else None  # see forward: x - center, or x
        weight = rest[0] if rest else None
        blocks: _Blocks = ctx.blocks
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        shape = (-1,) if x3.dim() == 2 else (-1, 1)
        count = x3.numel() // x3.shape[1]
        dy3 = dy.reshape(x3.shape)  # (N, C[, M])
        parts = blocks.parts(2, x3.shape[1], x3)  # per-block sums of dy and xc * dy, (2, B, C)
        centered, prods = blocks.scratch.unbind(0)

        for q, sl in enumerate(blocks.slices):
            rows = sl.stop - sl.start
            blocks.sum_into(dy3[sl], parts[0, q])
            xc = x3[sl] if center is None else torch.sub(x3[sl], center, out=centered[:rows])
            blocks.sum_into(torch.mul(xc, dy3[sl], out=prods[:rows]), parts[1, q])
        sum_dy = parts[0].sum(0)  # dbeta = sum(dy), (C,)
        # sum(dy * (x - mean)) with x - mean = xc - offset; dgamma = sum(dy * xhat)
        dgamma = (parts[1].sum(0) - offset * sum_dy) * invstd  # (C,)

        dx = None
        if need_x:
            # dx = gamma*invstd/N * (N*dy - sum(dy) - xhat*sum(dy*xhat))
            #    = k*dy + a*(xc - offset) + c0, with per-channel k, a, c0
            k = invstd if weight is None else weight * invstd  # (C,)
            a = k * invstd * dgamma / -count  # (C,)
            c0 = k * sum_dy / -count - a * offset  # (C,)
            dx3 = torch.empty_like(x3)  # (N, C[, M])
            for sl in blocks.slices:
                rows = sl.stop - sl.start
                xc = x3[sl] if center is None else torch.sub(x3[sl], center, out=centered[:rows])
                torch.addcmul(c0.view(shape), xc, a.view(shape), out=dx3[sl])
                dx3[sl].addcmul_(dy3[sl], k.view(shape))
            dx = dx3.view(dy.shape)
        return (
            dx,
            dgamma if need_w else None,
            sum_dy if need_b else None,
            None,
            None,
            None,
            None,
        )


_batch_norm_train: Callable[..., Any] = _BatchNormTrain.apply


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    r"""Normalize each channel of ``input`` by its batch (or running) mean and variance.

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    with the statistics of channel ``c`` taken over every dimension but dim 1 (``N``, and ``L`` or
    ``H, W``).

    The traps, all as torch does them:

    - **Biased variance to normalize** (divide by :math:`n`, the number of values per channel),
      **unbiased variance for the running estimate** (divide by :math:`n - 1`).
    - **Momentum rule**: ``running = (1 - momentum) * running + momentum * batch_stat``. This is
      the opposite convention to an optimizer's momentum: ``momentum=0.1`` keeps 90% of the old
      value. ``momentum=None`` (a cumulative average) is the module's job: it passes
      ``momentum = 1 / num_batches_tracked``.
    - In training the running buffers are **updated in place** (when given); the output always
      uses the batch statistics. With ``training=False`` the running statistics normalize and the
      buffers are left alone.
    - A training batch with **one value per channel** is refused: its variance is 0/0.

    In training the gradient is hand-written (closed form, float tolerance of torch's kernel):

    .. math::
        \frac{\partial L}{\partial x} = \frac{\gamma\,\sigma^{-1}}{n}\Big(n\,dy - \sum dy
            - \hat{x} \sum dy\,\hat{x}\Big),\quad
        \frac{\partial L}{\partial \gamma} = \sum dy\,\hat{x},\quad
        \frac{\partial L}{\partial \beta} = \sum dy

    It is once differentiable: a double backward through it raises an error.

    Numerics: the batch variance is a shifted one (sums of :math:`x - K` and their squares, then
    corrected for the shift, with :math:`K` the first block of rows' mean, or 0 where that block
    sits within half a std of 0; a second pass around the batch mean when the first block is
    atypical). Where a channel's mean is more than 2 stds from 0, the output and the gradient
    use the centered input and correct for the shift. On a float32 channel whose mean is far
    from 0 (hundreds of stds) that keeps output and gradients within a few 1e-6 of float64,
    where torch's CPU kernel drifts to 1e-5..1e-4.

    Speed: every pass walks the batch in cache-sized blocks of rows and only the input is saved,
    so forward + backward move about as many bytes as torch's fused kernel
    (``benchmarks/batchnorm.py`` times the two).

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

        >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
        <torch._C.Generator object at ...>
        >>> x = torch.randn(8, 3) * 5 + 2
        >>> rm, rv = torch.zeros(3), torch.ones(3)
        >>> y = batch_norm(x, rm, rv, training=True)
        >>> y.mean(0).abs().max() < 1e-6, y.var(0, unbiased=False).sub(1).abs().max() < 1e-4
        (tensor(True), tensor(True))
        >>> torch.allclose(rm, 0.1 * x.mean(0)), torch.allclose(rv, 0.9 + 0.1 * x.var(0))
        (True, True)
    """
    if input.dim() < 2:
        raise ValueError(f"expected input of shape (N, C, *), got {input.dim()}D input")
    if training:
        _verify_batch_size(list(input.shape))
        if eps <= 0.0:
            raise ValueError(f"batch_norm eps must be positive during training, but got {eps}")
        out = _batch_norm_train(input, weight, bias, running_mean, running_var, momentum, eps)
        return cast(Tensor, out)
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
