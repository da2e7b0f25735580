"""The code behind an experiment, rendered as a script a learner can run without normlab.

An experiment's computation is a handful of plain functions and classes (its ``code``). normlab
runs them itself, and this module renders the *same objects'* source, with the imports they use
and last lines that call the experiment's ``entry`` with the chosen parameters and print the
result's tables, ``print_tables(tables(result))`` (an entry that streams is a generator: the
script runs it through, its last yield being the whole run). No second copy of any computation
exists: the script is the code that produced the numbers, so it prints what normlab reports.

>>> from normlab.experiments import get_experiment
>>> text = render(get_experiment("linear-scale"), {"seed": 0})
>>> "import normlab" in text, "torch.manual_seed(seed)" in text
(False, True)
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import inspect
import io
import sys
import textwrap
from collections.abc import Iterable, Mapping
from typing import Any

from normlab import __version__
from normlab.experiments.base.params import params_dict
from normlab.experiments.base.registry import ENGINE, Experiment
from normlab.experiments.base.results import Result
from normlab.models import print_tables

WIDTH = 88
"""Longest line of the call before its arguments go one per line."""


def source_of(obj: Any) -> str:
    """The source of a function or class as its module writes it, dedented."""
    return textwrap.dedent(inspect.getsource(obj)).strip("\n")


def _imports(module_name: str) -> list[ast.Import | ast.ImportFrom]:
    """The top-level imports of a module, except ``__future__`` and normlab's own."""
    tree = ast.parse(inspect.getsource(sys.modules[module_name]))
    out: list[ast.Import | ast.ImportFrom] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.module in ("__future__", None) or node.module.startswith("normlab"):
                continue
            out.append(node)
        elif isinstance(node, ast.Import) and not any(
            a.name.startswith("normlab") for a in node.names
        ):
            out.append(node)
    return out


def _bound(alias: ast.alias) -> str:
    """The name an import binds: ``F`` for ``import torch.nn.functional as F``."""
    return alias.asname or alias.name.split(".")[0]


def imports(objects: Iterable[Any], body: str) -> list[str]:
    """The import lines ``body`` needs, taken from the modules that define ``objects``.

    Each import is kept, trimmed to the names ``body`` uses, in the order the modules list them,
    after ``from __future__ import annotations`` where a hint names something the script does not
    define (a type alias of the code's module), so that hints stay unevaluated text.
    """
    used = {n.id for n in ast.walk(ast.parse(body)) if isinstance(n, ast.Name)}
    found: dict[str, tuple[bool, bool, str]] = {}  # line -> its sort key
    merged: dict[str, dict[str, ast.alias]] = {}  # ``from M import ...``: M's names, every module's
    bound: set[str] = set()
    for module in dict.fromkeys(obj.__module__ for obj in objects):
        for node in _imports(module):
            names = [a for a in node.names if _bound(a) in used]
            bound |= {_bound(a) for a in names}
            if names and isinstance(node, ast.ImportFrom):
                merged.setdefault(str(node.module), {}).update({ast.unparse(a): a for a in names})
            elif names:
                top = names[0].name
                found[ast.unparse(ast.Import(names=names))] = (_third_party(top), False, top)
    for top, aliases in merged.items():  # one line per module, its names sorted as isort sorts
        names = sorted(aliases.values(), key=lambda a: a.name)
        found[ast.unparse(ast.ImportFrom(module=top, names=names, level=0))] = (
            _third_party(top),
            True,
            top,
        )
    lines = sorted(found, key=lambda line: found[line])  # the standard library first, as isort
    if _unbound_hints(body) - bound:  # a hint names a module's type alias: it stays text
        lines.insert(0, "from __future__ import annotations")
    return lines


def _third_party(module: str) -> bool:
    return module.split(".")[0] not in sys.stdlib_module_names


def _unbound_hints(body: str) -> set[str]:
    """Names that ``body``'s annotations use and neither ``body`` nor the builtins define."""
    tree = ast.parse(body)
    hints: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            hints += [a.annotation for a in args if a.annotation is not None]
            hints += [node.returns] if node.returns is not None else []
        elif isinstance(node, ast.ClassDef):  # a dataclass's fields (a function's locals' hints
            # are never evaluated)
            hints += [n.annotation for n in node.body if isinstance(n, ast.AnnAssign)]
    used = {n.id for hint in hints for n in ast.walk(hint) if isinstance(n, ast.Name)}
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)} | {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    return used - defined - set(dir(builtins))


def call(experiment: Experiment, params: Mapping[str, Any]) -> str:
    """The lines that run the experiment: ``result = entry(...)`` (for an entry that streams, a
    generator: ``for result in entry(...): pass``), then ``print_tables(tables(result))``."""
    args = [f"{k}={_literal(v)}" for k, v in params.items()]
    head = f"{'for result in' if experiment.streams else 'result ='} {experiment.entry.__name__}("
    tail = ":\n    pass  # the result so far, each time the run grows; the last is the whole run"
    one_line = head + ", ".join(args) + ")"
    if len(one_line) > WIDTH:
        one_line = head + "\n" + "".join(f"    {a},\n" for a in args) + ")"
    if experiment.streams:
        one_line += tail
    return f"{one_line}\nprint_tables({experiment.tables.__name__}(result))"


def _literal(value: Any) -> str:
    """A parameter value as code, strings in double quotes as the rest of the code writes them."""
    if isinstance(value, str) and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return repr(value)


def header(experiment: Experiment) -> str:
    """What the script is, in its docstring's words."""
    what = textwrap.fill(f"{experiment.title}: {experiment.summary}.", WIDTH - 4)
    how = textwrap.fill(
        f"The code behind normlab's {experiment.name!r} experiment (normlab {__version__}), with "
        "the parameters it ran with. It needs only PyTorch (and numpy, scikit-learn where "
        "imported) and prints the numbers normlab reports.",
        WIDTH - 4,
    )
    return f"{what}\n\n{how}"


def parts(experiment: Experiment, params: object) -> tuple[list[str], list[str], str]:
    """``(import lines, one source per code object, the call)`` for a ``Params`` instance."""
    values = params_dict(params)
    code = code_of(experiment)
    sources = [source_of(obj) for obj in code]
    run = call(experiment, values)
    return imports(code, "\n\n".join([*sources, run])), sources, run


def code_of(experiment: Experiment) -> tuple[Any, ...]:
    """What a script defines: the experiment's code, then the printer of its tables."""
    return (*experiment.code, print_tables)


def render(experiment: Experiment, params: Mapping[str, Any] | object) -> str:
    """The whole script for ``params`` (a ``Params`` instance, or a dict validated here)."""
    if isinstance(params, Mapping):
        params = experiment.make_params(params)
    lines, sources, run = parts(experiment, params)
    doc = '"""' + header(experiment) + '\n"""'
    blocks = [doc, "\n".join(lines), *sources, run]
    return "\n\n\n".join(blocks[:-1]) + "\n\n\n" + blocks[-1] + "\n"


def output(experiment: Experiment, result: Result) -> str:
    """What the script prints for ``result``: the tables its ``tables`` makes of the result's
    data."""
    data = result.data()
    buffer = io.StringIO()
    with ENGINE, contextlib.redirect_stdout(buffer):  # sys.stdout is the process's: take turns
        print_tables(experiment.tables(data))
    return buffer.getvalue()
