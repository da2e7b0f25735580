"""The doctor's vocabulary: its labels, the thresholds that give them (the table in
:mod:`normlab.doctor`), the fix methods, and the order of severity."""

from __future__ import annotations

LABELS = ("non-finite", "vanishing", "exploding", "dead", "saturated", "symmetric", "ok")
"""The label vocabulary: the problems, then ok (the verdict orders them by :data:`SEVERITY`)."""
VANISHING = 1e-2
EXPLODING = 1e2
GRAD_VANISHING = 1e-3
GRAD_EXPLODING = 1e3
DEAD_FRAC = 0.6
SATURATED_FRAC = 0.25
SYMMETRIC_SPREAD = 1e-5
TANH_SATURATION = 0.99
SIGMOID_SATURATION = 0.49  # of |y - 0.5|: y <= 0.01 or y >= 0.99

FIX_METHODS = ("he", "xavier", "orthogonal", "lsuv")
SEVERITY = ("non-finite", "symmetric", "dead", "vanishing", "exploding", "saturated")
"""The order of the problems in a diagnosis (``Diagnosis.problems``, the verdict), most severe
first."""
