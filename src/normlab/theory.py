"""Variance-propagation predictions for deep stacks at initialization.

For a layer :math:`a = W h` with fan-in :math:`n`, zero-mean weights of variance
:math:`\\sigma_w^2` independent of the inputs, :math:`\\mathrm{Var}(a) = n \\sigma_w^2\\,
\\mathbb{E}[h^2]`. Writing :math:`g^2 = n \\sigma_w^2`:

* a linear stack multiplies the variance by :math:`g^2` per layer, so
  :math:`\\mathrm{Var}(a_k) = g^{2k}\\,\\mathrm{Var}(x)`;
* behind a ReLU, :math:`\\mathbb{E}[\\mathrm{relu}(a)^2] = \\mathrm{Var}(a)/2` for symmetric
  :math:`a`, so the pre-activation variance changes by :math:`g^2/2` per layer, which He et al.
  (2015) cancel with :math:`g^2 = 2`; the post-ReLU variance is
  :math:`(\\tfrac12 - \\tfrac1{2\\pi})\\,\\mathrm{Var}(a)`.

These are the mean-field (infinite-width) predictions; a finite layer of width :math:`n` wanders
around them by a relative :math:`O(1/\\sqrt{n})` per layer.
"""

from __future__ import annotations

import math


def linear_variance(gain: float, depth: int, input_variance: float = 1.0) -> list[float]:
    """Predicted variance after each of ``depth`` linear layers: ``input_variance * g**(2k)``.

    >>> [round(v, 4) for v in linear_variance(1.1, 3)]
    [1.21, 1.4641, 1.7716]
    """
    return [input_variance * gain ** (2 * k) for k in range(1, depth + 1)]


def relu_variance(gain: float, depth: int, input_variance: float = 1.0) -> list[float]:
    """Predicted variance of the ReLU outputs of a stack with ``n * Var(w) = gain**2``.

    The input is zero-mean (its second moment is its variance); every later layer reads ReLU
    outputs, whose second moment is half the previous pre-activation variance.

    >>> [round(v, 4) for v in relu_variance(math.sqrt(2.0), 3)]  # He: flat
    [0.6817, 0.6817, 0.6817]
    """
    relu_factor = 0.5 - 1.0 / (2.0 * math.pi)  # Var(relu(a)) / Var(a), a ~ N(0, Var(a))
    out = []
    pre = gain**2 * input_variance  # Var(a_1)
    for _ in range(depth):
        out.append(relu_factor * pre)
        pre = gain**2 * pre / 2.0  # E[relu(a)^2] = Var(a) / 2
    return out
