r"""Training loops used by the experiments.

Both trainers run full-batch SGD on a binary task with ``binary_cross_entropy_with_logits``, as
the seed notebook trains, and return the loss of every step (the loss of step ``t`` is measured
before step ``t``'s update). Neither waits on the host inside its loop: losses go into a
preallocated tensor and come back in one transfer at the end.

- :func:`train_sgd` trains any model through autograd and ``torch.optim.SGD``'s update.
- :func:`train_mlp_fast` trains one shape of model, the :func:`normlab.models.mlp` stack (blocks
  ``Linear -> [BatchNorm1d] -> ReLU``, then a ``Linear`` head), with a hand-written forward and
  backward; :func:`train_mlps_fast` trains several such models side by side. They compute the
  same math as :func:`train_sgd` on the same model, several times faster
  (``benchmarks/widgets.py`` measures it against the seed notebook's loop).

Where the time goes on a small CPU, and so what the fast trainer avoids: a 150-step run of a
4 x 64 MLP on 200 points does about 2 GFLOP, 30-40 ms of matmul on one core, while the autograd +
optimizer loop takes 150-350 ms. The rest is per-op overhead: autograd bookkeeping, the
optimizer's per-parameter work, a host sync per step, and OpenMP hand-offs between two threads
for matrices far too small to split (when another process holds the second core, each hand-off
waits for the scheduler). The fast trainer issues ~30 ATen calls per step, each the kernel
autograd itself would have run, on one intra-op thread, into buffers allocated once, with every
gradient written straight into one flat buffer so that the SGD update is a single ``add_``. What
is left is mostly matmul, and Python's own time per call: the two common nets (one width
without BatchNorm, as init-train's; BatchNorm in every block, as bn-lr's) run their steps from
TorchScript (:mod:`normlab._fastloop`), the same calls at about half the overhead each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from normlab import _fastloop, _payload, workers
from normlab import nn as nlnn

OnStep = Callable[[int, nn.Module], None]
"""Called as ``on_step(step, model)`` after backward and before the update (gradients are set)."""

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each step."""

CHUNK = 25
"""Steps per call of the scripted loop (:mod:`normlab._fastloop`); ``progress`` is called for
each of them after the call, so a run asked to stop stops within ``CHUNK`` steps."""


def train_sgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    lr: float,
    steps: int,
    on_step: OnStep | None = None,
    progress: Progress | None = None,
) -> torch.Tensor:
    """Train ``model`` with full-batch SGD for ``steps`` steps; return the loss of each step.

    The loss of step ``t`` is measured before step ``t``'s update, like the seed's loop.

    Args:
        model: maps ``(N, D)`` inputs to ``(N, 1)`` logits; put in train mode here.
        x: ``(N, D)`` inputs.  y: ``(N, 1)`` targets in {0, 1}.
        lr: learning rate.  steps: number of updates.
        on_step: optional recorder, see :data:`OnStep`.
        progress: optional ``progress(done, total)`` callback.

    Returns:
        ``(steps,)`` float32 CPU tensor of losses (``inf``/``nan`` kept where training diverged).
    """
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    losses = torch.empty(steps, device=x.device)
    for step in range(steps):
        for p in params:
            p.grad = None  # optim's zero_grad(): gradients start afresh each step
        loss = F.binary_cross_entropy_with_logits(model(x), y)
        loss.backward()
        losses[step] = loss.detach()
        if on_step is not None:
            on_step(step, model)
        _sgd_step(params, lr)
        if progress is not None:
            progress(step + 1, steps)
    return losses.cpu()


@torch.no_grad()
def _sgd_step(params: Sequence[torch.Tensor], lr: float) -> None:
    r"""The update of ``torch.optim.SGD(params, lr=lr)`` at its defaults, bit for bit.

    .. math:: p \leftarrow p - \text{lr} \cdot \partial L / \partial p

    Written out rather than constructed: a process's first torch optimizer imports
    ``torch._dynamo`` (1.7-2.5 s measured here), many times the runs this trainer serves
    (``normlab run symmetry`` trains for about 35 ms).
    """
    for p in params:
        if p.grad is not None:
            p.add_(p.grad, alpha=-lr)  # optim.SGD's single-tensor step without momentum


# --------------------------------------------------------------------------------------------
# The fast trainer


@dataclass
class FastRun:
    """What :func:`train_mlp_fast` returns.

    ``init_outputs[i]`` and ``init_grads[i]`` are block ``i``'s output (after its ReLU) and the
    gradient of the loss with respect to it, at the initial weights (step 0); both lists are
    empty unless ``record_init=True``.
    """

    losses: torch.Tensor  # (steps,) float32, CPU
    init_outputs: list[torch.Tensor] = field(default_factory=list)  # L x (N, H)
    init_grads: list[torch.Tensor] = field(default_factory=list)  # L x (N, H)


_BATCH_NORMS = (nn.BatchNorm1d, nlnn.BatchNorm1d)


def _aten(op: Any) -> Callable[..., Any]:
    """The C++ entry point of a ``torch.ops`` overload.

    Calling it directly skips ``OpOverload.__call__``'s Python frame (~2 us a call, as much as
    the kernel on a (200, 64) tensor).
    """
    raw = getattr(op, "_op", None)
    fn: Callable[..., Any] = raw if callable(raw) else op
    return fn


# The kernels autograd runs for ReLU's backward (in its out= form, writing into a buffer) and for
# BatchNorm's backward (whose out= form only wraps a copy around it).
_relu_backward = _aten(torch.ops.aten.threshold_backward.grad_input)
_bn_backward = _aten(torch.ops.aten.native_batch_norm_backward.default)


@dataclass
class _Block:
    linear: nn.Linear
    norm: nn.Module | None  # a BatchNorm1d (torch's or normlab's) between Linear and ReLU


def _flatten(module: nn.Module) -> list[nn.Module]:
    if isinstance(module, nn.Sequential):
        return [leaf for child in module for leaf in _flatten(child)]
    return [module]


def _mlp_plan(model: nn.Module) -> tuple[list[_Block], nn.Linear]:
    """Read ``model`` as blocks ``Linear -> [BatchNorm1d] -> ReLU`` and a ``Linear`` head.

    Nested ``nn.Sequential``\\ s are flattened, so both :func:`normlab.models.mlp` and a flat
    ``nn.Sequential`` (the seed's way) are accepted; anything else raises ``ValueError``.
    """
    mods = _flatten(model)
    supported = "Linear -> [BatchNorm1d] -> ReLU blocks, then a Linear head"
    blocks: list[_Block] = []
    i = 0
    while i < len(mods) - 1:
        lin, i = mods[i], i + 1
        norm = None
        if isinstance(mods[i], _BATCH_NORMS):
            norm, i = mods[i], i + 1
        if not isinstance(lin, nn.Linear) or i >= len(mods) or not isinstance(mods[i], nn.ReLU):
            got = " -> ".join(type(m).__name__ for m in mods)
            raise ValueError(f"model {got} not supported, use {supported}")
        blocks.append(_Block(lin, norm))
        i += 1
    head = mods[-1] if mods else None
    if i != len(mods) - 1 or not isinstance(head, nn.Linear):
        got = " -> ".join(type(m).__name__ for m in mods)
        raise ValueError(f"model {got} not supported, use {supported}")
    return blocks, head


@contextmanager
def _one_intraop_thread() -> Iterator[None]:
    """Run the body with one intra-op thread, then restore this thread's setting.

    The matrices here are far too small to split across threads: with two, every matmul pays an
    OpenMP hand-off, and waits for a whole scheduler slice when another process holds the other
    core. ``torch.set_num_threads`` sets the calling thread's OpenMP and MKL counts (and torch's
    default for threads started meanwhile); the ``finally`` puts all of them back.
    """
    old = torch.get_num_threads()
    if old == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def train_mlp_fast(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    lr: float,
    steps: int,
    progress: Progress | None = None,
    record_init: bool = False,
) -> FastRun:
    r"""Train an MLP with full-batch SGD through a hand-written forward and backward.

    ``model`` must be blocks ``Linear -> [BatchNorm1d] -> ReLU`` then a ``Linear`` head, as
    :func:`normlab.models.mlp` builds them (nested or flat ``nn.Sequential``; ``BatchNorm1d``
    from torch or :mod:`normlab.nn`). It trains from the model's current weights with the math
    of :func:`train_sgd` (same loss, gradients, update and BatchNorm running statistics), and
    the model's parameters and buffers hold the trained values on return. There is no
    ``on_step`` hook: nothing is materialized per step but the logits.

    Forward, for block :math:`l` with input :math:`h_{l-1}` (:math:`h_0 = x`) and loss
    :math:`L = \mathrm{mean}\big(\mathrm{softplus}(z) - y z\big)` on the head's logits :math:`z`:

    .. math::
        a_l = h_{l-1} W_l^\top + b_l,\quad
        u_l = \mathrm{BN}(a_l) = \gamma_l \hat{a}_l + \beta_l,\ \
        \hat{a}_l = (a_l - \mu_l)\,\sigma_l^{-1},\quad h_l = \max(u_l, 0)

    with :math:`\mu_l` the batch mean and :math:`\sigma_l^{-1} = (\mathrm{Var}[a_l] +
    \epsilon)^{-1/2}` (biased variance); without BN, :math:`u_l = a_l`. Backward, written out:

    .. math::
        dz = (\mathrm{sigmoid}(z) - y) / N,\quad
        du_l = dh_l \odot [h_l > 0],\quad
        dW_l = da_l^\top h_{l-1},\ \ db_l = \textstyle\sum_n da_l,\ \
        dh_{l-1} = da_l W_l

    and through BN (:math:`dy = du_l`, sums over the batch):

    .. math::
        da_l = \frac{\gamma\,\sigma^{-1}}{N}\Big(N\,dy - \sum dy - \hat{a}\sum dy\,\hat{a}\Big),
        \quad d\gamma = \sum dy\,\hat{a},\quad d\beta = \sum dy

    Then every parameter takes :math:`p \leftarrow p - \mathrm{lr}\cdot dp`, and the running
    statistics the eager layer's rule: ``running = (1 - m) * running + m * batch_stat``, with
    the *unbiased* variance and ``m = momentum`` (or ``1 / num_batches_tracked`` when it is
    ``None``).

    How it is fast (see the module docstring): each line above is one ATen call, the kernel
    autograd runs for it (``addmm``, ``threshold_backward``, and torch's fused BatchNorm kernels
    ``native_batch_norm`` and ``native_batch_norm_backward``, whose backward computes the
    formula above in one pass over the batch; they measured twice as fast here as the same
    formulas written as separate ops); gradients land in one flat buffer so the update is one
    ``add_``; the logits of every step are kept and the losses computed in one call at the end;
    no autograd, no optimizer, no host sync, and one intra-op thread. In a net of one width
    without BatchNorm, the weight gradients of blocks 2..L come from one batched matmul and all
    bias gradients from one sum, after the backward pass (the same products and sums, in fewer
    calls). A Linear bias right before a BatchNorm is left out of the loop: the batch mean
    cancels it and its gradient is exactly 0 (the running mean gets its share back at the end),
    which saves two ops per layer.

    Agreement with :func:`train_sgd`: without BatchNorm every op is the one eager runs, in the
    same order, so losses and weights are bitwise equal (150 steps at lr 2.0 included). With
    BatchNorm the statistics round differently from :mod:`normlab.nn`'s (torch's own kernel
    also rounds differently on 1 and 2 threads), so the two agree to float32 rounding at first;
    at a large learning rate training amplifies rounding, and the curves can drift apart after
    a few dozen steps (as two eager runs with torch's and normlab's BatchNorm do).

    Args:
        model: the network; its parameters and BatchNorm buffers are updated in place.
        x: ``(N, D)`` inputs.
        y: ``(N, 1)`` targets in {0, 1}.
        lr: learning rate.
        steps: number of updates.
        progress: optional ``progress(done, total)`` callback, called after each step.
        record_init: also return every block's output and its gradient at step 0.

    Returns:
        :class:`FastRun`; ``losses`` is ``(steps,)`` float32 on the CPU, like :func:`train_sgd`.

    Shape:
        - x: :math:`(N, D)`, y: :math:`(N, 1)`, with :math:`N \ge 2` when there is BatchNorm.

    Example::

        >>> from normlab import data, models
        >>> x, y = data.two_moons()
        >>> g = torch.Generator().manual_seed(0)
        >>> net = models.mlp(2, 16, 2, out_dim=1, norm="batch", generator=g)
        >>> run = train_mlp_fast(net, x, y, lr=0.5, steps=50)
        >>> run.losses.shape, bool(run.losses[-1] < run.losses[0])
        (torch.Size([50]), True)
    """
    with _one_intraop_thread():
        return _train_fast(model, x, y, lr, steps, progress, record_init)


def train_mlps_fast(
    models: Sequence[nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    lr: float,
    steps: int,
    progress: Progress | None = None,
    parallel: bool = True,
    helpers: bool = True,
) -> list[FastRun]:
    """Train independent models with :func:`train_mlp_fast`, side by side on the CPU.

    The costliest model (most BatchNorm layers, then most parameters; the first of equals) trains
    in the calling thread and reports ``progress``. Each other one trains in a helper process of
    :mod:`normlab.workers` when they are started, ready and idle (``normlab lab`` starts one),
    else on a thread of its own; every run has one intra-op thread. Results are the same as
    training the models one after another (each run is single-threaded and deterministic, and a
    helper runs the same code on the same kernels).

    Why processes: on threads the Python side of every op holds the GIL, so on a 2-core CPU two
    models on two threads took 1.2-1.7x as long as the longer one alone, and with a helper
    process 1.0-1.5x (``benchmarks/widgets.py`` measures both). A model that cannot be
    pickled (or has two tensors on one storage, see :mod:`normlab._payload`), or a helper that
    dies, falls back to the calling thread. If the calling thread's run raises (Ctrl+C, or a
    lab run nobody waits for any more), the other runs stop at their next step, in threads or
    helpers (:func:`normlab.workers.cancel`), and their models keep the weights they had.

    Args:
        models: networks as :func:`train_mlp_fast` accepts them, trained in place.
        x, y, lr, steps, progress: as in :func:`train_mlp_fast` (``progress`` follows the
            model trained in the calling thread).
        parallel: train side by side (CPU tensors only); ``False`` trains one after another.
        helpers: use ready helper processes; ``False`` keeps to threads.

    Returns:
        One :class:`FastRun` per model, in order.
    """
    if not models:
        return []
    if not parallel or len(models) == 1 or x.device.type != "cpu":
        return [
            train_mlp_fast(m, x, y, lr=lr, steps=steps, progress=progress if i == 0 else None)
            for i, m in enumerate(models)
        ]
    # The calling thread takes the costliest run (a helper's run of the same work measured up
    # to ~10% slower) and reports its progress; the others go to helpers or threads.
    here = max(range(len(models)), key=lambda i: _cost(models[i]))
    others = [i for i in range(len(models)) if i != here]
    runs: list[FastRun | None] = [None] * len(models)
    remote = _submit_to_helpers([models[i] for i in others], x, y, lr, steps) if helpers else None
    if remote is not None:
        try:
            with _one_intraop_thread():
                runs[here] = _train_fast(models[here], x, y, lr, steps, progress, False)
        except BaseException:  # e.g. a lab run stopped: nobody will read the helpers' runs
            for future in remote:
                workers.cancel(future)
            raise
        for i, future in zip(others, remote, strict=True):
            runs[i] = _collect(future, models[i], x, y, lr, steps)
        return [r for r in runs if r is not None]

    errors: list[BaseException] = []
    stop = threading.Event()  # set when the calling thread's run fails (Ctrl+C included)

    def stop_if_asked(done: int, total: int) -> None:
        if stop.is_set():
            raise _Stopped

    def work(i: int) -> None:
        try:
            runs[i] = train_mlp_fast(models[i], x, y, lr=lr, steps=steps, progress=stop_if_asked)
        except _Stopped:
            pass  # the calling thread raises its own error
        except BaseException as err:  # handed to the calling thread
            errors.append(err)

    # Set one thread here first, so that the workers' torch defaults start at one too.
    with _one_intraop_thread():
        threads = [threading.Thread(target=work, args=(i,)) for i in others]
        for t in threads:
            t.start()
        try:
            runs[here] = _train_fast(models[here], x, y, lr, steps, progress, False)
        except BaseException:
            stop.set()  # the other runs end at their next step instead of finishing first
            raise
        finally:
            for t in threads:
                t.join()
    if errors:
        raise errors[0]
    return [r for r in runs if r is not None]


# --------------------------------------------------------------------------------------------
# Runs in helper processes (normlab.workers): the model goes there pickled (normlab._payload:
# tensors as raw bytes), and its trained state comes back with the losses.


class _PayloadError(Exception):
    """A helper could not unpickle a run (e.g. a model class it cannot import)."""


def helper_init() -> None:
    """Prepare a helper process for :func:`train_mlps_fast`: one intra-op thread, warm kernels.

    Pass it to :func:`normlab.workers.start` as the ``initializer``.
    """
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 2, generator=g)  # (16, 2)
    y = (x[:, :1] > 0).float()  # (16, 1)
    with_bn = nn.Sequential(nn.Linear(2, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))
    train_mlp_fast(with_bn, x, y, lr=0.1, steps=2)
    # two blocks of one width without BN: the scripted loop, compiled here rather than in a run
    plain = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    train_mlp_fast(plain, x, y, lr=0.1, steps=2)


def _train_remote(payload: bytes) -> bytes:
    try:
        model, x, y, lr, steps = _payload.loads(payload)
    except Exception as exc:
        raise _PayloadError(f"{type(exc).__name__}: {exc}") from None
    run = train_mlp_fast(model, x, y, lr=lr, steps=steps, progress=_stop_if_closing)
    return _payload.dumps((run.losses, model.state_dict()))


def _stop_if_closing(done: int, total: int) -> None:
    """A helper's run ends at the next step once its pool closes or its caller calls it off
    (no one will read it)."""
    if workers.stopping():
        raise _Stopped


def _cost(model: nn.Module) -> tuple[int, int]:
    """What orders runs by cost: BatchNorm layers (each ~half a block's matmul time), then size."""
    return (
        sum(isinstance(m, _BATCH_NORMS) for m in model.modules()),
        sum(p.numel() for p in model.parameters()),
    )


def _submit_to_helpers(
    models: Sequence[nn.Module], x: torch.Tensor, y: torch.Tensor, lr: float, steps: int
) -> list[Future[bytes]] | None:
    """Hand each model to a ready, idle helper; ``None`` (use threads) when there are not
    enough of those or a model won't pickle."""
    if workers.running() is None:
        return None
    try:
        payloads = [_payload.dumps((m, x.detach(), y.detach(), lr, steps)) for m in models]
    except Exception:  # e.g. a class defined inside a function, or a lambda hook: use threads
        return None
    futures: list[Future[bytes]] = []
    for payload in payloads:
        future = workers.submit(_train_remote, payload)
        if future is None:  # busy with another run (or stopped meanwhile): all go to threads
            for handed in futures:
                workers.cancel(handed)
            return None
        futures.append(future)
    return futures


def _collect(
    future: Future[bytes],
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    lr: float,
    steps: int,
) -> FastRun:
    """The helper's run of ``model``, its trained state copied in; trained here if it failed."""
    try:
        losses, state = _payload.loads(future.result())
    except (workers.BrokenProcessPool, _PayloadError, _Stopped, CancelledError):
        pass  # the helper died, closed or could not read the model: train it here
    else:
        model.load_state_dict(state)
        return FastRun(losses=losses)
    return train_mlp_fast(model, x, y, lr=lr, steps=steps)


class _Stopped(Exception):
    """Raised by a run's ``progress`` to end it early (before its weights are written back): its
    caller gave up, or its helper pool is closing."""


def _train_fast(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    lr: float,
    steps: int,
    progress: Progress | None,
    record_init: bool,
) -> FastRun:
    blocks, head = _mlp_plan(model)
    n = x.shape[0]
    if n < 2 and any(b.norm is not None for b in blocks):
        raise ValueError(
            f"Expected more than 1 value per channel when training, got input size {list(x.shape)}"
        )
    model.train()
    # Blocks of one width, without BatchNorm (the init-train net): every hidden block's weight
    # gradient comes from one batched matmul and every bias gradient from one sum, after the
    # backward pass, so their gradients sit side by side in the flat buffer, weights first.
    widths = {b.linear.out_features for b in blocks}
    stacked = (
        len(blocks) >= 2
        and len(widths) == 1
        and all(b.norm is None for b in blocks)
        and len({b.linear.bias is None for b in blocks}) == 1
    )
    params: list[torch.Tensor] = []  # every parameter, in the order of the flat buffers
    if stacked:
        params += [b.linear.weight for b in blocks]
        params += [b.linear.bias for b in blocks if b.linear.bias is not None]
    else:
        for blk in blocks:
            params += [p for p in (blk.linear.weight, blk.linear.bias) if p is not None]
            if blk.norm is not None:
                params += [
                    p for p in (blk.norm.weight, blk.norm.bias) if isinstance(p, torch.Tensor)
                ]
    params += [p for p in (head.weight, head.bias) if p is not None]
    if len({id(p) for p in params}) != len(params):
        raise ValueError("model shares a parameter between layers, which is not supported")
    # The first block's weight is kept transposed, (D, H), when BatchNorm follows it: its
    # gradient is then x^T da, which MKL computes about 5 times as fast as da^T x (the (H, N)
    # by (N, D) shape, D = 2 on the moons). The two round differently; with BatchNorm the run
    # is compared with eager training at float tolerance anyway, without it bit for bit.
    transposed = {id(blocks[0].linear.weight)} if blocks and blocks[0].norm is not None else set()

    with torch.inference_mode():
        flat = torch.cat(
            [(p.detach().t() if id(p) in transposed else p.detach()).reshape(-1) for p in params]
        )  # (P,)
        grad = torch.zeros_like(flat)  # (P,), same layout; a slot never written stays 0
        views: _Views = {}  # id(parameter) -> (its value, its gradient), views into flat, grad
        starts: dict[int, int] = {}  # id(parameter) -> where it starts in flat and grad
        offset = 0
        for p in params:
            k = p.numel()
            starts[id(p)] = offset
            value, g = flat[offset : offset + k], grad[offset : offset + k]
            if id(p) in transposed:  # stored (D, H), seen (H, D)
                views[id(p)] = (value.view(p.shape[::-1]).t(), g.view(p.shape[::-1]).t())
            else:
                views[id(p)] = (value.view(p.shape), g.view(p.shape))
            offset += k
        xi, yi = x.detach(), y.detach()
        layers: list[_Layer] = []
        scratch: dict[tuple[int, ...], torch.Tensor] = {}  # shared gradient buffers
        if stacked:  # every block's output and da, (L, N, H) each
            act_all = xi.new_empty((len(blocks), n, blocks[0].linear.out_features))
            da_all = torch.empty_like(act_all)
        for i, blk in enumerate(blocks):
            buffers = (act_all[i], da_all[i]) if stacked else None
            below = layers[-1] if layers else None
            flipped = id(blk.linear.weight) in transposed
            layers.append(_Layer(blk, views, below, xi, steps, scratch, buffers, flipped))
        if stacked:
            first, depth, width = layers[0], len(blocks), blocks[0].linear.out_features
            start = starts[id(blocks[1].linear.weight)]  # blocks 2..L's weights, one after another
            gw_rest = grad[start : start + (depth - 1) * width * width].view(-1, width, width)
            da_rest_t = da_all[1:].transpose(1, 2)  # (L-1, H, N)
            act_below = act_all[:-1]  # (L-1, N, H)
            bias0 = blocks[0].linear.bias
            gb_all = (  # every block's bias gradient, (L, H)
                None
                if bias0 is None
                else grad[starts[id(bias0)] : starts[id(bias0)] + depth * width].view(depth, width)
            )
        w_head, gw_head = views[id(head.weight)]  # (out, H) each
        wt_head = w_head.t()  # (H, out)
        b_head, gb_head = _value(views, head.bias), _grad(views, head.bias)  # (out,) each
        if b_head is not None:  # expanded once: addmm then skips expanding it every step
            b_head = b_head.expand(n, head.out_features)  # (out,) -> (N, out), a view
        logits = xi.new_empty((steps, n, head.out_features))  # (T, N, out)
        logits_t = logits.unbind(0)  # the head's addmm writes step t's logits into logits_t[t]
        dz = xi.new_empty((n, head.out_features))  # dL/dlogits, (N, out)
        dz_t = dz.t()  # (out, N)
        # N as a tensor: the same division as by the number, without wrapping a scalar per call
        count = xi.new_full((1, 1), float(n))
        dh_top = layers[-1].dh if layers else None  # dL/d(last block's output), (N, H)
        backward_layers = layers[::-1]
        init_outputs: list[torch.Tensor] = []
        init_grads: list[torch.Tensor] = []
        neg_lr = -lr
        mm, addmm, sigmoid, bsum = torch.mm, torch.addmm, torch.sigmoid, torch.sum
        bmm = torch.bmm
        bn_forward, bn_backward, relu_backward = (
            torch.native_batch_norm,
            _bn_backward,
            _relu_backward,
        )
        norm_params = [p for lay in backward_layers if lay.bn is not None for p in lay.bn.params]
        norm_grads: list[torch.Tensor] = []  # their gradients, filled by the backward each step

        def python_steps(begin: int, end: int) -> None:
            """Steps ``begin..end-1``, each op a call from Python (every kind of net)."""
            for step in range(begin, end):
                # forward: a = h W^T + b, [BatchNorm], ReLU
                h = xi
                for layer in layers:
                    bn = layer.bn
                    if bn is not None:
                        mm(h, layer.w_t, out=layer.pre)  # (N, H_in) @ (H_in, H) -> (N, H), no bias
                        u, bn.mean, bn.invstd = bn_forward(
                            layer.pre, bn.weight, bn.bias, bn.running_mean, bn.running_var, True,
                            bn.factors[step], bn.eps,
                        )  # fmt: skip  # (N, H) -> (N, H); batch mean (H,), invstd (H,)
                        layer.act = u
                    elif layer.b_rows is not None:
                        addmm(
                            layer.b_rows, h, layer.w_t, out=layer.act
                        )  # (N, H_in) @ (H_in, H) + b
                    else:
                        mm(h, layer.w_t, out=layer.act)  # (N, H_in) @ (H_in, H) -> (N, H)
                    h = layer.act.relu_()  # (N, H)
                if b_head is not None:
                    z = addmm(b_head, h, wt_head, out=logits_t[step])  # (N, H) @ (H, out) + b
                else:
                    z = mm(h, wt_head, out=logits_t[step])  # (N, H) @ (H, out) -> (N, out)

                # backward, from dz = (sigmoid(z) - y) / N, BCE-with-logits' backward op for op
                sigmoid(z, out=dz).sub_(yi).div_(count)  # (N, out)
                mm(dz_t, h, out=gw_head)  # (out, N) @ (N, H) -> (out, H)
                if gb_head is not None:
                    bsum(dz, 0, out=gb_head)  # (N, out) -> (out,)
                if dh_top is not None:
                    mm(dz, w_head, out=dh_top)  # (N, out) @ (out, H) -> (N, H)
                for layer in backward_layers:
                    if record_init and step == 0:  # before the buffer is reused below
                        init_grads.append(layer.dh.clone())
                    da = relu_backward(layer.dh, layer.act, 0, grad_input=layer.da)  # dh * [h > 0]
                    da_t = layer.da_t  # (H, N)
                    bn = layer.bn
                    if bn is not None:
                        # running stats left out: with train=True the kernel reads the saved ones
                        da, dgamma, dbeta = bn_backward(
                            da, layer.pre, bn.weight, None, None, bn.mean, bn.invstd, True, bn.eps,
                            bn.mask,
                        )  # fmt: skip  # (N, H) -> (N, H); dgamma (H,), dbeta (H,)
                        da_t = da.t()
                        norm_grads.extend(g for g in (dgamma, dbeta) if g is not None)
                    below = layer.below
                    if layer.x_t is not None:  # the first block, its weight kept transposed
                        mm(layer.x_t, da, out=layer.gw_t)  # (D, N) @ (N, H) -> (D, H)
                    elif not stacked:
                        inp = xi if below is None else below.act  # (N, H_in)
                        mm(da_t, inp, out=layer.gw)  # (H, N) @ (N, H_in) -> (H, H_in)
                        if layer.gb is not None:
                            bsum(da, 0, out=layer.gb)  # (N, H) -> (H,)
                    if below is not None:
                        mm(da, layer.w, out=below.dh)  # (N, H) @ (H, H_in) -> (N, H_in)
                if stacked:  # the same products and sums, for all blocks at once
                    bmm(da_rest_t, act_below, out=gw_rest)  # (L-1, H, N) @ (L-1, N, H)
                    mm(first.da_t, xi, out=first.gw)  # (H, N) @ (N, D) -> (H, D)
                    if gb_all is not None:
                        bsum(da_all, 1, out=gb_all)  # (L, N, H) -> (L, H)
                if record_init and step == 0:
                    init_outputs.extend(layer.act.clone() for layer in layers)
                    init_grads.reverse()  # collected from the top block down

                # update: p <- p - lr * dp for every parameter, the elementwise op of optim.SGD
                flat.add_(grad, alpha=neg_lr)
                if norm_params:  # gammas and betas, their gradients in backward order
                    torch._foreach_add_(norm_params, norm_grads, alpha=neg_lr)
                    norm_grads.clear()
                if progress is not None:
                    progress(step + 1, steps)

        # The two common shapes run from TorchScript (see normlab._fastloop), the same ops in
        # chunks of CHUNK steps so that progress (which may stop the run) is called every few
        # ms: a stack of one width without BatchNorm (init-train's net, bn-lr's run without BN)
        # and a stack with an affine, tracking BatchNorm in every block (bn-lr's run with BN),
        # all biases on. Any other net runs from Python.
        scripted: Callable[..., None] | None = None
        args: tuple[Any, ...] = ()
        heads = b_head is not None and gb_head is not None
        if stacked and heads and gb_all is not None:
            scripted = _fastloop.scripted("stacked")
            args = (
                xi, yi, [lay.w_t for lay in layers], [lay.w for lay in layers],
                [lay.b_rows for lay in layers], [lay.act for lay in layers],
                [lay.dh for lay in layers], [lay.da for lay in layers], first.da_t, first.gw,
                da_rest_t, act_below, gw_rest, da_all, gb_all, wt_head, w_head, b_head,
                gw_head, gb_head, logits, dz, count, flat, grad, neg_lr,
            )  # fmt: skip
        elif (
            heads and layers and layers[0].x_t is not None and all(_plain_bn(lay) for lay in layers)
        ):
            scripted = _fastloop.scripted("bn")
            bns = [lay.bn for lay in layers if lay.bn is not None]
            args = (
                xi, layers[0].x_t, yi, [lay.w_t for lay in layers], [lay.w for lay in layers],
                [lay.gw for lay in layers], layers[0].gw_t, [lay.pre for lay in layers],
                [lay.act for lay in layers], [lay.dh for lay in layers],
                [lay.da for lay in layers], [bn.weight for bn in bns], [bn.bias for bn in bns],
                [bn.running_mean for bn in bns], [bn.running_var for bn in bns],
                [bn.factors for bn in bns], [bn.eps for bn in bns], wt_head, w_head, b_head,
                gw_head, gb_head, logits, dz, count, flat, grad, norm_params, neg_lr,
            )  # fmt: skip
        if scripted is None:
            python_steps(0, steps)
        else:
            done = 0
            if record_init:  # step 0 from Python, which records the outputs and gradients
                python_steps(0, 1)
                done = 1
            while done < steps:
                end = min(done + CHUNK, steps)
                _fastloop.run_steps(scripted, done, end, *args)
                if progress is not None:
                    for step in range(done, end):
                        progress(step + 1, steps)
                done = end

        # the loss of every step in one call: (T, N, out) -> mean over (N, out) -> (T,)
        target = yi.expand(steps, *yi.shape)
        per_point = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
        losses = per_point.mean(dim=(1, 2))

    with torch.no_grad():
        for p in params:
            p.copy_(views[id(p)][0])
        for blk, layer in zip(blocks, layers, strict=True):
            if blk.norm is not None and layer.bn is not None:
                layer.bn.write_back(blk.norm, _value(views, blk.linear.bias), steps)
        # Tensors made under inference_mode can't enter autograd later: hand back plain ones.
        return FastRun(
            losses=losses.cpu().clone(),
            init_outputs=[t.clone() for t in init_outputs],
            init_grads=[t.clone() for t in init_grads],
        )


_Views = dict[int, tuple[torch.Tensor, torch.Tensor]]


def _plain_bn(layer: _Layer) -> bool:
    """A BatchNorm block as :func:`normlab._fastloop._bn_steps` takes it: affine, with running
    statistics, all three gradients asked for."""
    bn = layer.bn
    return (
        bn is not None
        and bn.weight is not None
        and bn.bias is not None
        and bn.running_mean is not None
        and bn.running_var is not None
    )


def _scratch(
    pool: dict[tuple[int, ...], torch.Tensor], like: torch.Tensor, shape: tuple[int, int], k: int
) -> torch.Tensor:
    key = (*shape, k)
    if key not in pool:
        pool[key] = like.new_empty(shape)
    return pool[key]


def _value(views: _Views, p: object) -> torch.Tensor | None:
    return views[id(p)][0] if isinstance(p, torch.Tensor) else None


def _grad(views: _Views, p: object) -> torch.Tensor | None:
    return views[id(p)][1] if isinstance(p, torch.Tensor) else None


class _Layer:
    """One block inside the fast loop: views into the flat buffers, and its work buffers.

    What the loop writes is allocated here once and rewritten each step (``out=``), and every
    view it reads (transposes too) is made once. The exception is a BatchNorm layer's output,
    which its kernel allocates.
    """

    def __init__(
        self,
        block: _Block,
        views: _Views,
        below: _Layer | None,
        like: torch.Tensor,
        steps: int,
        scratch: dict[tuple[int, ...], torch.Tensor],
        buffers: tuple[torch.Tensor, torch.Tensor] | None = None,
        transposed: bool = False,
    ) -> None:
        lin = block.linear
        shape = (like.shape[0], lin.out_features)  # (N, H)
        self.below = below  # the block whose output is this block's input (None: the data)
        self.w, self.gw = views[id(lin.weight)]  # (H, H_in) each
        self.w_t = self.w.t()  # (H_in, H)
        self.gw_t = self.gw.t()  # (H_in, H)
        # A weight stored transposed (the first block's, when BatchNorm follows it: see
        # _train_fast) gets its gradient as x^T da, written into gw_t, with x^T made once here.
        assert not transposed or below is None, "only the first block's input is the data"
        self.x_t = like.t().contiguous() if transposed else None  # (D, N)
        self.b, self.gb = _value(views, lin.bias), _grad(views, lin.bias)  # (H,) each
        # the bias as every row of a (N, H) view, made once: addmm would expand it every call
        self.b_rows = None if self.b is None else self.b.expand(shape)
        # the block's output h (BN: the kernel's, each step), and dL/d(ReLU input) = dh * [h > 0]
        self.act = like.new_empty(shape) if buffers is None else buffers[0]
        # Gradient buffers are shared between blocks of one width, so that a step's data stays
        # in cache: dh alternates between two (a block reads its own and writes the one below),
        # da is used and done with inside one block's backward (in a stacked net, see
        # _train_fast, each block keeps its own for the batched weight gradients).
        index: int = 0 if below is None else below.index + 1
        self.index: int = index  # this block's position, from the input
        self.dh = _scratch(scratch, like, shape, index % 2)  # dL/dh, written by the block above
        self.da = _scratch(scratch, like, shape, 2) if buffers is None else buffers[1]
        self.da_t = self.da.t()  # (H, N)
        self.pre = self.act  # the Linear output
        self.bn: _BnState | None = None
        if block.norm is not None:
            self.bn = _BnState(block.norm, views, steps)
            # BatchNorm subtracts the batch mean, so the Linear bias before it cancels and its
            # gradient is exactly 0: it stays out of the loop (write_back adds it to the running
            # mean, where eager training has it).
            self.b, self.gb, self.b_rows = None, None, None
            self.pre = like.new_empty(shape)


class _BnState:
    """One BatchNorm layer inside the fast loop: gamma/beta views, buffers, momentum schedule."""

    def __init__(self, norm: nn.Module, views: _Views, steps: int) -> None:
        self.weight, self.bias = _value(views, norm.weight), _value(views, norm.bias)  # (H,)
        self.params = [p for p in (self.weight, self.bias) if p is not None]
        self.mask = [True, self.weight is not None, self.bias is not None]
        rm, rv = _buffer(norm, "running_mean"), _buffer(norm, "running_var")
        self.tracking = bool(getattr(norm, "track_running_stats", True)) and rm is not None
        # private copies, updated in place by the kernel each step, written back at the end
        self.running_mean = rm.detach().clone() if self.tracking and rm is not None else None
        self.running_var = rv.detach().clone() if self.tracking and rv is not None else None
        tracked = _buffer(norm, "num_batches_tracked")
        done = int(tracked.item()) if tracked is not None else 0
        momentum = getattr(norm, "momentum", 0.1)
        # the weight of step t's batch statistics in the running average
        self.factors = (
            [1.0 / (done + t + 1) for t in range(steps)]  # momentum=None: batch k weighs 1/k
            if momentum is None
            else [float(momentum)] * steps
        )
        self.eps = float(getattr(norm, "eps", 1e-5))
        self.mean = torch.empty(0)  # this step's batch mean, (H,)
        self.invstd = torch.empty(0)  # this step's 1 / sqrt(var + eps), (H,)

    def write_back(self, norm: nn.Module, linear_bias: torch.Tensor | None, steps: int) -> None:
        """Copy the running statistics (and the step count) into ``norm``'s buffers.

        The loop normalized ``h W^T`` without the Linear bias ``b``, so its running mean lacks
        the part of ``b`` the running average took in: ``b * (1 - prod_t (1 - factor_t))``.
        """
        if not self.tracking or self.running_mean is None or self.running_var is None:
            return
        mean = self.running_mean
        if linear_bias is not None:
            kept = 1.0
            for f in self.factors:
                kept *= 1.0 - f
            mean = torch.add(mean, linear_bias, alpha=1.0 - kept)  # (H,)
        for name, value in (("running_mean", mean), ("running_var", self.running_var)):
            buffer = _buffer(norm, name)
            if buffer is not None:
                buffer.copy_(value)
        tracked = _buffer(norm, "num_batches_tracked")
        if tracked is not None:
            tracked.add_(steps)


def _buffer(module: nn.Module, name: str) -> torch.Tensor | None:
    value = getattr(module, name, None)
    return value if isinstance(value, torch.Tensor) else None
