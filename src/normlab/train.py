"""The one training loop: a step of any optimizer, and full-batch SGD on a binary task.

:func:`train_step` is the step every experiment trains with, in the seed's and every PyTorch
tutorial's order: ``zero_grad``, forward, loss, backward, step. The loss of a step is measured
before its update. :func:`train` takes those steps with full-batch SGD, as the seed notebook
trains. The experiments' scripts include these functions as they are, so the losses normlab
reports are the ones this loop prints in a notebook. :func:`train_stacked` is the same loop
for K nets of one shape at once (a sweep's batched configurations), with each net's SGD update
written out, since one optimizer steps one rate.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[..., torch.Tensor] = F.binary_cross_entropy_with_logits,
) -> float:
    """One optimizer step on the batch ``(x, y)``; returns the batch's loss before the update.

    The order: ``zero_grad`` (``backward`` adds to ``.grad``, so last step's gradients go
    first), forward, ``loss_fn(model(x), y)``, ``backward`` (the gradient of that loss at the
    current weights), ``step`` (the update). The gradients stay in ``.grad`` until the next
    ``zero_grad``, so a caller may read them after the step.

    Args:
        model: the network; ``model(x)`` is what ``loss_fn`` compares with ``y``.
        optimizer: steps ``model``'s parameters (any rule: SGD, momentum, Adam, per-layer rates).
        x: a batch of inputs.  y: its targets.
        loss_fn: ``loss_fn(output, y)``, a scalar; binary cross-entropy on ``(N, 1)`` logits
            and ``(N, 1)`` targets in {0, 1} by default.
    """
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)  # a scalar: the batch's mean loss
    loss.backward()
    optimizer.step()
    return loss.item()


def train(
    net: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float, steps: int
) -> Iterator[float]:
    """Train ``net`` with full-batch SGD for ``steps`` steps, yielding each step's loss as it goes.

    A generator, so that a caller sees the curve grow (``for loss in train(...)``) or takes it
    whole (``list(train(...))``); the steps are taken as the losses are asked for.

    Args:
        net: maps ``(N, D)`` inputs to ``(N, 1)`` logits; put in training mode here.
        x: ``(N, D)`` inputs.  y: ``(N, 1)`` targets in {0, 1}.
        lr: the learning rate.  steps: the number of updates.

    Yields:
        ``steps`` losses (``inf`` or ``nan`` where training diverged).
    """
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    for _ in range(steps):
        yield train_step(net, opt, x, y)  # (N, 1) logits vs (N, 1) targets


def train_stacked(
    nets: Sequence[nn.Module], x: torch.Tensor, y: torch.Tensor, lrs: torch.Tensor, steps: int
) -> list[list[float]]:
    r"""Train K nets of one architecture together, net :math:`k` with full-batch SGD at rate
    ``lrs[k]``: what :func:`~normlab.train.train` does to each, in one forward and one backward
    per step for all K.

    The K nets' parameters and buffers are stacked into tensors of shape ``(K, *shape)``
    (:func:`torch.func.stack_module_state`); :func:`torch.func.vmap` maps one net's loss over
    that first dimension. BatchNorm's batch statistics and its running statistics stay per net:
    vmap runs it on the K nets' ``(N, C)`` activations as one batch of ``K * C`` channels, each
    net's own. The K losses share no weight, so the gradient of
    their sum with respect to net :math:`k`'s weights is net :math:`k`'s own gradient, and the
    update is SGD's with each net's rate:

    .. math::
        W_k \leftarrow W_k - \mathrm{lr}_k \, \nabla_{W_k} \ell_k

    The order is :func:`~normlab.train.train_step`'s (zero the gradients, forward, loss,
    backward, step, record); that function cannot serve, as it steps one optimizer at one rate
    and returns one loss. The nets are trained in place (their final weights and buffers are
    written back), as ``train`` trains its net.

    The numbers are ``train``'s to float32 rounding: a batched kernel may add the terms of a sum
    in another order than the kernel of one net (``tests/experiments/test_bn_lr_batched.py``
    derives the tolerance).

    Args:
        nets: K nets of one architecture, mapping ``(N, D)`` inputs to ``(N, 1)`` logits.
        x: ``(N, D)`` inputs.  y: ``(N, 1)`` targets in {0, 1}, the same for every net.
        lrs: ``(K,)`` learning rates, on the nets' device.  steps: the number of updates.

    Returns:
        K loss curves of ``steps`` losses each, each loss measured before its step's update.
    """
    params, buffers = stack_module_state(list(nets))  # name -> (K, *shape), params are leaves
    skeleton = copy.deepcopy(nets[0]).to("meta").train()  # the architecture without its data

    def loss_of(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = functional_call(skeleton, (p, b), (x,))  # one net's (N, 1) logits
        return F.binary_cross_entropy_with_logits(logits, y)  # a scalar: its mean loss

    losses_of = vmap(loss_of)  # the K nets' stacked tensors -> (K,) losses
    curves: list[list[float]] = []  # (steps, K)
    for _ in range(steps):
        for p in params.values():
            p.grad = None  # zero_grad
        losses = losses_of(params, buffers)  # (K,): forward and loss, every net
        losses.sum().backward()  # p.grad[k]: net k's own gradient
        with torch.no_grad():
            for p in params.values():
                rate = lrs.view(-1, *[1] * (p.dim() - 1))  # (K,) -> (K, 1, ...) to broadcast
                p.addcmul_(p.grad, rate, value=-1.0)  # W_k - lr_k * grad_k, as SGD rounds it
        curves.append(losses.tolist())
    with torch.no_grad():  # the trained weights and running statistics back into each net
        for k, net in enumerate(nets):
            net.load_state_dict({name: t[k] for name, t in (params | buffers).items()})
    return [list(curve) for curve in zip(*curves, strict=True)]  # (steps, K) -> K curves
