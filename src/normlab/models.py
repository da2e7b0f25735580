"""Building blocks the experiments share, in plain PyTorch.

Every class and function here is plain ``torch`` (calling each other and, for an activation by
name, :func:`normlab.theory.activation_pair`, pasted with them), so that an experiment's rendered
script (``normlab run NAME --code``) can carry its source: an experiment that uses one lists it in
its ``code``, with every block it calls (a pasted function finds no module constant,
so each one spells out what it needs). Experiments import this module and the ground floor, never
each other: editing a block here changes every experiment that lists it, and only those.

- the MLP stacks: :func:`block` (Linear -> [norm] -> activation; :data:`NORMS` names its
  norms), :class:`MLP` (the notebook's DeepMLP: blocks, then a Linear to the logits) and
  :class:`TinyMLP` (one hidden layer);
- initialization by name: :func:`xavier_uniform`, :func:`he_normal`, :func:`apply_init`;
- :func:`histogram` of a tensor's finite values;
- :func:`log_spaced`, the one log-spaced grid of numbers (``bn-lr-sweep``'s learning rates and
  a sweep's ``A:B:N:log`` range);
- transformer-style residual blocks (the residual-stream experiment);
- the mean-field stacks: :func:`input_pair`, :func:`draw_stack` and :func:`propagate` (two
  inputs through many cells' stacks at once, measured layer by layer) and
  :class:`GaussianStack` (one such stack to train);
- :data:`LOSS_CLIP`, the ceiling the training experiments draw a diverging loss at.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from normlab.theory import activation_pair

# -- transformer-style residual blocks (the residual-stream experiment) ------------------------
#
# A residual stream x_{l+1} = x_l + s * f(x_l) with the normalization in one of six places
# (Xiong et al. 2020, *On layer normalization in the Transformer architecture*; Kim et al.
# 2025, *Peri-LN*; Zhu et al. 2025, *Transformers without normalization*; Bachlechner et al.
# 2020, *ReZero is all you need*). Every weight is drawn N(0, 1/fan_in) and no layer has a bias,
# so that a branch's output second moment is a fixed multiple of its input's at initialization
# (0.5 for Linear -> ReLU -> Linear), as normlab.theory.residual_stream assumes.


def lecun_linear(fan_in: int, fan_out: int) -> nn.Linear:
    r"""A bias-free ``nn.Linear`` with weights :math:`\mathcal{N}(0, 1/\mathrm{fan\_in})`
    (LeCun): :math:`\mathbb{E}|Wx|^2/\mathrm{fan\_out} = \mathbb{E}|x|^2/\mathrm{fan\_in}`.

    >>> lecun_linear(4, 3).weight.shape, lecun_linear(4, 3).bias is None
    (torch.Size([3, 4]), True)
    """
    layer = nn.Linear(fan_in, fan_out, bias=False)
    nn.init.normal_(layer.weight, mean=0.0, std=fan_in**-0.5)  # Var(w) = 1 / fan_in
    return layer


class DyT(nn.Module):
    r"""Dynamic Tanh (Zhu, Chen, He, LeCun & Liu 2025), an element-wise stand-in for LayerNorm.

    .. math::
        \mathrm{DyT}(x) = \gamma \odot \tanh(\alpha x) + \beta

    :math:`\alpha` is one learned scalar (``alpha0`` at initialization, the paper's 0.5),
    :math:`\gamma` and :math:`\beta` are learned per feature (1 and 0 at initialization). DyT
    computes no statistic of its input: it squashes large values instead of dividing by a
    measured scale, so a stream of second moment :math:`m` comes out with second moment
    :math:`\mathbb{E}[\tanh(\alpha\sqrt{m}\,z)^2] < 1`, not 1 as after LayerNorm.

    Args:
        dim: size of the last dimension (the features).
        alpha0: the initial :math:`\alpha`. Default: 0.5

    Shape:
        - Input: :math:`(*, \mathrm{dim})`
        - Output: same shape as the input

    Examples::

        >>> dyt = DyT(3)
        >>> dyt(torch.tensor([0.0, 2.0, -4.0]))
        tensor([ 0.0000,  0.7616, -0.9640], grad_fn=<AddBackward0>)
    """

    def __init__(self, dim: int, alpha0: float = 0.5) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(alpha0))  # one scalar for the whole layer
        self.weight = nn.Parameter(torch.ones(dim))  # gamma, (dim,)
        self.bias = nn.Parameter(torch.zeros(dim))  # beta, (dim,)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * torch.tanh(self.alpha * x) + self.bias  # (*, dim) -> (*, dim)


class FeedForward(nn.Module):
    r"""The transformer's MLP branch: Linear -> ReLU -> Linear, no biases, weights
    :math:`\mathcal{N}(0, 1/\mathrm{fan\_in})`.

    Its branch gain, the output's second moment per unit of the input's, is 1/2 at
    initialization: the first Linear keeps the second moment, ReLU zeroes half of a symmetric
    input (:math:`\mathbb{E}[\mathrm{relu}(u)^2] = \mathbb{E}[u^2]/2`), the second keeps it.

    Args:
        d_model: features of the stream.
        d_hidden: features of the hidden layer (a transformer uses ``4 * d_model``).

    Shape:
        - Input: :math:`(N, T, d_\mathrm{model})`; output: the same

    Examples::

        >>> _ = torch.manual_seed(0)
        >>> x = torch.randn(64, 32, 128)
        >>> y = FeedForward(128, 512)(x)
        >>> y.shape, round((y.pow(2).mean() / x.pow(2).mean()).item(), 1)
        (torch.Size([64, 32, 128]), 0.5)
    """

    def __init__(self, d_model: int, d_hidden: int) -> None:
        super().__init__()
        self.up = lecun_linear(d_model, d_hidden)
        self.down = lecun_linear(d_hidden, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.up(x))  # (N, T, d) -> (N, T, d_hidden)
        out: torch.Tensor = self.down(hidden)  # (N, T, d_hidden) -> (N, T, d)
        return out


class SelfAttention(nn.Module):
    r"""Single-head self-attention over all tokens (no mask), no biases, weights
    :math:`\mathcal{N}(0, 1/\mathrm{fan\_in})`.

    .. math::
        \mathrm{Attn}(X) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d}}\right) V W_O,
        \qquad Q = X W_Q,\; K = X W_K,\; V = X W_V

    Every output token is a convex combination of value vectors: stacked without skip
    connections, attention averages the tokens into one another and the token matrix collapses
    to rank one doubly exponentially fast in depth (Dong, Cordonnier & Loukas 2021).

    Args:
        d_model: features of the stream (and of queries, keys and values).

    Shape:
        - Input: :math:`(N, T, d_\mathrm{model})`; output: the same

    Examples::

        >>> SelfAttention(16)(torch.randn(2, 5, 16)).shape
        torch.Size([2, 5, 16])
    """

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.query = lecun_linear(d_model, d_model)
        self.key = lecun_linear(d_model, d_model)
        self.value = lecun_linear(d_model, d_model)
        self.out = lecun_linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.query(x), self.key(x), self.value(x)  # (N, T, d) each
        scores = q @ k.transpose(-2, -1) / x.shape[-1] ** 0.5  # (N, T, d) @ (N, d, T) -> (N, T, T)
        weights = torch.softmax(scores, dim=-1)  # (N, T, T): each row sums to 1
        out: torch.Tensor = self.out(weights @ v)  # (N, T, T) @ (N, T, d) -> (N, T, d)
        return out


class ResidualBranch(nn.Module):
    r"""One residual connection around ``branch``, with the normalization where ``placement``
    puts it (:math:`s` = ``branch_scale``, :math:`f` = ``branch``):

    - ``"post"`` (the original Transformer): :math:`x \leftarrow \mathrm{LN}(x + s f(x))`
    - ``"pre"`` (GPT-2, Xiong et al. 2020): :math:`x \leftarrow x + s f(\mathrm{LN}(x))`
    - ``"peri"`` (Kim et al. 2025): :math:`x \leftarrow x + s\,\mathrm{LN}(f(\mathrm{LN}(x)))`
    - ``"dyt"`` (Zhu et al. 2025): pre-LN with :class:`DyT` for LN:
      :math:`x \leftarrow x + s f(\mathrm{DyT}(x))`
    - ``"none"``: :math:`x \leftarrow x + s f(x)` (use :math:`s = 1/\sqrt{L}`, Hayou et al.)
    - ``"rezero"`` (Bachlechner et al. 2020): :math:`x \leftarrow x + \alpha f(x)`,
      :math:`\alpha` learned and 0 at initialization (``branch_scale`` is not used)

    The LayerNorms are torch's ``nn.LayerNorm`` (:math:`\gamma = 1, \beta = 0` at
    initialization).

    Args:
        branch: the module :math:`f` (attention or MLP), shape-preserving.
        d_model: features of the stream.
        placement: one of ``"post"``, ``"pre"``, ``"peri"``, ``"dyt"``, ``"none"``,
            ``"rezero"``.
        branch_scale: the constant :math:`s` multiplying the branch. Default: 1.0

    Examples::

        >>> block = ResidualBranch(FeedForward(8, 32), 8, "rezero")
        >>> x = torch.randn(2, 3, 8)
        >>> torch.equal(block(x), x)  # ReZero starts as the identity
        True
    """

    def __init__(
        self, branch: nn.Module, d_model: int, placement: str, branch_scale: float = 1.0
    ) -> None:
        super().__init__()
        valid = ("post", "pre", "peri", "dyt", "none", "rezero")
        if placement not in valid:
            raise ValueError(f"placement {placement!r} not supported, use one of {list(valid)}")
        self.branch = branch
        self.branch_scale = branch_scale
        self.norm_in: nn.Module = nn.Identity()  # before the branch: pre, peri, dyt
        self.norm_out: nn.Module = nn.Identity()  # on the branch's output: peri
        self.norm_after: nn.Module = nn.Identity()  # on the sum: post
        if placement in ("pre", "peri"):
            self.norm_in = nn.LayerNorm(d_model)
        if placement == "dyt":
            self.norm_in = DyT(d_model)
        if placement == "peri":
            self.norm_out = nn.LayerNorm(d_model)
        if placement == "post":
            self.norm_after = nn.LayerNorm(d_model)
        self.gate = nn.Parameter(torch.zeros(())) if placement == "rezero" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm_out(self.branch(self.norm_in(x)))  # (N, T, d)
        h = self.gate * h if self.gate is not None else self.branch_scale * h
        out: torch.Tensor = self.norm_after(x + h)  # (N, T, d)
        return out


class TransformerBlock(nn.Module):
    r"""A transformer-style block: an attention branch (unless ``attention=False``) then an MLP
    branch, each a :class:`ResidualBranch` with the same ``placement`` and ``branch_scale``.

    GPT-2 (Radford et al. 2019) scales the output projection of every branch by
    :math:`1/\sqrt{2L}` at initialization, :math:`2L` the number of branches of :math:`L`
    blocks; at initialization that is ``branch_scale = (2 * L) ** -0.5``.

    Args:
        d_model: features of the stream.
        placement: where the normalization sits (see :class:`ResidualBranch`).
        attention: whether the block has an attention branch. Default: ``True``
        branch_scale: the constant multiplying every branch. Default: 1.0
        d_hidden: features of the MLP's hidden layer; ``None`` means ``4 * d_model``.

    Shape:
        - Input: :math:`(N, T, d_\mathrm{model})`; output: the same

    Examples::

        >>> block = TransformerBlock(16, "pre")
        >>> block(torch.randn(2, 5, 16)).shape, len(block.branches)
        (torch.Size([2, 5, 16]), 2)
    """

    def __init__(
        self,
        d_model: int,
        placement: str,
        attention: bool = True,
        branch_scale: float = 1.0,
        d_hidden: int | None = None,
    ) -> None:
        super().__init__()
        hidden = d_hidden if d_hidden is not None else 4 * d_model
        branches: list[nn.Module] = [SelfAttention(d_model)] if attention else []
        branches.append(FeedForward(d_model, hidden))
        self.branches = nn.ModuleList(
            ResidualBranch(f, d_model, placement, branch_scale) for f in branches
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for branch in self.branches:
            x = branch(x)  # (N, T, d) -> (N, T, d)
        return x


# -- MLP stacks (the lessons' deep nets) -------------------------------------------------------
#
# The seed notebook's nets: a stack of blocks Linear -> [normalization] -> activation at torch's
# default Linear init, the normalization before the activation as Ioffe & Szegedy (2015) place
# BatchNorm. Every random draw is a Linear's, in the order the layers are built, so a net built
# after torch.manual_seed(seed) starts from the same weights with and without a norm.


NORMS = ("none", "batch", "layer", "rms")
"""The normalizations a block can hold, by name (see :func:`block`): the choices every stack
experiment and the training view declare."""


def block(
    d_in: int, d_out: int, norm: str = "none", activation: str = "relu", bias: bool = True
) -> nn.Sequential:
    """One block ``Linear(d_in, d_out) -> [normalization] -> activation``.

    Args:
        d_in: features in.
        d_out: features out (and of the normalization).
        norm: ``"none"``, ``"batch"`` (BatchNorm1d), ``"layer"`` (LayerNorm) or ``"rms"``
            (RMSNorm). Default: ``"none"``
        activation: ``"relu"``, ``"tanh"``, ``"sigmoid"``, ``"gelu"`` or ``"linear"`` (none).
            Default: ``"relu"``
        bias: whether the Linear has a bias. Default: ``True``

    Examples::

        >>> [type(m).__name__ for m in block(2, 4, "batch")]
        ['Linear', 'BatchNorm1d', 'ReLU']
        >>> [type(m).__name__ for m in block(4, 4, "layer", "tanh")]
        ['Linear', 'LayerNorm', 'Tanh']
    """
    layers: list[nn.Module] = [nn.Linear(d_in, d_out, bias=bias)]
    if norm == "batch":
        layers.append(nn.BatchNorm1d(d_out))
    elif norm == "layer":
        layers.append(nn.LayerNorm(d_out))
    elif norm == "rms":
        layers.append(nn.RMSNorm(d_out))
    elif norm != "none":
        valid = ["none", "batch", "layer", "rms"]  # spelled out: a pasted block sees no NORMS
        raise ValueError(f"norm {norm!r} not supported, use one of {valid}")
    activations = {
        "relu": nn.ReLU,
        "tanh": nn.Tanh,
        "sigmoid": nn.Sigmoid,
        "gelu": nn.GELU,
        "linear": nn.Identity,
    }
    layers.append(activations[activation]())
    return nn.Sequential(*layers)


class MLP(nn.Sequential):
    """``hidden_layers`` blocks ``Linear -> [norm] -> activation`` of ``width`` units, then a
    ``Linear`` to ``d_out`` logits: the notebook's DeepMLP, a two-moons classifier by default.

    It is an ``nn.Sequential``: ``*blocks, head = net`` unpacks it, so that a caller can run
    the blocks one by one and measure (or differentiate with respect to) their outputs.

    Args:
        width: units of every hidden block.
        hidden_layers: number of blocks.
        norm: the normalization in every block (see :func:`block`). Default: ``"none"``
        activation: the nonlinearity of every block. Default: ``"relu"``
        d_in: input features. Default: 2
        d_out: output logits. Default: 1

    Examples::

        >>> net = MLP(8, 3, norm="batch")
        >>> net(torch.randn(5, 2)).shape, [type(m).__name__ for m in net[0]]
        (torch.Size([5, 1]), ['Linear', 'BatchNorm1d', 'ReLU'])
    """

    def __init__(
        self,
        width: int,
        hidden_layers: int,
        norm: str = "none",
        activation: str = "relu",
        d_in: int = 2,
        d_out: int = 1,
    ) -> None:
        dims = [d_in] + [width] * hidden_layers
        blocks = [block(dims[k], width, norm, activation) for k in range(hidden_layers)]
        super().__init__(*blocks, nn.Linear(dims[-1], d_out))


class TinyMLP(nn.Module):
    """One hidden ReLU layer, then a linear output (2 -> ``hidden`` -> 1): small enough to watch
    every unit (``fc1.weight[j]`` holds hidden unit ``j``'s incoming weights).

    Examples::

        >>> TinyMLP(6)(torch.randn(4, 2)).shape
        torch.Size([4, 1])
    """

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(2, hidden)
        self.fc2 = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc2(torch.relu(self.fc1(x)))  # (N, 2) -> (N, hidden) -> (N, 1)
        return out


# -- the mean-field stacks (edge-of-chaos, chaos-cell) ------------------------------------------
#
# The stacks of the mean-field picture (Poole et al. 2016; Schoenholz et al. 2017): layers
# h^l = W^l phi(h^{l-1}) + b^l with W^l ~ N(0, sigma_w2 / n) and b^l ~ N(0, sigma_b2). Every
# weight is a fixed standard normal draw times the cell's scale, so that cells drawn from one
# seed share their draws (common random numbers) and differ by their variances alone.


def input_pair(width: int, q0: float, c0: float) -> torch.Tensor:
    """Two inputs ``(2, n)`` of length |x|^2 / n = q0 and correlation c0, exactly."""
    u, v = torch.randn(2, width)  # (n,), (n,)
    v = v - (v @ u) / (u @ u) * u  # orthogonal to u
    u, v = u / u.norm(), v / v.norm()  # unit vectors
    return torch.stack([u, c0 * u + math.sqrt(1.0 - c0**2) * v]) * math.sqrt(width * q0)


def draw_stack(depth: int, width: int, device: str) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The standard normal draws every cell shares: per layer Z (n, n) and beta (n,)."""
    return [
        (torch.randn(width, width).to(device), torch.randn(width).to(device)) for _ in range(depth)
    ]


def propagate(
    activation: str,
    stack: list[tuple[torch.Tensor, torch.Tensor]],
    x: torch.Tensor,
    sigma_w2: torch.Tensor,
    sigma_b2: torch.Tensor,
) -> dict[str, torch.Tensor]:
    """Both inputs through the stack of every cell at once.

    ``sigma_w2``, ``sigma_b2``: ``(cells,)``. Returns, per cell and layer, ``(cells, depth)``:
    ``q`` (mean squared pre-activation of the two inputs), ``c`` (their correlation) and
    ``growth``, the mean over every direction of |J delta|^2 / |delta|^2 with J = W diag(phi'(h))
    the layer's Jacobian: |J|_F^2 / n = sigma_w2 * mean_j phi'(h_j)^2 |Z[:, j]|^2 / n (the mean
    over both inputs).
    """
    phi, dphi = activation_pair(activation)
    cells, n = sigma_w2.shape[0], x.shape[1]
    w_scale = (sigma_w2 / n).sqrt().view(cells, 1, 1)  # W = sqrt(sigma_w2 / n) Z
    b_scale = sigma_b2.sqrt().view(cells, 1, 1)  # b = sqrt(sigma_b2) beta
    h = x.expand(cells, 2, n)  # (cells, 2, n): the inputs are layer 0
    q, c, growth = [], [], []
    for z, beta in stack:
        columns = (z**2).mean(0)  # (n,): |Z[:, j]|^2 / n, near 1
        gain = (dphi(h) ** 2 * columns).mean(-1)  # (cells, 2, n) -> (cells, 2)
        growth.append(sigma_w2 * gain.mean(1))  # (cells,)
        h = w_scale * (phi(h) @ z.t()) + b_scale * beta  # (cells, 2, n) @ (n, n): every cell
        q.append((h**2).mean((1, 2)))  # (cells, 2, n) -> (cells,)
        h1, h2 = h[:, 0], h[:, 1]  # (cells, n)
        c.append((h1 * h2).sum(-1) / ((h1**2).sum(-1) * (h2**2).sum(-1)).sqrt())  # (cells,)
    return {"q": torch.stack(q, 1), "c": torch.stack(c, 1), "growth": torch.stack(growth, 1)}


class GaussianStack(nn.Module):
    """A deep stack to train: ``in_features`` -> ``width`` (``depth`` layers, the activation
    after each) -> 1 logit, every weight drawn N(0, sigma_w2 / fan_in) and every bias
    N(0, sigma_b2), each as a standard normal draw times its scale (two stacks drawn from one
    seed share the draws and differ by their variances alone).

    Examples::

        >>> GaussianStack("tanh", 3, 8, 1.5, 0.05)(torch.randn(4, 2)).shape
        torch.Size([4, 1])
    """

    def __init__(
        self,
        activation: str,
        depth: int,
        width: int,
        sigma_w2: float,
        sigma_b2: float,
        in_features: int = 2,
    ) -> None:
        super().__init__()
        self.phi, _ = activation_pair(activation)
        fan_ins, fan_outs = [in_features] + [width] * depth, [width] * depth + [1]
        self.layers = nn.ModuleList()
        for fan_in, fan_out in zip(fan_ins, fan_outs, strict=True):
            layer = nn.Linear(fan_in, fan_out)
            with torch.no_grad():  # W = sqrt(sigma_w2 / fan_in) Z, b = sqrt(sigma_b2) beta
                layer.weight.copy_(torch.randn(fan_out, fan_in) * math.sqrt(sigma_w2 / fan_in))
                layer.bias.copy_(torch.randn(fan_out) * math.sqrt(sigma_b2))
            self.layers.append(layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = self.phi(layer(x))  # (N, fan_in) -> (N, width)
        out: torch.Tensor = self.layers[-1](x)  # (N, width) -> (N, 1)
        return out


# -- initialization by name --------------------------------------------------------------------


def xavier_uniform(fan_in: int, fan_out: int) -> torch.Tensor:
    """Xavier/Glorot uniform: w ~ U(-a, a) with a = sqrt(6 / (fan_in + fan_out)).

    Glorot & Bengio (2010): the variance :math:`a^2/3 = 2/(n_{in} + n_{out})` keeps a linear
    (or tanh near 0) layer's forward and backward scale on average.
    """
    a: float = (6.0 / (fan_in + fan_out)) ** 0.5
    return (torch.rand(fan_out, fan_in) * 2.0 - 1.0) * a  # (out, in), like nn.Linear's weight


def he_normal(fan_in: int, fan_out: int) -> torch.Tensor:
    """He/Kaiming normal for ReLU: w ~ N(0, 2 / fan_in).

    He et al. (2015): the factor 2 makes up for the half of a symmetric input that ReLU zeroes.
    """
    std: float = (2.0 / fan_in) ** 0.5
    return torch.randn(fan_out, fan_in) * std  # (out, in)


def apply_init(net: nn.Module, method: str) -> None:
    """Set every Linear weight of ``net`` by ``method``, every bias to 0.

    ``method`` is ``"zeros"``, ``"small"`` (N(0, 0.02^2)), ``"large"`` (N(0, 0.30^2)),
    ``"xavier"`` (:func:`xavier_uniform`) or ``"he"`` (:func:`he_normal`). The weights are drawn
    layer by layer in the order ``net.modules()`` lists them.
    """
    methods = ("zeros", "small", "large", "xavier", "he")
    if method not in methods:
        raise ValueError(f"method {method!r} not supported, use one of {list(methods)}")
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.Linear):
                fan_in, fan_out = m.in_features, m.out_features
                if method == "zeros":
                    m.weight.zero_()
                elif method == "small":
                    m.weight.normal_(0.0, 0.02)
                elif method == "large":
                    m.weight.normal_(0.0, 0.30)
                elif method == "xavier":
                    m.weight.copy_(xavier_uniform(fan_in, fan_out))
                elif method == "he":
                    m.weight.copy_(he_normal(fan_in, fan_out))
                m.bias.zero_()


# -- the histogram -----------------------------------------------------------------------------


def histogram(values: torch.Tensor, bins: int) -> dict[str, list[float]]:
    """Counts of the finite ``values`` in ``bins`` equal bins spanning their range.

    Returns ``{"counts": (bins,), "edges": (bins + 1,)}`` as lists. A constant tensor (a
    collapsed layer) is counted in one unit-wide range around its value; one with no finite
    value counts nothing.

    Examples::

        >>> histogram(torch.tensor([1.0, 2.0, float("inf"), float("nan")]), 2)["counts"]
        [1.0, 1.0]
    """
    finite = values[torch.isfinite(values)]
    lo, hi = (finite.min().item(), finite.max().item()) if finite.numel() else (0.0, 0.0)
    if hi <= lo:  # every value equal (a collapsed layer): one unit-wide range around it
        lo, hi = lo - 0.5, hi + 0.5
    counts = torch.histc(finite, bins=bins, min=lo, max=hi)
    return {"counts": counts.tolist(), "edges": torch.linspace(lo, hi, bins + 1).tolist()}


# -- a log-spaced grid -------------------------------------------------------------------------


def log_spaced(low: float, high: float, n: int) -> list[float]:
    r"""``n`` numbers from ``low`` to ``high``, both included, evenly spaced on a log scale.

    .. math::
        x_i = \exp\Big(\ln a + (\ln b - \ln a)\,\frac{i}{n - 1}\Big),
        \qquad i = 0, \dots, n - 1

    each rounded to 12 significant digits: ``math.exp(math.log(3.0))`` is not exactly 3.0, and
    rounded, the ends are what was asked for and the points are the same floats whatever the
    last bit of a machine's ``exp``. Python floats rather than ``torch.logspace``, which
    computes in float32 (0.1 comes out as 0.10000000149). ``bn-lr-sweep``'s learning rates and
    a sweep's ``A:B:N:log`` range (``normlab sweep bn-lr --grid lr=0.1:3.0:12:log``) are both
    this function's answer, so the two train at the same rates.

    Examples::

        >>> log_spaced(0.1, 10.0, 3)
        [0.1, 1.0, 10.0]
        >>> log_spaced(0.1, 3.0, 12)[1]
        0.136233448594
    """
    if low <= 0 or high <= 0 or n < 2:
        raise ValueError(f"log_spaced needs low > 0, high > 0 and n >= 2, got {low}, {high}, {n}")
    a, b = math.log(low), math.log(high)
    points = [math.exp(a + (b - a) * i / (n - 1)) for i in range(n)]  # (n,): a, ..., b in ln
    return [float(f"{x:.12g}") for x in points]


# -- constants the experiments share -----------------------------------------------------------

LOSS_CLIP = 5.0
"""A diverging training loss is drawn at this ceiling, as the seed's ``np.clip(losses, 0, 5)``."""


# -- printing a result's tables -----------------------------------------------------------------


def fmt(x: float | None, digits: int = 4) -> str:
    """``x`` with ``digits`` decimals, as the seeds print it: no ``-0.0000``; ``-`` for a value
    that is missing or not finite (a diverged run's loss).

    Examples::

        >>> fmt(-0.00001), fmt(float("nan")), fmt(0.68764)
        ('0.0000', '-', '0.6876')
    """
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return "-"
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def fmt_as(x: float | None, spec: str) -> str:
    """``x`` in a format ``spec`` (``".4g"``, ``".2e"``); ``-`` where :func:`fmt` writes it.

    Examples::

        >>> fmt_as(1234567.0, ".4g"), fmt_as(0.000123, ".2e"), fmt_as(None, ".4g")
        ('1.235e+06', '1.23e-04', '-')
    """
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return "-"
    return format(x, spec)


def print_tables(tables: list[dict[str, Any]]) -> None:
    """Print tables of formatted cells: each one's title, its columns aligned, its notes.

    Each table is a dict ``{"title": str, "columns": [str], "rows": [[str]], "notes": [str]}``,
    the shape an experiment's ``tables(result)`` returns (and the lab shows).

    Examples::

        >>> table = {"title": "T", "columns": ["a", "b"], "rows": [["1", "22"]], "notes": []}
        >>> print_tables([table])
        T
        a  b
        1  22
    """
    for i, table in enumerate(tables):
        lines = [table["columns"], *table["rows"]]
        widths = [max(len(line[j]) for line in lines) for j in range(len(table["columns"]))]
        print(("\n" if i else "") + table["title"])
        for line in lines:
            cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=True)]
            print("  ".join(cells).rstrip())
        for note in table["notes"]:
            print(note)


def fmt_list(xs: list[float], digits: int) -> str:
    """A list of numbers with :func:`fmt`: ``[0.53, -0.28]``."""
    return "[" + ", ".join(fmt(x, digits) for x in xs) + "]"
