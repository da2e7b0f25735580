"""The fast trainer's loop for its two common nets, as TorchScript.

:func:`normlab.train.train_mlp_fast` issues 30-50 ATen calls a step. On the lab's nets each
kernel takes a few microseconds, and the Python around each call (the interpreter, the
binding's argument parsing, the loop's own bookkeeping) about as long again. :func:`run_steps`
runs the same calls, in the same order, into the same buffers, from TorchScript's interpreter,
which dispatches an op in about half the time. TorchScript against Python on this machine
kind, one intra-op thread:

- ``mm`` then ``relu_`` on 2 x 2 tensors, 10 000 times: 2.6 against 5.1 us a pair;
- init-train's 5 x 32 net without BatchNorm (:func:`_stacked_steps`), 150 steps in chunks of
  25: 39.4 against 49.0 ms (medians of 22 interleaved runs);
- bn-lr's 4 x 64 net with BatchNorm (:func:`_bn_steps`), 150 steps: 98.0 against 129.7 ms
  (medians of 20 interleaved pairs).

The results are bit for bit those of the Python loop: the kernels are the same and
TorchScript's graph optimizations are off (``torch.jit.optimized_execution``), so nothing is
fused or reordered.

``torch.jit.script`` is deprecated in torch 2.13 (it warns when used; the warning is silenced
here). torch is pinned, and where scripting fails :func:`scripted` returns ``None`` and the
trainer runs its Python loop, which stays the reference: the tests compare the two bit for bit.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.jit._fuser import optimized_execution  # torch.jit's own, not re-exported for mypy


def _head(
    h: torch.Tensor,  # (N, H), the last block's output
    y: torch.Tensor,  # (N, out)
    wt_head: torch.Tensor,  # (H, out)
    w_head: torch.Tensor,  # (out, H)
    b_head: torch.Tensor,  # (N, out), the bias expanded
    gw_head: torch.Tensor,  # (out, H)
    gb_head: torch.Tensor,  # (out,)
    z: torch.Tensor,  # (N, out), this step's logits
    dz: torch.Tensor,  # (N, out)
    dz_t: torch.Tensor,  # (out, N), dz transposed
    count: torch.Tensor,  # (1, 1), N
    dh: torch.Tensor,  # (N, H), dL/dh written here
) -> None:
    """The head's forward and backward, from BCE-with-logits' gradient, as both loops run it."""
    torch.addmm(b_head, h, wt_head, out=z)  # (N, H) @ (H, out) + b
    torch.sigmoid(z, out=dz)
    dz.sub_(y).div_(count)  # dL/dz = (sigmoid(z) - y) / N
    torch.mm(dz_t, h, out=gw_head)  # (out, N) @ (N, H)
    torch.sum(dz, [0], out=gb_head)  # (N, out) -> (out,)
    torch.mm(dz, w_head, out=dh)  # (N, out) @ (out, H)


def _stacked_steps(
    start: int,
    stop: int,
    x: torch.Tensor,  # (N, D)
    y: torch.Tensor,  # (N, 1)
    w_ts: list[torch.Tensor],  # L x (H_in, H), each block's weight, transposed views
    ws: list[torch.Tensor],  # L x (H, H_in)
    b_rows: list[torch.Tensor],  # L x (N, H), each block's bias expanded over the batch
    acts: list[torch.Tensor],  # L x (N, H), each block's output, rewritten every step
    dhs: list[torch.Tensor],  # L x (N, H), dL/d(block output)
    das: list[torch.Tensor],  # L x (N, H), dL/d(block pre-activation)
    first_da_t: torch.Tensor,  # (H, N), block 1's da transposed
    first_gw: torch.Tensor,  # (H, D), block 1's weight gradient
    da_rest_t: torch.Tensor,  # (L-1, H, N), blocks 2..L's da transposed
    act_below: torch.Tensor,  # (L-1, N, H), blocks 1..L-1's outputs
    gw_rest: torch.Tensor,  # (L-1, H, H), blocks 2..L's weight gradients
    da_all: torch.Tensor,  # (L, N, H), every block's da
    gb_all: torch.Tensor,  # (L, H), every block's bias gradient
    wt_head: torch.Tensor,  # (H, out)
    w_head: torch.Tensor,  # (out, H)
    b_head: torch.Tensor,  # (N, out), the head's bias expanded
    gw_head: torch.Tensor,  # (out, H)
    gb_head: torch.Tensor,  # (out,)
    logits: torch.Tensor,  # (T, N, out), step t's logits in logits[t]
    dz: torch.Tensor,  # (N, out)
    count: torch.Tensor,  # (1, 1), N
    flat: torch.Tensor,  # (P,), every parameter
    grad: torch.Tensor,  # (P,), their gradients, same layout
    neg_lr: float,
) -> None:
    """Steps ``start..stop-1``: the stacked branch of ``train._train_fast``'s loop, op for op."""
    depth = len(ws)
    dz_t = dz.t()  # (out, N)
    for step in range(start, stop):
        h = x
        for i in range(depth):
            torch.addmm(b_rows[i], h, w_ts[i], out=acts[i])  # (N, H_in) @ (H_in, H) + b
            h = acts[i].relu_()
        _head(h, y, wt_head, w_head, b_head, gw_head, gb_head, logits[step], dz, dz_t, count,
              dhs[depth - 1])  # fmt: skip
        for j in range(depth):
            i = depth - 1 - j
            torch.ops.aten.threshold_backward(dhs[i], acts[i], 0, grad_input=das[i])
            if i > 0:
                torch.mm(das[i], ws[i], out=dhs[i - 1])  # (N, H) @ (H, H_in)
        torch.bmm(da_rest_t, act_below, out=gw_rest)  # (L-1, H, N) @ (L-1, N, H)
        torch.mm(first_da_t, x, out=first_gw)  # (H, N) @ (N, D)
        torch.sum(da_all, [1], out=gb_all)  # (L, N, H) -> (L, H)
        flat.add_(grad, alpha=neg_lr)  # p <- p - lr * dp, every parameter


def _bn_steps(
    start: int,
    stop: int,
    x: torch.Tensor,  # (N, D)
    x_t: torch.Tensor,  # (D, N)
    y: torch.Tensor,  # (N, 1)
    w_ts: list[torch.Tensor],  # L x (H_in, H); block 1's is its (D, H) storage
    ws: list[torch.Tensor],  # L x (H, H_in)
    gws: list[torch.Tensor],  # L x (H, H_in), weight gradients (block 1's unused: gw_t0)
    gw_t0: torch.Tensor,  # (D, H), block 1's weight gradient, stored transposed
    pres: list[torch.Tensor],  # L x (N, H), the Linear outputs (no bias: BN cancels it)
    acts: list[torch.Tensor],  # L x (N, H), block outputs, replaced every step (BN's output)
    dhs: list[torch.Tensor],  # L x (N, H), dL/d(block output)
    das: list[torch.Tensor],  # L x (N, H), dL/d(ReLU input)
    gammas: list[torch.Tensor],  # L x (H,)
    betas: list[torch.Tensor],  # L x (H,)
    running_means: list[torch.Tensor],  # L x (H,), updated in place
    running_vars: list[torch.Tensor],  # L x (H,), updated in place
    factors: list[list[float]],  # L x T, each step's weight in the running average
    eps: list[float],  # L
    wt_head: torch.Tensor,  # (H, out)
    w_head: torch.Tensor,  # (out, H)
    b_head: torch.Tensor,  # (N, out)
    gw_head: torch.Tensor,  # (out, H)
    gb_head: torch.Tensor,  # (out,)
    logits: torch.Tensor,  # (T, N, out)
    dz: torch.Tensor,  # (N, out)
    count: torch.Tensor,  # (1, 1), N
    flat: torch.Tensor,  # (P,)
    grad: torch.Tensor,  # (P,)
    norm_params: list[torch.Tensor],  # gammas and betas, from the top block down
    neg_lr: float,
) -> None:
    """Steps ``start..stop-1`` of a stack with BatchNorm in every block: ``_train_fast``'s loop,
    op for op."""
    depth = len(ws)
    dz_t = dz.t()  # (out, N)
    means: list[torch.Tensor] = [x] * depth  # this step's batch means, (H,) each
    invstds: list[torch.Tensor] = [x] * depth  # this step's 1 / sqrt(var + eps), (H,) each
    for step in range(start, stop):
        h = x
        for i in range(depth):
            torch.mm(h, w_ts[i], out=pres[i])  # (N, H_in) @ (H_in, H)
            u, mean, invstd = torch.native_batch_norm(
                pres[i], gammas[i], betas[i], running_means[i], running_vars[i], True,
                factors[i][step], eps[i],
            )  # fmt: skip  # (N, H) -> (N, H); (H,), (H,)
            means[i] = mean
            invstds[i] = invstd
            acts[i] = u
            h = u.relu_()
        _head(h, y, wt_head, w_head, b_head, gw_head, gb_head, logits[step], dz, dz_t, count,
              dhs[depth - 1])  # fmt: skip
        norm_grads: list[torch.Tensor] = []
        for j in range(depth):
            i = depth - 1 - j
            torch.ops.aten.threshold_backward(dhs[i], acts[i], 0, grad_input=das[i])
            da, dgamma, dbeta = torch.ops.aten.native_batch_norm_backward(
                das[i], pres[i], gammas[i], None, None, means[i], invstds[i], True, eps[i],
                [True, True, True],
            )  # fmt: skip  # (N, H) -> (N, H); (H,), (H,)
            norm_grads.append(dgamma)
            norm_grads.append(dbeta)
            if i == 0:
                torch.mm(x_t, da, out=gw_t0)  # (D, N) @ (N, H)
            else:
                torch.mm(da.t(), acts[i - 1], out=gws[i])  # (H, N) @ (N, H_in)
                torch.mm(da, ws[i], out=dhs[i - 1])  # (N, H) @ (H, H_in)
        flat.add_(grad, alpha=neg_lr)  # p <- p - lr * dp
        torch._foreach_add_(norm_params, norm_grads, alpha=neg_lr)


_lock = threading.Lock()
_compiled: dict[str, Callable[..., None] | None] = {}  # name -> function; None: it failed
_LOOPS = {"stacked": _stacked_steps, "bn": _bn_steps}


def scripted(name: str = "stacked") -> Callable[..., None] | None:
    """The loop ``name`` (``"stacked"``: :func:`_stacked_steps`, ``"bn"``: :func:`_bn_steps`)
    as TorchScript, compiled on first use; ``None`` if that fails."""
    with _lock:
        if name not in _compiled:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)  # see the module doc
                    fn: Any = torch.jit.script(_LOOPS[name])
                _compiled[name] = fn
            except Exception:  # no TorchScript (a later torch, no source files): Python loop
                _compiled[name] = None
        return _compiled[name]


def run_steps(fn: Callable[..., None], *args: Any) -> None:
    """Call the scripted loop with TorchScript's graph optimizations off (op for op)."""
    with optimized_execution(False):
        fn(*args)
