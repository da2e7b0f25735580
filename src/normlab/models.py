"""Building blocks the experiments share, in plain PyTorch.

Every class and function here is plain ``torch`` (no normlab import), so that an experiment's
rendered script (``normlab run NAME --code``) can carry its source: an experiment that uses one
lists it in its ``code``.
"""

from __future__ import annotations

import torch
from torch import nn

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
