"""normlab.plots: every experiment draws, and draws its own data.

Each registered experiment runs once with small parameters; the figure's axes count is checked
and at least one drawn series is compared with the Result it came from (exact float equality:
the plot must hand matplotlib the Result's numbers, floored only where a log axis needs it).
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import math
import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.collections import QuadMesh
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle, StepPatch

from normlab import plots
from normlab.experiments import Result, list_experiments, run_experiment
from normlab.experiments.bn_lr import BnLrResult
from normlab.experiments.bn_lr_sweep import BnLrSweepResult, SweepCurve
from normlab.experiments.bn_running_stats import RunningStatsResult
from normlab.experiments.init_compare import Histogram, InitCompareResult, SchemeCurve
from normlab.experiments.init_train import InitTrainResult
from normlab.experiments.linear_scale import LinearScaleResult
from normlab.experiments.variance import VarianceCurve, VarianceResult
from normlab.probe import ActivationProbe, ActivationStats, GradientProbe, GradientStats

# Small, fast parameters per experiment (a new experiment without an entry fails the tests).
SMALL: dict[str, dict[str, Any]] = {
    "linear-scale": {},
    "drift": {"depth": 4},
    "bn-columns": {},
    "bn-running-stats": {"passes": 5},
    "bn-stack": {"depth": 4},
    "symmetry": {"steps": 5, "hidden": 3},
    "variance": {"depth": 8, "width": 32, "batch": 64},
    "init-compare": {"depth": 6, "width": 32, "batch": 64, "hist_layer": 3, "bins": 20},
    "init-train": {"hidden_layers": 3, "width": 8, "steps": 10},
    "bn-from-scratch": {"batch": 128, "parity_batches": 2},
    "bn-lr": {"steps": 10, "hidden_layers": 2, "width": 16},
    "bn-lr-sweep": {"points": 3, "steps": 12, "tail": 2, "width": 8, "hidden_layers": 2},
    "doctor": {"model": "dead-relu", "steps": 1},
}

N_AXES = {
    "linear-scale": 1,
    "drift": 1,
    "bn-columns": 2,
    "bn-running-stats": 2,
    "bn-stack": 1,
    "symmetry": 2,
    "variance": 1,
    "init-compare": 5,
    "init-train": 2,
    "bn-from-scratch": 3,
    "bn-lr": 1,
    "bn-lr-sweep": 1,
    "doctor": 4,
}

NAMES = [e.name for e in list_experiments()]


@cache
def result(name: str) -> Result:
    return run_experiment(name, **SMALL[name])


@cache
def drawn(name: str) -> Figure:
    return plots.figure(result(name))


def line(ax: Axes, label: str) -> Line2D:
    found = [ln for ln in ax.lines if ln.get_label() == label]
    assert len(found) == 1, f"{label!r} not among {[ln.get_label() for ln in ax.lines]}"
    return found[0]


def ydata(ln: Line2D) -> list[float]:
    values: list[float] = np.asarray(ln.get_ydata(), dtype=float).tolist()
    return values


def xdata(ln: Line2D) -> list[float]:
    values: list[float] = np.asarray(ln.get_xdata(), dtype=float).tolist()
    return values


def heights(ax: Axes, container: int) -> list[float]:
    bars = ax.containers[container]
    return [p.get_height() for p in bars if isinstance(p, Rectangle)]


def stairs(ax: Axes) -> list[StepPatch]:
    return [p for p in ax.patches if isinstance(p, StepPatch)]


# -- every experiment ------------------------------------------------------------------------------


def test_every_experiment_has_small_parameters() -> None:
    assert set(NAMES) == set(SMALL) == set(N_AXES)


@pytest.mark.parametrize("name", NAMES)
def test_figure_has_axes_with_content(name: str) -> None:
    fig = drawn(name)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == N_AXES[name]
    for ax in fig.axes:
        if ax.axison:
            assert ax.lines or ax.patches, f"{name}: empty axes {ax.get_title()!r}"
            # a panel sharing its x axis is labelled by the sibling that shows the ticks
            siblings = ax.get_shared_x_axes().get_siblings(ax)
            labelled = any(a.get_xlabel() or a.get_xticklabels() for a in siblings)
            assert labelled, f"{name}: unlabelled x axis"
    titles = [fig.get_suptitle(), *(ax.get_title() for ax in fig.axes)]
    assert any(titles), f"{name}: no title"


def test_linear_scale_bars() -> None:
    r = result("linear-scale")
    assert isinstance(r, LinearScaleResult)
    (ax,) = drawn("linear-scale").axes
    assert heights(ax, 0) == [r.input_std, r.scaled_input_std]
    assert heights(ax, 1) == [r.output_std, r.scaled_output_std]


@pytest.mark.parametrize("name", ["drift", "bn-stack"])
def test_stack_lines_start_at_the_input(name: str) -> None:
    r: Any = result(name)
    (ax,) = drawn(name).axes
    assert ydata(line(ax, "std")) == [r.input_std, *r.stds]
    assert ydata(line(ax, "mean")) == [r.input_mean, *r.means]
    assert xdata(line(ax, "std")) == list(range(len(r.stds) + 1))
    assert ("batch norm" in drawn(name).get_suptitle()) == (name == "bn-stack")


def test_bn_columns_bars() -> None:
    r: Any = result("bn-columns")
    ax_std, ax_mean = drawn("bn-columns").axes
    assert heights(ax_std, 0) == r.input_stds
    assert heights(ax_std, 1) == r.output_stds
    assert ax_std.get_yscale() == "log"
    assert heights(ax_mean, 0) == r.input_means
    assert heights(ax_mean, 1) == r.output_means


def test_bn_running_stats_lines() -> None:
    r: Any = result("bn-running-stats")
    ax_m, ax_v = drawn("bn-running-stats").axes
    for j in range(3):
        assert ydata(line(ax_m, f"feature {j}")) == [0.0, *(row[j] for row in r.running_means)]
        assert ydata(line(ax_v, f"feature {j}")) == [1.0, *(row[j] for row in r.running_vars)]
    line(ax_v, f"true var {r.true_var:g}")  # the legend entry
    dashed = [ydata(ln) for ln in ax_v.lines if ln.get_linestyle() == "--" and ydata(ln)]
    assert dashed == [[r.true_var] * 2]


def test_symmetry_one_line_per_unit() -> None:
    r: Any = result("symmetry")
    fig = drawn("symmetry")
    ax_w, ax_g = fig.axes
    for j in range(3):
        assert ydata(line(ax_w, f"unit {j}")) == [step[j][0] for step in r.weights]
        assert ydata(line(ax_g, f"unit {j}")) == [step[j][0] for step in r.grads]
    assert "overlap" in ax_w.get_title()  # constant init by default
    assert "random init" in fig.get_suptitle()  # the contrast's numbers


def test_variance_measured_and_theory() -> None:
    r: Any = result("variance")
    (ax,) = drawn("variance").axes
    assert ax.get_yscale() == "log"
    for c in r.curves:
        measured = line(ax, f"g = {c.gain:g} measured")
        assert ydata(measured) == c.measured
        assert measured.get_linestyle() == "None"  # markers only
    dashed = [ln for ln in ax.lines if ln.get_linestyle() == "--" and ydata(ln)]
    assert [ydata(ln) for ln in dashed] == [c.theory for c in r.curves]


def test_init_compare_variances_and_histograms() -> None:
    r: Any = result("init-compare")
    left, *hists = drawn("init-compare").axes
    assert left.get_yscale() == "log"
    for c, hax in zip(r.curves, hists, strict=True):
        assert ydata(line(left, c.scheme)) == [max(v, 1e-30) for v in c.variances]
        (patch,) = stairs(hax)
        assert patch.get_data()[0].tolist() == c.histogram.counts
        assert patch.get_data()[1].tolist() == c.histogram.edges
        assert c.scheme in hax.get_title()


def test_init_train_variances_and_loss() -> None:
    r: Any = result("init-train")
    ax_v, ax_l = drawn("init-train").axes
    fwd = line(ax_v, "activation variance (forward)")
    assert ydata(fwd) == [max(v, 1e-12) for v in r.forward_variances]
    bwd = line(ax_v, "gradient variance dL/dh (backward)")
    assert ydata(bwd) == [max(v, 1e-12) for v in r.backward_variances]
    assert ydata(ax_l.lines[0]) == r.losses


def test_bn_from_scratch_histograms_and_parity() -> None:
    r: Any = result("bn-from-scratch")
    ax_b, ax_a, ax_t = drawn("bn-from-scratch").axes
    drawn_hists = [*stairs(ax_b), *stairs(ax_a)]
    # an affine map keeps the counts, so the edges tell the three histograms apart
    for patch, h in zip(drawn_hists, [r.before_hist, r.after_hist, r.rescaled_hist], strict=True):
        assert patch.get_data()[0].tolist() == h.counts
        assert patch.get_data()[1].tolist() == h.edges
    text = ax_t.texts[0].get_text()
    assert "running_var" in text and "input grad" in text


def test_bn_lr_chosen_curve_is_bold() -> None:
    r: Any = result("bn-lr")
    (ax,) = drawn("bn-lr").axes
    chosen = line(ax, "without BN (chosen)")
    contrast = line(ax, "with BN")
    assert ydata(chosen) == [min(v, 5.0) for v in r.losses]
    assert ydata(contrast) == [min(v, 5.0) for v in r.contrast_losses]
    assert chosen.get_linewidth() > contrast.get_linewidth()
    assert ax.get_ylim() == (0.0, 5.0)
    assert f"learning rate {r.lr:g}" in drawn("bn-lr").get_suptitle()


def test_bn_lr_sweep_final_losses_on_log_axes() -> None:
    r: Any = result("bn-lr-sweep")
    fig = drawn("bn-lr-sweep")
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    for c in r.curves:
        name = "with BN" if c.batch_norm else "without BN"
        final = line(ax, name)
        assert xdata(final) == r.lrs
        assert ydata(final) == c.final_losses
        assert ydata(line(ax, f"_peak {name}")) == c.peak_losses
        i = c.largest_stable_lr_index
        if i is not None:  # the vertical dotted line sits at the largest stable rate
            mark = line(ax, f"largest stable rate {name}: {r.lrs[i]:.3g}")
            assert xdata(mark) == [r.lrs[i]] * 2
    # a point is hollow exactly where the run was not stable
    for c in r.curves:
        name = "with BN" if c.batch_norm else "without BN"
        stable = [x for x, ok in zip(r.lrs, c.stable, strict=True) if ok]
        unstable = [x for x, ok in zip(r.lrs, c.stable, strict=True) if not ok]
        assert xdata(line(ax, f"_stable {name}")) == stable
        hollow = line(ax, f"_unstable {name}")
        assert xdata(hollow) == unstable
        assert hollow.get_markerfacecolor() == "white"
    assert "largest stable rate" in ax.get_title()
    assert "steps 12" in fig.get_suptitle()


# -- non-finite data -------------------------------------------------------------------------------

NAN, INF = math.nan, math.inf


def test_bn_lr_non_finite_losses_drawn_at_the_clip() -> None:
    diverged: list[Any] = [0.7, INF, NAN, None]  # None: what to_dict makes of a non-finite loss
    r = BnLrResult(batch_norm=True, lr=5.0, losses=[0.7, 0.5, 0.4, 0.3], contrast_losses=diverged)
    (ax,) = plots.figure(r).axes
    assert ydata(line(ax, "without BN")) == [0.7, 5.0, 5.0, 5.0]
    assert ydata(line(ax, "with BN (chosen)")) == [0.7, 0.5, 0.4, 0.3]


def test_bn_lr_sweep_diverged_runs_drawn_at_the_ceiling() -> None:
    lrs = [0.1, 1.0, 10.0]
    diverged: list[Any] = [0.2, None, INF]  # None: what to_dict makes of a non-finite loss
    plain = SweepCurve(False, diverged, [0.7, NAN, 12.0], [True, False, False])
    bn = SweepCurve(True, [0.05, 0.04, 0.0], [0.3, 0.2, 0.1], [True, True, True])
    fig = plots.figure(BnLrSweepResult(lrs=lrs, curves=[plain, bn]))
    (ax,) = fig.axes
    assert ydata(line(ax, "without BN")) == [0.2, 5.0, 5.0]
    assert ydata(line(ax, "_peak without BN")) == [0.7, 5.0, 5.0]
    assert ydata(line(ax, "with BN")) == [0.05, 0.04, 1e-6]  # 0 floored for the log axis
    assert any("not finite or above 5" in t.get_text() for t in ax.texts)
    assert "without BN 0.1" in ax.get_title() and "with BN 10 (the largest tried)" in ax.get_title()


def test_bn_lr_sweep_with_no_stable_rate() -> None:
    flat = SweepCurve(False, [0.6, 0.6], [0.7, 0.7], [False, False])
    fig = plots.figure(
        BnLrSweepResult(lrs=[0.5, 1.0], curves=[flat, dataclasses.replace(flat, batch_norm=True)])
    )
    (ax,) = fig.axes
    assert "without BN none, with BN none" in ax.get_title()
    assert not [ln for ln in ax.lines if ln.get_label().startswith("largest stable")]


def test_results_rebuilt_from_json_with_nulls_draw() -> None:
    diverged = InitTrainResult(
        method="large",
        forward_variances=[1e3, INF, NAN],
        backward_variances=[0.0, 0.0, 0.0],
        losses=[0.7, INF, NAN],
    )
    again = InitTrainResult(
        **{k: v for k, v in diverged.to_dict().items() if k not in ("experiment", "params")}
    )
    assert again.losses == [0.7, None, None]
    fig = plots.figure(again)
    assert "diverged" in fig.axes[1].get_title()
    assert ydata(fig.axes[0].lines[1]) == [1e-12] * 3  # zero gradient variance, floored


def test_variance_with_zero_inf_and_none_draws() -> None:
    measured: list[Any] = [2.0, INF, 0.0, None]
    curve = VarianceCurve(gain=1.5, measured=measured, theory=[2.25, 5.06, 11.4, 25.6])
    plots.figure(VarianceResult(layers=[1, 2, 3, 4], curves=[curve], activation="linear"))


def test_init_compare_collapsed_and_blown_up() -> None:
    flat = Histogram(counts=[0.0, 100.0, 0.0], edges=[-0.5, -0.1, 0.1, 0.5])
    broken = Histogram(counts=[NAN, NAN], edges=[NAN, INF, INF])
    curves = [
        SchemeCurve("all zero", [0.0, 0.0], [0.0, 0.0], flat),
        SchemeCurve("blown up", [1e30, INF], [1e30, INF], broken),
    ]
    r = InitCompareResult(
        xavier_bound_formula=0.1,
        xavier_max_abs=0.1,
        he_std_formula=0.1,
        he_std_measured=0.1,
        hist_layer=1,
        curves=curves,
    )
    fig = plots.figure(r)
    assert ydata(line(fig.axes[0], "all zero")) == [1e-30, 1e-30]
    assert "not finite" in fig.axes[2].texts[0].get_text()


def test_running_stats_with_nulls_draws() -> None:
    means: list[Any] = [[0.1, None]]
    variances: list[Any] = [[None, 2.0]]
    r = RunningStatsResult(
        running_means=means,
        running_vars=variances,
        batch_means=[[1.0, 1.0]],
        batch_vars=[[INF, 20.0]],
        true_mean=0.0,
        true_var=100.0,
    )
    plots.figure(r)


# -- dispatch and saving --------------------------------------------------------------------------


@dataclass
class _Unknown(Result):
    value: float = 0.0


def test_unknown_result_type_is_named() -> None:
    with pytest.raises(TypeError, match="_Unknown"):
        plots.figure(_Unknown())
    with pytest.raises(TypeError, match="dict"):
        plots.figure(cast(Any, {"experiment": "drift"}))


def test_save_png_and_svg(tmp_path: Path) -> None:
    r = result("drift")
    png = plots.save(r, tmp_path / "drift.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = plots.save(r, str(tmp_path / "drift.SVG"))
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")


@pytest.mark.parametrize("suffix", [".pdf", ".jpg", ""])
def test_save_bad_suffix(tmp_path: Path, suffix: str) -> None:
    with pytest.raises(ValueError, match=r"\.png, \.svg") as info:
        plots.save(result("linear-scale"), tmp_path / f"figure{suffix}")
    assert repr(suffix) in str(info.value)
    assert not list(tmp_path.iterdir())


def test_save_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        plots.save(result("linear-scale"), tmp_path / "nope" / "figure.png")
    assert not (tmp_path / "nope").exists()


def test_draws_from_threads() -> None:
    errors: list[BaseException] = []

    def draw() -> None:
        try:
            for _ in range(2):
                plots.figure(result("linear-scale")).canvas.draw()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=draw) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_no_pyplot() -> None:
    tree = ast.parse(Path(plots.__file__).read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any("pyplot" in name for name in imported)


def _spoil(value: Any, bad: Iterator[float | None]) -> Any:
    """``value`` with every float (at any depth; ints kept) replaced by the next of ``bad``."""
    if isinstance(value, float):
        return next(bad)
    if isinstance(value, list):
        return [_spoil(v, bad) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: _spoil(getattr(value, f.name), bad)
            for f in dataclasses.fields(value)
            if f.name not in ("experiment", "params")
        }
        return dataclasses.replace(value, **changes)
    return value


@pytest.mark.parametrize("mix", ["all none", "mixed"])
@pytest.mark.parametrize("name", NAMES)
def test_non_finite_values_anywhere_still_draw(name: str, mix: str) -> None:
    """``None`` everywhere (a result rebuilt from JSON of a blown-up run), or a cycle of
    0.5, nan, inf, -inf, None over every float: drawing must neither fail nor warn."""
    bad = (
        itertools.repeat(None)
        if mix == "all none"
        else itertools.cycle([0.5, NAN, INF, -INF, None])
    )
    plots.figure(_spoil(result(name), bad)).canvas.draw()


# -- probe statistics (normlab.probe) --------------------------------------------------------------


@cache
def probed() -> tuple[ActivationStats, GradientStats]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Tanh()
    )
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    with ActivationProbe(net) as act, GradientProbe(net, optimizer=opt) as grad:
        for _ in range(4):
            opt.zero_grad()
            net(torch.randn(32, 6, generator=g)).pow(2).mean().backward()
            opt.step()
            act.step()
            grad.step()
    return act.result(), grad.result()


def column(rows: list[list[float]], j: int, floor: float | None = None) -> list[float]:
    return [r[j] if floor is None else max(r[j], floor) for r in rows]


def test_probe_curves_draw_each_layer_over_the_steps() -> None:
    stats, _ = probed()
    fig = plots.probe_curves(stats, ["std", "zero_frac", "saturated_frac"])
    ax_std, ax_zero, ax_sat = fig.axes
    assert ax_std.get_yscale() == "log" and ax_zero.get_yscale() == "linear"
    for j, name in enumerate(stats.layers):
        assert ydata(line(ax_std, name)) == column(stats.std, j, 1e-30)
        assert ydata(line(ax_zero, name)) == column(stats.zero_frac, j)
        assert ydata(line(ax_sat, name)) == column(stats.saturated_frac, j)
        assert xdata(line(ax_std, name)) == [0.0, 1.0, 2.0, 3.0]
    assert "|x| ≥ 0.99" in ax_sat.get_ylabel()
    default = plots.probe_curves(stats)
    assert [ax.get_title() for ax in default.axes] == ["std", "zero_frac"]
    default.canvas.draw()


def test_probe_curves_of_gradients() -> None:
    _, grads = probed()
    fig = plots.probe_curves(grads)
    ax_std, ax_ratio = fig.axes
    assert ax_ratio.get_title() == "update_ratio" and ax_ratio.get_yscale() == "log"
    assert grads.update_ratio is not None
    for j, name in enumerate(grads.layers):
        assert ydata(line(ax_std, name)) == column(grads.grad_std, j, 1e-30)
        drawn_ratio = ydata(line(ax_ratio, name))
        want = column(grads.update_ratio, j)
        assert np.array_equal(drawn_ratio, want, equal_nan=True)  # nan for ReLU and Tanh
    fig.canvas.draw()


def test_probe_curves_with_many_layers_use_a_color_bar() -> None:
    net = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(12)])
    with ActivationProbe(net) as probe:
        net(torch.randn(3, 4))
    fig = plots.probe_curves(probe.result(), ["mean"])
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(ax.lines) == 12
    assert len(fig.axes) == 2 and "forward order" in fig.axes[1].get_ylabel()


def test_probe_heatmap_of_layers_and_of_steps() -> None:
    stats, _ = probed()
    fig = plots.probe_heatmap(stats)
    (ax, _bar) = fig.axes
    (mesh,) = [c for c in ax.collections if isinstance(c, QuadMesh)]
    drawn_counts = np.ma.getdata(mesh.get_array())
    assert drawn_counts.shape == (len(stats.bin_edges) - 1, len(stats.layers))
    assert drawn_counts.T.tolist() == stats.hist[-1]
    assert "step 3" in ax.get_title()
    assert [t.get_text() for t in ax.get_xticklabels()] == stats.layers

    fig = plots.probe_heatmap(stats, layer="1", step=0)
    (mesh,) = [c for c in fig.axes[0].collections if isinstance(c, QuadMesh)]
    assert np.ma.getdata(mesh.get_array()).T.tolist() == [h[1] for h in stats.hist]
    fig.canvas.draw()


def test_probe_figures_refuse_bad_arguments() -> None:
    stats, grads = probed()
    with pytest.raises(ValueError, match=r"statistics \['grad_std'\] not supported"):
        plots.probe_curves(stats, ["grad_std"])
    with pytest.raises(ValueError, match="statistics"):
        plots.probe_curves(grads, [])
    with pytest.raises(ValueError, match="step 4 out of range, use -4 to 3"):
        plots.probe_heatmap(stats, step=4)
    with pytest.raises(ValueError, match="layer 'nope' not probed"):
        plots.probe_heatmap(stats, layer="nope")
    empty = ActivationStats(
        layers=[], kinds=[], mean=[], std=[], min=[], max=[], zero_frac=[],
        saturated_frac=[], hist=[], bin_edges=[-1.0, 0.0, 1.0],
    )  # fmt: skip
    with pytest.raises(ValueError, match="no step recorded"):
        plots.probe_heatmap(empty)
    plots.probe_curves(empty).canvas.draw()  # no step: empty axes, no warning


def test_probe_figures_from_json_with_nulls() -> None:
    stats, grads = probed()
    data = stats.to_dict()
    data["std"] = [[None, 0.0, math.inf, 1.0] for _ in data["std"]]  # a rebuilt blown-up run
    data["hist"] = [[[0] * 40 for _ in stats.layers] for _ in stats.hist]  # nothing counted
    again = ActivationStats(**data)
    ax = plots.probe_curves(again).axes[0]
    assert ydata(line(ax, "1")) == [1e-30] * 4  # a dead layer's std 0 sits on the floor
    plots.probe_heatmap(again).canvas.draw()
    rebuilt = GradientStats(**grads.to_dict())
    plots.probe_curves(rebuilt).canvas.draw()


def test_doctor_figure_draws_each_weight_layer_s_gradient_ratio_against_its_bounds() -> None:
    r = run_experiment("doctor", model="vanishing-sigmoid", steps=1)
    fixed = run_experiment("doctor", model="vanishing-sigmoid", init="lsuv", steps=1)
    before, after = r.diagnosis, fixed.diagnosis  # type: ignore[attr-defined]
    fig = plots.diagnosis_figure(before, after, "lsuv")  # the same layers, re-initialized
    ax_act, ax_rho, ax_grad, _ = fig.axes
    for name, d in (("as given", before), ("lsuv", after)):
        weighted = [(j, la.grad_ratio) for j, la in enumerate(d.layers) if la.kind == "Linear"]
        rho = line(ax_rho, name)
        assert xdata(rho) == [j for j, _ in weighted]  # weight layers only, joined
        assert ydata(rho) == [max(v, plots.DIAGNOSIS_FLOOR) for _, v in weighted]
        assert ydata(line(ax_act, name)) == [la.scale for la in d.layers]
    dotted = sorted(ln.get_ydata()[0] for ln in ax_rho.lines if ln.get_linestyle() == ":")
    assert dotted == [plots.GRAD_VANISHING, plots.GRAD_EXPLODING]
    assert ax_rho.get_yscale() == "log" and ax_grad.get_yscale() == "log"
    assert min(ydata(line(ax_rho, "as given"))) < 1e-15  # the stack's first layer, far below
