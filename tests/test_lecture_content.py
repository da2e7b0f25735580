"""The lecture's remaining content, measured: the dataset, the error surface, BatchNorm's
regularizing noise, and BatchNorm's reduced sensitivity to the initializer (issue 18).

Like the seed figures, these are numbers of live runs at the experiments' defaults; each test
asserts a property that a change in the code (or in the claim) would break.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from sklearn.datasets import make_moons

from normlab.experiments import Result, run_experiment

Run = Callable[..., Result]


# -- the dataset ------------------------------------------------------------------------------


def test_the_scatter_is_the_notebook_s_standardized_moons(cached_run: Run) -> None:
    r = cached_run("two-moons")
    x_np, y_np = make_moons(n_samples=200, noise=0.2, random_state=0)
    x_np = (x_np - x_np.mean(axis=0)) / x_np.std(axis=0)
    for c, points in enumerate(r.classes):
        expected = x_np[y_np == c].T  # (2, 100)
        np.testing.assert_allclose(np.array(points), expected, atol=1e-6)  # float32 of them
    assert [len(p[0]) for p in r.classes] == [100, 100]
    assert [f"{m:.3f}" for m in r.means] in (["0.000", "0.000"], ["-0.000", "0.000"])
    assert [f"{s:.3f}" for s in r.stds] == ["1.003", "1.003"]  # the notebook's print
    (figure,) = r.figures()
    (panel,) = figure.panels
    assert [s.kind for s in panel.series] == ["markers", "markers"]  # a scatter, no lines
    assert [len(s.x) for s in panel.series] == [100, 100]


def test_more_noise_blurs_the_moons_but_keeps_them_standardized() -> None:
    r = run_experiment("two-moons", n_samples=400, noise=0.5, seed=3)
    assert [len(p[0]) for p in r.classes] == [200, 200]
    assert all(abs(m) < 1e-5 for m in r.means)
    assert [round(s, 4) for s in r.stds] == [round(math.sqrt(400 / 399), 4)] * 2


# -- the error surface ------------------------------------------------------------------------


def test_two_starts_end_in_two_minima_with_a_ridge_between(cached_run: Run) -> None:
    r = cached_run("error-surface")
    assert all(loss < 0.1 for loss in r.final_losses)  # both starts trained
    assert all(acc >= 0.97 for acc in r.accuracies)
    assert r.end_distance > 1.5 * r.start_distance  # training took them further apart
    # the slice passes through both ends: alpha 0 is end A, alpha 1 is end B
    a0, a1 = r.alphas.index(0.0), r.alphas.index(1.0)
    assert r.slice[a0] == pytest.approx(r.final_losses[0], abs=1e-6)
    assert r.slice[a1] == pytest.approx(r.final_losses[1], abs=1e-6)
    # non-convex: somewhere between the ends the loss lies above the chord between them
    chord = [(1 - a) * r.final_losses[0] + a * r.final_losses[1] for a in r.alphas]
    above = [v - c for a, v, c in zip(r.alphas, r.slice, chord, strict=True) if 0 < a < 1]
    assert max(above) > 0.3
    assert r.barrier > 0.3 and r.peak_between > 5 * max(r.final_losses)
    assert r.slice[0] > r.final_losses[0] and r.slice[-1] > r.final_losses[1]  # valleys


@pytest.mark.parametrize("seed", [1, 2])
def test_the_ridge_is_there_for_other_starts_too(seed: int) -> None:
    r = run_experiment("error-surface", seed=seed)
    assert r.barrier > 0.2 and max(r.final_losses) < 0.1


def test_the_same_start_ends_in_the_same_place() -> None:
    again = run_experiment("error-surface", steps=50)
    assert again.to_dict() == run_experiment("error-surface", steps=50).to_dict()
    one_start = run_experiment("error-surface", width=4, hidden_layers=1, steps=1, points=5)
    assert one_start.start_distance > 0  # the two starts are two draws, never the same


# -- BatchNorm's regularizing noise -----------------------------------------------------------


def test_batch_statistics_make_a_point_s_output_depend_on_its_batch(cached_run: Run) -> None:
    plain, bn = cached_run("bn-regularization").runs
    assert plain.noise == 0.0  # without BN an example's output ignores its batch-mates
    assert bn.noise > 0.5  # with BN its logit moves by more than half a unit


def test_bn_narrows_the_train_test_gap_without_buying_accuracy(cached_run: Run) -> None:
    r = cached_run("bn-regularization")
    plain, bn = r.runs
    assert len(plain.train) == len(bn.test) == r.params["epochs"]
    assert 0 < bn.gap < plain.gap  # the held-out loss sits closer to the training loss
    assert bn.train[-1] > plain.train[-1]  # ... mostly because BN fits the training set less
    # on this toy task the accuracies barely differ: regularization, not a better classifier
    assert abs(bn.test_acc[-1] - plain.test_acc[-1]) < 0.03
    assert all(0.85 < acc < 0.95 for acc in (bn.test_acc[-1], plain.test_acc[-1]))


# -- BatchNorm and the initializer ------------------------------------------------------------


def test_init_default_is_bn_lr_as_it_was(cached_run: Run) -> None:
    default = cached_run("bn-lr")
    assert default.params["init"] == "default"
    assert run_experiment("bn-lr", init="default", steps=20).losses == default.losses[:20]


@pytest.mark.parametrize("init", ["small", "large", "xavier", "he"])
def test_with_bn_every_initializer_trains_at_lr_2(cached_run: Run, init: str) -> None:
    r = cached_run("bn-lr", init=init)
    bn = r.losses_with(True)
    assert all(math.isfinite(v) for v in bn) and bn[-1] < 0.1


def test_without_bn_the_initializer_decides(cached_run: Run) -> None:
    last = {i: cached_run("bn-lr", init=i).losses_with(False)[-1] for i in ("small", "large", "he")}
    assert last["small"] == pytest.approx(math.log(2), abs=1e-3)  # the signal vanished: 50/50
    assert not math.isfinite(last["large"]) and not math.isfinite(last["he"])  # diverged
