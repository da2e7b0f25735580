"""Toy datasets for the experiments: two moons, standardized per feature.

The moons come from :func:`sklearn.datasets.make_moons` (generated in memory, no download). They
are standardized to mean 0 and std 1 per feature, the regime the variance arguments assume.
:func:`two_moons` is plain code: the training experiments' scripts include it as it is, its
import of scikit-learn at the script's top.

scikit-learn is imported where the points are made, not with this module: it takes longer to
import than torch (``python -X importtime``), and every process that imports the experiments'
registry (``normlab list``, the lab, a sweep's worker) would pay it, though most never make data.
"""

from __future__ import annotations

import torch


def two_moons(
    n_samples: int = 200, noise: float = 0.2, random_state: int = 0, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """The seed notebook's shared dataset: standardized two moons as float32 tensors.

    Args:
        n_samples: number of points (half per class).
        noise: std of the Gaussian noise scikit-learn adds.
        random_state: scikit-learn's seed.
        device: where the tensors live.

    Returns:
        ``(x, y)`` of shapes ``(n_samples, 2)`` and ``(n_samples, 1)``; ``y`` holds 0.0 or 1.0.

    Example::

        >>> x, y = two_moons()
        >>> x.shape, y.shape
        (torch.Size([200, 2]), torch.Size([200, 1]))
        >>> [round(v, 3) for v in x.std(0).tolist()]  # unbiased std of a standardized column
        [1.003, 1.003]
    """
    from sklearn.datasets import make_moons  # here: see the module docstring

    x_np, y_np = make_moons(n_samples=n_samples, noise=noise, random_state=random_state)
    x_np = (x_np - x_np.mean(axis=0)) / x_np.std(axis=0)  # (N, 2): per-feature mean 0, std 1
    x = torch.tensor(x_np, dtype=torch.float32, device=device)
    y = torch.tensor(y_np, dtype=torch.float32, device=device).unsqueeze(1)  # (N,) -> (N, 1)
    return x, y
