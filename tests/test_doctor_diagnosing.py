"""``normlab.doctor.diagnosing``: the diagnosis pass by pass, each what ``diagnose`` gives for
the batches so far, the model left as it was however the passes end; and ``fixing``, the fix
step by step (LSUV's layers)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab import zoo
from normlab.doctor import diagnose, diagnosing, fix, fixing

PASSES = 2
BATCH = 8  # a few examples: the numbers only have to be the same both ways, not meaningful


def _model_and_batches(name: str) -> tuple[nn.Module, list[torch.Tensor]]:
    """``"bn-tanh"``: a small BatchNorm + tanh + ReLU MLP in training mode (its running
    statistics move between passes; saturation and dead units are measured); else the zoo's
    model of that name."""
    torch.manual_seed(0)
    if name == "bn-tanh":
        model: nn.Module = nn.Sequential(
            nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(),
            nn.Linear(16, 4),
        )  # fmt: skip
        shape: tuple[int, ...] = (BATCH, 8)
    else:
        model, shape = zoo.build(name, 0), zoo.input_shape(name, BATCH)
    g = torch.Generator().manual_seed(1)
    return model, [torch.randn(shape, generator=g) for _ in range(PASSES)]


def _state(model: nn.Module) -> dict[str, torch.Tensor | None]:
    """Every parameter, buffer (BatchNorm running statistics) and gradient of ``model``."""
    grads = {f"{n}.grad": p.grad for n, p in model.named_parameters()}
    return {**{n: t.clone() for n, t in model.state_dict().items()}, **grads}


@pytest.mark.parametrize("name", ["bn-tanh", "lstm"])
def test_the_kth_pass_yields_what_diagnose_gives_for_the_first_k_batches(name: str) -> None:
    # Exactly (==, no tolerance): the same passes, the same readout drawn from the same
    # generator state, judged by the same code. A BatchNorm MLP and an LSTM (its own weight
    # kinds).
    model, xs = _model_and_batches(name)
    partials = [d.to_dict() for d in diagnosing(model, xs, generator=torch.Generator())]
    assert [d["steps"] for d in partials] == list(range(1, PASSES + 1))
    for k, partial in enumerate(partials, start=1):
        fresh, _ = _model_and_batches(name)
        assert partial == diagnose(fresh, xs[:k], generator=torch.Generator()).to_dict(), k


def test_the_model_is_left_as_it_was_when_the_passes_end_or_stop() -> None:
    model, xs = _model_and_batches("bn-tanh")
    before = _state(model)
    for stop_after in (1, PASSES):  # closed mid-run (a cancelled stream), or run through
        passes = diagnosing(model, xs)
        for _ in range(stop_after):
            next(passes)
        passes.close()
        after = _state(model)
        assert after.keys() == before.keys()
        for key, value in before.items():
            if value is None:
                assert after[key] is None, key
            else:
                assert torch.equal(value, after[key]), key  # type: ignore[arg-type]
        assert not any(m._forward_hooks or m._backward_hooks for m in model.modules())


@pytest.mark.parametrize("method", ["lsuv", "he"])
def test_fixing_ends_on_fix_s_report_and_lsuv_goes_a_layer_at_a_time(method: str) -> None:
    """``fixing`` is ``fix`` step by step: from the same generator its last report and the
    weights are ``fix``'s; LSUV yields once per layer it rescales, each report holding the
    layers done so far, and another method yields once."""
    x = torch.randn(zoo.input_shape("dead-relu", BATCH), generator=torch.Generator().manual_seed(1))
    once, stepped = zoo.build("dead-relu", 0), zoo.build("dead-relu", 0)
    report = fix(once, method, x, generator=torch.Generator().manual_seed(2))
    reports = list(fixing(stepped, method, x, generator=torch.Generator().manual_seed(2)))
    assert reports[-1].to_dict() == report.to_dict()
    for (name, p), q in zip(once.named_parameters(), stepped.parameters(), strict=True):
        assert torch.equal(p, q), name
    if method == "lsuv":
        assert report.lsuv is not None and len(report.lsuv.layers) == 9  # 8 hidden + the head
        done = [r.lsuv.layers if r.lsuv else None for r in reports]
        assert done == [report.lsuv.layers[:k] for k in range(1, 10)]
    else:
        assert len(reports) == 1
