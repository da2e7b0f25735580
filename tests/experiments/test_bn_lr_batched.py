r"""``bn-lr`` batched (issue 34, item 3): many configurations of one shape trained together give
each configuration the losses it gets alone.

**The tolerance.** A step's loss is the mean of :math:`N = 200` positive per-sample losses.
The batched path computes the same sums as the run alone, but a batched kernel may add their
terms in another order (the stacked ``64 -> 1`` head's products, BatchNorm's statistics and its
weight and bias gradients, the loss's backward under ``vmap``). Summed in any order, :math:`N`
positive float32 terms may move by up to :math:`(N - 1)\,u` relative, :math:`u = 2^{-24}` the
unit roundoff (Higham, *Accuracy and Stability of Numerical Algorithms*, 2002, §4.2:
:math:`|\hat s - s| \le \gamma_{N-1} \sum_i |x_i|`, and :math:`\sum_i |x_i| = s` for positive
terms). So two correct float32 computations of one loss may differ by

.. math::
    \mathrm{RTOL} = (N - 1)\,u = 199 \cdot 2^{-24} \approx 1.19 \times 10^{-5}

relative, and a loss is compared to that. Measured (one torch thread, this project's CPU
machine): every hidden block's forward is bit-identical to the run alone, and so is the SGD
update (``addcmul_`` rounds as SGD's ``add_(grad, alpha=-lr)``); the ``64 -> 1`` head, the
loss's backward and BatchNorm's weight and bias gradients are not. The first loss of every net
without BN and of half the nets with BN is bit-identical, none differs by more than
:math:`2.2 \times 10^{-7}` (2 ulp); over this sweep's 6 steps 56% of the losses are
bit-identical, and 2 of its 96 curves leave RTOL, each where its run alone leaves RTOL too.

**Where no tolerance holds.** Training amplifies a rounding difference from step to step, and a
chaotic run grows it to the size of the loss itself. The default run (lr 2.0 without BN, 150
steps) leaves RTOL at step 9 batched, and at step 8 when it runs alone from initial weights
nudged by one ulp; later both differ from it by more than the loss itself. Past the step where
such a nudge (every initial weight one ulp up, or every one down) moves the run's own loss by
more than RTOL, float32 does not determine the loss to RTOL, and no second computation of it
can be held to RTOL there. A loss that differs by more than RTOL is allowed only from that
step on; the sweep runs 6 steps, where almost every loss is within RTOL (the nudged runs are
trained only for a curve that is not).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import pytest
import torch

from normlab.data import two_moons
from normlab.experiments import get_experiment, params_dict
from normlab.experiments.bn_lr import batch_key, bn_lr_batched, initial_net
from normlab.train import train, train_stacked

RTOL = 199 * 2.0**-24  # (N - 1) u for the mean of N = 200 positive float32 terms
STEPS = 6
LRS = [0.05, 0.1, 0.2, 0.5, 1.0, 1.5, 2.0, 3.0]
INITS = ["default", "xavier", "he"]
SEEDS = [0, 1]


def full(**values: Any) -> dict[str, Any]:
    """Every declared parameter of ``bn-lr``: the defaults, then ``values``, validated."""
    return params_dict(get_experiment("bn-lr").make_params(values))


def alone(config: dict[str, Any]) -> dict[str, Any]:
    """What the experiment's entry yields last for ``config``: the run alone."""
    *_, last = get_experiment("bn-lr").entry(**config)
    return dict(last)


@pytest.fixture(scope="module")
def sweep() -> list[dict[str, Any]]:
    """48 configurations, 8 learning rates x 3 inits x 2 seeds, half of them choosing BN (each
    trains both nets), 6 steps."""
    grid = itertools.product(LRS, INITS, SEEDS)
    return [
        full(lr=lr, init=init, seed=seed, steps=STEPS, batch_norm=k % 2 == 1)
        for k, (lr, init, seed) in enumerate(grid)
    ]


def same_loss(batched: float, alone: float) -> bool:
    """Within RTOL of each other, or both diverged (inf or nan)."""
    if not (math.isfinite(batched) and math.isfinite(alone)):
        return not (math.isfinite(batched) or math.isfinite(alone))
    return abs(batched - alone) <= RTOL * abs(alone)


def determined_until(config: dict[str, Any], batch_norm: bool, curve: list[float]) -> int:
    """The first step at which the run alone (``curve``) moves by more than RTOL when every
    initial weight is nudged by one ulp (all up, or all down); ``len(curve)`` if none does."""
    x, y = two_moons()
    first = len(curve)
    for direction in (math.inf, -math.inf):
        shape = (config["width"], config["hidden_layers"], config["device"])
        net = initial_net(batch_norm, config["init"], config["seed"], *shape)
        with torch.no_grad():
            for p in net.parameters():
                p.copy_(torch.nextafter(p, torch.full_like(p, direction)))
        nudged = list(train(net, x, y, config["lr"], len(curve)))
        moved = [
            t for t, (a, b) in enumerate(zip(nudged, curve, strict=True)) if not same_loss(a, b)
        ]
        first = min([first, *moved])
    return first


def test_a_48_configuration_sweep_batched_gives_the_losses_of_each_run_alone(
    sweep: list[dict[str, Any]],
) -> None:
    batched_entry = get_experiment("bn-lr").batched
    assert batched_entry is not None
    with torch.random.fork_rng(devices=[]):
        results = batched_entry(sweep)
    assert len(results) == 48
    for config, got in zip(sweep, results, strict=True):
        want = alone(config)
        assert got.keys() == want.keys()
        assert (got["batch_norm"], got["lr"]) == (want["batch_norm"], want["lr"])
        for curve in ("losses", "contrast_losses"):
            assert len(got[curve]) == len(want[curve]) == STEPS
            pairs = enumerate(zip(got[curve], want[curve], strict=True))
            off = [t for t, (b, a) in pairs if not same_loss(b, a)]
            if off:  # allowed only where float32 does not determine the run alone to RTOL
                bn = config["batch_norm"] == (curve == "losses")
                assert min(off) >= determined_until(config, bn, want[curve]), (config, curve)


def test_configurations_that_differ_only_in_batch_norm_swap_their_curves() -> None:
    plain, with_bn = full(steps=3, lr=0.5), full(steps=3, lr=0.5, batch_norm=True)
    a, b = bn_lr_batched([plain, with_bn])
    assert (a["batch_norm"], b["batch_norm"]) == (False, True)
    assert a["losses"] == b["contrast_losses"] and a["contrast_losses"] == b["losses"]
    assert a["losses"] != a["contrast_losses"]


def test_train_stacked_trains_each_net_in_place_as_train_does() -> None:
    """Weights and BatchNorm's running statistics after 4 steps, each net at its own (calm)
    rate, as ``train`` leaves its copy: within RTOL relative, and RTOL absolute for an entry
    near 0. The entries are of order 1, and one near 0 is a sum that cancels, whose rounding is
    relative to its terms: the bias of a Linear before BatchNorm gets a zero gradient in exact
    arithmetic (BN subtracts the batch mean), so its float32 value is rounding noise."""
    x, y = two_moons()
    lrs = [0.05, 0.1, 0.2]
    nets = [initial_net(True, "he", seed, 16, 3, "cpu") for seed in range(3)]
    copies = [initial_net(True, "he", seed, 16, 3, "cpu") for seed in range(3)]
    curves = train_stacked(nets, x, y, torch.tensor(lrs), 4)
    for net, copy, lr, curve in zip(nets, copies, lrs, curves, strict=True):
        assert all(same_loss(b, a) for b, a in zip(curve, train(copy, x, y, lr, 4), strict=True))
        got, want = net.state_dict(), copy.state_dict()
        assert got.keys() == want.keys() and any("running_var" in k for k in got)
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=RTOL, atol=RTOL, msg=name)


def test_initial_net_draws_the_nets_bn_lr_trains() -> None:
    config = full(steps=2, init="xavier", seed=3, hidden_layers=2, width=8)
    want = alone(config)
    x, y = two_moons()
    for bn, curve in ((False, "losses"), (True, "contrast_losses")):
        net = initial_net(bn, "xavier", 3, 8, 2, "cpu")
        assert list(train(net, x, y, config["lr"], 2)) == want[curve]  # the same code: exact


# -- the registry's batching hook ---------------------------------------------------------------


def test_bn_lr_declares_its_batched_entry_and_key() -> None:
    experiment = get_experiment("bn-lr")
    assert experiment.batched is bn_lr_batched
    assert experiment.batch_key is batch_key


def test_an_experiment_that_cannot_batch_declares_neither() -> None:
    experiment = get_experiment("drift")
    assert experiment.batched is None and experiment.batch_key is None


@pytest.mark.parametrize("left_out", ["batched", "batch_key"])
def test_batched_and_batch_key_go_together(left_out: str) -> None:
    with pytest.raises(ValueError, match="batched and batch_key"):
        dataclasses.replace(get_experiment("bn-lr"), **{left_out: None})


@pytest.mark.parametrize("change", [{"lr": 0.3}, {"init": "he"}, {"seed": 7}, {"batch_norm": True}])
def test_what_lives_in_the_stacked_weights_may_differ_within_a_batch(
    change: dict[str, Any],
) -> None:
    assert batch_key(full(**change)) == batch_key(full())


@pytest.mark.parametrize(
    "change", [{"width": 32}, {"hidden_layers": 3}, {"steps": 20}, {"device": "cuda"}]
)
def test_a_different_shape_is_a_different_batch(change: dict[str, Any]) -> None:
    assert batch_key({**full(), **change}) != batch_key(full())


def test_bn_lr_batched_refuses_configurations_of_two_shapes() -> None:
    with pytest.raises(ValueError, match="one batch_key"):
        bn_lr_batched([full(steps=2), full(steps=2, width=8)])
