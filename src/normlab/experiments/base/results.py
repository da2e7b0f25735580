"""An experiment's result: data only, JSON-ready, with its tables and figures described as data.

A run returns a :class:`Result` dataclass. Faces read it (``to_dict`` for JSON, ``tables`` for
terminal tables, ``figures`` for the generic renderers) and never compute.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np
import torch

from normlab.figures import Figure, Table


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

    def data(self) -> dict[str, Any]:
        """The fields as the dicts and lists the experiment's ``entry`` returned (non-finite
        floats kept): what its code's ``tables(result)`` reads."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def tables(self) -> list[Table]:
        """The key numbers as tables: what the CLI prints and the lab shows under a plot.

        An experiment formats them once, in its code's ``tables(result)`` (which its script
        prints): a result's ``tables`` is ``Table.from_dicts(tables(self.data()))``.
        """
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


def _plain(value: Any) -> Any:
    """Plain data: dataclasses to dicts, lists and dicts copied, numbers as they are."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
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


@dataclass
class Histogram:
    """A result's histogram, as :func:`normlab.models.histogram` returns it."""

    counts: list[float]  # (bins,)
    edges: list[float]  # (bins + 1,)
