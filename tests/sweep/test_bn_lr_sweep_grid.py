r"""``bn-lr-sweep`` is a sweep of ``bn-lr`` on the engine (issue 34): the command its table prints
trains the very runs it summarizes.

``bn-lr-sweep`` runs here at a small size, with rates up to 3.0, where a run is chaotic. The
sweep command is read from its own table's note (not rebuilt here) and runs on the sweep engine
twice, into two stores:

- through ``normlab.cli.main``, the command as printed: the engine batches the grid's cells (one
  ``batch_key``) into one call of ``bn-lr``'s batched entry;
- through :class:`~normlab.sweep.Sweep` with a backend that runs each cell alone
  (``run_one``, what the engine does for an experiment that cannot batch): the CLI has no switch
  for it, so this path takes the note's ``--grid`` axes to the API.

Each cell is one ``bn-lr`` run: the net without BN (``losses``, ``batch_norm`` keeps its default
False) and with BN (``contrast_losses``) at one rate, from ``torch.manual_seed(seed)``.

**Alone: exact.** A cell run alone is the same code as ``bn-lr-sweep``'s run at that rate (the
same ``MLP``, ``train`` and seed, the same thread count), so its curves summarized with
``bn-lr-sweep``'s own ``summarize`` give its final loss, peak and verdict bit for bit (``==``).

**Batched: to float32 rounding, where float32 determines the run.** The tolerance is
``tests/experiments/test_bn_lr_batched.py``'s, and so is its reasoning: a batched kernel may add a
step's 200 positive per-sample losses in another order, which moves their float32 mean by up to
:math:`\mathrm{RTOL} = (N - 1)\,u = 199 \cdot 2^{-24}` relative. A loss of the batched path may
leave RTOL of the run alone only from the step where the run alone itself moves by more than RTOL
when its initial weights are nudged by one ulp (chaos: there float32 does not determine the loss
to RTOL, and no second computation can be held to it); a curve that float32 determines to its
last step must stay within RTOL at every step. The test checks that the grid holds at least one
chaotic curve, so that it tests the allowance too (measured here: the net with BN at 3.0, whose
nudged run leaves RTOL at step 16 of 24).
"""

from __future__ import annotations

import contextlib
import io
import math
import shlex
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from normlab import cli
from normlab.experiments import Result, run_experiment
from normlab.experiments.bn_lr_sweep import summarize
from normlab.sweep import Group, Outcome, Sweep
from normlab.sweep.engine import run_one, threads
from tests.experiments.test_bn_lr_batched import determined_until, same_loss

PARAMS = {
    "lr_min": 0.1,
    "lr_max": 3.0,  # a chaotic rate at these sizes
    "points": 4,
    "steps": 24,
    "tail": 5,
    "hidden_layers": 2,
    "width": 16,
}
NOTE = "the same grid on the sweep engine: "


@pytest.fixture(scope="module")
def sweep_result() -> Result:
    return run_experiment("bn-lr-sweep", **PARAMS)


@pytest.fixture(scope="module")
def command(sweep_result: Result) -> list[str]:
    """The sweep command of ``bn-lr-sweep``'s table note, split as a shell splits it."""
    (table,) = sweep_result.tables()
    (note,) = [n for n in table.notes if n.startswith(NOTE)]
    return shlex.split(note.removeprefix(NOTE))


def grid_of(command: Sequence[str]) -> list[str]:
    """The ``--grid`` axes of ``normlab sweep bn-lr --grid A --grid B ...`` (nothing else)."""
    assert list(command[:3]) == ["normlab", "sweep", "bn-lr"]
    flags, specs = command[3::2], command[4::2]
    assert set(flags) == {"--grid"} and len(flags) == len(specs)
    return list(specs)


def one_by_one(groups: Sequence[Group]) -> Iterator[Outcome]:
    """A backend that runs every cell alone, as the engine runs an experiment that cannot
    batch."""
    for group in groups:
        for config in group.configs:
            with threads(group.threads):
                yield run_one(config)


@pytest.fixture(scope="module")
def alone(command: list[str], tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    store = tmp_path_factory.mktemp("alone") / "sweeps.sqlite3"
    sweep = Sweep("bn-lr", grid_of(command), store=store)
    assert sweep.run(backend=one_by_one).errors == 0
    return sweep.records()


@pytest.fixture(scope="module")
def batched(command: list[str], tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    store = tmp_path_factory.mktemp("batched") / "sweeps.sqlite3"
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main([*command[1:], "--store", str(store), "--json"]) == 0
    return Sweep("bn-lr", grid_of(command), store=store).records()


def curve(record: dict[str, Any], batch_norm: bool) -> list[float]:
    """A stored loss curve (a non-finite loss stored as None: back as nan)."""
    assert record["status"] == "ok" and record["params"]["batch_norm"] is False
    stored = record["result"]["contrast_losses" if batch_norm else "losses"]
    return [math.nan if v is None else v for v in stored]


def test_the_grid_parses_to_bn_lr_sweep_s_rates(sweep_result: Result, command: list[str]) -> None:
    sweep = Sweep("bn-lr", grid_of(command))
    assert [c.params["lr"] for c in sweep.configs] == sweep_result.lrs  # the same floats
    assert sweep_result.lrs[-1] == PARAMS["lr_max"]


def test_each_cell_alone_gives_bn_lr_sweep_s_numbers_exactly(
    sweep_result: Result, alone: list[dict[str, Any]]
) -> None:
    assert [r["params"]["lr"] for r in alone] == sweep_result.lrs
    tail, stable_loss = sweep_result.params["tail"], sweep_result.params["stable_loss"]
    for c in sweep_result.curves:
        got = [summarize(curve(r, c.batch_norm), tail, stable_loss) for r in alone]
        want = list(zip(c.final_losses, c.peak_losses, c.stable, strict=True))
        assert got == want, c.batch_norm


def test_the_batched_cli_sweep_gives_each_cell_s_losses_to_float32_rounding(
    alone: list[dict[str, Any]], batched: list[dict[str, Any]]
) -> None:
    assert len({r["seconds"] for r in batched}) == 1  # one batched call's time, shared
    chaotic = []  # (lr, batch_norm) of the curves float32 does not determine to the last step
    for a, b in zip(alone, batched, strict=True):
        assert a["id"] == b["id"]
        for bn in (False, True):
            want, got = curve(a, bn), curve(b, bn)
            until = determined_until(a["params"], bn, want)
            off = [t for t, (x, y) in enumerate(zip(got, want, strict=True)) if not same_loss(x, y)]
            assert min(off, default=until) >= until, (a["params"]["lr"], bn, off, until)
            if until < len(want):
                chaotic.append((a["params"]["lr"], bn))
    assert chaotic  # the grid tests the allowance for chaos, not only calm runs
