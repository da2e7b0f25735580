"""Toy datasets for the experiments: two moons, standardized per feature.

The moons come from :func:`sklearn.datasets.make_moons` (generated in memory, no download). They
are standardized to mean 0 and std 1 per feature, the regime the variance arguments assume.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch


@lru_cache(maxsize=8)
def _moons_numpy(n_samples: int, noise: float, random_state: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_moons

    x, y = make_moons(n_samples=n_samples, noise=noise, random_state=random_state)
    x = (x - x.mean(axis=0)) / x.std(axis=0)  # (N, 2): per-feature mean 0, biased std 1
    return x, y


def two_moons(
    n_samples: int = 200,
    noise: float = 0.2,
    random_state: int = 0,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Standardized two-moons data as float32 tensors.

    Args:
        n_samples: number of points (half per class).
        noise: std of the Gaussian noise added by scikit-learn.
        random_state: scikit-learn's seed.
        device: where the tensors live.

    Returns:
        ``(x, y)`` with shapes ``(n_samples, 2)`` and ``(n_samples, 1)``; ``y`` holds 0.0 or 1.0.

    Example::

        >>> x, y = two_moons()
        >>> x.shape, y.shape
        (torch.Size([200, 2]), torch.Size([200, 1]))
        >>> [round(v, 3) for v in x.std(0).tolist()]  # unbiased std of a standardized column
        [1.003, 1.003]
    """
    if n_samples < 2:
        raise ValueError(f"n_samples must be at least 2, got {n_samples}")
    x, y = _moons_numpy(n_samples, float(noise), random_state)
    xt = torch.tensor(x, dtype=torch.float32, device=device)
    yt = torch.tensor(y, dtype=torch.float32, device=device).unsqueeze(1)  # (N,) -> (N, 1)
    return xt, yt
