"""The chaos-cell experiment: one cell of the mean-field phase diagram, measured against the
theory, batched for the sweep engine, and the edge-of-chaos grid as a sweep of it (issue 34).

The tolerances on the measurement are the edge-of-chaos experiment's, measured there over 12
seeds at width 1000 and depth 50 (tests/experiments/test_edge_of_chaos.py): away from the
critical point one stack's chi_1 stays within 1.4% of the theory's (72 cells x 3 seeds); at the
critical point it scatters by a standard deviation of 0.0063. Between two computations of the
same cells (all at once or one by one) the numbers agree to float32 rounding: rtol 1e-4, atol
1e-6, as test_edge_of_chaos.py's row test derives (1e-6 a layer, not amplified by 10 ordered or
critical layers); the training losses to RTOL = (N - 1) u for a mean of N = 64 positive float32
per-sample losses (Higham 2002, section 4.2; tests/experiments/test_bn_lr_batched.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from normlab import theory
from normlab.experiments import get_experiment, params_dict, run_experiment
from normlab.experiments.chaos_cell import ChaosCellResult, chaos_cell_batched
from normlab.models import GaussianStack
from normlab.sweep import Sweep
from normlab.sweep.summary import summarize_sweep
from normlab.sweep.views import view

RTOL = 63 * 2.0**-24  # (N - 1) u for the mean of N = 64 positive float32 terms
WIDE = {"width": 1000, "depth": 50, "steps": 1, "train_width": 4}  # the measured cells


def full(**values: Any) -> dict[str, Any]:
    """Every declared parameter of ``chaos-cell``: the defaults, then ``values``, validated."""
    return params_dict(get_experiment("chaos-cell").make_params(values))


@pytest.mark.parametrize(
    ("activation", "sigma_w2", "sigma_b2"),
    [("tanh", 1.0, 0.05), ("tanh", 3.0, 0.05), ("erf", 2.5, 0.2), ("linear", 0.8, 0.1)],
)
def test_chi_1_of_a_wide_stack_is_the_theory_s_away_from_the_edge(
    activation: str, sigma_w2: float, sigma_b2: float
) -> None:
    r = run_experiment(
        "chaos-cell", activation=activation, sigma_w2=sigma_w2, sigma_b2=sigma_b2, **WIDE
    )
    assert isinstance(r, ChaosCellResult)
    mf = theory.mean_field(activation, sigma_w2, sigma_b2)
    assert r.chi_1_theory == mf.chi_1 and r.xi_c == mf.xi_c  # normlab.theory's, as it is
    assert r.chi_1 == pytest.approx(mf.chi_1, rel=0.014)
    assert r.trainable_depth == pytest.approx(6 * mf.xi_c)


def test_chi_1_at_the_critical_point_is_1_within_three_standard_deviations() -> None:
    critical = round(theory.critical_sigma_w2("tanh", 0.05), 2)  # 1.76
    r = run_experiment("chaos-cell", sigma_w2=critical, **WIDE)
    assert isinstance(r, ChaosCellResult)
    assert abs(r.chi_1_theory - 1.0) < 0.002  # the rounded critical sigma_w2
    assert abs(r.chi_1 - 1.0) < 3 * 0.0063
    # the layer-by-layer theory ends where the fixed point is, and the settled length (the mean
    # of layers 11-50: 1.3% sd) stays within 3 sd of it
    assert r.q_theory[-1] == pytest.approx(r.q_star, rel=1e-3)
    assert sum(r.q[10:]) / 40 == pytest.approx(r.q_star, rel=3 * 0.013)


def test_the_cells_of_one_seed_share_their_draws() -> None:
    torch.manual_seed(3)
    low = GaussianStack("tanh", 3, 8, 1.0, 0.04)
    torch.manual_seed(3)
    high = GaussianStack("tanh", 3, 8, 4.0, 0.16)
    for a, b in zip(low.parameters(), high.parameters(), strict=True):
        torch.testing.assert_close(b, 2.0 * a, rtol=2e-7, atol=0.0)  # two roundings of Z * s


def test_cells_run_together_as_each_runs_alone() -> None:
    cells = [(0.8, 0.0, 0.1), (1.76, 0.05, 0.2), (3.0, 0.05, 0.05), (3.0, 0.3, 0.1)]
    configs = [
        full(sigma_w2=w, sigma_b2=b, lr=lr, depth=8, width=64, train_width=8, steps=4)
        for w, b, lr in cells
    ]
    together = chaos_cell_batched(configs)
    for config, batched in zip(configs, together, strict=True):
        alone = run_experiment("chaos-cell", **config).data()
        for key in ("q", "c", "growth", "chi_1"):
            torch.testing.assert_close(
                torch.tensor(batched[key]), torch.tensor(alone[key]), rtol=1e-4, atol=1e-6
            )
        for key in ("chi_1_theory", "q_star", "c_star", "xi_c", "q_theory", "c_theory"):
            assert batched[key] == alone[key]  # the same float64 theory
        assert batched["losses"] == pytest.approx(alone["losses"], rel=RTOL, abs=0.0)
    with pytest.raises(ValueError, match="batch_key"):
        chaos_cell_batched([configs[0], full(depth=9, width=64)])


def test_a_sweep_of_cells_is_the_edge_of_chaos_grid(tmp_path: Path) -> None:
    """The edge-of-chaos grid on the sweep engine: a sweep of chaos-cell over the grid's
    variances measures the chi_1 and the correlation the edge-of-chaos experiment measures on
    its grid (the same seed draws the same stack), and the sweep's heat map of chi_1 is the
    experiment's."""
    shared = {"depth": 8, "width": 64, "steps": 2, "train_width": 4, "seed": 5}
    edge = run_experiment("edge-of-chaos", w_points=3, b_points=2, sigma_b2_max=0.2, **shared)
    grid = {"sigma_w2": edge.sigma_w2s, "sigma_b2": edge.sigma_b2s, **shared}  # type: ignore[attr-defined]
    sweep = Sweep("chaos-cell", grid, store=tmp_path / "s.sqlite3")
    summary = sweep.run()
    assert (summary.total, summary.ran, summary.errors) == (6, 6, 0)
    found = {
        (r["params"]["sigma_b2"], r["params"]["sigma_w2"]): r["result"] for r in sweep.records()
    }
    for row, sb2 in enumerate(edge.sigma_b2s):  # type: ignore[attr-defined]
        for col, sw2 in enumerate(edge.sigma_w2s):  # type: ignore[attr-defined]
            cell = found[(sb2, sw2)]
            measured = [cell["chi_1"], cell["c"][-1]]
            expected = [edge.chi_1[row][col], edge.c[row][col]]  # type: ignore[attr-defined]
            torch.testing.assert_close(
                torch.tensor(measured), torch.tensor(expected), rtol=1e-4, atol=1e-6
            )
    chi_map = view(summarize_sweep(sweep), "sigma_w2", "sigma_b2", "chi_1").figures()[0]
    z = chi_map.panels[0].series[0].z  # (rows: sigma_b2, columns: sigma_w2)
    assert z is not None
    torch.testing.assert_close(
        torch.tensor(z, dtype=torch.float32),
        torch.tensor(edge.chi_1),
        rtol=1e-4,
        atol=1e-6,  # type: ignore[attr-defined]
    )


# What its script also runs at in tests/test_script.py (the first is its notebook's).
SCRIPT_SETTINGS = [
    {"activation": "erf", "sigma_w2": 3.0, "depth": 6, "width": 32, "steps": 3},
    {"activation": "linear", "sigma_w2": 0.9, "sigma_b2": 0.0, "depth": 4, "steps": 2},
]


# (params, optimizer steps) for tests/test_registry.py's progress test.
PROGRESS = ({"steps": 7, "depth": 4, "width": 16}, 7)


# What it streams with in tests/test_registry.py's streaming test.
STREAMING = {"steps": 5, "depth": 4, "width": 16}


# What grows in its streamed result, and how many partials STREAMING gives before the last
# yield (tests/test_registry.py): the measurement (its chi_1), then a loss a step.
CURVE = (lambda d: [d["chi_1"], *d["losses"]], 6)


def seed_figure(d: dict[str, Any]) -> bool:
    """What its default run must show (tests/lab/test_api.py runs it through HTTP): at the
    critical point of sigma_b2 = 0.05 the measured chi_1 is 1 (width 512: 0.0063 x sqrt(1000 /
    512) = 0.0088 sd, 3 sd allowed), and the stack trains below chance."""
    return abs(d["chi_1"] - 1.0) < 0.027 and d["losses"][-1] < 0.6931
