"""The sandbox side of a code check: run the learner's code, probe it, report once.

The sandbox hides the lab's own package (``normlab.lab``) from the code it runs, so this file
travels into the run as a file of its own (``_normlab_check.py``, next to ``submission.py``,
the learner's code, and ``_check_job.json``) and imports nothing but the standard library and
torch. The program the sandbox runs, :data:`CHILD_MAIN`, calls :func:`main`, which

1. reads the job (a nonce, a probe's name, the probe's inputs) and deletes its file, before any
   learner code runs;
2. runs ``submission.py`` as ``__main__`` and hands its globals to the probe, which calls the
   learner's functions (or reads their variables) and returns what it saw;
3. writes one line ``normlab-check-<nonce> <json>`` straight to the process's stdout.

Nothing here decides pass or fail: the server judges the report against its own recomputation
(see :mod:`normlab.lab.lessons.exercise`). A learner who prints a fake report line gains
nothing: the server accepts exactly one report line per run, and judges its numbers, not any
verdict in it. This is not a wall against a learner who sets out to rewrite the harness from
inside its own process (the sandbox is what protects the machine); such a learner could only
misreport their own progress, and would need the right numbers to do even that.

The server imports this module too, for :func:`case_tensors`, which both sides must compute
alike.
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

MARKER = "normlab-check"
"""Starts the report line: ``normlab-check-<nonce> <json>``."""
SUBMISSION_FILE = "submission.py"
JOB_FILE = "_check_job.json"
MODULE_FILE = "_normlab_check.py"
CHILD_MAIN = "import _normlab_check\n\n_normlab_check.main()\n"
"""The program the sandbox runs for a code check (its working folder is on ``sys.path``)."""

Probe = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


def main() -> None:
    """Run one code check in this process (see the module docstring)."""
    dumps, write = json.dumps, os.write  # held here, before learner code could rebind them
    job = json.loads(Path(JOB_FILE).read_text(encoding="utf-8"))
    os.remove(JOB_FILE)
    mark = f"{MARKER}-{job['nonce']} "
    out = os.dup(1)  # the report goes here even if the learner closes or redirects stdout
    probe = PROBES[job["probe"]]
    record: dict[str, Any]
    try:
        namespace = runpy.run_path(SUBMISSION_FILE, run_name="__main__")
        record = {"report": probe(namespace, job["args"])}
    except SystemExit as exc:
        record = {"error": f"SystemExit({exc.code!r}): leave out exit() so the checks can run"}
    except BaseException as exc:
        record = {"error": describe_error(exc)}
    for stream in (sys.stdout, sys.stderr):
        # a stream the learner closed cannot be flushed; their output is theirs to lose
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    write(out, ("\n" + mark + dumps(record) + "\n").encode())
    os.close(out)


def describe_error(exc: BaseException) -> str:
    """``"ValueError: message (line 7 of your code)"``: the learner's own innermost line."""
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).name == SUBMISSION_FILE:
            line = frame.lineno
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if line is None else f"{text} (line {line} of your code)"


def number(value: object) -> float | str:
    """A learner's scalar as a float, or words for what it is instead."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "ndim", None) == 0:  # 0-d tensor or array
        value = item()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{type(value).__name__} {_short(value)}"
    return float(value)


def number_list(value: object) -> list[float] | str:
    """A learner's sequence of numbers (list, tuple, 1-d tensor or array) as floats."""
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        value = tolist()
    if not isinstance(value, list | tuple):
        return f"a {type(value).__name__} ({_short(value)}), not a list of numbers"
    out: list[float] = []
    for i, v in enumerate(value):
        x = number(v)
        if isinstance(x, str):
            return f"a list whose item {i} is a {x}, not a number"
        out.append(x)
    return out


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _function(namespace: dict[str, Any], name: str) -> tuple[Any, dict[str, Any] | None]:
    fn = namespace.get(name)
    if fn is None or not callable(fn):
        return None, {"defined": fn is not None, "callable": False}
    return fn, None


# -- he-derivation -----------------------------------------------------------------------------


class Activation:
    r"""A two-slope activation, :math:`f(z) = s_+ z` for :math:`z > 0` and :math:`s_- z`
    otherwise: ReLU :math:`(1, 0)`, leaky ReLU :math:`(1, a)`, a scaled ReLU :math:`(c, 0)`,
    :math:`|z|` :math:`(1, -1)`. Called on a tensor like ``torch.relu``; its ``repr`` is its name.

    >>> Activation({"name": "leaky_relu(0.25)", "pos": 1.0, "neg": 0.25})(torch.tensor([-2.0, 3.0]))
    tensor([-0.5000,  3.0000])
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.name: str = spec["name"]
        self.pos: float = spec["pos"]
        self.neg: float = spec["neg"]

    def __call__(self, z: Any) -> torch.Tensor:
        z = torch.as_tensor(z)
        return torch.where(z > 0, self.pos * z, self.neg * z)

    def __repr__(self) -> str:
        return self.name


def _call(fn: Any, *args: Any) -> float | str:
    try:
        return number(fn(*args))
    except Exception as exc:
        return "raised " + describe_error(exc)


def probe_he_derivation(namespace: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """Call ``kept_fraction`` on each activation of ``args``, ``init_std`` on each
    ``(fan_in, kept)`` of ``args["calls"]`` and on ``(width, kept)`` with the learner's own
    measured fractions; report what came back."""
    functions = {}
    for name in ("kept_fraction", "init_std"):
        fn = namespace.get(name)
        functions[name] = "missing" if fn is None else "ok" if callable(fn) else "not callable"
    if any(state != "ok" for state in functions.values()):
        return {"functions": functions}
    kept_fraction, init_std = namespace["kept_fraction"], namespace["init_std"]
    kept = [_call(kept_fraction, Activation(spec)) for spec in args["activations"]]
    stack_std = [_call(init_std, args["width"], k) if isinstance(k, float) else None for k in kept]
    std = [_call(init_std, n, k) for n, k in args["calls"]]
    return {"functions": functions, "kept": kept, "stack_std": stack_std, "std": std}


# -- bn-backward -------------------------------------------------------------------------------


def case_tensors(case: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The float64 ``(x, gamma, dy)`` of one case: ``x`` of shape ``(n, d)``, scaled, shifted."""
    g = torch.Generator().manual_seed(case["seed"])
    shape = (case["n"], case["d"])
    x = case["scale"] * torch.randn(shape, generator=g, dtype=torch.float64) + case["shift"]
    gamma = 0.5 + torch.rand(case["d"], generator=g, dtype=torch.float64)  # (D,) in [0.5, 1.5)
    dy = torch.randn(shape, generator=g, dtype=torch.float64)  # (N, D)
    return x, gamma, dy


@contextlib.contextmanager
def _counting_autograd() -> Any:
    """Count runs of autograd's engine inside the block (yields a one-item list).

    ``Tensor.backward``, ``torch.autograd.backward`` and ``torch.autograd.grad`` (and what is
    built on them) all reach the engine through ``torch.autograd._engine_run_backward``.
    """
    module, name = torch.autograd, "_engine_run_backward"
    real = getattr(module, name)
    calls = [0]

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    setattr(module, name, counting)
    try:
        yield calls
    finally:
        setattr(module, name, real)


def probe_backward(namespace: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """Call ``batchnorm_backward(dy, x, gamma)`` on every case; report shapes and values."""
    fn, missing = _function(namespace, "batchnorm_backward")
    if missing is not None:
        return {**missing, "cases": []}
    cases: list[dict[str, Any]] = []
    for case in args["cases"]:
        x, gamma, dy = case_tensors(case)
        try:
            with _counting_autograd() as calls, torch.no_grad():
                out = fn(dy.clone(), x.clone(), gamma.clone())
        except Exception as exc:
            cases.append({"error": describe_error(exc)})
            continue
        cases.append({"autograd_calls": calls[0], **_grads(out)})
    return {"defined": True, "callable": True, "cases": cases}


def _grads(out: object) -> dict[str, Any]:
    if not isinstance(out, tuple | list):
        return {"shape_error": f"it returned a {type(out).__name__}, not (dx, dgamma, dbeta)"}
    if len(out) != 3:
        return {"shape_error": f"it returned {len(out)} values, not (dx, dgamma, dbeta)"}
    grads: dict[str, Any] = {}
    for name, value in zip(("dx", "dgamma", "dbeta"), out, strict=True):
        try:
            t = torch.as_tensor(value, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            return {"shape_error": f"{name} is a {type(value).__name__}, not a tensor"}
        grads[name] = {"shape": list(t.shape), "values": t.flatten().tolist()}
    return {"grads": grads}


# -- init-vs-bn --------------------------------------------------------------------------------


def probe_compare(namespace: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """Read the learner's two loss curves and their conclusion."""
    out: dict[str, Any] = {"missing": []}
    for name in ("he_losses", "bn_losses"):
        if name in namespace:
            out[name] = number_list(namespace[name])
        else:
            out["missing"].append(name)
    if "bn_still_helps" in namespace:
        value = namespace["bn_still_helps"]
        out["bn_still_helps"] = value if isinstance(value, bool) else _short(value)
    else:
        out["missing"].append("bn_still_helps")
    return out


PROBES: dict[str, Probe] = {
    "he_derivation": probe_he_derivation,
    "batchnorm_backward": probe_backward,
    "compare": probe_compare,
}
"""Every probe, by the name a :class:`~normlab.lab.lessons.exercise.CodeExercise` gives."""
