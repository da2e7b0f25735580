"""Shared pieces of the browser tests: where things are, and the API seen from the test."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM = os.environ.get("NORMLAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
START_TIMEOUT_S = 120.0
ALLOWED_HOST = "127.0.0.1"

# Training widgets start from fewer steps so every change answers quickly on a small CI box
# (and their scripts run within the playground's time limit); starting from the address is
# itself part of what is tested.
PRESETS = {
    "initialization": (
        "?symmetry.steps=8&init-train.steps=12&init-compare.depth=12&error-surface.steps=40"
    ),
    "bn-from-scratch": (
        "?bn-lr.steps=12&bn-from-scratch.parity_batches=2"
        "&bn-lr-sweep.points=3&bn-lr-sweep.steps=30&bn-lr-sweep.tail=3"
    ),
    "bn-training": "?bn-regularization.epochs=4&bn-lr.steps=12",
    # the grid trains a stack per cell: a small grid, narrow stacks and a few steps here
    "edge-of-chaos": (
        "?edge-of-chaos.w_points=4&edge-of-chaos.b_points=2&edge-of-chaos.width=128"
        "&edge-of-chaos.steps=3"
    ),
    "residual-normalization": (
        "?bn-gradient-explosion.depth=16&bn-gradient-explosion.width=64"
        "&bn-gradient-explosion.batch=32&residual-stream.depth=12&residual-stream.d_model=32"
    ),
    # the coordinate check trains 2 x (5 widths + 6 depths) nets: fewer, narrower ones here
    "width-depth": "?coord-check.max_width=256&coord-check.max_depth=8&coord-check.depth_width=64",
}


def api(base: str, name: str, params: dict[str, Any]) -> tuple[int, Any]:
    """POST the experiment API from the test side: (status, JSON body)."""
    req = urllib.request.Request(
        f"{base}/api/experiments/{name}",
        data=json.dumps(params).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def registry(base: str) -> Any:
    """GET /api/experiments."""
    with urllib.request.urlopen(f"{base}/api/experiments", timeout=30) as r:
        return json.loads(r.read())


# A right answer to the he-derivation exercise (measure the kept fraction, derive the std).
HE_RIGHT = """import math

import torch

def kept_fraction(activation):
    z = torch.randn(10**6)
    return ((activation(z) ** 2).mean() / (z**2).mean()).item()

def init_std(fan_in, kept):
    return math.sqrt(1.0 / (kept * fan_in))
"""
