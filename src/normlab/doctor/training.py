r"""The training check: the model as given and a remedied one, trained side by side over a few
seeds on a proxy task, and the margin a lower loss must clear before it is called a cure.

The proxy task is one any model has: fit a fixed random target :math:`t \sim \mathcal{N}(0, 1)`
of the output's shape by mean squared error, with Adam at :data:`TRIAL_LR` for
:data:`TRIAL_STEPS` steps, cycling through the given batches. The target has unit scale, not
the output's: the data a model is trained on is standardized, so a unit target is the task a
practitioner poses, and a model whose output is :math:`10^{15}` at init really is harder to
train there. A target scaled to each model's own output would hide exactly that, and would
give the two models different tasks. Each seed draws its own target; both models get the same
target and the same batches, in the same order.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from normlab.doctor.results import Diagnosis
from normlab.doctor.running import Input, _call, _map, _steps
from normlab.probe import finite_or_none

TRIAL_STEPS, TRIAL_LR, TRIAL_SEEDS = 100, 1e-3, 3
MIN_SEEDS, MAX_SEEDS, MIN_STEPS, MAX_STEPS = 2, 10, 10, 1000
CURE_GAIN = 0.05
"""The least a cure must lower the loss (5%, over the seeds' geometric mean): a smaller gain is
what a change of learning rate or a longer run gives, too little to call a change a cure."""


def _final(curve: Sequence[float]) -> float:
    """The loss a run ended at: the mean of its last tenth (at least one step), which wiggles
    less than the last step alone (Adam's step noise, and which batch came last)."""
    tail = curve[-max(1, len(curve) // 10) :]
    return sum(tail) / len(tail)


def _log(loss: float) -> float:
    """``ln loss``; a diverged run (inf or nan) counts as the worst, ``+inf``."""
    if not math.isfinite(loss):
        return math.inf
    return math.log(loss) if loss > 0 else -math.inf


@dataclass
class Trial:
    r"""A short training run, over a few seeds, of the model as given and of the remedied one.

    For seed :math:`s` let :math:`b_s` and :math:`a_s` be the final losses (the mean of the
    last tenth of the steps) as given and remedied, and :math:`d_s = \ln b_s - \ln a_s` the
    gain (logs, because broken models' losses span orders of magnitude and a cure is a factor).
    The remedy **lowered the loss** when

    1. :math:`d_s > 0` on every seed: with no effect at all each sign is a coin flip, and all
       :math:`K` agree by chance :math:`2^{-K}` of the time;
    2. the mean gain exceeds the **seed-to-seed spread**,
       :math:`\bar d > \max_s \ln b_s - \min_s \ln b_s`: how far the given model's own loss
       moves when only the seed (the target) changes. A difference smaller than that cannot
       be told from a change of seed. The same model on both sides gives :math:`d_s = 0`
       exactly, and a :math:`10^{-6}` gain is far below any spread;
    3. :math:`\bar d \ge -\ln(1 - \text{CURE\_GAIN})`: at least 5% lower (:data:`CURE_GAIN`).

    It is a **cure** only when, besides, a re-diagnosis of the remedied model no longer flags
    the problems the remedy was tried for, nor any new one (``flagged`` is empty); without a
    re-diagnosis (``flagged`` is ``None``) nothing is called a cure.

    A diverged run's loss counts as :math:`+\infty`; the spread is taken over the finite ones.
    """

    steps: int
    seeds: list[int]
    before: list[float]  # per seed: the final loss of the model as given
    after: list[float]  # per seed: the final loss of the remedied model
    warmup: int = 0  # linear learning-rate warm-up steps of the remedied run (0: none)
    flagged: list[str] | None = None  # what the re-diagnosis still flags; None: not re-diagnosed
    curve_before: list[float] = field(default_factory=list)  # the first seed's loss per step
    curve_after: list[float] = field(default_factory=list)

    @property
    def gains(self) -> list[float]:
        """:math:`d_s = \\ln b_s - \\ln a_s` per seed (nan where both runs diverged)."""
        out = []
        for b, a in zip(self.before, self.after, strict=True):
            lb, la = _log(b), _log(a)
            out.append(math.nan if lb == la and math.isinf(lb) else lb - la)
        return out

    @property
    def gain(self) -> float:
        """The mean gain :math:`\\bar d` (``exp`` of it: how many times lower the loss is)."""
        gains = self.gains
        return math.nan if any(math.isnan(d) for d in gains) else sum(gains) / len(gains)

    @property
    def spread(self) -> float:
        """The given model's seed-to-seed range of :math:`\\ln b_s` (finite losses only)."""
        logs = [_log(b) for b in self.before if math.isfinite(_log(b))]
        return max(logs) - min(logs) if len(logs) >= 2 else 0.0

    @property
    def lowered(self) -> bool:
        """Conditions 1 to 3: lower on every seed, by more than the spread and by 5%."""
        floor = -math.log(1 - CURE_GAIN)
        gains = self.gains
        return all(d > 0 for d in gains) and self.gain > self.spread and self.gain >= floor

    @property
    def cured(self) -> bool:
        """Lowered the loss, and re-diagnosed with none of the problems left."""
        return self.lowered and self.flagged == []

    def words(self, what: str = "the fix") -> str:
        """One sentence: both losses per seed, then :meth:`verdict`."""
        b = ", ".join(f"{x:.4g}" for x in self.before)
        a = ", ".join(f"{x:.4g}" for x in self.after)
        warm = f" (warm-up over its first {self.warmup} steps)" if self.warmup else ""
        return (
            f"training check ({self.steps} Adam steps on a proxy task, {len(self.seeds)} seeds):"
            f" final loss {b} as given, {a} with {what}{warm}; {self.verdict(what)}"
        )

    def verdict(self, what: str = "the fix") -> str:
        """The gain against the spread, the re-diagnosis, and whether that makes a cure."""
        if self.cured:
            return (
                f"{what} lowered the loss {math.exp(self.gain):.3g}x (log gain {self.gain:.3g}, "
                f"seed-to-seed spread {self.spread:.3g}) and the re-diagnosis no longer flags "
                "the problem: a cure"
            )
        return f"{self._why_not(what)}: not a cure, keep the model as built"

    def _why_not(self, what: str) -> str:
        gain = self.gain
        if not all(d > 0 for d in self.gains):
            loss = f"the loss did not fall on every seed with {what}"
        elif not self.lowered:
            loss = (
                f"the loss fell {math.exp(gain):.3g}x, within the seed-to-seed spread "
                f"({math.exp(self.spread):.3g}x) or under {CURE_GAIN:.0%}"
            )
        else:
            loss = f"the loss fell {math.exp(gain):.3g}x on every seed"
        if self.flagged is None:
            return f"{loss}, and the remedied model was not re-diagnosed"
        if self.flagged:
            return f"{loss}, but the re-diagnosis still flags {', '.join(self.flagged)}"
        return loss

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = finite_or_none(dataclasses.asdict(self))
        extra = {"gain": self.gain, "spread": self.spread}
        out |= finite_or_none(extra) | {"lowered": self.lowered, "cured": self.cured}
        return out


def _check_trial(steps: int, seeds: int, warmup: int = 0) -> None:
    if not MIN_STEPS <= steps <= MAX_STEPS:
        raise ValueError(f"steps={steps} not allowed, use an integer in [{MIN_STEPS}, {MAX_STEPS}]")
    if not MIN_SEEDS <= seeds <= MAX_SEEDS:
        raise ValueError(
            f"seeds={seeds} not allowed, use an integer in [{MIN_SEEDS}, {MAX_SEEDS}]: "
            "the spread needs two seeds at least"
        )
    if not 0 <= warmup <= steps:
        raise ValueError(f"warmup={warmup} not allowed, use an integer in [0, steps={steps}]")


def _seeds(generator: torch.Generator | None, k: int) -> list[int]:
    return [int(s) for s in torch.randint(2**62, (k,), generator=generator)]


def _train(
    model: nn.Module,
    batches: Sequence[Input],
    seed: int,
    *,
    steps: int,
    warmup: int = 0,
    output: str | None = None,
) -> tuple[list[float], nn.Module]:
    """Train a copy of ``model`` on the proxy task for ``seed``; the loss per step, and the copy.

    With ``warmup`` the learning rate rises linearly, :math:`\\eta_t = \\eta \\min(1, (t + 1) /
    \\text{warmup})`, then stays at :data:`TRIAL_LR`.
    """
    net = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)  # the same targets for every model of this seed
    opt = torch.optim.Adam(net.parameters(), lr=TRIAL_LR)
    targets: dict[tuple[int, torch.Size], torch.Tensor] = {}  # per batch and output shape
    curve = []
    for step in range(steps):
        k = step % len(batches)
        for group in opt.param_groups:
            group["lr"] = TRIAL_LR * (min(1.0, (step + 1) / warmup) if warmup else 1.0)
        opt.zero_grad()
        out = _call(net, _map(batches[k], torch.Tensor.clone), output)  # in-place ops: a copy
        if (key := (k, out.shape)) not in targets:  # an output length the model computes
            targets[key] = torch.randn(out.shape, generator=g).to(out)  # (out.shape)
        loss = torch.nn.functional.mse_loss(out, targets[key])
        loss.backward()
        opt.step()
        curve.append(loss.item())
    return curve, net


def _flagged(before: Diagnosis, after: Diagnosis, addresses: Sequence[str] | None) -> list[str]:
    """The re-diagnosis's problems that bar a cure: those the remedy was tried for (of
    ``addresses``, all when ``None``) that are still there, and any the model did not have."""
    return [
        p for p in after.problems if p not in before.problems or addresses is None or p in addresses
    ]


def _trial(
    seeds: list[int],
    before: list[list[float]],
    after: list[list[float]],
    *,
    warmup: int = 0,
    flagged: list[str] | None = None,
) -> Trial:
    return Trial(
        steps=len(before[0]),
        seeds=seeds,
        before=[_final(c) for c in before],
        after=[_final(c) for c in after],
        warmup=warmup,
        flagged=flagged,
        curve_before=before[0],
        curve_after=after[0],
    )


def trial(
    given: nn.Module,
    fixed: nn.Module,
    batches: Input | Sequence[Input],
    *,
    steps: int = TRIAL_STEPS,
    seeds: int = TRIAL_SEEDS,
    generator: torch.Generator | None = None,
    output: str | None = None,
    warmup: int = 0,
    diagnoses: tuple[Diagnosis, Diagnosis] | None = None,
    addresses: Sequence[str] | None = None,
) -> Trial:
    """Train copies of ``given`` and ``fixed`` side by side over ``seeds`` seeds (see
    :class:`Trial`); the models themselves are left as they are.

    Args:
        given: the model as given.
        fixed: the remedied model.
        batches: one input batch, or several (cycled through, one per step).
        steps: Adam steps per run, in [10, 1000].
        seeds: runs per model, in [2, 10] (the spread needs two); each seed is drawn from
            ``generator`` and draws its own target.
        generator: draws the seeds.
        output: the output field to read, as for :func:`normlab.doctor.diagnose`.
        warmup: linear warm-up steps for ``fixed``'s runs (a schedule change); 0: none.
        diagnoses: the diagnoses of ``given`` and ``fixed``; without them nothing is a cure.
        addresses: the problems the change was made for (default: all of them).

    Examples::

        >>> from normlab import zoo
        >>> net = zoo.build("symmetric")
        >>> t = trial(net, net, torch.randn(16, 32), steps=10)  # the same model both sides
        >>> t.gains, t.lowered
        ([0.0, 0.0, 0.0], False)
    """
    xs = _steps(batches)
    _check_trial(steps, seeds, warmup)
    drawn = _seeds(generator, seeds)
    before = [_train(given, xs, s, steps=steps, output=output)[0] for s in drawn]
    after = [_train(fixed, xs, s, steps=steps, warmup=warmup, output=output)[0] for s in drawn]
    flagged = None if diagnoses is None else _flagged(*diagnoses, addresses)
    return _trial(drawn, before, after, warmup=warmup, flagged=flagged)
