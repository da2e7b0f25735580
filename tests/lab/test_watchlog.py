"""normlab.lab.watchlog: a growing watch log read a piece at a time, and what /watch shows of it.

The log comes from a real :func:`normlab.watch` run; the tail must read only complete lines,
at most a chunk per look, keep at most ``keep`` records, name a bad line by its number and carry
on, and start again when the log is replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

import normlab
from normlab.doctor.view import training_figure
from normlab.lab import watchlog
from normlab.lab.watchlog import LogTail, WatchLog, WatchLogError, check_path, watch_state
from normlab.watching import events


def watched_lines(path: Path, steps: int = 60, every: int = 5) -> list[str]:
    """The lines a real watch run writes to ``path``: a small ReLU net whose middle layer's
    units are killed at step 30 (a bias pushed far below 0)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    with normlab.watch(net, every=every, log=path) as w:
        for step in range(steps):
            if step == 30:
                with torch.no_grad():
                    net[2].bias[:14] = -100.0
            opt.zero_grad()
            net(torch.randn(32, 4, generator=g)).pow(2).mean().backward()
            w.step()
            opt.step()
    return path.read_text().splitlines(keepends=True)


@pytest.fixture(scope="module")
def lines(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return watched_lines(tmp_path_factory.mktemp("watch") / "run.jsonl")


def test_a_real_log_is_read_whole_and_shown(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text("".join(lines))
    tail = LogTail(log)
    assert tail.poll() and tail.status == "ok"
    records = [json.loads(line) for line in lines]
    assert tail.count == len(records) == 12 and list(tail.records) == records
    state = watch_state(tail, version=3)
    assert state["version"] == 3 and state["records"] == 12 and state["last_step"] == 55
    assert state["summary"] == "12 records, steps 0 to 55"
    assert state["events"] == events(records) and any("became dead" in e for e in state["events"])
    assert state["figures"] == [json.loads(json.dumps(training_figure(records).to_dict()))]
    table = state["tables"][0]
    assert [row[0] for row in table["rows"]] == [f"model[{k}]" for k in range(5)]
    assert table["columns"][-1] == "labels" and table["rows"][3][-1] == "dead"
    json.dumps(state, allow_nan=False)  # strict JSON
    assert not tail.poll()  # nothing new: nothing changed


def test_only_complete_lines_are_read(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text(lines[0] + lines[1][:40])  # the second line is being written
    tail = LogTail(log)
    tail.poll()
    assert tail.count == 1 and tail.skipped == 0 and tail.errors == watchlog.deque()
    with log.open("a") as f:
        f.write(lines[1][40:] + lines[2])
    assert tail.poll() and tail.count == 3 and tail.skipped == 0
    assert [r["step"] for r in tail.records] == [0, 5, 10]


def test_a_bad_line_is_named_and_skipped(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    bad = ['{"step": 5, "layers": [\n', "\n", '{"step": "ten"}\n', "[1, 2]\n"]
    log.write_text(lines[0] + bad[0] + bad[1] + lines[2] + bad[2] + bad[3] + lines[3])
    tail = LogTail(log)
    tail.poll()
    assert tail.count == 3 and tail.skipped == 3 and tail.lines == 7  # the blank line is no error
    assert [e.split(":")[0] for e in tail.errors] == [
        "line 2 of run.jsonl is not a watch record",
        "line 5 of run.jsonl is not a watch record",
        "line 6 of run.jsonl is not a watch record",
    ]
    assert "not JSON" in tail.errors[0] and "'step'" in tail.errors[1]
    state = watch_state(tail)
    assert state["skipped"] == 3 and state["errors"] == list(tail.errors)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("input_std", "big", "'input_std'"),
        ("problems", [1], "'problems'"),
        ("layers", {}, "'layers'"),
        ("layers", [{"name": "0"}], "layers[0] has no string 'kind'"),
    ],
)
def test_a_record_missing_what_the_page_reads_is_refused(
    lines: list[str], field: str, value: object, said: str
) -> None:
    record = json.loads(lines[0])
    record[field] = value
    with pytest.raises(ValueError, match=said.replace("[", r"\[").replace("]", r"\]")):
        watchlog.check_record(record)
    layer = dict(record["layers"][0] if field != "layers" else json.loads(lines[0])["layers"][0])
    layer["act_std"] = "x"
    with pytest.raises(ValueError, match="no number 'act_std'"):
        watchlog.check_record({**json.loads(lines[0]), "layers": [layer]})


def test_a_huge_log_is_read_a_chunk_at_a_time_and_kept_to_keep(
    lines: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text("".join(lines * 20))  # 240 records
    chunk = int(len(lines[0]) * 2.5)  # two and a half lines per look
    monkeypatch.setattr(watchlog, "CHUNK_BYTES", chunk)
    tail = LogTail(log, keep=7)
    looks = 0
    while True:
        before = tail.offset
        tail.poll()
        looks += 1
        assert tail.offset - before <= chunk and len(tail.records) <= 7
        if not tail.behind:
            break
    assert tail.count == 240 and len(tail.records) == 7 and looks >= 240 // 3
    assert [r["step"] for r in tail.records] == [25, 30, 35, 40, 45, 50, 55]
    assert "the last 7 shown" in watch_state(tail)["summary"]


def test_a_line_longer_than_a_chunk_is_skipped(
    lines: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "run.jsonl"
    chunk = len(lines[2]) + 500
    monkeypatch.setattr(watchlog, "CHUNK_BYTES", chunk)
    log.write_text(lines[0][:100] + " " * chunk + lines[0][100:] + lines[1][:900] + "\n" + lines[2])
    tail = LogTail(log)
    tail.poll()
    while tail.behind:  # inside the long line a look reads on, and nothing shown changes
        assert not tail.poll() or not tail._long_line
    assert tail.lines == 3 and tail.skipped == 2  # line 2 is cut short, so no record either
    assert tail.count == 1 and tail.records[0] == json.loads(lines[2])
    assert "line 1 of run.jsonl" in tail.errors[0] and "longer than" in tail.errors[0]


def test_a_missing_log_is_waited_for_then_read(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "later.jsonl"
    watch = WatchLog(log, interval=0)
    state = watch.state()
    assert state["status"] == "waiting" and state["records"] == 0 and state["figures"] == []
    assert "does not exist yet" in state["summary"] and str(log) in state["summary"]
    assert watch.state()["version"] == state["version"]  # no change, the same state
    log.write_text("".join(lines[:2]))
    after = watch.state()
    assert after["status"] == "ok" and after["records"] == 2 and after["version"] > state["version"]


def test_a_replaced_or_truncated_log_is_read_again(lines: list[str], tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text("".join(lines[:6]))
    tail = LogTail(log)
    tail.poll()
    log.write_text("".join(lines[:2]))  # a new run, same file
    assert tail.poll() and tail.count == 2
    log.unlink()
    assert tail.poll() and tail.status == "waiting" and tail.count == 0
    log.write_text(lines[0])
    assert tail.poll() and tail.count == 1


def test_paths_that_can_never_be_a_log(tmp_path: Path) -> None:
    with pytest.raises(WatchLogError, match="is a directory"):
        check_path(tmp_path)
    afile = tmp_path / "a.txt"
    afile.write_text("")
    with pytest.raises(WatchLogError, match="cannot read it"):
        check_path(afile / "run.jsonl")  # below a file: never a path to anything
    assert check_path(tmp_path / "not-yet.jsonl") == tmp_path / "not-yet.jsonl"
