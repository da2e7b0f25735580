"""The house's import rules, read from the source with :mod:`ast` (nothing is imported).

Two rules from DESIGN.md ("Arrows point one way"):

- **No private reach.** No module imports a private (``_``-prefixed) name from a module outside
  its own package folder, nor reads one as an attribute of such a module
  (``torch.nn.modules.conv._ConvNd``, ``init._calculate_fan_in_and_fan_out``). A private
  *module* of another folder (``normlab.doctor._private``) counts as a private name too.
  The same folder is one package: its modules share their private helpers, as torch's
  ``nn/modules/`` do. Dunders (``__version__``) are public.
- **No circles.** The graph whose nodes are the modules of ``src/normlab`` and whose edges are
  their imports, at module level and inside functions alike (a lazy import still ties two
  modules together), has no cycle. ``from pkg import mod`` imports ``pkg.mod`` when ``mod`` is a
  module, and ``pkg`` (its ``__init__``) otherwise; the parent packages that Python runs on the
  way are not counted (every module would import ``normlab``).

Left out of both rules: the bodies of ``if TYPE_CHECKING:`` (they never run, and annotations are
strings: ``from __future__ import annotations``) and of ``if __name__ == "__main__":`` (they run
only when the file is the program, as ``__main__``, never when the module is imported: ``python
-m normlab.cli`` goes through :mod:`normlab.__main__`), and the stdlib's underscored functions
that its documentation gives as public API (:data:`DOCUMENTED`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "normlab"

DOCUMENTED = {
    "os._exit",  # the documented way to end a forked child without running the parent's cleanup
    "sys._current_frames",  # documented; __main__ reads where the main thread is
}

# Violations that other branches of issue 31 fix (experiments/ and probe.py are being rewritten
# there, so they are not edited here). The lead empties this set after merging them.
PENDING: set[str] = set()


def module_name(path: Path) -> str:
    """``src/normlab/doctor/graph.py`` -> ``normlab.doctor.graph``; a package by its folder."""
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def is_package(name: str) -> bool:
    return name in MODULES and MODULES[name].name == "__init__.py"


def folder(name: str) -> str:
    """The package folder a module sits in: itself for a package, its parent otherwise."""
    return name if is_package(name) else name.rpartition(".")[0]


def is_private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _never_imported(node: ast.If) -> bool:
    """``if TYPE_CHECKING:`` or ``if __name__ == "__main__":``: a body no import runs."""
    test = node.test
    if isinstance(test, ast.Name | ast.Attribute):
        return (test.id if isinstance(test, ast.Name) else test.attr) == "TYPE_CHECKING"
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node``, skipping the bodies that importing the module never runs."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _never_imported(child):
            for other in child.orelse:
                yield other
                yield from _walk(other)
            continue
        yield child
        yield from _walk(child)


def _absolute(importer: str, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` names, relative imports resolved against ``importer``."""
    if not node.level:
        return node.module or ""
    base = folder(importer).split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


@dataclass(frozen=True)
class Reach:
    """One private name that ``importer`` takes from ``owner`` (a module, ours or not)."""

    importer: str
    line: int
    owner: str
    name: str

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} {self.owner}.{self.name}"


@functools.cache
def parse(name: str) -> ast.Module:
    return ast.parse(MODULES[name].read_text())


def imports(name: str) -> Iterator[tuple[int, str, str | None, str | None]]:
    """``(line, module, imported name or None, local alias)`` for every import of a module."""
    for node in _walk(parse(name)):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, None, a.asname or a.name.partition(".")[0]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(name, node)
            for a in node.names:
                yield node.lineno, module, a.name, a.asname or a.name


def _submodule(module: str, attr: str) -> str | None:
    """``pkg.attr`` when it is one of our modules (``from pkg import attr`` imports it)."""
    full = f"{module}.{attr}"
    return full if full in MODULES else None


def _outside(importer: str, owner: str) -> bool:
    """Whether ``owner`` lies outside ``importer``'s package folder (not ours counts as outside)."""
    return owner not in MODULES or folder(owner) != folder(importer)


def _module_aliases(name: str) -> dict[str, str]:
    """Local names bound to modules: ``import torch.nn as nn``, ``from torch.nn import init``."""
    aliases: dict[str, str] = {}
    for _, module, attr, local in imports(name):
        if local is None or attr == "*":
            continue
        if attr is None:
            aliases[local] = module if local != module.partition(".")[0] else local
        elif _submodule(module, attr) or (
            module not in MODULES and not module.startswith("normlab")
        ):
            # `from torch.nn import init`: outside our package we cannot tell a module from a
            # class, so the attribute check below treats both alike (`nn.Module._apply` is private
            # to torch as much as `init._calculate_fan_in_and_fan_out` is)
            aliases[local] = f"{module}.{attr}"
    return aliases


def _chain(node: ast.Attribute) -> list[str] | None:
    """``a.b.c`` -> ``["a", "b", "c"]``; None when the chain does not start at a name."""
    parts = [node.attr]
    value = node.value
    while isinstance(value, ast.Attribute):
        parts.append(value.attr)
        value = value.value
    if not isinstance(value, ast.Name):
        return None
    return [value.id, *reversed(parts)]


def private_reaches(name: str) -> Iterator[Reach]:
    """Every private name ``name`` takes from a module outside its folder."""
    for line, module, attr, _ in imports(name):
        owner_parts = module.split(".")
        if attr is not None and attr != "*":
            owner_parts.append(attr)
        for i, part in enumerate(owner_parts):
            owner = ".".join(owner_parts[:i])
            if is_private(part) and owner and _outside(name, owner):
                yield Reach(name, line, owner, part)
                break
    aliases = _module_aliases(name)
    attributes = [n for n in _walk(parse(name)) if isinstance(n, ast.Attribute)]
    inner = {id(n.value) for n in attributes}
    for node in attributes:
        if id(node) in inner:
            continue  # read each chain once, whole: `a.b.c`, not its `a.b` again
        chain = _chain(node)
        if chain is None or chain[0] not in aliases:
            continue
        yield from _reach_in_chain(name, node.lineno, aliases[chain[0]], chain[1:])


def _reach_in_chain(name: str, line: int, owner: str, parts: list[str]) -> Iterator[Reach]:
    for part in parts:
        if is_private(part):
            if _outside(name, owner):
                yield Reach(name, line, owner, part)
            return
        owner = f"{owner}.{part}"


def test_no_module_takes_a_private_name_from_another_package_folder() -> None:
    found = {
        str(r)
        for name in MODULES
        for r in private_reaches(name)
        if f"{r.owner}.{r.name}" not in DOCUMENTED
    }
    assert sorted(found - PENDING) == []


def edges(name: str) -> set[str]:
    """The modules of ours that ``name`` imports (see the module docstring for what counts)."""
    out = set()
    for _, module, attr, _ in imports(name):
        target = (_submodule(module, attr) if attr not in (None, "*") else None) or module
        if target in MODULES and target != name:
            out.add(target)
    return out


def cycles() -> list[list[str]]:
    """One cycle through each strongly connected part of the import graph of more than one module
    (Tarjan's algorithm, iterative; the graph has a few hundred nodes)."""
    graph = {name: sorted(edges(name)) for name in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    parts: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if i < len(graph[node]):
                work.append((node, i + 1))
                nxt = graph[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                part = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    part.append(top)
                    if top == node:
                        break
                if len(part) > 1:
                    parts.append(sorted(part))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return parts


def test_no_import_circle_among_the_package_s_modules() -> None:
    assert [p for p in cycles() if " -> ".join(p) not in PENDING] == []
