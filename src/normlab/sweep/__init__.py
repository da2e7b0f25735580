"""Sweeps: grids of experiments, run in groups (batched when they can), stored so nothing is lost.

- :mod:`~normlab.sweep.grid`: the axes of a grid, its cells (:class:`Config`) and their ids;
- :mod:`~normlab.sweep.engine`: groups of cells and how one runs (:func:`run_group`);
- :mod:`~normlab.sweep.store`: the SQLite store, one row per cell, each written once;
- :mod:`~normlab.sweep.sweeps`: a :class:`Sweep` (build, run, resume, ``frame()``, export).
"""

from normlab.sweep.engine import Backend, Group, Outcome, groups_of, in_process, run_group
from normlab.sweep.grid import Axis, Config, Grid, GridError, config_id
from normlab.sweep.store import DEFAULT_STORE, Store, StoreError
from normlab.sweep.sweeps import RunSummary, Sweep, run_sweep

__all__ = [
    "DEFAULT_STORE",
    "Axis",
    "Backend",
    "Config",
    "Grid",
    "GridError",
    "Group",
    "Outcome",
    "RunSummary",
    "Store",
    "StoreError",
    "Sweep",
    "config_id",
    "groups_of",
    "in_process",
    "run_group",
    "run_sweep",
]
