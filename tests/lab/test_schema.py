"""The OpenAPI document against the lab itself: schemathesis calls every operation in-process.

Each operation gets a few requests generated from its schema (its parameters, bodies and
ids): valid ones, and invalid ones (a wrong type, a value out of range, an unknown field),
which the lab must refuse in its documented error shape (``negative_data_rejection``: a
request the document calls invalid gets a 4xx). Every answer must be one the document
declares: a documented status code (``status_code_conformance``), a body that matches that
response's schema (``response_schema_conformance``), a declared content type, and never a
5xx (``not_a_server_error``). What the document says is then what the API does.

Bounds, so that the whole run stays near a minute on two busy cores:

- a few examples per operation and mode (:data:`EXAMPLES`), no deadline, no shrinking, and
  only the fuzzing phase (the coverage phase would try every boundary of every parameter);
- a streaming experiment's integer parameters (steps, widths, depths, sizes; its seed aside),
  given or not, are set to at most a quarter of their default (:func:`_bounded`): at their
  maxima a run trains for minutes, ``bn-lr-sweep`` at its defaults takes 10-20 s here, and
  the experiments that stream without training are those that can take seconds (issue 33:
  unbounded, their POSTs and streams took 19 s of CPU here, bounded 3 s). The values stay
  inside what the document allows, so they are still its cases;
- a sweep started by ``POST /api/sweeps`` runs in the lab's job thread while the test goes
  on (until the lab stops): its experiment's integer parameters are bounded the same way, as
  fixed settings of its grid, and its seeds to :data:`SWEEP_SEEDS` (:func:`_bounded_sweep`);
  its store is a temporary file;
- ``GET /api/train/stream`` is not called: its run trains until the client leaves, so its
  answer has no end to check (``tests/lab/test_trainpage.py`` reads its events).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import schemathesis
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS as REGISTERED
from schemathesis.checks import load_all_checks
from schemathesis.config import SchemathesisConfig
from schemathesis.core import NotSet
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import positive_data_acceptance

from normlab.experiments import get_experiment, list_experiments
from normlab.lab import labsweeps
from normlab.lab.app import create_app
from normlab.lab.exercises import EXERCISES, CodeExercise

LAB = "http://127.0.0.1"  # the lab answers loopback Host names only
EXAMPLES = 5
DRAWN_EXAMPLES = 2
"""Valid cases of an operation that draws (``/notebook``: a run, then every figure of it drawn
with matplotlib, a second or more each): 190 s of this test's 244 s went to them at 5. Their
parameters are read by the same function as ``/code``'s and the run's, which take
:data:`EXAMPLES`, and the figures' drawing has its own tests (``tests/test_notebook*.py``)."""
UNBOUNDED = ("/api/train/stream",)
"""Operations not called, and why: see the module docstring."""
RULES_IN_WORDS = {
    **{p.name: p.follows[1] for e in list_experiments() for p in e.parameters if p.follows},
    "norm": "model",  # the doctor: only its MLP models take a norm
    "batch_size": "norm",  # training: BatchNorm needs two or more points a batch
}
"""Parameters bound by a rule on another (``tail`` at most ``steps``): the rules the document
states in words only, in the parameter's description (JSON Schema cannot compare two values),
so a request it calls valid may break one
(:func:`test_every_rule_between_parameters_is_in_the_text`)."""


SWEEPS = "/api/sweeps"
SWEEP_SEEDS = 2
"""The most seeds a sweep the test starts runs (:func:`_bounded_sweep`)."""


def documented_positive_data_acceptance(ctx: Any, response: Any, case: Any) -> bool | None:
    """schemathesis' ``positive_data_acceptance``, with the documented exceptions: a 422 naming
    a parameter of :data:`RULES_IN_WORDS` or its partner, and a sweep's grid that the sweep
    engine refuses (:func:`_refused_by_the_sweep_engine`)."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except Failure:
        if not (
            _breaks_a_rule_in_words(case, response) or _refused_by_the_sweep_engine(case, response)
        ):
            raise
        return None


def _refused_by_the_sweep_engine(case: Any, response: Any) -> bool:
    """``POST /api/sweeps`` answered 422 naming ``grid``, ``seeds`` or a parameter its grid
    names: the engine's check of each axis against the experiment's declarations, and the
    lab's bounds, which the document states in words (JSON Schema cannot say which parameters
    the experiment chosen has, nor how many values a text like ``0.1:3:12`` gives)."""
    if case.operation.path != SWEEPS or response.status_code != 422:
        return False
    grid = case.body.get("grid") if isinstance(case.body, dict) else None
    if isinstance(grid, list):
        names = {str(t).partition("=")[0].strip() for t in grid}
    else:
        names = set(grid) if isinstance(grid, dict) else set()
    named = response.json().get("detail", {}).get("parameter")
    return named in {"grid", "seeds"} | names | {n.replace("-", "_") for n in names}


def _breaks_a_rule_in_words(case: Any, response: Any) -> bool:
    if response.status_code != 422:
        return False
    named = response.json().get("detail", {}).get("parameter")
    pairs = {(a, b) for a, b in RULES_IN_WORDS.items()} | {
        (b, a) for a, b in RULES_IN_WORDS.items()
    }
    return any(a == named for a, _ in pairs)


load_all_checks()
CHECKS = [
    *(c for c in REGISTERED.get_all() if c is not positive_data_acceptance),
    documented_positive_data_acceptance,
]
"""Every check schemathesis has, its ``positive_data_acceptance`` with the one documented
exception."""
REQUEST_TIMEOUT_S = max(e.wall_s for e in EXERCISES if isinstance(e, CodeExercise)) + 30.0
"""The longest an answer may take: a code exercise's checked run at its wall-clock limit, plus
the sandbox's start and the check (schemathesis' own 10 s cut runs short on a busy machine)."""
STREAMS = {e.name for e in list_experiments() if e.streams}
"""The experiments whose runs can take seconds (those that train, and those that stream their
stages): :func:`_bounded` keeps their cases small."""

REJECTIONS = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429"]
"""What counts as refusing an invalid request: schemathesis' 4xx list and 413, the lab's answer to
a body over its byte limit (a ``code`` longer than its ``maxLength`` can also be over 1 MiB, and
the document declares 413 for those operations). A 5xx is no refusal: ``not_a_server_error``."""

CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {"negative_data_rejection": {"expected-statuses": REJECTIONS}},
        "generation": {"mode": "all", "max-examples": EXAMPLES, "no-shrink": True},
        "phases": {
            "examples": {"enabled": False},
            "coverage": {"enabled": False},
            "stateful": {"enabled": False},
        },
    }
)


def _lab_schema() -> Any:
    """The lab's own document, loaded in-process; its requests go to the app itself, whose
    lifespan schemathesis runs (started at the first request, stopped when the tests end).
    Its progress database and its sweep store are temporary files: no test touches the
    learner's."""
    folder = Path(tempfile.mkdtemp(prefix="normlab-schema-"))
    app = create_app(db_path=folder / "progress.sqlite3", sweeps_store=folder / "sweeps.sqlite3")
    loaded = schemathesis.openapi.from_dict(app.openapi(), config=CONFIG)
    loaded.app = app
    return loaded.exclude(path=list(UNBOUNDED))


schema = _lab_schema()  # loaded when the module is (schemathesis' lazy loader needs pytest < 9)


def _experiment(path: str) -> str | None:
    """The experiment a path runs (``/api/experiments/NAME[/...]``), if it streams."""
    parts = path.split("/")
    if len(parts) >= 4 and parts[:3] == ["", "api", "experiments"] and parts[3] in STREAMS:
        return parts[3]
    return None


def _small(p: Any, given: Any) -> Any:
    """A quarter of ``p``'s default at most, for a valid integer ``given``; else ``given``."""
    if type(given) is not int or p.min is None or p.max is None or not p.min <= given <= p.max:
        return given
    return min(given, max(int(p.min), p.default // 4))


def _bounded_sweep(case: Any) -> None:
    """A sweep's body: its experiment's integer parameters (not its seed) as :func:`_bounded`
    sets a run's, as fixed settings of the grid (each value of a list bounded alike), and at
    most :data:`SWEEP_SEEDS` seeds. What is invalid stays as generated, to be refused."""
    body = case.body
    name = body.get("experiment") if isinstance(body, dict) else None
    if not isinstance(name, str) or name not in STREAMS:
        return
    seeds = body.get("seeds")
    if type(seeds) is int and 1 <= seeds <= labsweeps.MAX_CONFIGS:  # valid: bounded
        body["seeds"] = min(seeds, SWEEP_SEEDS)
    grid = body.setdefault("grid", {})
    for p in get_experiment(name).parameters:
        if p.kind != "int" or p.name == "seed":
            continue
        if isinstance(grid, dict):
            given = grid.get(p.name, p.default)
            many = isinstance(given, list)
            grid[p.name] = [_small(p, v) for v in given] if many else _small(p, given)
        elif isinstance(grid, list) and not any(str(t).startswith(f"{p.name}=") for t in grid):
            grid.append(f"{p.name}={_small(p, p.default)}")


def _bounded(case: Any) -> None:
    """Set a streaming experiment's integer parameters (not its seed) to at most a quarter of
    their default, in the body or the query, whichever the operation takes: those left out
    too, since their defaults can run for seconds each (its defaults are tested elsewhere).
    Invalid values (out of range, not integers) stay as generated, to be refused. A sweep's
    body: :func:`_bounded_sweep`."""
    if case.operation.path == SWEEPS and case.operation.method.upper() == "POST":
        _bounded_sweep(case)
        return
    name = _experiment(case.operation.path)
    if name is None:
        return
    where = "body" if case.operation.method.upper() == "POST" else "query"
    values = getattr(case, where)
    if isinstance(values, NotSet) or values is None:  # none sent: the defaults would run
        values = {}
        setattr(case, where, values)
        if where == "body":
            case.media_type = "application/json"
    if not isinstance(values, dict):
        return  # not an object of parameters: refused before anything runs
    for p in get_experiment(name).parameters:
        if p.kind == "int" and p.name != "seed":
            values[p.name] = _small(p, values.get(p.name, p.default))


def _check_operation(operation: Any, mode: GenerationMode) -> int:
    """Call ``operation`` with up to :data:`EXAMPLES` cases of ``mode`` (:data:`DRAWN_EXAMPLES`
    valid ones of a download) and validate each answer
    with every check; the number of cases called (0 when the mode has none: nothing in the
    operation can be made invalid). A failing check raises, naming the case."""
    called = []

    drawn = mode is GenerationMode.POSITIVE and operation.path.endswith("/notebook")

    @settings(
        max_examples=DRAWN_EXAMPLES if drawn else EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        phases=[Phase.generate],  # no shrinking: the first failure is reported as drawn
    )
    @given(operation.as_strategy(generation_mode=mode))
    def call(case: Any) -> None:
        _bounded(case)
        called.append(case)
        case.call_and_validate(base_url=LAB, checks=CHECKS, timeout=REQUEST_TIMEOUT_S)

    try:
        call()
    except Unsatisfiable:
        return 0
    return len(called)


def test_every_answer_is_documented() -> None:
    """Every operation, with valid and invalid cases; each failure is collected, with the
    operation it came from, and all are reported together. (One test, not one per operation as
    schemathesis' ``parametrize`` makes: under pytest-xdist those pass having called nothing,
    so this module had to run alone, after the rest.)"""
    failures, called = [], {}
    for loaded in schema.get_all_operations():
        operation = loaded.ok()
        called[operation.label] = 0
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                called[operation.label] += _check_operation(operation, mode)
            except (FailureGroup, Exception) as exc:  # a failed check: schemathesis' report
                failures.append(f"{operation.label} ({mode.value}):\n{exc}")
    assert not failures, "\n\n".join(failures)
    assert len(called) > 100 and all(called.values()), [k for k, v in called.items() if not v]


def test_the_document_leaves_no_answer_or_body_unsaid() -> None:
    """Every JSON answer has a schema, every route that reads a body declares it, and every
    experiment's ``device`` offers the devices this machine has, no others."""
    document = schema.raw_schema
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            ok = [r for code, r in operation["responses"].items() if code.startswith("2")]
            assert len(ok) == 1, (method, path)  # 200, or 202 for a sweep started
            for media, content in ok[0].get("content", {}).items():
                said = {k: v for k, v in content.get("schema", {}).items() if k != "title"}
                assert said or media == "text/event-stream", (method, path, media)
            if method in ("post", "put"):
                assert "requestBody" in operation, (method, path)
            for p in operation.get("parameters", []):
                if p["name"] == "device":
                    assert p["schema"]["enum"] == devices, (method, path)
    for e in list_experiments():
        body = document["paths"][f"/api/experiments/{e.name}"]["post"]["requestBody"]
        device = body["content"]["application/json"]["schema"]["properties"].get("device")
        assert device is None or device["enum"] == devices, e.name


def test_a_body_over_the_byte_limit_counts_as_refused() -> None:
    """A ``code`` over its ``maxLength`` and over 1 MiB is refused with 413 before it is read;
    schemathesis' own list of refusals lacks 413, so without :data:`REJECTIONS` this case, which
    the fuzzer draws now and then, failed the suite by chance."""
    operation = schema["/api/listings/{listing_id}"]["PUT"]
    drawn: list[Any] = []

    @settings(max_examples=20, database=None, derandomize=True, phases=[Phase.generate])
    @given(operation.as_strategy(generation_mode=GenerationMode.NEGATIVE))
    def draw(c: Any) -> None:  # a case whose body of code is the negative part (no shrinking)
        body_mode = c.meta.components[ParameterLocation.BODY].mode
        if isinstance(c.body, dict) and set(c.body) == {"code"} and body_mode.is_negative:
            drawn.append(c)

    draw()
    case = drawn[0]
    case.path_parameters = {"listing_id": "drift-plain"}  # a valid id: else 422 comes first
    case.body["code"] = "x" * 1_200_000
    response = case.call(base_url=LAB)
    assert response.status_code == 413, response.text
    case.validate_response(response, checks=CHECKS)


def test_every_rule_between_parameters_is_in_the_text() -> None:
    """The rules :data:`RULES_IN_WORDS` excuses are stated where a reader of the document looks:
    each such parameter's description names its partner (and every such parameter exists)."""
    said = 0
    for operations in schema.raw_schema["paths"].values():
        for operation in operations.values():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            declared = dict(body.get("schema", {}).get("properties", {}))
            declared |= {p["name"]: p["schema"] for p in operation.get("parameters", [])}
            for name, partner in RULES_IN_WORDS.items():
                if name in declared and partner in declared:
                    assert partner in declared[name]["description"], (name, partner)
                    said += 1
    assert said >= len(RULES_IN_WORDS)
