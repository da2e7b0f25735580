"""The code behind an experiment, rendered as a script a learner can run without normlab.

An experiment's computation is a handful of plain functions and classes (its ``code``). normlab
runs them itself, and this module renders the *same objects'* source, with the imports they use
and last lines that call the experiment's ``entry`` with the chosen parameters and print the
result's tables, ``print_tables(tables(result))`` (an entry that streams is a generator: the
script runs it through, its last yield being the whole run). No second copy of any computation
exists: the script is the code that produced the numbers, so it prints what normlab reports.

It reads like a notebook cell, not like the engine: each source is rendered by :func:`plain`
(no type annotations, docstrings cut to their summary, no UI hooks; the engine keeps all three),
then every function is specialized for the values its callers give it, starting from the chosen
parameters (:func:`pruned`): a branch those values decide keeps only the side they take, a
table looked up by a known key gives its entry, a parameter that carries nothing leaves the
function and its calls, and only the objects the call still reaches are pasted. A helper that
handles every norm and activation is pasted as the one block the run builds.

>>> from normlab.experiments import get_experiment
>>> text = render(get_experiment("linear-scale"), {"seed": 0})
>>> "import normlab" in text, "torch.manual_seed(seed)" in text
(False, True)
"""

from __future__ import annotations

import ast
import bisect
import builtins
import contextlib
import functools
import inspect
import io
import itertools
import math
import re
import sys
import textwrap
import threading
import tokenize
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from normlab import __version__
from normlab.experiments.base.params import params_dict
from normlab.experiments.base.registry import ENGINE, Experiment
from normlab.experiments.base.results import Result
from normlab.models import print_tables

WIDTH = 88
"""Longest line of the call before its arguments go one per line."""


_AST = threading.Lock()
"""One ``ast.parse`` (or compile of a tree) at a time in this process: CPython 3.11 keeps the
AST constructor's recursion depth in state that threads share, so two at once can fail with
``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905). The lab
renders code and notebooks in worker threads."""


def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, one thread at a time (:data:`_AST`)."""
    with _AST:
        return ast.parse(source)


def source_of(obj: Any) -> str:
    """The source of a function or class as its module writes it, dedented."""
    return textwrap.dedent(inspect.getsource(obj)).strip("\n")


@functools.cache  # a module's source is fixed for the process: parsed once, not per render
def _imports(module_name: str) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """The top-level imports of a module, except ``__future__`` and normlab's own (the nodes
    are shared between calls: read them, never change them)."""
    tree = parse(inspect.getsource(sys.modules[module_name]))
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
    return tuple(out)


@functools.cache  # a code object's source is fixed for the process
def _inner(obj: Any) -> tuple[ast.Import | ast.ImportFrom, ...]:
    """The imports inside the body of a function or class (normlab's own too: the doctor's
    experiment calls the doctor)."""
    tree = parse(source_of(obj))
    return tuple(n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom))


def _bound(alias: ast.alias) -> str:
    """The name an import binds: ``F`` for ``import torch.nn.functional as F``."""
    return alias.asname or alias.name.split(".")[0]


def imports(objects: Iterable[Any], body: str) -> list[str]:
    """The import lines ``body`` needs, taken from the modules that define ``objects`` and from
    the objects' own bodies (an import inside a function, which :func:`plain` takes out: the
    engine imports scikit-learn where the data is made, so that ``normlab list`` and the lab
    start without it; a script imports at its top).

    Each import is kept, trimmed to the names ``body`` uses, in the order the modules list them,
    after ``from __future__ import annotations`` where a hint names something the script does not
    define (a type alias of the code's module), so that hints stay unevaluated text.
    """
    used = {n.id for n in ast.walk(parse(body)) if isinstance(n, ast.Name)}
    found: dict[str, tuple[bool, bool, str]] = {}  # line -> its sort key
    merged: dict[str, dict[str, ast.alias]] = {}  # ``from M import ...``: M's names, every module's
    bound: set[str] = set()
    objects = list(objects)
    modules = dict.fromkeys(obj.__module__ for obj in objects)
    nodes = [*(n for m in modules for n in _imports(m)), *(n for o in objects for n in _inner(o))]
    for node in nodes:
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
    tree = parse(body)
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
    if len(one_line) > WIDTH:  # the arguments filled into lines under the call
        lines = [""]
        for arg in args:
            if lines[-1] and len(f"    {lines[-1]} {arg},") > WIDTH:
                lines.append("")
            lines[-1] += f" {arg}," if lines[-1] else f"{arg},"
        one_line = head + "\n" + "".join(f"    {line}\n" for line in lines) + ")"
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
        f"normlab {__version__}'s {experiment.name!r} experiment in plain PyTorch: it prints "
        "what normlab reports.",
        WIDTH - 4,
    )
    return f"{what}\n\n{how}"


def parts(experiment: Experiment, params: object) -> tuple[list[str], list[str], str]:
    """``(import lines, one source per code object, the call)`` for a ``Params`` instance: the
    code objects that the call reaches, each as :func:`plain` renders it."""
    values = params_dict(params)
    run = call(experiment, values)
    objects = {obj.__name__: obj for obj in code_of(experiment)}
    code = dict(_pruned(tuple((name, _plain_source(obj)) for name, obj in objects.items()), run))
    kept, sources = [objects[name] for name in code], [s.strip("\n") for s in code.values()]
    return imports(kept, "\n\n".join([*sources, run])), sources, run


@functools.cache  # a code object's source is fixed for the process: rendered once
def _plain_source(obj: Any) -> str:
    return plain(source_of(obj))


def _reached(run: str, sources: Mapping[str, str]) -> set[str]:
    """The names of ``sources`` that ``run`` calls, directly or through one another."""
    reached: set[str] = set()
    todo = set(_names(run))
    while todo:
        name = todo.pop()
        if name in sources and name not in reached:
            reached.add(name)
            todo |= _names(sources[name])
    return reached


@functools.lru_cache(maxsize=1024)
def _names(text: str) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(_tree(text)) if isinstance(n, ast.Name))


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


# -- the source as a learner reads it -----------------------------------------------------------

HOOKS = frozenset({"live"})
"""The names of UI hooks into a run (a callback the lab may pass, ``None`` everywhere else): a
parameter of that name, a statement ``if live ...:`` or ``live(...)`` and a keyword ``live=``
are the lab's, not the learner's code."""

LINE = 100
"""The longest line of rendered code, as the project writes its own (ruff's line length)."""


def plain(source: str) -> str:
    """``source`` (one function or class) as the learner reads it; the code that runs is the same.

    Each of the engine's extras is found with ``ast`` and its span replaced: type annotations
    (but a dataclass's fields: they make the fields), every docstring cut to its one-line
    summary (doctest examples go) and the UI's :data:`HOOKS`. An import inside it moves to the
    script's imports (:func:`imports`). Comments and the other lines stay as written.

    >>> print(plain('''def f(x: int, live: Any = None) -> int:
    ...     \"\"\"Twice x.
    ...
    ...     >>> f(2)
    ...     4
    ...     \"\"\"
    ...     y: int = 2 * x  # doubled
    ...     if live is not None:
    ...         live(y)
    ...     return y'''))
    def f(x):
        \"\"\"Twice x.\"\"\"
        y = 2 * x  # doubled
        return y
    """
    tree = parse(source)
    edits = _Edits(source)
    edits.body(tree.body, fields=False)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and not edits.is_cut(node):
            edits.hook_keywords(node)
    return edits.apply()


Def = ast.FunctionDef | ast.AsyncFunctionDef
Edit = tuple[int, int, str]
"""``(start, end, replacement)``: a span of a source (in characters) and its new text."""


class _Edits:
    """Replacements of spans of ``source``, located by ``ast`` nodes (whose columns count UTF-8
    bytes) and made in characters."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.starts = list(itertools.accumulate((len(line) for line in self.lines), initial=0))
        self.edits: list[tuple[int, int, str]] = []  # (start, end, replacement)
        self.cut: list[tuple[int, int]] = []  # the statements taken out

    @functools.cached_property
    def operators(self) -> list[tuple[int, str]]:
        """``(offset, text)`` of every operator token: brackets, colons."""
        return [
            (self.starts[t.start[0] - 1] + t.start[1], t.string)
            for t in tokenize.generate_tokens(io.StringIO(self.source).readline)
            if t.type == tokenize.OP
        ]

    def apply(self) -> str:
        text = self.source
        for start, end, new in sorted(self.edits, reverse=True):
            text = text[:start] + new + text[end:]
        return text

    def start(self, node: Any) -> int:
        line = self.lines[node.lineno - 1].encode()
        return self.starts[node.lineno - 1] + len(line[: node.col_offset].decode())

    def end(self, node: Any) -> int:
        line = self.lines[node.end_lineno - 1].encode()
        return self.starts[node.end_lineno - 1] + len(line[: node.end_col_offset].decode())

    def text(self, node: ast.AST) -> str:
        return self.source[self.start(node) : self.end(node)]

    def is_cut(self, node: ast.AST) -> bool:
        return any(start <= self.start(node) < end for start, end in self.cut)

    def drop(self, stmt: ast.stmt, keep_pass: bool = False, blanks: bool = False) -> None:
        """Take out the whole lines of ``stmt`` (``keep_pass``: leave ``pass`` in its place;
        ``blanks``: and the blank lines after it)."""
        last = stmt.end_lineno or stmt.lineno
        while blanks and last < len(self.lines) and not self.lines[last].strip():
            last += 1
        start, end = self.starts[stmt.lineno - 1], self.starts[last]
        self.cut.append((start, end))
        self.edits.append((start, end, " " * stmt.col_offset + "pass\n" if keep_pass else ""))

    def body(self, body: list[ast.stmt], fields: bool) -> None:
        """Edit one body's statements (``fields``: a dataclass's, whose hints make its fields)."""
        out = [s for s in body if _is_hook(s) or _is_import(s) or (_is_hint(s) and not fields)]
        for stmt in body:
            if stmt in out:
                last = len(out) == len(body) and stmt is body[-1]
                self.drop(stmt, keep_pass=last, blanks=_is_import(stmt) and not last)
            elif isinstance(stmt, ast.ClassDef):
                self.body(self.docstring(stmt), fields=_is_dataclass(stmt))
            elif isinstance(stmt, Def):
                self.header(stmt)
                self.body(self.docstring(stmt), fields=False)
            else:
                if isinstance(stmt, ast.AnnAssign) and stmt.value is not None and not fields:
                    self.edits.append((self.end(stmt.target), self.start(stmt.value), " = "))
                for nested in _bodies(stmt):
                    self.body(nested, fields=False)

    def docstring(self, node: Def | ast.ClassDef) -> list[ast.stmt]:
        """Cut ``node``'s docstring to its summary, or take it out; the statements after it."""
        if ast.get_docstring(node) is None:
            return node.body
        first, rest = node.body[0], node.body[1:]
        summary = _summary(ast.get_docstring(node) or "", LINE - first.col_offset)
        if summary:
            self.edits.append((self.start(first), self.end(first), summary))
        elif first.lineno > node.lineno:  # on lines of its own
            self.drop(first, keep_pass=not rest, blanks=bool(rest))
        return rest

    def header(self, node: Def) -> None:
        """``def name(args):`` from ``def`` to its colon, without annotations or hooks."""
        start, depth = self.start(node), 0
        first = bisect.bisect_left(self.operators, (start, ""))
        for offset, op in self.operators[first:]:  # the first colon outside brackets ends it
            depth += (op in "([{") - (op in ")]}")
            if op == ":" and depth == 0:
                end = offset + 1
                break
        keyword = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
        head = f"{keyword} {node.name}("
        args = self.arguments(node.args)
        indent = " " * node.col_offset
        text = head + ", ".join(args) + "):"
        if len(indent + text) > LINE:  # black's layouts: the arguments on one line, or one each
            inner = f"{indent}    " + ", ".join(args)
            if len(inner) > LINE:
                inner = ",\n".join(f"{indent}    {a}" for a in args) + ","
            text = f"{head}\n{inner}\n{indent}):"
        self.edits.append((start, end, text))

    def arguments(self, a: ast.arguments) -> list[str]:
        """The parameters as written, each ``name`` or ``name=default``, hooks left out."""

        def spelled(args: list[ast.arg], defaults: list[ast.expr | None]) -> list[str]:
            return [
                arg.arg + ("" if default is None else "=" + self.text(default))
                for arg, default in zip(args, defaults, strict=True)
                if arg.arg not in HOOKS
            ]

        positional = [*a.posonlyargs, *a.args]
        defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
        out = spelled(a.posonlyargs, defaults[: len(a.posonlyargs)])
        out += ["/"] if out else []
        out += spelled(a.args, defaults[len(a.posonlyargs) :])
        keywords = spelled(a.kwonlyargs, list(a.kw_defaults))
        if a.vararg:
            out.append("*" + a.vararg.arg)
        elif keywords:
            out.append("*")
        out += keywords
        return out + ([f"**{a.kwarg.arg}"] if a.kwarg else [])

    def is_elif(self, node: ast.stmt) -> bool:
        return self.lines[node.lineno - 1].lstrip().startswith("elif")

    def decide(self, node: ast.If | ast.IfExp, taken: bool, alone: bool = False) -> Edit:
        """The edit that keeps only the branch ``taken`` (True: the body) of ``node`` (``alone``:
        the only statement of its block, which must not empty)."""
        if isinstance(node, ast.IfExp):
            return self.start(node), self.end(node), self.text(node.body if taken else node.orelse)
        if self.is_elif(node):
            return self.decide_elif(node, taken)
        start, end = self.starts[node.lineno - 1], self.starts[node.end_lineno or node.lineno]
        if not taken and node.orelse and self.is_elif(node.orelse[0]):  # "elif b:" -> "if b:"
            return self.start(node), self.start(node.orelse[0]) + len("el"), ""
        branch = node.body if taken else node.orelse
        if not branch:
            return start, end, " " * node.col_offset + "pass\n" if alone else ""
        first = branch[0].lineno
        while self.lines[first - 2].lstrip().startswith("#"):  # its comments above it
            first -= 1
        shift = " " * (branch[0].col_offset - node.col_offset)
        lines = self.lines[first - 1 : branch[-1].end_lineno]
        return start, end, "".join(line.removeprefix(shift) for line in lines)

    def decide_elif(self, node: ast.If, taken: bool) -> Edit:
        """``elif test:`` decided: taken, it becomes the ``else:`` (what follows it goes); not
        taken, it goes (what follows it takes its place)."""
        start = self.starts[node.lineno - 1]
        after = self.orelse_line(node)  # the line of "else:" or of the next "elif", or None
        if taken:
            end = self.starts[node.end_lineno or node.lineno]
            body = self.starts[node.body[-1].end_lineno or node.body[-1].lineno]
            head = self.starts[node.body[0].lineno - 1]
            indent = " " * (
                len(self.lines[node.lineno - 1]) - len(self.lines[node.lineno - 1].lstrip())
            )
            return start, end, indent + "else:\n" + self.source[head:body]
        if after is None:
            return start, self.starts[node.end_lineno or node.lineno], ""
        return start, self.starts[after - 1], ""

    def orelse_line(self, node: ast.If) -> int | None:
        """The line number of the ``else:`` or ``elif`` after ``node``'s body, if any."""
        if not node.orelse:
            return None
        if self.is_elif(node.orelse[0]):
            return node.orelse[0].lineno
        line = node.body[-1].end_lineno or node.body[-1].lineno
        while not self.lines[line].lstrip().startswith("else"):
            line += 1
        return line + 1

    def hook_keywords(self, call: ast.Call) -> None:
        """Take ``live=...`` out of a call, with the comma before it (or after it, when first)."""
        items = sorted([*call.args, *call.keywords], key=self.start)
        for i, item in enumerate(items):
            if isinstance(item, ast.keyword) and item.arg in HOOKS:
                if i:
                    self.edits.append((self.end(items[i - 1]), self.end(item), ""))
                elif len(items) > 1:
                    self.edits.append((self.start(item), self.start(items[1]), ""))
                else:
                    self.edits.append((self.start(item), self.end(item), ""))


def _is_hook(stmt: ast.stmt) -> bool:
    """``if live ...:`` (with no ``else``) or ``live(...)``."""
    if isinstance(stmt, ast.If):
        named = {n.id for n in ast.walk(stmt.test) if isinstance(n, ast.Name)}
        if named & HOOKS and stmt.orelse:
            raise ValueError(f"a hook's if has an else: {ast.unparse(stmt.test)!r}")
        return bool(named & HOOKS)
    value = getattr(stmt, "value", None)
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in HOOKS
    )


def _is_import(stmt: ast.stmt) -> bool:
    """An import inside the function or class: it goes to the script's imports (:func:`imports`)."""
    return isinstance(stmt, ast.Import | ast.ImportFrom)


def _is_hint(stmt: ast.stmt) -> bool:
    """``name: hint`` with no value: only a hint."""
    return isinstance(stmt, ast.AnnAssign) and stmt.value is None


def _is_dataclass(node: ast.ClassDef) -> bool:
    """Whether the class's annotations make its fields (``@dataclass``, a NamedTuple)."""
    named = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list] + node.bases
    return any(
        ast.unparse(n).split(".")[-1] in ("dataclass", "NamedTuple", "TypedDict") for n in named
    )


def _bodies(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The blocks nested in a statement (``if``, ``for``, ``while``, ``with``, ``try``, ...)."""
    blocks = [getattr(stmt, f, []) for f in ("body", "orelse", "finalbody")]
    blocks += [h.body for h in getattr(stmt, "handlers", [])]
    blocks += [c.body for c in getattr(stmt, "cases", [])]
    return [b for b in blocks if b and isinstance(b[0], ast.stmt)]


SENTENCE_END = re.compile(r"(?<=[^.][.!?])\s+(?=[A-Z(`:])")  # not after "..": a range


def _summary(doc: str, width: int) -> str:
    """A docstring's one-line summary as a literal at most ``width`` long, or ``""``: the first
    sentence of its first paragraph, else the clause before its first ``;``."""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    sentence = SENTENCE_END.split(paragraph)[0]
    for line in (sentence, sentence.split("; ")[0].rstrip(".") + "."):
        literal = ("r" if "\\" in line else "") + f'"""{line}"""'
        if len(literal) <= width and not line.endswith('"'):
            return literal
    return ""


# -- the code at the parameters it runs with ----------------------------------------------------
#
# The run's call fixes the entry's parameters; every call the pasted code makes with constants
# (or with parameters already known) fixes the callee's the same way. A parameter that may take
# a few values is known as that set: a test true for all of them (or false for all) is decided.

Values = frozenset[tuple[type, Any]]
"""The values a name may hold where the run reaches it, each with its type (``1`` is not
``True``)."""

CASES = 64
"""The most combinations of known values a test is evaluated for."""


def _one_of(values: Iterable[Any]) -> Values:
    """``values`` as :data:`Values`."""
    return frozenset((type(v), v) for v in values)


def specialized(source: str, values: Mapping[str, Any]) -> str:
    """The function's ``source`` with each ``if`` on its parameters decided by ``values``: the
    branch the run takes stays (dedented to the ``if``), the other goes; a dict looked up by a
    known key gives its value, and a constant no line reads any more goes. A parameter the
    function reassigns is left alone.

    >>> print(specialized('def f(init):\\n    if init != "default":\\n        g(init)\\n'
    ...                   '    return 1 if init == "he" else 2', {"init": "default"}))
    def f(init):
        return 2
    """
    known = {name: _one_of([value]) for name, value in values.items()}
    while (step := _step(source, known)) is not None:
        source = step
    return source


def pruned(sources: Mapping[str, str], run: str) -> dict[str, str]:
    """The ``sources`` (name -> one function's or class's source) that ``run`` reaches, each
    :func:`specialized` for the values its callers give it, in their order."""
    out = dict(sources)
    settled: dict[tuple[str, frozenset[tuple[str, Values]]], str] = {}  # no step left
    while True:
        reached = _reached(run, out)
        out = {name: source for name, source in out.items() if name in reached}
        known = _known(out, run)  # what the others' edits below only narrow: still true
        changed = False
        for name, source in out.items():
            key = (source, frozenset(known.get(name, {}).items()))
            if key not in settled:
                done = source
                while (step := _step(done, known.get(name, {}))) is not None:
                    done = step
                settled[key] = settled[(done, key[1])] = done
            changed |= settled[key] != source
            out[name] = settled[key]
        if not changed:
            fewer = _parameters(out, run)
            if fewer is None:
                return out
            out = fewer


@functools.lru_cache(maxsize=128)
def _pruned(sources: tuple[tuple[str, str], ...], run: str) -> tuple[tuple[str, str], ...]:
    """:func:`pruned`, once per sources and call (a page and its notebook render the same)."""
    return tuple(pruned(dict(sources), run).items())


@functools.lru_cache(maxsize=1024)
def _tree(source: str) -> ast.Module:
    """:func:`parse`, once per source text (the trees are read, never changed)."""
    return parse(source)


def _scope(tree: ast.Module) -> Def | None:
    """The function whose parameters the callers set: the source's function, or the class's
    ``__init__``."""
    node = tree.body[0]
    if isinstance(node, ast.ClassDef):
        return next((s for s in node.body if isinstance(s, Def) and s.name == "__init__"), None)
    return node if isinstance(node, Def) else None


class _Calls(NamedTuple):
    """Who calls whom in the pasted code (the run's line named ``""``)."""

    trees: dict[str, ast.Module]
    scopes: dict[str, Def | None]  # each source's function whose parameters calls set
    inside: dict[str, frozenset[int]]  # each caller's nodes where its own parameters are in scope
    called: list[tuple[str, ast.Call, str]]  # (callee, the call, its caller)
    escaped: set[str]  # named otherwise than called (passed on, a base class, shadowed)


def _calls(sources: Mapping[str, str], run: str) -> _Calls:
    """Who calls whom among ``sources``, and from the ``run`` line."""
    trees = {name: _tree(source) for name, source in sources.items()}
    trees[""] = _tree(run)
    scopes = {name: _scope(tree) for name, tree in trees.items() if name}
    inside = {name: _ids(scope) for name, scope in scopes.items() if scope}
    called = [
        (callee, call, caller)
        for caller, source in [*sources.items(), ("", run)]
        for callee, call in _named_calls(source)
        if callee in scopes
    ]
    escaped = {name for source in [*sources.values(), run] for name in _named(source)}
    return _Calls(trees, scopes, inside, called, escaped & set(scopes))


@functools.lru_cache(maxsize=1024)
def _nodes(node: ast.AST) -> tuple[ast.AST, ...]:
    """``ast.walk(node)``, once per node (the trees are read, never changed)."""
    return tuple(ast.walk(node))


@functools.lru_cache(maxsize=1024)
def _ids(node: ast.AST) -> frozenset[int]:
    """The ``id`` of every node under ``node``."""
    return frozenset(id(n) for n in _nodes(node))


@functools.lru_cache(maxsize=1024)
def _blocks(function: ast.AST) -> tuple[list[ast.stmt], ...]:
    """Every block of statements in ``function``, its body first."""
    nested = [b for n in _nodes(function) if isinstance(n, ast.stmt) for b in _bodies(n)]
    return (getattr(function, "body", []), *nested)


@functools.lru_cache(maxsize=1024)
def _named_calls(source: str) -> list[tuple[str, ast.Call]]:
    """``(name, call)`` for every call of a name in ``source``."""
    calls = [n for n in ast.walk(_tree(source)) if isinstance(n, ast.Call)]
    return [(c.func.id, c) for c in calls if isinstance(c.func, ast.Name)]


@functools.lru_cache(maxsize=1024)
def _named(source: str) -> frozenset[str]:
    """The names ``source`` uses otherwise than to call them, or binds as parameters."""
    funcs = {id(call.func) for _, call in _named_calls(source)}
    nodes = list(ast.walk(_tree(source)))
    named = {n.id for n in nodes if isinstance(n, ast.Name) and id(n) not in funcs}
    return frozenset(named | {n.arg for n in nodes if isinstance(n, ast.arg)})


@functools.lru_cache(maxsize=1024)
def _uses(node: ast.AST) -> dict[str, list[ast.Name]]:
    """Each name's nodes under ``node``."""
    uses: dict[str, list[ast.Name]] = {}
    for n in _nodes(node):
        if isinstance(n, ast.Name):
            uses.setdefault(n.id, []).append(n)
    return uses


@functools.lru_cache(maxsize=1024)
def _parents(node: ast.AST) -> dict[int, ast.AST]:
    """Each node's parent under ``node``, by the child's ``id``."""
    return {id(c): p for p in _nodes(node) for c in ast.iter_child_nodes(p)}


def _known(sources: Mapping[str, str], run: str) -> dict[str, dict[str, Values]]:
    """For each source, the values of its parameters that every call the code makes gives.

    A function (or class) whose name is used but not called (passed on, a base class) gets
    none; a parameter one call gives an unknown value is left out. Callers' parameters are
    known once their own callers' are: repeated until nothing changes.
    """
    c = _calls(sources, run)
    known: dict[str, dict[str, Values]] = {}
    while True:
        envs = {name: _env(scope, known.get(name, {})) for name, scope in c.scopes.items()}
        new: dict[str, dict[str, Values]] = {}
        for name, scope in c.scopes.items():
            if scope is not None and name not in c.escaped:
                new[name] = _union(
                    _bind(call, scope, envs[caller] if id(call) in c.inside.get(caller, ()) else {})
                    for callee, call, caller in c.called
                    if callee == name
                )
        if new == known:
            return known
        known = new


def _parameters(sources: Mapping[str, str], run: str) -> dict[str, str] | None:
    """The sources with parameters that carry nothing taken out of their functions and of the
    calls to them (one per function, and none where another's edits touch the same sources),
    or None where there is none: a parameter no line reads, or one no call gives whose default
    (a name, an attribute, a constant) is then written where the line names it anyway
    (``loss_fn(...)``, ``bias=bias``); a default every call gives goes. The entry's stay, as the
    run's call gives them."""
    c = _calls(sources, run)
    edits: dict[str, _Edits] = {}
    for name, scope in c.scopes.items():
        sites = [(call, caller) for callee, call, caller in c.called if callee == name]
        unpacked = any(  # ``f(*args)``, ``f(**kwargs)``: what they give is not written
            isinstance(a, ast.Starred) for call, _ in sites for a in call.args
        ) or any(k.arg is None for call, _ in sites for k in call.keywords)
        touched = {name} | {caller for _, caller in sites}
        if (
            scope is None
            or name in c.escaped
            or unpacked
            or "" in touched
            or touched & set(edits)  # edited this time round already: next time
        ):
            continue
        mine = {n: _Edits(sources[n]) for n in touched}
        for arg in [*scope.args.args, *scope.args.kwonlyargs][int(scope.name == "__init__") :]:
            if _parameter(mine, name, scope, arg, sites):
                edits |= mine
                break
    if not edits:
        return None
    return {n: edits[n].apply() if n in edits else s for n, s in sources.items()}


def _parameter(
    edits: Mapping[str, _Edits],
    name: str,
    scope: Def,
    arg: ast.arg,
    sites: list[tuple[ast.Call, str]],
) -> bool:
    """Whether ``arg`` of ``scope`` (the function of source ``name``) carries nothing: then its
    edits (out of the function and the calls ``sites``, or its default written in) are made."""
    a, at = scope.args, edits[name]
    if arg.arg in _locals(scope)[0]:
        return False  # rebound: its value changes
    last = dict(_signature(scope))[arg]  # its default, or itself when it has none
    default = last if isinstance(last, ast.expr) else None
    given = [(call, caller, _given(call, scope, arg)) for call, caller in sites]
    first_default = len(a.args) - len(a.defaults)  # the first positional one with a default
    if (
        default is not None
        and all(g for *_, g in given)
        and (arg in a.kwonlyargs or a.args.index(arg) == first_default)
    ):  # every call gives it: its default goes (``f(a, b=1, c=2)`` -> ``f(a, b, c=2)``)
        at.edits.append((at.end(arg), at.end(default), ""))
        return True
    parents = _parents(scope)
    reads = _uses(scope).get(arg.arg, [])
    if reads:  # written in where the line names it anyway: ``f(x)`` for ``loss_fn(x)``
        if default is None or not _pure(default) or any(g for *_, g in given):
            return False
        calls = [p for p in parents.values() if isinstance(p, ast.Call)]
        named = {id(n) for n in reads if isinstance(parents[id(n)], ast.keyword)}
        named |= {id(call.func) for call in calls}
        shadowed = {n.id for n in ast.walk(default) if isinstance(n, ast.Name)}
        if shadowed & _locals(scope)[0] or not all(id(n) in named for n in reads):
            return False
        for n in reads:
            at.edits.append((at.start(n), at.end(n), at.text(default)))
        return True
    alone_keyword = arg in a.kwonlyargs and len(a.kwonlyargs) == 1 and a.vararg is None
    if alone_keyword or not all(g is None or g[1] for *_, g in given):
        return False
    top = _tree(at.source).body[0]  # the function, or the class of an ``__init__``
    doc = ast.get_docstring(top) if isinstance(top, Def | ast.ClassDef) else None
    if f"``{arg.arg}``" in (doc or ""):  # "by ``method``": it stays
        return False
    at.edits.append(_cut(at, _signature(scope), arg))
    for call, caller, g in given:
        if g is not None:
            edits[caller].edits.append(_cut(edits[caller], _arguments(call), g[0]))
    return True


def _given(call: ast.Call, scope: Def, arg: ast.arg) -> tuple[ast.AST, bool] | None:
    """What ``call`` gives ``arg``: the keyword or argument, and whether it can go (a plain value:
    taking it out of every call and of the function binds the others as before); None where it
    gives nothing."""
    for k in call.keywords:
        if k.arg == arg.arg:
            return k, _pure(k.value)
    positional = [*scope.args.posonlyargs, *scope.args.args][int(scope.name == "__init__") :]
    if arg in positional and positional.index(arg) < len(call.args):
        given = call.args[positional.index(arg)]
        return given, _pure(given)
    return None


def _signature(scope: Def) -> list[tuple[ast.AST, ast.AST]]:
    """Each parameter's span, as (first node, last node): the name, and its default if any."""
    a = scope.args
    defaults = dict(zip(a.args[len(a.args) - len(a.defaults) :], a.defaults, strict=True))
    defaults |= {k: d for k, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d}
    return [(arg, defaults.get(arg, arg)) for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]]


def _arguments(call: ast.Call) -> list[tuple[ast.AST, ast.AST]]:
    """A call's arguments and keywords as written, in :func:`_cut`'s spans."""
    return [(item, item) for item in sorted([*call.args, *call.keywords], key=_position)]


def _position(node: Any) -> tuple[int, int]:
    """Where ``node`` starts: ``(line, column)``."""
    return node.lineno, node.col_offset


def _cut(at: _Edits, items: list[tuple[ast.AST, ast.AST]], item: ast.AST) -> Edit:
    """The edit that takes ``item`` out of a list of ``items`` with its comma: the one after it,
    or the one before it when it is last."""
    i = next(k for k, (first, _) in enumerate(items) if first is item)
    if i + 1 < len(items):
        return at.start(item), at.start(items[i + 1][0]), ""
    if i:
        return at.end(items[i - 1][1]), at.end(items[i][1]), ""
    return at.start(item), at.end(items[i][1]), ""


def _union(bindings: Iterable[dict[str, Values] | None]) -> dict[str, Values]:
    """Each parameter's values over all the calls: only those every call gives known values."""
    out: dict[str, Values] | None = None
    for binding in bindings:
        if binding is None:
            return {}
        if out is None:
            out = dict(binding)
        else:
            out = {k: v | binding[k] for k, v in out.items() if k in binding}
    return out or {}


def _bind(call: ast.Call, scope: Def, env: Mapping[str, Values]) -> dict[str, Values] | None:
    """The known values one call gives ``scope``'s parameters (a default where it gives none);
    None where the call unpacks ``*args`` or ``**kwargs`` or gives more than the parameters."""
    a = scope.args
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return None
    positional = [*a.posonlyargs, *a.args]
    defaults: dict[str, ast.expr | None] = dict.fromkeys(p.arg for p in positional)
    defaults.update(
        zip(
            [p.arg for p in positional][len(positional) - len(a.defaults) :],
            a.defaults,
            strict=True,
        )
    )
    defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)})
    given: dict[str, ast.expr] = {}
    method = int(isinstance(scope, Def) and scope.name == "__init__")  # self
    if len(call.args) > len(positional) - method:
        return None
    given.update({p.arg: arg for p, arg in zip(positional[method:], call.args, strict=False)})
    given.update({str(k.arg): k.value for k in call.keywords})
    out: dict[str, Values] = {}
    for name, default in list(defaults.items())[method:]:
        expr = given.get(name, default)
        values = None if expr is None else _values(expr, env if name in given else {})
        if values is not None:
            out[name] = values
    return out


def _values(expr: ast.expr, env: Mapping[str, Values]) -> Values | None:
    """The values ``expr`` may take: a constant, a known name, ``a if test else b`` of those."""
    if isinstance(expr, ast.Name):
        return env.get(expr.id)
    if isinstance(expr, ast.IfExp):
        taken = _decided(expr.test, env)
        if taken is not None:
            return _values(expr.body if taken else expr.orelse, env)
        body, orelse = _values(expr.body, env), _values(expr.orelse, env)
        return None if body is None or orelse is None else body | orelse
    try:
        value = ast.literal_eval(expr)
        hash(value)
    except (ValueError, TypeError, SyntaxError):
        return None
    return _one_of([value])


def _env(scope: Def | None, known: Mapping[str, Values]) -> dict[str, Values]:
    """What ``scope``'s names are known to hold: its parameters that it never rebinds, and the
    locals its body binds once, at its top level, to a constant."""
    if scope is None:
        return {}
    stores, constants = _locals(scope)
    builtin = {k: v for k, v in _BUILTIN_VALUES.items() if k not in stores}
    return builtin | {k: v for k, v in known.items() if k not in stores} | constants


@functools.lru_cache(maxsize=1024)
def _locals(scope: Def) -> tuple[frozenset[str], dict[str, Values]]:
    """The names ``scope`` binds (a nested function's or lambda's parameters too), and those
    its body binds once, at its top level, to a constant, with their value."""
    names = [n for n in _nodes(scope) if isinstance(n, ast.Name)]
    stores = [n.id for n in names if not isinstance(n.ctx, ast.Load)]
    own = {id(a) for a in ast.walk(scope.args)}
    stores += [a.arg for a in _nodes(scope) if isinstance(a, ast.arg) and id(a) not in own]
    constants = {}
    for stmt in scope.body:
        target = _single_target(stmt)
        if target is None or stores.count(target) != 1 or not isinstance(stmt, ast.Assign):
            continue
        values = _values(stmt.value, {})
        if isinstance(stmt.value, ast.Dict) and _looked_up(scope, target):  # for ``k in table``
            keys = [k.value for k in stmt.value.keys if isinstance(k, ast.Constant)]
            if len(keys) == len(stmt.value.keys):
                values = _one_of([frozenset(keys)])
        if values is not None:
            constants[target] = values
    return frozenset(stores), constants


BUILTINS: dict[str, Any] = {
    f.__name__: f for f in (isinstance, len, callable, str, int, float, bool, tuple, type)
}
"""The builtins a decided test may call (on known values): they only look at them."""
_BUILTIN_VALUES = {name: _one_of([f]) for name, f in BUILTINS.items()}


def _looked_up(scope: Def, name: str) -> bool:
    """Whether ``scope`` only looks into ``name`` (a dict it binds once), never changes it or
    lets it out: ``name[key]``, ``key in name`` and ``list(name)`` (``len``, ``sorted``, ...)."""
    parents = _parents(scope)
    for n in _uses(scope).get(name, []):
        if not (isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)):
            continue
        p = parents[id(n)]
        looked = isinstance(p, ast.Subscript) and p.value is n and isinstance(p.ctx, ast.Load)
        looked |= (
            isinstance(p, ast.Compare)
            and n in p.comparators
            and all(isinstance(op, ast.In | ast.NotIn) for op in p.ops)
        )
        looked |= (
            isinstance(p, ast.Call)
            and isinstance(p.func, ast.Name)
            and p.func.id in ("list", "len", "sorted", "tuple", "set")
            and not p.keywords
        )
        if not looked:
            return False
    return True


def _single_target(stmt: ast.stmt) -> str | None:
    """``name`` for ``name = value``, else None."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target = stmt.targets[0]
        return target.id if isinstance(target, ast.Name) else None
    return None


_CONSTANT_TEST: tuple[type[ast.AST], ...] = (ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Not)
_CONSTANT_TEST += (ast.Name, ast.Constant, ast.Tuple, ast.List, ast.Load, ast.cmpop, ast.boolop)
_CONSTANT_TEST += (ast.Call,)  # of a known name: one of the BUILTINS
"""What a test that :func:`specialized` decides may hold: comparisons of names and constants,
and :data:`BUILTINS` called on them."""


def _decided(
    test: ast.expr, known: Mapping[str, Values], before: Iterable[ast.expr] = ()
) -> bool | None:
    """The truth of ``test`` for every combination of the known values of the names it reads
    (it compares only names and constants), when all agree; else None. ``before``: the tests of
    the ``if`` and ``elif`` above an ``elif``, where those that can be evaluated so are false."""
    if not _evaluable(test, known):
        return None
    earlier = [t for t in before if _evaluable(t, known)]
    names = sorted({n.id for t in (test, *earlier) for n in ast.walk(t) if isinstance(n, ast.Name)})
    if math.prod(len(known[n]) for n in names) > CASES:
        return None
    with _AST:  # a tree compiled is a tree built again (see parse)
        codes = [compile(ast.Expression(t), "<test>", "eval") for t in (test, *earlier)]
    truths = set()
    for case in itertools.product(*([v for _, v in known[n]] for n in names)):
        scope = dict(zip(names, case, strict=True))  # constants and parameters only
        first, *rest = (bool(eval(code, {"__builtins__": {}}, scope)) for code in codes)
        if not any(rest):
            truths.add(first)
    return truths.pop() if len(truths) == 1 else (False if not truths else None)


def _evaluable(test: ast.expr, known: Mapping[str, Values]) -> bool:
    """Whether ``test`` compares only known names and constants."""
    names = {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
    return (
        bool(names)
        and names <= set(known)
        and all(isinstance(n, _CONSTANT_TEST) for n in ast.walk(test))
    )


def _step(source: str, known: Mapping[str, Values]) -> str | None:
    """``source`` after one decision (an ``if`` decided, a dict lookup folded, a dead constant
    taken out) that ``known`` (its parameters' values) allows; None when there is none."""
    tree = _tree(source)
    node, scope = tree.body[0], _scope(tree)
    defs = [node] if isinstance(node, Def) else [s for s in _body(node) if isinstance(s, Def)]
    at = _Edits(source)
    for function in defs:
        env = _env(function, known if function is scope else {})
        edit = (
            _decision(at, function, env)
            or _unreachable(at, function)
            or _fold(at, function, env)
            or _dead(at, function)
            or _returned(at, function)
        )
        if edit is None:
            edit = _alias(at, function)
        if edit is not None:
            start, end, new = edit
            return source[:start] + new + source[end:]
    return None


def _alias(at: _Edits, function: Def) -> Edit | None:
    """``name = other`` (both names, bound once, ``other`` never in ``function``): the first line
    that reads ``name`` reads ``other`` (the assignment then goes, :func:`_dead`)."""
    stores = _stores(function)
    for stmt in function.body:
        name = _single_target(stmt)
        value = getattr(stmt, "value", None)
        if name is None or not isinstance(value, ast.Name) or value.id in stores:
            continue
        reads = [n for n in _uses(function).get(name, []) if isinstance(n.ctx, ast.Load)]
        if stores.count(name) == 1 and reads:
            return at.start(reads[0]), at.end(reads[0]), value.id
    return None


def _body(node: ast.stmt) -> list[ast.stmt]:
    """A class's (or any compound statement's) body; ``[]`` for a simple statement."""
    return list(getattr(node, "body", []))


def _decision(at: _Edits, function: Def, env: Mapping[str, Values]) -> Edit | None:
    """The edit of the first ``if`` (or ``a if test else b``) whose test ``env`` decides."""
    blocks = _blocks(function)[1:]
    alone = {id(b[0]) for b in blocks if len(b) == 1}  # the only statement of its block
    before: dict[int, list[ast.expr]] = {}  # an elif's: the tests above it
    for node in _nodes(function):
        if isinstance(node, ast.If) and node.orelse and at.is_elif(node.orelse[0]):
            before[id(node.orelse[0])] = [*before.get(id(node), []), node.test]
        if isinstance(node, ast.If | ast.IfExp):
            taken = _decided(node.test, env, before.get(id(node), []))
            if taken is not None:
                return at.decide(node, taken, alone=id(node) in alone)
    return None


def _unreachable(at: _Edits, function: Def) -> Edit | None:
    """The lines after a ``return``, ``raise``, ``continue`` or ``break`` in the same block."""
    ends = ast.Return | ast.Raise | ast.Continue | ast.Break
    for block in _blocks(function):
        stop = next((i for i, stmt in enumerate(block) if isinstance(stmt, ends)), None)
        if stop is not None and stop + 1 < len(block):
            last = block[-1].end_lineno or block[-1].lineno
            return at.starts[block[stop].end_lineno or block[stop].lineno], at.starts[last], ""
    return None


def _returned(at: _Edits, function: Def) -> Edit | None:
    """``name = value`` then ``return name`` (typed so for mypy): ``return value``, where no
    other line reads ``name``."""
    if any(isinstance(n, ast.Global | ast.Nonlocal) for n in _nodes(function)):
        return None
    for block in _blocks(function):
        for stmt, last in itertools.pairwise(block):
            name = _single_target(stmt)
            if (
                name is not None
                and isinstance(stmt, ast.Assign)
                and isinstance(last, ast.Return)
                and isinstance(last.value, ast.Name)
                and last.value.id == name
                and len(_uses(function)[name]) == 2  # bound here, read there
                and last.lineno > (stmt.end_lineno or stmt.lineno)
            ):
                start, end = at.start(stmt), at.start(stmt.value)
                line = at.starts[last.lineno - 1], at.starts[last.end_lineno or last.lineno]
                return start, line[1], "return " + at.source[end : line[0]]
    return None


def _fold(at: _Edits, function: Def, env: Mapping[str, Values]) -> Edit | None:
    """``table[key]`` with ``key`` known, ``table`` a dict of constant keys and of values that
    are names, attributes, constants, lambdas or tuples of those (never a list a caller may
    append to), bound once and only ever looked into: that value."""
    tables = {
        name: stmt.value
        for stmt in function.body
        if (name := _single_target(stmt)) is not None
        and isinstance(stmt, ast.Assign)
        and isinstance(stmt.value, ast.Dict)
        and _stores(function).count(name) == 1
        and _looked_up(function, name)
    }
    for node in _nodes(function):
        if not isinstance(node, ast.Subscript) or not isinstance(node.ctx, ast.Load):
            continue
        table = tables.get(node.value.id) if isinstance(node.value, ast.Name) else node.value
        key = _values(node.slice, env)
        if isinstance(table, ast.Dict) and _constant_table(table) and key and len(key) == 1:
            (kind, value), entries = next(iter(key)), zip(table.keys, table.values, strict=True)
            for k, v in reversed(list(entries)):  # the last of a key written twice counts
                if isinstance(k, ast.Constant) and (type(k.value), k.value) == (kind, value):
                    return at.start(node), at.end(node), at.text(v)
    return None


def _constant_table(table: ast.Dict) -> bool:
    """Constant keys; values that nobody changes: names, attributes, constants, lambdas and
    tuples of those."""

    def fixed(v: ast.expr) -> bool:
        if isinstance(v, ast.Tuple):
            return all(fixed(e) for e in v.elts)
        return isinstance(v, ast.Constant | ast.Name | ast.Attribute | ast.Lambda) and _pure(v)

    return all(isinstance(k, ast.Constant) for k in table.keys) and all(
        fixed(v) for v in table.values
    )


def _dead(at: _Edits, function: Def) -> Edit | None:
    """The lines of ``name = value`` (at the function's top level, ``value`` plain) when no
    line reads ``name``, with the comment lines above it."""
    read = {
        n.id for n in _nodes(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    for stmt in function.body[:-1] if len(function.body) > 1 else []:
        name = _single_target(stmt)
        if (
            name is not None
            and name not in read
            and isinstance(stmt, ast.Assign)
            and _pure(stmt.value)
        ):
            first = stmt.lineno
            while first > 1 and at.lines[first - 2].lstrip().startswith("#"):
                first -= 1
            return at.starts[first - 1], at.starts[stmt.end_lineno or stmt.lineno], ""
    return None


def _stores(function: Def) -> list[str]:
    """The names ``function`` binds (assigns, loops over, deletes), once per binding."""
    return [
        n.id
        for n in _nodes(function)
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    ]


def _pure(expr: ast.expr) -> bool:
    """Whether evaluating ``expr`` can only build a value: constants, names, attributes and the
    displays of those."""
    if isinstance(expr, ast.Constant | ast.Name):
        return True
    if isinstance(expr, ast.Lambda):  # made, not called: only its defaults are evaluated
        return all(_pure(d) for d in [*expr.args.defaults, *expr.args.kw_defaults] if d)
    if isinstance(expr, ast.Attribute | ast.UnaryOp):
        return _pure(expr.value if isinstance(expr, ast.Attribute) else expr.operand)
    if isinstance(expr, ast.Tuple | ast.List | ast.Set):
        return all(_pure(e) for e in expr.elts)
    if isinstance(expr, ast.Dict):
        return all(k is not None and _pure(k) for k in expr.keys) and all(
            _pure(v) for v in expr.values
        )
    return False
