"""The experiment registry's building blocks: declared parameters, results, tables.

Every experiment declares its parameters once, as fields of a frozen ``Params`` dataclass made
with :func:`param`. Everything else is derived from that declaration: validation here, the CLI
flags, the HTTP schema and the lab's widgets. A run returns a :class:`Result` dataclass that holds
data only; faces read it (``to_dict`` for JSON, ``tables`` for terminal tables, ``plots.py`` for
figures) and never compute.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import operator
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Self, cast

import numpy as np
import torch

from normlab.figures import Figure
from normlab.figures import Table as Table  # re-exported: each experiment makes its tables

Kind = Literal["int", "float", "bool", "choice", "float_list"]
Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while a training run advances."""
Live = Callable[[Callable[[], "Result"]], None]
"""Called as ``live(partial)`` at every yield of a streaming experiment's entry (its result so
far; the last yield is the whole run); ``partial()`` builds that Result."""

MAX_SEED = 2**31 - 1

ENGINE = threading.RLock()
"""Held while an experiment's code runs. The code seeds torch's global generator and prints to
``sys.stdout``, as a learner's notebook does, so two runs at once would draw from each other's
stream (and print into each other's output): they take turns."""


class ParameterError(ValueError):
    """A parameter value outside what its declaration allows (or an unknown name)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


class ParameterTypeError(TypeError):
    """A parameter value of the wrong type."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Spec:
    """What a parameter allows, stored in the dataclass field's metadata."""

    help: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    step: float | None = None
    max_len: int | None = None
    follows: tuple[str, str] | None = None


RELATIONS: dict[str, tuple[str, Callable[[Any, Any], bool]]] = {
    "<=": ("at most", operator.le),
    "<": ("smaller than", operator.lt),
    ">": ("larger than", operator.gt),
}
"""How a parameter can depend on another one: ``follows=(relation, partner)``."""


def param(
    default: Any,
    help: str,
    *,
    min: float | None = None,
    max: float | None = None,
    choices: Sequence[str] | None = None,
    step: float | None = None,
    max_len: int | None = None,
    follows: tuple[str, str] | None = None,
) -> Any:
    """Declare one experiment parameter as a dataclass field (default, bounds or choices, help).

    ``follows=(relation, partner)`` bounds it by another parameter's value (``("<=",
    "depth")``: at most the depth; relations in :data:`RELATIONS`): the validation names it
    when the pair disagrees, and a widget moves it when its partner moves past it.
    """
    if follows is not None and follows[0] not in RELATIONS:
        valid = list(RELATIONS)
        raise ValueError(f"follows relation {follows[0]!r} not supported, use one of {valid}")
    spec = Spec(
        help=help,
        min=min,
        max=max,
        choices=tuple(choices) if choices is not None else None,
        step=step,
        max_len=max_len,
        follows=follows,
    )
    return field(default=default, metadata={"normlab": spec})


def seed_param(default: int = 0) -> Any:
    return param(
        default,
        "seed of every random draw (data, weights); same seed, same run",
        min=0,
        max=MAX_SEED,
        step=1,
    )


DEVICES = ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)
"""The devices this machine has: only these are offered."""


def device_param() -> Any:
    return param("cpu", "torch device to run on (seed figures are defined on cpu)", choices=DEVICES)


@dataclass(frozen=True)
class Parameter:
    """One declared parameter, as the faces see it."""

    name: str
    kind: Kind
    default: Any
    help: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    step: float | None = None
    max_len: int | None = None
    follows: tuple[str, str] | None = None  # (relation, partner): see param()

    @property
    def sized(self) -> bool:
        """Whether it sizes the run (an integer other than a seed): its help states the cost."""
        return self.kind == "int" and self.max is not None and self.max < MAX_SEED

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def allowed(self) -> str:
        """Words for what this parameter accepts, used in every error message."""
        if self.kind == "bool":
            return "true or false"
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices or ())
        noun = {"int": "an integer", "float": "a number", "float_list": "a list of numbers"}
        text = noun[self.kind]
        if self.min is not None and self.max is not None:
            text += f" in [{_fmt(self.min)}, {_fmt(self.max)}]"
        if self.kind == "float_list":
            text += f", 1 to {self.max_len} values"
        return text

    def validate(self, value: object) -> Any:
        """Return ``value`` as this parameter's type, or raise naming the parameter."""
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise self._type_error(value)
            return value
        if self.kind == "choice":
            if not isinstance(value, str):
                raise self._type_error(value)
            if value not in (self.choices or ()):
                raise self._value_error(value)
            return value
        if self.kind == "int":
            if isinstance(value, float) and value.is_integer():
                value = int(value)  # JSON's 2.0 is the integer 2 (2.5 stays refused)
            if isinstance(value, bool) or not isinstance(value, int):
                raise self._type_error(value)
            self._check_range(value, value)
            return value
        if self.kind == "float":
            return self._check_float(value, value)
        # float_list
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise self._type_error(value)
        if not 1 <= len(value) <= (self.max_len or 1):
            raise self._value_error(value)
        return tuple(self._check_float(v, value) for v in value)

    def parse(self, text: str) -> Any:
        """Parse a command-line string, then validate it."""
        text = text.strip()
        value: object
        try:
            if self.kind == "int":
                value = int(text)
            elif self.kind == "float":
                value = float(text)
            elif self.kind == "bool":
                lowered = text.lower()
                if lowered not in _BOOL_WORDS:
                    raise ValueError(text)
                value = _BOOL_WORDS[lowered]
            elif self.kind == "float_list":
                value = [float(part) for part in text.split(",")]
            else:
                value = text
        except ValueError:
            raise ParameterTypeError(
                self.name, f"parameter {self.name!r}: {text!r} is not {self.allowed()}"
            ) from None
        return self.validate(value)

    def schema(self) -> dict[str, Any]:
        """A JSON-ready description (for ``GET /api/experiments`` and the widgets)."""
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "help": self.help}
        out["default"] = list(self.default) if self.kind == "float_list" else self.default
        for key in ("min", "max", "step", "max_len"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.choices is not None:
            out["choices"] = list(self.choices)
        if self.follows is not None:
            out["follows"] = {"relation": self.follows[0], "partner": self.follows[1]}
        return out

    def _check_float(self, value: object, shown: object) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._type_error(shown)
        number = float(value)
        if not math.isfinite(number):
            raise self._value_error(shown)
        self._check_range(number, shown)
        return number

    def _check_range(self, number: float, shown: object) -> None:
        if (self.min is not None and number < self.min) or (
            self.max is not None and number > self.max
        ):
            raise self._value_error(shown)

    def _value_error(self, value: object) -> ParameterError:
        return ParameterError(
            self.name, f"parameter {self.name!r}: {value!r} is not allowed, use {self.allowed()}"
        )

    def _type_error(self, value: object) -> ParameterTypeError:
        return ParameterTypeError(
            self.name,
            f"parameter {self.name!r}: {value!r} ({type(value).__name__}) is not {self.allowed()}",
        )


_BOOL_WORDS = {
    "true": True,
    "1": True,
    "yes": True,
    "on": True,
    "false": False,
    "0": False,
    "no": False,
    "off": False,
}


def _fmt(x: float) -> str:
    """A bound as the user types it: whole numbers in full (the seed's 2147483647, which ``:g``
    would round to 2.14748e+09), others short (0.01, 2.5)."""
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"


@functools.cache  # a declaration never changes; reading type hints costs ~0.3 ms a request
def parameters_of(params_type: type) -> tuple[Parameter, ...]:
    """Read the :class:`Parameter` list off a ``Params`` dataclass declared with :func:`param`."""
    hints = typing.get_type_hints(params_type)
    out = []
    for f in dataclasses.fields(params_type):
        spec = f.metadata["normlab"]
        hint = hints[f.name]
        kind: Kind
        if hint is bool:
            kind = "bool"
        elif hint is int:
            kind = "int"
        elif hint is float:
            kind = "float"
        elif hint is str:
            if spec.choices is None:
                raise TypeError(f"parameter {f.name!r}: a str parameter needs choices")
            kind = "choice"
        elif typing.get_origin(hint) is tuple:
            kind = "float_list"
        else:
            raise TypeError(f"parameter {f.name!r}: unsupported type {hint!r}")
        out.append(
            Parameter(
                name=f.name,
                kind=kind,
                default=f.default,
                help=spec.help,
                min=spec.min,
                max=spec.max,
                choices=spec.choices,
                step=spec.step,
                max_len=spec.max_len,
                follows=spec.follows,
            )
        )
    return tuple(out)


@dataclass
class Result:
    """Base class of every experiment's result: data only, JSON-ready through :meth:`to_dict`.

    ``experiment`` and ``params`` are filled in by ``run_experiment`` so that a result says how
    to reproduce it. Non-finite floats (a diverged loss) become ``None`` so the JSON is strict.
    """

    experiment: str = field(default="", kw_only=True)
    params: dict[str, Any] = field(default_factory=dict, kw_only=True)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def tables(self) -> list[Table]:
        """The key numbers as tables: what the CLI prints and the lab shows under a plot."""
        raise NotImplementedError

    def figures(self) -> list[Figure]:
        """The result's figures, described as data (:mod:`normlab.figures`)."""
        raise NotImplementedError

    @classmethod
    def from_raw(cls, raw: Mapping[str, Any]) -> Self:
        """Build the result from the dict an experiment's ``entry`` returns (nested dicts become
        the dataclasses the fields declare)."""
        value: Self = _build(cls, raw)
        return value


def _build(hint: Any, value: Any) -> Any:
    """``value`` (plain JSON-like data) as the type ``hint``: dataclasses from dicts, lists of
    them, optional ones; anything else as it is. Lists are new lists (a run that goes on
    appending to its own does not change the result built from them)."""
    if value is None:
        return None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        hints = typing.get_type_hints(hint)
        fields = {f.name for f in dataclasses.fields(hint) if f.init}
        unknown = set(value) - fields
        if unknown:
            raise TypeError(f"{hint.__name__} has no field(s) {sorted(unknown)}")
        return hint(**{k: _build(hints[k], v) for k, v in value.items()})
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and args:
        if typing.get_origin(args[0]) is list or args[0] in (float, int, bool, str):
            return list(value)  # plain data: a new outer list, its items shared
        return [_build(args[0], v) for v in value]
    if origin in (types.UnionType, typing.Union):
        kinds = [a for a in args if a is not type(None)]
        return _build(kinds[0], value) if len(kinds) == 1 else value
    return value


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().tolist()
    elif isinstance(value, np.ndarray):
        value = value.tolist()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float | np.floating):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


@dataclass(frozen=True)
class Cost:
    """The most one run of an experiment may cost, at every setting's maximum: CPU seconds (one
    torch thread) and resident memory above the lab's own, on a loaded 2-core machine, with
    margin. ``tests/lab/test_maxima.py`` walks every experiment at :meth:`Experiment.maxima`
    and holds it to this (``benchmarks/maxima.py`` measures the same); the help of each of its
    sized parameters states it (:attr:`Parameter.sized`)."""

    cpu_s: float
    mib: int = 1024

    def __str__(self) -> str:
        memory = f"{self.mib / 1024:g} GiB" if self.mib >= 1024 else f"{self.mib} MiB"
        return (
            f"at every setting's maximum a run takes at most about {self.cpu_s:g} s of CPU"
            f" and {memory}"
        )


@dataclass(frozen=True)
class Experiment:
    """A registered experiment: its declared parameters, its plain-PyTorch code, its result.

    ``code`` is the experiment's computation, the functions and classes a learner reads, in the
    order a script defines them; they use only torch, numpy, scikit-learn and the standard
    library. ``entry`` (one of them) takes every declared parameter as a keyword and returns a
    dict of plain numbers and lists; ``show`` (one of them) prints that dict. normlab calls
    ``entry`` itself and builds ``result_type`` from its dict, and :mod:`~normlab.experiments.
    script` renders the same objects' source as a script, so what normlab reports is what the
    code prints. ``total_steps(params)`` counts the optimizer steps a training run takes (for a
    progress bar). ``cost`` bounds its costliest allowed run, :meth:`maxima`, whose choices
    ``heaviest`` names where the last one is not the costliest.
    """

    name: str
    title: str
    summary: str
    params_type: type
    result_type: type[Result]
    entry: Callable[..., Any]  # returns the result dict, or yields it as it grows (streams)
    show: Callable[[dict[str, Any]], None]
    code: tuple[Any, ...]
    cost: Cost
    heaviest: Mapping[str, Any] = field(default_factory=dict)
    total_steps: Callable[[Any], int] | None = None

    def __post_init__(self) -> None:
        for needed in (self.entry, self.show):
            if needed not in self.code:
                raise ValueError(f"experiment {self.name!r}: {needed.__name__} is not in its code")
        declared = parameters_of(self.params_type)
        unknown = set(self.heaviest) - {p.name for p in declared}
        if unknown:
            raise ValueError(f"experiment {self.name!r}: heaviest names no parameter {unknown}")
        unbounded = [p.name for p in declared if p.kind in ("int", "float") and p.max is None]
        if unbounded:  # its cost could not be bounded, nor maxima() built
            raise ValueError(f"experiment {self.name!r}: {unbounded} declare no maximum")

    @property
    def trains(self) -> bool:
        """Whether a run trains (it steps an optimizer and reports progress)."""
        return self.total_steps is not None

    @property
    def streams(self) -> bool:
        """Whether ``entry`` shows its result as it grows: it yields the result so far, and
        last the whole run (a generator function), rather than returning it."""
        return inspect.isgeneratorfunction(self.entry)

    @property
    def parameters(self) -> tuple[Parameter, ...]:
        """The declared parameters; a sized one's help states the experiment's :attr:`cost`."""
        return _with_cost(parameters_of(self.params_type), self.cost)

    def maxima(self) -> dict[str, Any]:
        """The costliest allowed request: every number at its maximum (a list as long as
        allowed), every bool true, every choice its last, except what :attr:`heaviest` names
        (the choices that cost most, found with ``benchmarks/maxima.py``)."""
        out: dict[str, Any] = {}
        for p in parameters_of(self.params_type):
            if p.kind in ("int", "float"):
                top = cast(float, p.max)  # every number declares one: see __post_init__
                out[p.name] = int(top) if p.kind == "int" else top
            elif p.kind == "float_list":
                out[p.name] = [p.max] * (p.max_len or 1)
            elif p.kind == "bool":
                out[p.name] = True
            else:
                out[p.name] = (p.choices or ())[-1]
        return {**out, **self.heaviest}

    def make_params(self, values: Mapping[str, object]) -> Any:
        """Validate ``values`` (names and each value) and build the ``Params`` instance."""
        return make_params(self.params_type, values, self.name)


@functools.cache
def _with_cost(parameters: tuple[Parameter, ...], cost: Cost) -> tuple[Parameter, ...]:
    return tuple(
        dataclasses.replace(p, help=f"{p.help} ({cost})") if p.sized else p for p in parameters
    )


def make_params(params_type: type, values: Mapping[str, object], owner: str) -> Any:
    """Validate ``values`` against ``params_type``'s declaration (each name, then each value)
    and build the instance; ``owner`` names what the parameters belong to in the messages."""
    declared = {p.name: p for p in parameters_of(params_type)}
    for name in values:
        if name not in declared:
            valid = ", ".join(declared)
            raise ParameterError(
                name, f"unknown parameter {name!r} for {owner!r}, use one of: {valid}"
            )
    checked = {name: declared[name].validate(v) for name, v in values.items()}
    made = params_type(**checked)
    for p in declared.values():
        if p.follows is not None:
            relation, partner = p.follows
            words, holds = RELATIONS[relation]
            value, bound = getattr(made, p.name), getattr(made, partner)
            if not holds(value, bound):
                raise ParameterError(
                    p.name,
                    f"parameter {p.name!r}: {_fmt(value)} must be {words} {partner} "
                    f"({_fmt(bound)})",
                )
    return made


def params_dict(params: Any) -> dict[str, Any]:
    """A ``Params`` instance as the JSON-ready dict a Result records (tuples become lists)."""
    return {
        k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(params).items()
    }


def fmt(x: float, digits: int = 4) -> str:
    """Format a number the way the seeds print it (fixed digits, no ``-0.0000``)."""
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def fmt_list(xs: Sequence[float], digits: int) -> str:
    return "[" + ", ".join(fmt(x, digits) for x in xs) + "]"


@dataclass
class Histogram:
    counts: list[float]  # (bins,)
    edges: list[float]  # (bins + 1,)


def histogram(a: torch.Tensor, bins: int) -> Histogram:
    """Counts of ``a``'s finite values in ``bins`` equal bins spanning their range (a unit-wide
    bin if constant; around 0 if none is finite: an overflowed stack counts nothing).

    >>> histogram(torch.tensor([1.0, 2.0, float("inf"), float("nan")]), 2).counts
    [1.0, 1.0]
    >>> histogram(torch.tensor([float("inf")]), 2).counts
    [0.0, 0.0]
    """
    a = a[torch.isfinite(a)]
    lo, hi = (a.min().item(), a.max().item()) if a.numel() else (0.0, 0.0)
    if hi <= lo:  # every activation equal (collapsed): one narrow bin around it
        lo, hi = lo - 0.5, hi + 0.5
    counts = torch.histc(a, bins=bins, min=lo, max=hi)
    edges = torch.linspace(lo, hi, bins + 1)
    return Histogram(counts=counts.tolist(), edges=edges.tolist())
