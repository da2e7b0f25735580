r"""``two-moons``: the toy dataset every training experiment learns, drawn.

:func:`~normlab.data.two_moons` makes two interleaved half circles with scikit-learn's
``make_moons`` (Gaussian noise of std ``noise``), then standardizes each feature,

.. math::
    x'_{ij} = \frac{x_{ij} - \bar{x}_j}{s_j}, \qquad
    s_j = \sqrt{\tfrac{1}{N} \textstyle\sum_i (x_{ij} - \bar{x}_j)^2},

so every feature has mean 0 and (biased) std 1: the regime the variance arguments assume. The
result holds the points of each class and the per-feature mean and unbiased std (``.std()``,
which reads :math:`\sqrt{N/(N-1)}`, 1.003 for 200 points).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from normlab import figures as fig
from normlab.data import two_moons
from normlab.experiments.base.params import device_param, param, seed_param
from normlab.experiments.base.registry import Cost, Experiment
from normlab.experiments.base.results import Result
from normlab.figures import Table
from normlab.models import fmt


@dataclass(frozen=True)
class Params:
    n_samples: int = param(200, "points (half per class)", min=10, max=2000, step=2)
    noise: float = param(0.2, "std of the noise added to the moons", min=0.0, max=1.0, step=0.01)
    seed: int = seed_param()
    device: str = device_param()


# -- the code (plain PyTorch: what `normlab run two-moons --code` prints) ----------------------


def draw_moons(n_samples: int, noise: float, seed: int, device: str) -> dict[str, Any]:
    """The standardized moons (scikit-learn's ``random_state=seed``), split by class."""
    x, y = two_moons(n_samples=n_samples, noise=noise, random_state=seed, device=device)
    x, labels = x.cpu(), y.cpu().squeeze(1)  # (N, 2), (N, 1) -> (N,)
    return {
        "classes": [x[labels == c].T.tolist() for c in (0, 1)],  # per class: (2, N_c) as [x1, x2]
        "means": x.mean(dim=0).tolist(),  # (N, 2) -> (2,)
        "stds": x.std(dim=0).tolist(),  # (2,): unbiased, divides by N - 1
    }


def tables(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Each feature's mean and (unbiased) std after standardizing, and the class sizes."""
    stats = zip(result["means"], result["stds"], strict=True)
    rows = [[f"x{j}", fmt(mean, 3), fmt(std, 3)] for j, (mean, std) in enumerate(stats, start=1)]
    sizes = ", ".join(f"class {c}: {len(points[0])}" for c, points in enumerate(result["classes"]))
    return [
        {
            "title": "Standardized features",
            "columns": ["feature", "mean", "std"],
            "rows": rows,
            "notes": [sizes],
        }
    ]


# -- the result ---------------------------------------------------------------------------------


@dataclass
class TwoMoonsResult(Result):
    classes: list[list[list[float]]]  # (2 classes, 2 features, N_c points)
    means: list[float]  # (2,)
    stds: list[float]  # (2,): unbiased

    def tables(self) -> list[Table]:
        return Table.from_dicts(tables(self.data()))

    def figures(self) -> list[fig.Figure]:
        series = [
            fig.Series(
                f"class {c}",
                points[0],
                points[1],
                kind="markers",
                color=(fig.RED, fig.BLUE)[c],
                marker_size=6.0,
                opacity=0.8,
            )
            for c, points in enumerate(self.classes)
        ]
        panel = fig.Panel(fig.Axis("x1 (standardized)"), fig.Axis("x2 (standardized)"), series)
        n = sum(len(p[0]) for p in self.classes)
        return [fig.Figure(f"The toy dataset: {n} standardized two-moons points", [panel])]


EXPERIMENT = Experiment(
    name="two-moons",
    title="The two-moons dataset",
    summary="the standardized two moons the training experiments learn, one colour per class",
    params_type=Params,
    result_type=TwoMoonsResult,
    entry=draw_moons,
    tables=tables,
    code=(two_moons, draw_moons, fmt, tables),
    cost=Cost(1.0),  # 0.02 s measured at maxima(), one thread (benchmarks/maxima.py): no stream
)
