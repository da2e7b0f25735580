"""``normlab._payload``: what a helper process receives and sends back is what was pickled."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from normlab import _payload
from normlab import nn as nlnn

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def bits(t: torch.Tensor) -> list[int]:
    return t.contiguous().reshape(-1).view(torch.uint8).tolist()


class Marked(torch.Tensor):
    """A tensor subclass (module level, so that it pickles)."""


def round_trip(obj: object) -> object:
    return _payload.loads(_payload.dumps(obj))


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 5), min_size=0, max_size=4),
    dtype=st.sampled_from(DTYPES),
    transpose=st.booleans(),
)
def test_tensors_come_back_bit_for_bit(
    shape: list[int], dtype: torch.dtype, transpose: bool
) -> None:
    g = torch.Generator().manual_seed(len(shape))
    t = (torch.rand(shape, generator=g) * 100 - 50).to(dtype)
    if transpose and t.dim() >= 2:
        t = t.transpose(0, -1)  # not contiguous: sent in its logical order
    back = round_trip(t)
    assert isinstance(back, torch.Tensor) and type(back) is torch.Tensor
    assert back.dtype == t.dtype and back.shape == t.shape
    # bits, not values: NaN-free here, and -0.0 / 0.0 are told apart through the bytes
    assert bits(back) == bits(t)


def test_parameters_and_requires_grad() -> None:
    w = nn.Parameter(torch.randn(3, 2))
    frozen = nn.Parameter(torch.randn(2), requires_grad=False)
    leaf = torch.randn(4, requires_grad=True)
    w2, frozen2, leaf2 = round_trip((w, frozen, leaf))  # type: ignore[misc]
    assert type(w2) is nn.Parameter and w2.requires_grad and torch.equal(w2, w)
    assert type(frozen2) is nn.Parameter and not frozen2.requires_grad
    assert type(leaf2) is torch.Tensor and leaf2.requires_grad and leaf2.is_leaf


def test_a_model_comes_back_whole_and_independent() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Linear(2, 8), nlnn.BatchNorm1d(8), nn.ReLU(),
        nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(),
        nn.Linear(8, 1),
    )  # fmt: skip
    net(torch.randn(16, 2))  # running statistics and counts moved off their initial values
    back = round_trip(net)
    assert isinstance(back, nn.Sequential)
    assert [type(m) for m in back] == [type(m) for m in net]
    for (k, a), (k2, b) in zip(net.state_dict().items(), back.state_dict().items(), strict=True):
        assert k == k2 and a.dtype == b.dtype and torch.equal(a, b)
    with torch.no_grad():  # the copy owns writable memory of its own
        back[0].weight.add_(1.0)
        back[1].running_mean.zero_()
    assert not torch.equal(back[0].weight, net[0].weight)
    assert not torch.equal(back[1].running_mean, net[1].running_mean)
    # it trains: autograd works on the rebuilt parameters
    back(torch.randn(16, 2)).sum().backward()
    assert all(p.grad is not None for p in back.parameters())


def test_one_object_twice_stays_one_object() -> None:
    w = nn.Parameter(torch.ones(3))
    a, b = round_trip((w, w))  # type: ignore[misc]
    assert a is b


def test_two_tensors_on_one_storage_are_refused() -> None:
    base = torch.arange(10.0)
    with pytest.raises(pickle.PicklingError, match="two tensors share a storage"):
        _payload.dumps((base, base[2:5]))
    tied = nn.Linear(4, 4)
    other = nn.Linear(4, 4)
    other.weight = nn.Parameter(tied.weight.detach().t())  # another Parameter, same memory
    with pytest.raises(pickle.PicklingError, match="two tensors share a storage"):
        _payload.dumps(nn.Sequential(tied, other))


def test_what_it_does_not_carry_goes_through_torch() -> None:
    tagged = torch.ones(2)
    tagged.note = "kept"  # type: ignore[attr-defined]
    back = round_trip(tagged)
    assert back.note == "kept"  # type: ignore[attr-defined]

    marked = torch.ones(2).as_subclass(Marked)
    assert type(pickle.loads(pickle.dumps(marked))) is Marked  # torch's own round trip...
    assert type(round_trip(marked)) is Marked  # ...is what the payload does too


def test_unpicklable_objects_still_raise() -> None:
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        _payload.dumps(lambda: 0)


def test_payload_benchmark_runs() -> None:
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "payload.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert len(rows) == 5 and all(row.endswith("x") for row in rows[1:]), proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("on the request's critical path"), proc.stdout
