"""What each widget's plot must show for a Result: trace ``meta`` -> y values (``EXPECTED``),
and, where the x values carry data too, trace ``meta`` -> x values (``EXPECTED_X``).

These mirror ``lab.js``'s views (and ``normlab.plots``): the same fields, floors and clipping.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

LOG_FLOOR = 1e-30
INIT_TRAIN_FLOOR = 1e-12
LOSS_CLIP = 5.0
SWEEP_FLOOR = 1e-6
MAX_LINES = 8

Traces = dict[str, list[Any]]


def _floor(xs: list[float | None], floor: float) -> list[float | None]:
    return [None if v is None else max(v, floor) for v in xs]


def _clip(xs: list[float | None]) -> list[float]:
    return [
        LOSS_CLIP if v is None or not math.isfinite(v) else min(max(v, 0.0), LOSS_CLIP) for v in xs
    ]


def _stack(r: dict[str, Any]) -> Traces:
    return {"std": [r["input_std"], *r["stds"]], "mean": [r["input_mean"], *r["means"]]}


def _running(r: dict[str, Any]) -> Traces:
    out: Traces = {}
    for j in range(min(len(r["running_means"][0]), MAX_LINES)):
        out[f"running_mean:{j}"] = [0, *(row[j] for row in r["running_means"])]
        out[f"running_var:{j}"] = [1, *(row[j] for row in r["running_vars"])]
        out[f"batch_mean:{j}"] = [row[j] for row in r["batch_means"]]
        out[f"batch_var:{j}"] = [row[j] for row in r["batch_vars"]]
    return out


def _symmetry(r: dict[str, Any]) -> Traces:
    hidden = len(r["weights"][0])
    out: Traces = {}
    for j in range(hidden):
        out[f"weight:{j}"] = [w[j][0] for w in r["weights"]]
        out[f"grad:{j}"] = [g[j][0] for g in r["grads"]]
    return out


def _variance(r: dict[str, Any]) -> Traces:
    out: Traces = {}
    for i, c in enumerate(r["curves"]):
        out[f"measured:{i}"] = _floor(c["measured"], LOG_FLOOR)
        out[f"theory:{i}"] = _floor(c["theory"], LOG_FLOOR)
    return out


def _init_compare(r: dict[str, Any]) -> Traces:
    out: Traces = {}
    for i, c in enumerate(r["curves"]):
        out[f"variance:{i}"] = _floor(c["variances"], LOG_FLOOR)
        out[f"theory:{i}"] = _floor(c["theory"], LOG_FLOOR)
        out[f"hist:{i}"] = [0 if v is None else v for v in c["histogram"]["counts"]]
    return out


def _bn_lr(r: dict[str, Any]) -> Traces:
    chosen = r["batch_norm"]
    return {
        f"bn:{'true' if chosen else 'false'}": _clip(r["losses"]),
        f"bn:{'false' if chosen else 'true'}": _clip(r["contrast_losses"]),
    }


def _sweep_shown(xs: list[float | None]) -> list[float]:
    """Not finite or above the ceiling: on the ceiling; otherwise floored for the log axis."""
    return [
        LOSS_CLIP if v is None or not math.isfinite(v) or v > LOSS_CLIP else max(v, SWEEP_FLOOR)
        for v in xs
    ]


def _bn_lr_sweep(r: dict[str, Any]) -> Traces:
    out: Traces = {}
    for c in r["curves"]:
        bn = "true" if c["batch_norm"] else "false"
        out[f"final:{bn}"] = out[f"dots:{bn}"] = _sweep_shown(c["final_losses"])
        out[f"peak:{bn}"] = _sweep_shown(c["peak_losses"])
    return out


def _bn_lr_sweep_x(r: dict[str, Any]) -> Traces:
    out: Traces = {}
    for c in r["curves"]:
        bn = "true" if c["batch_norm"] else "false"
        out[f"final:{bn}"] = out[f"dots:{bn}"] = r["lrs"]
        out[f"peak:{bn}"] = r["lrs"]
        stable = [i for i, ok in enumerate(c["stable"]) if ok]
        if stable:  # a dotted vertical line at the largest stable rate (its y spans the axis)
            out[f"largest:{bn}"] = [r["lrs"][stable[-1]]] * 2
    return out


def _doctor(r: dict[str, Any]) -> Traces:
    return {
        key: _floor([layer[key] for layer in r["layers"]], LOG_FLOOR)
        for key in ("act_std", "grad_ratio", "grad_std")
    }


EXPECTED: dict[str, Callable[[dict[str, Any]], Traces]] = {
    "doctor": _doctor,
    "linear-scale": lambda r: {
        "input_std": [r["input_std"], r["scaled_input_std"]],
        "output_std": [r["output_std"], r["scaled_output_std"]],
    },
    "drift": _stack,
    "bn-stack": _stack,
    "bn-columns": lambda r: {
        "std_before": _floor(r["input_stds"], 1e-12),
        "std_after": _floor(r["output_stds"], 1e-12),
        "mean_before": r["input_means"],
        "mean_after": r["output_means"],
    },
    "bn-running-stats": _running,
    "symmetry": _symmetry,
    "variance": _variance,
    "init-compare": _init_compare,
    "init-train": lambda r: {
        "forward": _floor(r["forward_variances"], INIT_TRAIN_FLOOR),
        "backward": _floor(r["backward_variances"], INIT_TRAIN_FLOOR),
        "loss": r["losses"],
    },
    "bn-from-scratch": lambda r: {
        "before": r["before_hist"]["counts"],
        "after": r["after_hist"]["counts"],
        "rescaled": r["rescaled_hist"]["counts"],
    },
    "bn-lr": _bn_lr,
    "bn-lr-sweep": _bn_lr_sweep,
}

EXPECTED_X: dict[str, Callable[[dict[str, Any]], Traces]] = {
    "bn-lr-sweep": _bn_lr_sweep_x,
}
