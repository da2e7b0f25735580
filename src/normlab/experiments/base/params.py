"""An experiment's parameters: declared once, validated here, read by every face.

Every experiment declares its parameters once, as fields of a frozen ``Params`` dataclass made
with :func:`param`. Everything else is derived from that declaration: the validation here
(:func:`make_params`), the CLI flags, the HTTP schema, the lab's widgets and the sweep grids
all read the same :class:`Parameter` list (:func:`parameters_of`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

Kind = Literal["int", "float", "bool", "choice", "float_list"]

MAX_SEED = 2**31 - 1


NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
"""A number as a list of them is written on the command line and in a query: decimal, with an
optional exponent (no ``inf``, ``nan`` or ``1_000``)."""


FLOAT_LIST = rf"^\s*{NUMBER}(?:\s*,\s*{NUMBER})*\s*$"
"""Comma-separated numbers (:data:`NUMBER`), as a regular expression (Python's and JSON
Schema's): the text :meth:`Parameter.parse` reads as a list (how many, and each one's range,
are checked after)."""


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
    declared = Parameter(
        name="",  # the field's name and its type hint's kind: filled in by parameters_of
        kind=_KIND_OF_DEFAULT.get(type(default), "choice"),
        default=default,
        help=help,
        min=min,
        max=max,
        choices=tuple(choices) if choices is not None else None,
        step=step,
        max_len=max_len,
        follows=follows,
    )
    return field(default=default, metadata={"normlab": declared})


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
    """One declared parameter: what :func:`param` declares and every face reads.

    :func:`param` stores it in the ``Params`` field's metadata; :func:`parameters_of` fills in
    the field's ``name`` and the ``kind`` its type hint gives.
    """

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
                if not re.fullmatch(FLOAT_LIST, text):
                    raise ValueError(text)
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


_KIND_OF_DEFAULT: dict[type, Kind] = {bool: "bool", int: "int", float: "float", tuple: "float_list"}
"""The kind a default suggests; the field's type hint decides (``x: float = param(1, ...)``)."""

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
        declared = f.metadata["normlab"]
        hint = hints[f.name]
        kind: Kind
        if hint is bool:
            kind = "bool"
        elif hint is int:
            kind = "int"
        elif hint is float:
            kind = "float"
        elif hint is str:
            if declared.choices is None:
                raise TypeError(f"parameter {f.name!r}: a str parameter needs choices")
            kind = "choice"
        elif typing.get_origin(hint) is tuple:
            kind = "float_list"
        else:
            raise TypeError(f"parameter {f.name!r}: unsupported type {hint!r}")
        out.append(dataclasses.replace(declared, name=f.name, kind=kind))
    return tuple(out)


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
