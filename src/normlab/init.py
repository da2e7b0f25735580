r"""Weight initializers written from their formulas, drop-in for :mod:`torch.nn.init`.

Every function here has the name and signature of its ``torch.nn.init`` twin and, from the same
generator state, returns a tensor that is bit for bit equal to torch's and leaves the generator in
the same state. That is a stronger promise than "same distribution": it needs the same random
primitive (``uniform_`` or ``normal_``), called on the same shape, in the same order, with bounds
computed by the same floating-point expression. Where the formula could be written two ways, the
code uses the one that rounds like torch's, and a comment says so.

The scale rules come from four papers:

- Glorot, X. & Bengio, Y. (2010). *Understanding the difficulty of training deep feedforward
  neural networks.* (Xavier / Glorot initialization)
- He, K., Zhang, X., Ren, S. & Sun, J. (2015). *Delving deep into rectifiers: surpassing
  human-level performance on ImageNet classification.* (Kaiming / He initialization)
- Saxe, A. M., McClelland, J. L. & Ganguli, S. (2013). *Exact solutions to the nonlinear dynamics
  of learning in deep linear neural networks.* (orthogonal initialization)
- Mishkin, D. & Matas, J. (2015). *All you need is a good init.* (LSUV: layer-sequential
  unit-variance initialization, :func:`lsuv_`)
"""

import math
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from torch import nn

__all__ = [
    "calculate_gain",
    "constant_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "lsuv_",
    "lsuv_layers",
    "normal_",
    "ones_",
    "orthogonal_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
]

_NonlinearityType = Literal[
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "sigmoid",
    "tanh",
    "relu",
    "leaky_relu",
    "selu",
]
_FanMode = Literal["fan_in", "fan_out"]

_LINEAR_FNS = (
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "sigmoid",
)
_NONLINEARITIES = [*_LINEAR_FNS, "tanh", "relu", "leaky_relu", "selu"]
_FAN_MODES = ["fan_in", "fan_out"]


def calculate_gain(nonlinearity: _NonlinearityType, param: int | float | None = None) -> float:
    r"""Return the gain that keeps the activation variance steady through ``nonlinearity``.

    .. math::
        \text{gain} = \begin{cases}
            1 & \text{linear, conv*, conv\_transpose*, sigmoid} \\
            5/3 & \text{tanh} \\
            \sqrt{2} & \text{relu} \\
            \sqrt{2 / (1 + \text{negative\_slope}^2)} & \text{leaky\_relu} \\
            3/4 & \text{selu}
        \end{cases}

    Traps: ``param`` is only read for ``leaky_relu`` and must then be an ``int`` or ``float``
    (``True``/``False`` are refused although ``bool`` is a subclass of ``int``); its default
    slope is 0.01, not 0, so ``calculate_gain("leaky_relu")`` is a hair below :math:`\sqrt{2}`.
    For self-normalizing SELU networks use ``"linear"`` (variance :math:`1/n`), not ``"selu"``,
    whose 3/4 is an empirical compromise.

    Args:
        nonlinearity: name of the function as in ``torch.nn.functional``.
        param: negative slope for ``leaky_relu``; ignored otherwise.

    Examples::

        >>> calculate_gain("relu") == math.sqrt(2.0)
        True
        >>> round(calculate_gain("leaky_relu", 0.2), 6)
        1.38675
    """
    if nonlinearity in _LINEAR_FNS:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            negative_slope: float = 0.01
        elif isinstance(param, int | float) and not isinstance(param, bool):
            negative_slope = param
        else:
            raise ValueError(
                f"negative_slope {param!r} is not a number, use an int or float (not a bool)"
            )
        return math.sqrt(2.0 / (1 + negative_slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"nonlinearity {nonlinearity!r} not supported, use one of {_NONLINEARITIES}")


def uniform_(
    tensor: torch.Tensor,
    a: float = 0.0,
    b: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Fill ``tensor`` in place with draws from the uniform distribution on :math:`[a, b)`.

    .. math::
        w \sim \mathcal{U}(a, b)

    Args:
        tensor: an n-dimensional tensor.
        a: lower bound.
        b: upper bound.
        generator: the generator to draw from (default: the global one).

    Examples::

        >>> w = uniform_(torch.empty(3, 5), -0.1, 0.1, generator=torch.Generator().manual_seed(0))
        >>> bool(w.abs().max() <= 0.1)
        True
    """
    with torch.no_grad():
        return tensor.uniform_(a, b, generator=generator)


def normal_(
    tensor: torch.Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Fill ``tensor`` in place with draws from a normal distribution.

    .. math::
        w \sim \mathcal{N}(\text{mean}, \text{std}^2)

    Trap: the second argument is the standard deviation, not the variance.

    Args:
        tensor: an n-dimensional tensor.
        mean: mean of the distribution.
        std: standard deviation of the distribution.
        generator: the generator to draw from (default: the global one).

    Examples::

        >>> normal_(torch.empty(3, 5), std=0.02, generator=torch.Generator().manual_seed(0)).shape
        torch.Size([3, 5])
    """
    with torch.no_grad():
        return tensor.normal_(mean, std, generator=generator)


def _norm_cdf(x: float) -> float:
    return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0


def trunc_normal_(
    tensor: torch.Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Fill ``tensor`` in place with draws from a normal distribution truncated to :math:`[a, b]`.

    .. math::
        w \sim \mathcal{N}(\text{mean}, \text{std}^2) \mid a \le w \le b

    Traps: ``a`` and ``b`` are absolute cut-offs, not multiples of ``std`` (the defaults -2 and 2
    cut at two standard deviations only when ``std=1``). A mean more than two standard deviations
    outside :math:`[a, b]` draws a ``UserWarning``. Torch 2.13 samples by rejection, not by the
    inverse CDF, and so does this function, so that the draws match torch's bit for bit: when the
    interval holds more than 30% of the mass, normal draws outside it are redrawn (a whole tensor
    per round); otherwise uniform proposals on :math:`[a, b]` are accepted with probability
    :math:`\exp(-\tfrac12 z^2) / \exp(-\tfrac12 z_{\text{mode}}^2)`. The number of draws, and so
    the generator state afterwards, depends on the values drawn.

    Args:
        tensor: an n-dimensional tensor.
        mean: mean of the untruncated normal.
        std: standard deviation of the untruncated normal.
        a: lower cut-off.
        b: upper cut-off.
        generator: the generator to draw from (default: the global one).

    Examples::

        >>> w = trunc_normal_(torch.empty(100), std=0.02, a=-0.04, b=0.04,
        ...                   generator=torch.Generator().manual_seed(0))
        >>> bool(w.abs().max() <= 0.04)
        True
    """
    if tensor.is_meta:  # no storage, nothing to draw
        return tensor
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn(
            f"trunc_normal_: mean {mean} is more than 2 std from [{a}, {b}]; "
            "the values drawn may not follow the truncated distribution",
            stacklevel=2,
        )
    with torch.no_grad():
        mass = _norm_cdf((b - mean) / std) - _norm_cdf((a - mean) / std)
        if mass > 0.3:
            # Compare against the bounds as the tensor's dtype stores them.
            lo = torch.tensor(a, dtype=tensor.dtype).item()
            hi = torch.tensor(b, dtype=tensor.dtype).item()
            result = tensor.normal_(mean, std, generator=generator)
            while True:
                outside = (result < lo) | (result > hi)
                if not outside.any():
                    break
                fresh = torch.empty_like(result).normal_(mean, std, generator=generator)
                result = torch.where(outside, fresh, result)
            if result is not tensor:
                tensor.copy_(result)
            return tensor

        # Little mass inside [a, b]: propose uniformly, accept with the normal density
        # relative to its peak inside the interval.
        peak = max(a, min(mean, b))
        log_peak = -0.5 * ((peak - mean) / std) ** 2
        candidates = torch.empty_like(tensor)
        u = torch.empty_like(tensor)

        def log_ratio_(x: torch.Tensor) -> torch.Tensor:
            # in place: log N(x) - log N(peak); same op sequence as torch, so same rounding
            return x.sub_(mean).div_(std).pow_(2).mul_(-0.5).sub_(log_peak)

        tensor.uniform_(a, b, generator=generator)
        pending = u.uniform_(generator=generator).log_().gt(log_ratio_(candidates.copy_(tensor)))
        if not pending.any():
            return tensor
        result = tensor
        while True:  # redraw only where still pending, but always a whole tensor of draws
            candidates.uniform_(a, b, generator=generator)
            result = torch.where(pending, candidates, result)
            rejected = u.uniform_(generator=generator).log_().gt(log_ratio_(candidates))
            pending = torch.where(pending, rejected, pending)
            if not pending.any():
                break
        tensor.copy_(result)
        return tensor


def constant_(tensor: torch.Tensor, val: float) -> torch.Tensor:
    r"""Fill ``tensor`` in place with the value ``val``.

    .. math::
        w = \text{val}

    Trap: every unit of a layer filled this way computes the same thing and gets the same
    gradient, so the symmetry is never broken; use it for biases and norm scales, not weights.

    Args:
        tensor: an n-dimensional tensor.
        val: the value to fill with.

    Examples::

        >>> constant_(torch.empty(2, 3), 0.3).unique().tolist() == [torch.tensor(0.3).item()]
        True
    """
    with torch.no_grad():
        return tensor.fill_(val)


def ones_(tensor: torch.Tensor) -> torch.Tensor:
    r"""Fill ``tensor`` in place with ones.

    .. math::
        w = 1

    Args:
        tensor: an n-dimensional tensor.

    Examples::

        >>> ones_(torch.empty(2, 3)).sum().item()
        6.0
    """
    with torch.no_grad():
        return tensor.fill_(1.0)


def zeros_(tensor: torch.Tensor) -> torch.Tensor:
    r"""Fill ``tensor`` in place with zeros.

    .. math::
        w = 0

    Args:
        tensor: an n-dimensional tensor.

    Examples::

        >>> zeros_(torch.empty(2, 3)).abs().sum().item()
        0.0
    """
    with torch.no_grad():
        return tensor.zero_()


def _calculate_fan_in_and_fan_out(tensor: torch.Tensor) -> tuple[int, int]:
    # weight layout (out, in, *kernel): Linear (out, in), ConvNd (out, in/groups, k1, ..., kN)
    if tensor.dim() < 2:
        raise ValueError(
            "fan_in and fan_out need a tensor with at least 2 dimensions, "
            f"got {tensor.dim()} (shape {tuple(tensor.shape)})"
        )
    receptive_field = 1
    for s in tensor.shape[2:]:
        receptive_field *= s
    fan_in = tensor.size(1) * receptive_field
    fan_out = tensor.size(0) * receptive_field
    return fan_in, fan_out


def _calculate_correct_fan(tensor: torch.Tensor, mode: _FanMode) -> int:
    if mode.lower() not in _FAN_MODES:
        raise ValueError(f"mode {mode!r} not supported, use one of {_FAN_MODES}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode.lower() == "fan_in" else fan_out


def xavier_uniform_(
    tensor: torch.Tensor,
    gain: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Fill ``tensor`` in place with Xavier/Glorot uniform draws (Glorot & Bengio, 2010).

    .. math::
        w \sim \mathcal{U}(-\sqrt{3}\,\sigma, \sqrt{3}\,\sigma), \qquad
        \sigma = \text{gain} \times \sqrt{\frac{2}{\text{fan\_in} + \text{fan\_out}}}

    Traps: the bound is computed as ``sqrt(3) * std``; the textbook
    ``gain * sqrt(6 / (fan_in + fan_out))`` is the same number on paper but can differ in the
    last bit, which would break bit-identity with torch. For a convolution weight both fans
    include the receptive field (the product of the kernel dimensions). A tensor with no rows
    and no columns has ``fan_in + fan_out == 0`` and raises ``ZeroDivisionError``, as in torch.

    Args:
        tensor: a tensor with at least 2 dimensions, laid out ``(out, in, *kernel)``.
        gain: scaling factor, e.g. ``calculate_gain("tanh")``.
        generator: the generator to draw from (default: the global one).

    Examples::

        >>> w = xavier_uniform_(torch.empty(64, 128), generator=torch.Generator().manual_seed(0))
        >>> bool(w.abs().max() <= math.sqrt(6 / (64 + 128)))
        True
    """
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std  # Var(U(-b, b)) = b^2 / 3
    with torch.no_grad():
        return tensor.uniform_(-bound, bound, generator=generator)


def xavier_normal_(
    tensor: torch.Tensor,
    gain: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Fill ``tensor`` in place with Xavier/Glorot normal draws (Glorot & Bengio, 2010).

    .. math::
        w \sim \mathcal{N}(0, \sigma^2), \qquad
        \sigma = \text{gain} \times \sqrt{\frac{2}{\text{fan\_in} + \text{fan\_out}}}

    Trap: the variance averages the forward (``fan_in``) and backward (``fan_out``) constraints,
    so for a non-square layer it satisfies neither exactly.

    Args:
        tensor: a tensor with at least 2 dimensions, laid out ``(out, in, *kernel)``.
        gain: scaling factor.
        generator: the generator to draw from (default: the global one).

    Examples::

        >>> g = torch.Generator().manual_seed(0)
        >>> xavier_normal_(torch.empty(16, 8, 3, 3), generator=g).shape
        torch.Size([16, 8, 3, 3])
    """
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    with torch.no_grad():
        return tensor.normal_(0.0, std, generator=generator)


def _kaiming_std(
    tensor: torch.Tensor, a: float, mode: _FanMode, nonlinearity: _NonlinearityType
) -> float:
    # mode is checked before nonlinearity, as in torch;
    # gain / sqrt(fan), not gain * sqrt(1 / fan): the two can round differently
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    return gain / math.sqrt(fan)


def kaiming_uniform_(
    tensor: torch.Tensor,
    a: float = 0,
    mode: _FanMode = "fan_in",
    nonlinearity: _NonlinearityType = "leaky_relu",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Fill ``tensor`` in place with Kaiming/He uniform draws (He et al., 2015).

    .. math::
        w \sim \mathcal{U}(-\sqrt{3}\,\sigma, \sqrt{3}\,\sigma), \qquad
        \sigma = \frac{\text{gain}}{\sqrt{\text{fan\_mode}}}

    Traps: the default ``nonlinearity="leaky_relu"`` with ``a=0`` gives the ReLU gain
    :math:`\sqrt{2}`; ``a`` is the leaky slope and is read only for ``"leaky_relu"``.
    ``"fan_in"`` keeps the forward activations' variance, ``"fan_out"`` the backward gradients'.
    Fans assume torch's ``(out, in)`` layout (``x @ w.T``); for ``x @ w`` pass ``w.T``.
    A tensor with no elements is left alone with a ``UserWarning``, before any check of its
    dimensions or of ``mode``.

    Args:
        tensor: a tensor with at least 2 dimensions, laid out ``(out, in, *kernel)``.
        a: negative slope of the leaky ReLU that follows the layer.
        mode: ``"fan_in"`` (default) or ``"fan_out"``.
        nonlinearity: name of the function that follows, as in ``torch.nn.functional``.
        generator: the generator to draw from (default: the global one).

    Examples::

        >>> g = torch.Generator().manual_seed(0)
        >>> w = kaiming_uniform_(torch.empty(64, 128), nonlinearity="relu", generator=g)
        >>> bool(w.abs().max() <= math.sqrt(6 / 128))
        True
    """
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    bound = math.sqrt(3.0) * std  # Var(U(-b, b)) = b^2 / 3
    with torch.no_grad():
        return tensor.uniform_(-bound, bound, generator=generator)


def kaiming_normal_(
    tensor: torch.Tensor,
    a: float = 0,
    mode: _FanMode = "fan_in",
    nonlinearity: _NonlinearityType = "leaky_relu",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Fill ``tensor`` in place with Kaiming/He normal draws (He et al., 2015).

    .. math::
        w \sim \mathcal{N}(0, \sigma^2), \qquad \sigma = \frac{\text{gain}}{\sqrt{\text{fan\_mode}}}

    Traps: as for :func:`kaiming_uniform_`: ``a`` is the leaky slope (default gain
    :math:`\sqrt{2}`), the fans assume the ``(out, in)`` layout, and a zero-element tensor is
    returned untouched with a ``UserWarning``.

    Args:
        tensor: a tensor with at least 2 dimensions, laid out ``(out, in, *kernel)``.
        a: negative slope of the leaky ReLU that follows the layer.
        mode: ``"fan_in"`` (default) or ``"fan_out"``.
        nonlinearity: name of the function that follows, as in ``torch.nn.functional``.
        generator: the generator to draw from (default: the global one).

    Examples::

        >>> g = torch.Generator().manual_seed(0)
        >>> w = kaiming_normal_(torch.empty(256, 512), nonlinearity="relu", generator=g)
        >>> abs(w.std().item() - math.sqrt(2 / 512)) < 0.002
        True
    """
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    std = _kaiming_std(tensor, a, mode, nonlinearity)
    with torch.no_grad():
        return tensor.normal_(0, std, generator=generator)


def orthogonal_(
    tensor: torch.Tensor,
    gain: float = 1,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Fill ``tensor`` in place with a (semi-)orthogonal matrix (Saxe et al., 2013).

    .. math::
        W = \text{gain} \times Q \,\operatorname{diag}(\operatorname{sign} R_{ii}),
        \qquad QR = A,\; A_{ij} \sim \mathcal{N}(0, 1)

    Traps: dimensions after the first are flattened, so the matrix is
    ``(rows, numel // rows)``; when it is wide (rows < cols) the QR is taken of its transpose
    and the result transposed back, so the *rows* are orthonormal. Multiplying by the signs of
    :math:`\operatorname{diag}(R)` makes :math:`Q` uniform (Haar) rather than biased by the QR
    convention. A tensor with no elements is returned untouched, silently.

    Args:
        tensor: a tensor with at least 2 dimensions.
        gain: scaling factor.
        generator: the generator to draw from (default: the global one).

    Examples::

        >>> w = orthogonal_(torch.empty(3, 5), generator=torch.Generator().manual_seed(0))
        >>> torch.allclose(w @ w.T, torch.eye(3), atol=1e-6)
        True
    """
    if tensor.dim() < 2:
        raise ValueError(
            f"orthogonal_ needs a tensor with at least 2 dimensions, got {tensor.dim()} "
            f"(shape {tuple(tensor.shape)})"
        )
    if tensor.numel() == 0 or tensor.is_meta:
        return tensor
    rows = tensor.size(0)
    cols = tensor.numel() // rows
    with torch.no_grad():
        flat = tensor.new_empty((rows, cols)).normal_(0, 1, generator=generator)  # (rows, cols)
        if rows < cols:
            flat.t_()  # (cols, rows): QR of the tall side
        q, r = torch.linalg.qr(flat)  # q (m, k), r (k, k) with k = min(rows, cols)
        q *= torch.diag(r, 0).sign()  # flip columns so diag(R) > 0: Haar-uniform Q
        if rows < cols:
            q.t_()
        tensor.view_as(q).copy_(q)
        tensor.mul_(gain)
    return tensor


WEIGHT_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)
"""The layers whose weight has a fan-in and a fan-out: the ones an initializer scales."""
_LSUVLayer = nn.Linear | nn.Conv1d | nn.Conv2d | nn.Conv3d


@dataclass
class LSUVResult:
    """What :func:`lsuv_` did to each layer it rescaled, in forward order."""

    layers: list[str]  # (L,) qualified module names
    iterations: list[int]  # (L,) rescalings each layer took
    variances: list[float]  # (L,) output variance measured after the last rescaling
    tol: float

    @property
    def converged(self) -> list[bool]:
        """Whether each layer's output variance ended within ``tol`` of 1."""
        return [abs(v - 1.0) < self.tol for v in self.variances]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _StopForward(Exception):
    """Raised from a hook once the layer of interest has run: the rest of the model is skipped."""


def _check_lsuv_args(tol: float, max_iter: int) -> None:
    if isinstance(tol, bool) or not isinstance(tol, int | float) or not math.isfinite(tol):
        raise ValueError(f"tol {tol!r} is not allowed, use a finite number > 0")
    if tol <= 0:
        raise ValueError(f"tol {tol!r} is not allowed, use a finite number > 0")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter {max_iter!r} is not allowed, use an integer >= 1")


def _forward_order(
    model: nn.Module, batch: torch.Tensor, layers: list[tuple[str, _LSUVLayer]]
) -> list[tuple[str, _LSUVLayer]]:
    # Registration order need not be call order (a head registered first, a shared layer):
    # one forward pass with hooks tells the truth. Layers that never run are left out.
    called: list[int] = []
    handles = []
    for i, (_, layer) in enumerate(layers):

        def record(_m: nn.Module, _inp: Any, _out: Any, i: int = i) -> None:
            if i not in called:
                called.append(i)

        handles.append(layer.register_forward_hook(record))
    try:
        model(batch)
    finally:
        for h in handles:
            h.remove()
    return [layers[i] for i in called]


def _output_variance(model: nn.Module, batch: torch.Tensor, layer: nn.Module) -> float:
    seen: list[torch.Tensor] = []

    def grab(_m: nn.Module, _inp: Any, out: torch.Tensor) -> None:
        seen.append(out)
        raise _StopForward

    handle = layer.register_forward_hook(grab)
    try:
        model(batch)
    except _StopForward:
        pass
    finally:
        handle.remove()
    return float(seen[0].var(unbiased=False))  # over every element: batch, units, positions


def lsuv_(
    model: nn.Module,
    batch: torch.Tensor,
    tol: float = 0.1,
    max_iter: int = 10,
    generator: torch.Generator | None = None,
) -> LSUVResult:
    r"""Initialize ``model`` in place by layer-sequential unit variance (Mishkin & Matas, 2015).

    Every ``Linear`` and ``Conv1d/2d/3d`` weight is first filled by :func:`orthogonal_` and its
    bias zeroed; then, layer by layer in the order the forward pass calls them, the weight is
    divided by the standard deviation of the layer's output on ``batch`` until that variance is 1:

    .. math::
        W_l \leftarrow \frac{W_l}{\sqrt{\operatorname{Var}(W_l * x_l)}}
        \quad \text{while} \quad \lvert \operatorname{Var}(W_l * x_l) - 1 \rvert \ge \text{tol}

    The variance is the biased one over every element of the output (batch, units, positions).
    Each layer is fixed before the next is measured, so a later layer sees its final input.

    Traps: the zeroed biases are part of the method (a far-negative bias would otherwise keep a
    ReLU dead whatever the weight's scale). The model runs in the mode it is in (a BatchNorm in
    training mode normalizes with batch statistics); its buffers (BatchNorm running statistics)
    are restored afterwards, so only weights and biases change. Layers the forward pass never
    calls as modules (``nn.MultiheadAttention.out_proj``) get the orthogonal weight but are not
    rescaled. A layer whose output has variance 0 on ``batch`` cannot be rescaled.

    Args:
        model: the network; modified in place.
        batch: an input batch ``model`` accepts; use real data where you have it.
        tol: how close to 1 each output variance must get; a number > 0.
        max_iter: the most rescalings per layer; an integer >= 1. A layer that is still off
            after them keeps its last scale (see :attr:`LSUVResult.converged`).
        generator: the generator the orthogonal pre-initialization draws from.

    Returns:
        :class:`LSUVResult` with each rescaled layer's name, iterations and final variance.

    Examples::

        >>> g = torch.Generator().manual_seed(0)
        >>> net = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        >>> result = lsuv_(net, torch.randn(256, 32, generator=g), generator=g)
        >>> result.layers
        ['0', '2']
        >>> all(result.converged)
        True
    """
    names, iterations, variances = [], [], []
    for name, steps, var in lsuv_layers(model, batch, tol, max_iter, generator):
        names.append(name)
        iterations.append(steps)
        variances.append(var)
    return LSUVResult(layers=names, iterations=iterations, variances=variances, tol=tol)


def lsuv_layers(
    model: nn.Module,
    batch: torch.Tensor,
    tol: float = 0.1,
    max_iter: int = 10,
    generator: torch.Generator | None = None,
) -> Iterator[tuple[str, int, float]]:
    r"""Layer-sequential unit variance layer by layer: yield each layer once it is rescaled.

    Once a layer is rescaled it yields ``(name, rescalings, output variance)``, in forward
    order; :func:`lsuv_` (see there for the method and its arguments) is this generator run to
    its end. The checks run at the first ``next``. The buffers are restored when the generator
    ends or is closed; a caller that stops early leaves the layers not yet reached orthogonal
    and unscaled.

    Examples::

        >>> g = torch.Generator().manual_seed(0)
        >>> net = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh())
        >>> [name for name, _, _ in lsuv_layers(net, torch.randn(256, 32, generator=g))]
        ['0', '2']
    """
    _check_lsuv_args(tol, max_iter)
    layers: list[tuple[str, _LSUVLayer]] = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear | nn.Conv1d | nn.Conv2d | nn.Conv3d)  # no module constant:
    ]  # a script that pastes this function (LSUV_CODE) finds only what it spells out
    if not layers:
        raise ValueError(
            "model has no Linear or Conv1d/2d/3d layer for lsuv_ to initialize, "
            "use a model that contains at least one"
        )
    buffers = {name: b.clone() for name, b in model.named_buffers()}
    try:
        with torch.no_grad():
            for _, layer in layers:
                orthogonal_(layer.weight, generator=generator)
                if layer.bias is not None:
                    layer.bias.zero_()
            order = _forward_order(model, batch, layers)
        for name, layer in order:
            steps = 0
            with torch.no_grad():  # not around the yield: the caller's grad mode is its own
                var = _output_variance(model, batch, layer)
                while True:
                    if not (math.isfinite(var) and var > 0):
                        raise ValueError(
                            f"batch: layer {name!r} puts out variance {var} on it, which lsuv_ "
                            "cannot rescale to 1; use a batch that gives every layer a varying, "
                            "finite input"
                        )
                    if abs(var - 1.0) < tol or steps == max_iter:
                        break
                    layer.weight.div_(math.sqrt(var))
                    steps += 1
                    var = _output_variance(model, batch, layer)
            yield name, steps, var
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in buffers:
                    b.copy_(buffers[name])


LSUV_CODE: tuple[Any, ...] = (
    orthogonal_,
    LSUVResult,
    _StopForward,
    _check_lsuv_args,
    _forward_order,
    _output_variance,
    lsuv_,
    lsuv_layers,
)
"""What a script pastes to run :func:`lsuv_` without normlab, in the order it defines them
(an experiment that calls ``lsuv_`` lists these in its ``code``)."""
