"""A sweep's grid: axes over an experiment's declared parameters, and one stable id per cell.

A grid names, for some of an experiment's declared parameters, the values to try; every other
parameter keeps its default. Its cells (the cartesian product of the axes) are
:class:`Config` s, each validated by the registry (:meth:`Experiment.make_params`) before
anything runs, so that a bad value stops the sweep before its first run.

An axis is written as on the command line (``--grid NAME=SPEC``) or in a sweep file (TOML):

- a list: ``batch_norm=true,false``, ``init=he,xavier``, ``lr=0.1,0.3`` (a ``float_list``
  parameter's values are separated by ``;``, each one a comma list: ``gains=1,1;0.9,1.1``);
- a range ``A:B:N``: ``N`` points from ``A`` to ``B``, both included, for a number parameter.
  A range that is positive and spans at least a decade (``max/min >= 10``) is spaced
  geometrically, any other linearly; ``A:B:N:log`` or ``A:B:N:lin`` says which. Why: what one
  sweeps over a decade or more (a learning rate, a width, a weight scale) acts by factors, and
  on a linear grid ``0.1:3:12`` would leave one point below 0.35; over less than a decade the
  two spacings differ little and the linear one gives the round numbers one typed
  (``0.1:0.5:5`` is 0.1, 0.2, ..., 0.5). Points are rounded to 12 significant digits (so that
  the ends are what was typed, whatever the machine's ``exp``), an integer parameter's to whole
  numbers (a range that repeats one is refused). The log spacing is
  :func:`normlab.models.log_spaced`, the function ``bn-lr-sweep`` makes its learning rates
  with: ``normlab sweep bn-lr --grid lr=0.1:3.0:12:log`` trains at its rates.

``--seeds N`` adds the axis ``seed = 0, 1, ..., N-1`` over the experiment's seed parameter.

>>> grid = Grid.parse("bn-lr", ["lr=0.1:1:3", "batch_norm=true,false"], seeds=2)
>>> [a.values for a in grid.axes]
[(0.1, 0.316227766017, 1.0), (True, False), (0, 1)]
>>> configs = grid.configs()
>>> len(configs), configs[0].params["steps"], len(configs[0].id)
(12, 150, 20)
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from normlab import __version__
from normlab.experiments import (
    Parameter,
    ParameterError,
    ParameterTypeError,
    get_experiment,
    params_dict,
)
from normlab.models import log_spaced

MAX_CONFIGS = 100_000
"""The most cells one grid may have: a bound on what one mistyped range can start (and on the
ids held in memory); a larger study is several sweeps into the same store."""

ID_LENGTH = 20
"""Hex digits of a config id: 80 bits, so that two cells of even a billion collide with a
chance below 1e-6 (birthday bound n^2 / 2^81)."""

SEED = "seed"
"""The declared parameter ``--seeds`` sweeps over."""

_RANGE = re.compile(r"^\s*([^:]+):([^:]+):([^:]+)(?::(log|lin))?\s*$")


class GridError(ParameterError):
    """A grid that cannot be swept: its message names the parameter and what is allowed."""


@dataclass(frozen=True)
class Config:
    """One cell of a sweep: an experiment and every one of its declared parameters.

    ``params`` holds every declared parameter (defaults filled in), validated by the registry,
    as JSON-ready values (a ``float_list`` as a list); ``id`` is :func:`config_id` of the two.
    Two configs are equal when their ids are.
    """

    experiment: str
    params: Mapping[str, Any] = field(compare=False)
    id: str


@dataclass(frozen=True)
class Axis:
    """One parameter's values in a grid, validated by its declaration; ``spec`` is how the
    user wrote them (kept in the store's record of the sweep)."""

    name: str
    values: tuple[Any, ...]
    spec: str


@dataclass(frozen=True)
class Grid:
    """An experiment and its axes; its cells are :meth:`configs`."""

    experiment: str
    axes: tuple[Axis, ...]

    @classmethod
    def parse(cls, experiment: str, specs: Sequence[str] = (), seeds: int | None = None) -> Grid:
        """A grid from command-line texts ``NAME=SPEC`` and ``--seeds N``."""
        return cls.from_mapping(experiment, grid_items(specs), seeds)

    @classmethod
    def from_mapping(
        cls, experiment: str, grid: Mapping[str, Any], seeds: int | None = None
    ) -> Grid:
        """A grid from ``{name: spec}``: a spec is a text as on the command line
        (``"0.1:3:12"``, ``"he,xavier"``), a list of values, or one value (a fixed setting)."""
        declared = {p.name: p for p in get_experiment(experiment).parameters}
        axes = [_axis(_declared(declared, experiment, k), v) for k, v in grid.items()]
        if seeds is not None:
            axes.append(_seed_axis(declared, experiment, seeds, set(grid)))
        size = math.prod(len(a.values) for a in axes)
        if size > MAX_CONFIGS:
            raise GridError("grid", f"the grid has {size} cells, at most {MAX_CONFIGS} allowed")
        return cls(experiment, tuple(axes))

    def configs(self) -> list[Config]:
        """Every cell (the last axis varies fastest), each validated by the registry: a
        combination the declaration refuses (``follows``) raises :class:`GridError` naming it."""
        experiment = get_experiment(self.experiment)
        names = [a.name for a in self.axes]
        out = []
        for values in itertools.product(*(a.values for a in self.axes)):
            cell = dict(zip(names, values, strict=True))
            try:
                params = params_dict(experiment.make_params(cell))
            except ParameterError as exc:
                raise GridError(exc.param, f"{exc} (in the cell {_cell_text(cell)})") from None
            out.append(Config(self.experiment, params, config_id(self.experiment, params)))
        return out

    def spec(self) -> dict[str, str]:
        """The axes as the user wrote them, ``{name: spec}`` (for the store's sweep record)."""
        return {a.name: a.spec for a in self.axes}


def grid_items(specs: Sequence[str]) -> dict[str, str]:
    """``["lr=0.1:3:12", "init=he,xavier"]`` as ``{"lr": "0.1:3:12", "init": "he,xavier"}``
    (a name may be written with ``-`` for ``_``, as its flag is)."""
    items: dict[str, str] = {}
    for text in specs:
        name, sep, spec = text.partition("=")
        if not sep or not name.strip():
            raise GridError("grid", f"--grid {text!r}: write NAME=VALUES (e.g. lr=0.1:3:12)")
        key = name.strip().replace("-", "_")
        if key in items:
            raise GridError(key, f"parameter {key!r}: given twice in the grid")
        items[key] = spec
    return items


def config_id(experiment: str, params: Mapping[str, Any]) -> str:
    """The stable id of a cell: a hash of the experiment's name, its :func:`version` and its
    parameters as canonical JSON (sorted keys, no spaces).

    Stable across runs, processes and machines (JSON writes a float as the shortest text that
    reads back to it), and different when any parameter changes. The version is in it because
    a result answers the code that computed it: when the experiment's code changes, its old
    results no longer say what it computes, and a restarted sweep must run the cells again
    rather than take them from the store.
    """
    text = _canonical({"experiment": experiment, "version": version(experiment), "params": params})
    return hashlib.sha256(text.encode()).hexdigest()[:ID_LENGTH]


@functools.cache
def version(experiment: str) -> str:
    """normlab's version and a digest of the experiment's code source: its module (its
    parameters, its result type, its own code), each shared object its code uses (``code``:
    models, the training loop, data) and its batched entry when it has one."""
    exp = get_experiment(experiment)
    objects = [sys.modules[exp.entry.__module__], *exp.code]
    batched = getattr(exp, "batched", None)
    if batched is not None:
        objects.append(batched)
    digest = hashlib.sha256()
    for obj in objects:
        digest.update(inspect.getsource(obj).encode())
    return f"{__version__}+{digest.hexdigest()[:12]}"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _declared(declared: Mapping[str, Parameter], experiment: str, name: str) -> Parameter:
    key = name.replace("-", "_")
    if key not in declared:
        valid = ", ".join(declared)
        raise GridError(key, f"unknown parameter {key!r} for {experiment!r}, use one of: {valid}")
    return declared[key]


def _axis(p: Parameter, spec: Any) -> Axis:
    """The values ``spec`` gives parameter ``p``, each validated by its declaration."""
    try:
        if isinstance(spec, str):
            values = _parse_spec(p, spec)
            shown = spec.strip()
        else:
            many = isinstance(spec, list | tuple) and not (
                p.kind == "float_list" and all(isinstance(v, int | float) for v in spec)
            )
            values = tuple(p.validate(v) for v in (spec if many else [spec]))
            shown = _canonical(spec)
    except ParameterError as exc:
        raise GridError(p.name, str(exc)) from None
    except ParameterTypeError as exc:  # the same message, as a grid's error
        raise GridError(p.name, str(exc)) from None
    if not values:
        raise GridError(p.name, f"parameter {p.name!r}: no values given, use {p.allowed()}")
    seen: set[str] = set()
    for v in values:  # by repr: a float_list's values are lists, which no set can hold
        if repr(v) in seen:
            raise GridError(p.name, f"parameter {p.name!r}: value {v!r} given twice")
        seen.add(repr(v))
    return Axis(p.name, values, shown)


def _parse_spec(p: Parameter, spec: str) -> tuple[Any, ...]:
    """A command-line spec: a range ``A:B:N[:log|:lin]`` or a list (``,``; ``;`` between a
    ``float_list`` parameter's lists)."""
    if ":" in spec:
        if p.kind not in ("int", "float"):
            raise ParameterError(
                p.name,
                f"parameter {p.name!r}: a range A:B:N needs a number parameter, "
                f"give a list of values: {p.allowed()}",
            )
        return _range(p, spec)
    parts = spec.split(";") if p.kind == "float_list" else spec.split(",")
    if len(parts) > MAX_CONFIGS:
        raise ParameterError(
            p.name, f"parameter {p.name!r}: {len(parts)} values, at most {MAX_CONFIGS} an axis"
        )
    return tuple(p.parse(part) for part in parts)


def _range(p: Parameter, spec: str) -> tuple[Any, ...]:
    """``N`` points from ``A`` to ``B`` (see the module's docstring for the spacing)."""
    match = _RANGE.match(spec)
    count = match.group(3).strip() if match else ""
    if match is None or not count.isdigit() or int(count) < 2:
        raise ParameterError(
            p.name,
            f"parameter {p.name!r}: {spec!r} is not a range A:B:N[:log|:lin] "
            "(N >= 2 points from A to B)",
        )
    n = int(count)
    if n > MAX_CONFIGS:  # refused before a point is made: N is the user's, unbounded
        raise ParameterError(
            p.name, f"parameter {p.name!r}: {spec!r} asks for {n} points, at most {MAX_CONFIGS}"
        )
    low, high = float(p.parse(match.group(1))), float(p.parse(match.group(2)))
    spacing = match.group(4) or (
        "log" if low > 0 and high > 0 and max(low, high) / min(low, high) >= 10 else "lin"
    )
    if spacing == "log" and (low <= 0 or high <= 0):
        raise ParameterError(
            p.name, f"parameter {p.name!r}: a :log range needs A and B above 0, not {spec!r}"
        )
    if spacing == "log":  # the one log spacing: bn-lr-sweep's learning rates are the same
        points = log_spaced(low, high, n)
    else:
        points = [float(f"{low + (high - low) * i / (n - 1):.12g}") for i in range(n)]
    values = tuple(round(x) if p.kind == "int" else x for x in points)
    distinct = sorted(set(values))
    if len(distinct) < len(values):
        raise ParameterError(
            p.name,
            f"parameter {p.name!r}: {spec!r} repeats integers: its {n} points round to "
            f"{len(distinct)} ({_list_text(distinct)}), use at most {len(distinct)} points",
        )
    return tuple(p.validate(v) for v in values)


def _seed_axis(
    declared: Mapping[str, Parameter], experiment: str, seeds: int, named: set[str]
) -> Axis:
    if SEED not in declared:
        raise GridError("seeds", f"--seeds: experiment {experiment!r} has no seed parameter")
    if SEED in named:
        raise GridError("seeds", "--seeds: the grid already names seed, give one or the other")
    p = declared[SEED]
    most = int(p.max or 0) + 1
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= most:
        raise GridError("seeds", f"--seeds {seeds!r}: use an integer in [1, {most}]")
    return Axis(SEED, tuple(range(seeds)), f"--seeds {seeds}")


def _list_text(values: Sequence[Any], most: int = 6) -> str:
    """The first ``most`` values, then how many more: an error names them in one short line
    (a range may hold 100,000)."""
    shown = ", ".join(str(v) for v in values[:most])
    return shown if len(values) <= most else f"{shown}, ... ({len(values)} in all)"


def _cell_text(cell: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in cell.items())
