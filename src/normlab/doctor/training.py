"""The training check after a fix: the model as given and the fixed one, trained side by side
on a proxy task (the doctor's one optimizer step)."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from normlab.doctor.running import Input, _call
from normlab.probe import finite_or_none

TRIAL_STEPS, TRIAL_LR = 100, 1e-3


@dataclass
class Trial:
    """A short training run of the model as given and of the fixed one: the same batches, the
    same targets, the same optimizer (Adam, :data:`TRIAL_LR`), :data:`TRIAL_STEPS` steps.

    The task is a proxy any model has: fit a fixed random target of the output's shape by mean
    squared error. A fix that leaves the model harder to train shows as a higher loss; only a
    lower one is called a cure.
    """

    steps: int
    before: list[float]  # the loss at each step, the model as given
    after: list[float]  # the same for the fixed model

    @property
    def cured(self) -> bool:
        return self.after[-1] < self.before[-1]

    def words(self) -> str:
        b, a = self.before, self.after
        how = "lowered" if self.cured else "did not lower"
        advice = "" if self.cured else ": not a cure, keep the model as built"
        return (
            f"training check ({self.steps} Adam steps on a proxy task): the fix {how} the loss, "
            f"{b[0]:.4g} -> {b[-1]:.4g} as given, {a[0]:.4g} -> {a[-1]:.4g} fixed{advice}"
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = finite_or_none(dataclasses.asdict(self))
        out["cured"] = self.cured
        return out


def trial(
    given: nn.Module,
    fixed: nn.Module,
    batches: Sequence[Input],
    *,
    steps: int = TRIAL_STEPS,
    generator: torch.Generator | None = None,
    output: str | None = None,
) -> Trial:
    """Train copies of ``given`` and ``fixed`` side by side (see :class:`Trial`); the models
    themselves are left as they are."""
    seed = int(torch.randint(2**62, (1,), generator=generator))
    losses = []
    for model in (given, fixed):
        net = copy.deepcopy(model)
        g = torch.Generator().manual_seed(seed)  # the same targets for both
        opt = torch.optim.Adam(net.parameters(), lr=TRIAL_LR)
        target: torch.Tensor | None = None
        curve = []
        for step in range(steps):
            x = batches[step % len(batches)]
            opt.zero_grad()
            out = _call(net, x, output)
            if target is None:
                target = torch.randn(out.shape, generator=g).to(out.device)
            loss = torch.nn.functional.mse_loss(out, target)
            loss.backward()
            opt.step()
            curve.append(loss.item())
        losses.append(curve)
    return Trial(steps, losses[0], losses[1])
