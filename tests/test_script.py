"""The code behind every experiment: a script that needs no normlab and prints what normlab reports.

For every registered experiment, at its defaults and at two other settings, the rendered script
runs in a fresh process of its own where ``import normlab`` fails, and what it prints is exactly
what the experiment's ``show`` prints for the result normlab computed in this test run (here,
or in another worker of the run: ``cached_run``); every number of the result's tables appears
in that output. The notebook of every experiment is that script cell by cell; three of them run
under nbclient, in one kernel, and print the same.

Those processes are forked from one that has imported what the scripts import (torch and
scikit-learn, seconds per interpreter) and never normlab, so 36 scripts pay that import once;
one script also runs as a learner runs it, ``python FILE`` in a fresh interpreter.
"""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import select
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from matplotlib.figure import Figure as MplFigure
from matplotlib.patches import StepPatch
from nbclient import NotebookClient

from normlab import notebook
from normlab.experiments import Result, get_experiment, list_experiments, script
from tests.experiments import expectations

PLAIN = [e.name for e in list_experiments() if e.name != "doctor"]

# each experiment's settings beyond the defaults: SCRIPT_SETTINGS in its own test module
CASES = [(name, {}) for name in PLAIN] + [
    (name, params)
    for name in PLAIN
    for params in expectations.expected(name, "SCRIPT_SETTINGS", [])
]


def _first(name: str) -> dict[str, Any]:
    """The notebook's setting: the first one here, or the defaults."""
    return expectations.expected(name, "SCRIPT_SETTINGS", [{}])[0]


@pytest.fixture(scope="module")
def no_normlab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ``normlab`` package refuses to import; scripts run from it."""
    root = tmp_path_factory.mktemp("plain")
    (root / "normlab").mkdir()
    (root / "normlab" / "__init__.py").write_text(
        'raise ImportError("the rendered code must not import normlab")\n'
    )
    return root


# The fork server: it imports what every script imports (torch._dynamo too, which torch imports
# at the first optimizer's construction), then for each request forks a child that runs the file
# as `python FILE` does (sys.argv, sys.path[0], __main__), its stdout and stderr into files, and
# answers the child's exit status (1 for an uncaught exception, whose traceback is on stderr).
FORK_SERVER = """
import json, os, runpy, sys, traceback
import sklearn.datasets, torch, torch._dynamo
assert not [m for m in sys.modules if m.partition(".")[0] == "normlab"]
for line in sys.stdin:
    path, out, err = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 1)
        os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
        sys.argv, sys.path[0] = [path], os.path.dirname(path)
        status = 0
        try:
            runpy.run_path(path, run_name="__main__")
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""
Ran = tuple[int, str, str]  # exit status, stdout, stderr


@pytest.fixture(scope="module")
def run_script(no_normlab: Path) -> Iterator[Callable[[Path], Ran]]:
    """Run a script in a fresh process forked from :data:`FORK_SERVER` (300 s at most).

    A run that does not answer (past 300 s, or the test stopped by pytest-timeout while it
    waits) takes its fork server with it: the next test gets a new one, never the late answer
    of another test's script."""
    log = no_normlab / "fork-server.err"
    servers: list[subprocess.Popen[str]] = []

    def server() -> subprocess.Popen[str]:
        if servers and servers[-1].poll() is None:
            return servers[-1]
        with log.open("a") as server_err:
            servers.append(
                subprocess.Popen(
                    [sys.executable, "-c", FORK_SERVER],
                    cwd=no_normlab,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=server_err,
                    text=True,
                    start_new_session=True,  # its children in its process group: one kill ends all
                )
            )
        return servers[-1]

    def run(path: Path) -> Ran:
        out, err, forks = path.with_suffix(".out"), path.with_suffix(".err"), server()
        assert forks.stdin is not None and forks.stdout is not None
        forks.stdin.write(json.dumps([str(path), str(out), str(err)]) + "\n")
        forks.stdin.flush()
        try:
            if not select.select([forks.stdout], [], [], 300)[0]:
                pytest.fail(f"{path.name} ran past 300 s")
            status = forks.stdout.readline()
        except BaseException:
            os.killpg(forks.pid, signal.SIGKILL)
            forks.wait()
            raise
        assert status, f"the fork server ended: {log.read_text()}"
        return int(status), out.read_text(), err.read_text()

    try:
        yield run
    finally:
        for forks in servers:
            assert forks.stdin is not None and forks.stdout is not None
            forks.stdin.close()
            forks.stdout.close()
            try:
                forks.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(forks.pid, signal.SIGKILL)
                forks.wait()


def test_the_settings_name_experiments_whose_script_is_plain() -> None:
    assert expectations.declaring("SCRIPT_SETTINGS") <= set(PLAIN)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "params"), CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)]
)
def test_the_rendered_code_prints_what_normlab_reports(
    name: str,
    params: dict[str, Any],
    no_normlab: Path,
    run_script: Callable[[Path], Ran],
    cached_run: Callable[..., Result],
) -> None:
    experiment = get_experiment(name)
    result = cached_run(name, **params)
    text = script.render(experiment, params)
    assert "normlab" not in _imports(text)
    path = no_normlab / f"{name.replace('-', '_')}.py"
    path.write_text(text)
    status, stdout, stderr = run_script(path)
    assert status == 0, stderr
    expected = script.output(experiment, result)
    assert stdout == expected
    printed = [float(n) for n in re.findall(NUMBER, stdout)]
    for table in result.tables():
        for row in table.rows:
            for cell in row:
                for number in re.findall(NUMBER, cell):
                    if "." in number or "e" in number:
                        assert _shown(number, printed), (number, cell, table.title)


NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


def _shown(cell: str, printed: list[float]) -> bool:
    """Whether a number of a table cell is among the printed numbers, to the cell's last digit."""
    mantissa, _, exponent = cell.partition("e")
    digits = len(mantissa.partition(".")[2])
    half_unit = 0.5 * 10.0 ** (int(exponent or 0) - digits)
    value = float(cell)
    return any(abs(p - value) <= half_unit * (1 + 1e-9) + 1e-300 for p in printed)


def _imports(text: str) -> set[str]:
    """The top-level modules a script imports."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("name", PLAIN)
def test_scripts_import_only_the_field_s_packages(name: str) -> None:
    text = script.render(get_experiment(name), {})
    field = {"torch", "numpy", "sklearn", "matplotlib"}  # and Python's own standard library
    assert {m for m in _imports(text) if m not in sys.stdlib_module_names} <= field
    compile(text, name, "exec")  # and it is one valid script


@pytest.mark.parametrize("name", [e.name for e in list_experiments()])
def test_the_script_carries_no_ui_hook(name: str) -> None:
    """No ``live`` callback in the learner's code: the lab watches a run from outside it (its
    optimizer steps, and the results a streaming experiment yields)."""
    tree = ast.parse(script.render(get_experiment(name), {}))
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg | ast.keyword) and n.arg}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert "live" not in names


@pytest.mark.parametrize("name", [e.name for e in list_experiments() if e.streams])
def test_a_streaming_script_runs_its_generator_through_then_shows_the_last(name: str) -> None:
    experiment = get_experiment(name)
    text = script.render(experiment, {})
    loop, last = ast.parse(text).body[-2:]
    assert isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)
    assert isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Name)
    assert (loop.target.id, loop.iter.func.id) == ("result", experiment.entry.__name__)
    assert [ast.unparse(s) for s in loop.body] == ["pass"]
    printer = f"print_tables({experiment.tables.__name__}(result))"
    assert ast.unparse(last) == printer  # after the loop: the last yield, the whole run


def test_the_script_binds_the_parameters_it_was_asked_for() -> None:
    text = script.render(get_experiment("drift"), {"depth": 13, "activation": "tanh"})
    assert "depth=13" in text and 'activation="tanh"' in text
    assert text.rstrip().endswith("print_tables(tables(result))")


def test_render_validates_its_parameters() -> None:
    with pytest.raises(ValueError, match="depth"):
        script.render(get_experiment("drift"), {"depth": 0})


@pytest.mark.slow
def test_a_script_runs_as_a_learner_runs_it(
    no_normlab: Path, cached_run: Callable[..., Result]
) -> None:
    """``python FILE`` in a fresh interpreter, nothing imported for it: bn-lr, the lesson's own
    figures, with an import list as wide as any (torch, its functional and nn, scikit-learn)."""
    experiment = get_experiment("bn-lr")
    path = no_normlab / "bn_lr_alone.py"
    path.write_text(script.render(experiment, {}))
    done = subprocess.run(
        [sys.executable, str(path)], cwd=no_normlab, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == script.output(experiment, cached_run("bn-lr"))


_NOTEBOOKS: dict[str, Any] = {}


def _notebook(name: str, cached_run: Callable[..., Result]) -> tuple[Any, str]:
    """The notebook of ``name`` at its first setting here (with its figures, drawn once per
    session), and the output it ships with."""
    if name not in _NOTEBOOKS:
        experiment = get_experiment(name)
        params = experiment.make_params(_first(name))
        result = cached_run(name, **_first(name))
        drawn = [f.to_dict() for f in result.figures()]
        nb = notebook.notebook(experiment, params, script.output(experiment, result), drawn)
        nbformat.validate(nb)
        _NOTEBOOKS[name] = nb
    nb = _NOTEBOOKS[name]
    return nb, _cell(nb, "run").outputs[0]["text"]


def _cell(nb: Any, cell_id: str) -> Any:
    """The notebook's cell of that id (the run's: ``run``; the one that draws: ``figure``)."""
    return next(c for c in nb.cells if c.get("id") == cell_id)


@pytest.mark.parametrize("name", PLAIN)
def test_the_notebook_is_the_script_cell_by_cell(
    name: str, cached_run: Callable[..., Result]
) -> None:
    """Its code cells are the script's blocks, in order and nothing else: the script runs and
    prints what normlab reports (above), so the notebook does, wherever a kernel runs it as a
    script is run (three of them are run in Jupyter below)."""
    nb, _ = _notebook(name, cached_run)
    text = script.render(get_experiment(name), _first(name))
    blocks = text.rstrip("\n").split("\n\n\n")[1:]  # the docstring aside
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert code[: len(blocks)] == blocks
    assert code[len(blocks) :] == [  # then only its figure's: the drawing, the data, the draw
        notebook.renderer(),
        _cell(nb, "figure-data").source,
        notebook.DRAW,
    ]


@pytest.mark.parametrize("name", PLAIN)
def test_the_notebook_draws_the_widget_s_figure(
    name: str, cached_run: Callable[..., Result]
) -> None:
    """After the run, the widget's figure descriptions as data, the generic code that draws
    them (no normlab in it), and the cell that draws, its output an image per figure."""
    nb, _ = _notebook(name, cached_run)
    described = [f.to_dict() for f in cached_run(name, **_first(name)).figures()]
    renderer, data = _cell(nb, "figure-renderer").source, _cell(nb, "figure-data").source
    assert "normlab" not in renderer + data
    assert ast.literal_eval(data.removeprefix("figures = ")) == described
    images = [o for o in _cell(nb, "figure").outputs if o.output_type == "display_data"]
    assert len(images) == len(described)
    for image in images:
        assert base64.b64decode(image.data["image/png"]).startswith(b"\x89PNG\r\n\x1a\n")
    namespace: dict[str, Any] = {}
    exec(renderer + "\n" + data, namespace)  # the cells' own code draws what was described
    for figure, want in zip(namespace["figures"], described, strict=True):
        drawn = MplFigure(figsize=namespace["size"](figure))
        namespace["draw_into"](drawn, figure)
        axes = [ax for ax in drawn.axes if ax.get_label() != "<colorbar>"]
        assert len(axes) == len(want["panels"])
        for ax, panel in zip(axes, want["panels"], strict=True):
            drawn_series = len(ax.containers) + len(ax.collections) + len(ax.lines)
            drawn_series += sum(isinstance(p, StepPatch) for p in ax.patches)
            assert drawn_series >= len(panel["series"]), panel["title"]


@pytest.fixture(scope="module")
def kernel(no_normlab: Path) -> Iterator[AsyncKernelManager]:
    """One Jupyter kernel for the notebooks run below, started in :func:`no_normlab`'s folder,
    where normlab cannot be imported: a kernel's start (IPython, then torch, matplotlib and
    scikit-learn imported by the notebook) costs seconds of CPU, paid once, as the scripts'
    fork server pays its imports once. Each notebook still starts from an empty namespace."""
    km = AsyncKernelManager()
    run_sync(km.start_kernel)(cwd=str(no_normlab))
    try:
        yield km
    finally:
        run_sync(km.shutdown_kernel)(now=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bn-lr", "init-compare", "variance"])
def test_the_notebook_runs_in_jupyter_and_prints_the_same(
    name: str, kernel: AsyncKernelManager, cached_run: Callable[..., Result]
) -> None:
    """In a real kernel: a training run, one with histograms, one with a list parameter."""
    nb, shipped = _notebook(name, cached_run)
    fresh = nbformat.reads(notebook.dumps(nb), as_version=4)
    for cell in fresh.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    # the names a notebook run before defined are gone: each one imports and defines its own
    fresh.cells.insert(0, nbformat.v4.new_code_cell("%reset -f"))
    client = NotebookClient(fresh, timeout=300, km=kernel)
    try:
        client.execute()
    finally:
        if client.kc is not None:  # the kernel is not the client's: its channels close here
            client.kc.stop_channels()
    printed = "".join(o.get("text", "") for o in _cell(fresh, "run").outputs)
    assert printed == shipped
    drawn = [o for o in _cell(fresh, "figure").outputs if "image/png" in o.get("data", {})]
    assert len(drawn) == len(_cell(nb, "figure").outputs)  # an image per figure, drawn there


@pytest.mark.slow
def test_the_doctor_s_code_calls_normlab_and_prints_what_it_reports(
    cached_run: Callable[..., Result], tmp_path: Path
) -> None:
    """The one exception: the doctor widget shows normlab's own tool, so its code imports it.

    It still runs on its own in a fresh interpreter and prints what the lab reports.
    """
    experiment = get_experiment("doctor")
    params = {"model": "dead-relu", "steps": 2}
    text = script.render(experiment, params)
    assert "from normlab import doctor, zoo" in text
    path = tmp_path / "doctor.py"
    path.write_text(text)
    done = subprocess.run(
        [sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == script.output(experiment, cached_run("doctor", **params))


# -- the source as a learner reads it (issue 33: the code to take away is long) ----------------

ENGINE_SOURCE = '''\
def step(net: Any, x: list[float], live: Callable[[dict[str, Any]], None] | None = None,
         *, scale: float = 2.0) -> list[float]:
    """Scale every value (the σ of the notes).

    Examples::

        >>> step(None, [1.0])
        [2.0]
    """
    out: list[float] = []  # (N,) -> (N,)
    for v in x:
        out.append(scale * v)
        if live is not None:
            live({"out": out})
    report(out, live=live)
    return out
'''

PLAIN_SOURCE = '''\
def step(net, x, *, scale=2.0):
    """Scale every value (the σ of the notes)."""
    out = []  # (N,) -> (N,)
    for v in x:
        out.append(scale * v)
    report(out)
    return out
'''


def test_plain_cuts_annotations_doctests_and_hooks_and_keeps_the_rest() -> None:
    """Located by ``ast`` (whose columns count bytes: the σ above), each span is cut alone."""
    assert script.plain(ENGINE_SOURCE) == PLAIN_SOURCE
    reported: list[list[float]] = []
    calls: list[dict[str, Any]] = []
    engine: dict[str, Any] = {"report": lambda out, live: reported.append(out)}
    learner: dict[str, Any] = {"report": reported.append}
    exec("from __future__ import annotations\n" + ENGINE_SOURCE, engine)
    exec(PLAIN_SOURCE, learner)
    assert (
        engine["step"](None, [1.0, 3.0], live=calls.append)
        == [2.0, 6.0]
        == (learner["step"](None, [1.0, 3.0]))
    )
    assert calls and reported == [[2.0, 6.0], [2.0, 6.0]]


def test_plain_keeps_a_dataclass_s_fields_and_a_body_never_empties() -> None:
    source = '''\
@dataclass(frozen=True)
class Moments:
    """Two moments.

    More words.
    """

    mean: float
    var: float = 1.0


class Done(Exception):
    """Raised when the run ends, a summary far too long to be kept on one line of the script, not
    even when cut at its first clause."""


def hook(live: Any) -> None:
    if live:
        live(1)
'''
    assert (
        script.plain(source)
        == '''\
@dataclass(frozen=True)
class Moments:
    """Two moments."""

    mean: float
    var: float = 1.0


class Done(Exception):
    pass


def hook():
    pass
'''
    )


def test_specialized_keeps_the_branch_the_parameters_take() -> None:
    source = """\
def run(init, norm, steps):
    if init != "default":
        setup(init)  # on the CPU
    else:
        # nn.Linear's own
        keep()
    if norm == "batch":
        a()
    elif norm == "layer":
        b()
    else:
        c()
    kind = "deep" if steps > 10 else "shallow"
    while steps:
        steps -= 1
        if steps == 3:
            stop()
"""
    assert (
        script.specialized(source, {"init": "default", "norm": "layer", "steps": 20})
        == """\
def run(init, norm, steps):
    # nn.Linear's own
    keep()
    b()
    kind = "deep" if steps > 10 else "shallow"
    while steps:
        steps -= 1
        if steps == 3:
            stop()
"""
    )
    shadowed = "def run(norm):\n    pick = lambda norm: 1 if norm else 2\n    return pick(norm)\n"
    assert script.specialized(shadowed, {"norm": 0}) == shadowed  # a lambda's own norm: left alone


def test_plain_moves_an_import_inside_a_function_out_of_its_body() -> None:
    """The import and the blank line after it go; a body left with nothing says ``pass``."""
    source = (
        "def data(n):\n"
        "    from sklearn.datasets import make_moons  # here: why, in the engine's words\n"
        "\n"
        "    return make_moons(n)\n"
        "\n"
        "\n"
        "def nothing():\n"
        "    import math\n"
    )
    assert script.plain(source) == (
        "def data(n):\n    return make_moons(n)\n\n\ndef nothing():\n    pass\n"
    )


@pytest.mark.parametrize("name", ["two-moons", "init-train", "bn-regularization", "training"])
def test_scikit_learn_is_imported_at_the_script_s_top_not_where_the_data_is_made(
    name: str,
) -> None:
    """The engine imports scikit-learn inside the functions that make the points
    (:mod:`normlab.data`); the script a learner reads imports it with the rest, at its top."""
    tree = ast.parse(script.render(get_experiment(name), {}))
    top = [ast.unparse(n) for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    assert any(line.startswith("from sklearn.datasets import ") for line in top), top
    inner = [
        ast.unparse(n)
        for d in tree.body
        if isinstance(d, ast.FunctionDef | ast.ClassDef)
        for n in ast.walk(d)
        if isinstance(n, ast.Import | ast.ImportFrom)
    ]
    assert not inner


def test_the_registry_the_cli_and_the_lab_import_without_scikit_learn() -> None:
    """``normlab list``, the lab and a sweep's worker import every experiment; scikit-learn
    (longer to import than torch) comes only with the first points made."""
    code = (
        "import sys, normlab.cli, normlab.experiments, normlab.lab.app\n"
        "print('sklearn' in sys.modules)\n"
        "normlab.experiments.run_experiment('two-moons', n_samples=20)\n"
        "print('sklearn' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.split() == ["False", "True"], out.stderr[-2000:]


def test_a_script_pastes_only_the_helpers_its_call_reaches() -> None:
    """bn-lr's default keeps nn.Linear's initialization: no apply_init (nor what it calls);
    with ``init="he"``, apply_init is called with "he" only, so its other methods' branches go
    and, with them, the Xavier initializer only they call."""
    experiment = get_experiment("bn-lr")
    default = ast.parse(script.render(experiment, {}))
    he = ast.parse(script.render(experiment, {"init": "he"}))
    defined = [
        {n.name for n in tree.body if isinstance(n, ast.FunctionDef)} for tree in (default, he)
    ]
    helpers = {"apply_init", "xavier_uniform", "he_normal"}
    assert not defined[0] & helpers
    assert defined[1] & helpers == {"apply_init", "he_normal"}


PROGRAM = {
    "make": '''\
def make(kind, verbose, scale=2.0, act="relu", loss_fn=F.mse_loss):
    """A layer list of ``kind``."""
    if verbose:
        print(kind)
    layers = [kind]
    if kind == "a":
        layers.append(1)
    elif kind == "b":
        layers.append(2)
    elif kind != "c":
        raise ValueError(kind)
    table = {"relu": R, "tanh": T}
    layers.append(table[act])
    return loss_fn(layers, scale=scale)
''',
    "run": """\
def run(n, label):
    out = []
    build = make
    for flag in (True, False):
        out.append(build("a" if flag else "c", False, 3.0))
    return out * n
""",
    "unused": "def unused():\n    return make('b')\n",
}


def test_pruned_specializes_each_helper_for_the_values_its_callers_give() -> None:
    """``make`` (called by another name ``build``, which then names it) is only ever called
    with ``verbose`` False and kind "a" or "c" (a test that depends on which stays;
    those true or false for both are decided, an elif where the ifs above it are false), the
    activation "relu" (its table gives R), no ``loss_fn`` (its default is written in) and a
    scale (whose default no call needs): what no line reads any more leaves the function and
    its calls. The entry keeps its
    parameters, as the run's call gives them; a function nothing calls goes. Both programs
    return the same."""
    run = 'result = run(n=2, label="x")'
    pruned = script.pruned(PROGRAM, run)
    assert list(pruned) == ["make", "run"]
    assert (
        pruned["make"]
        == '''\
def make(kind, scale):
    """A layer list of ``kind``."""
    layers = [kind]
    if kind == "a":
        layers.append(1)
    layers.append(R)
    return F.mse_loss(layers, scale=scale)
'''
    )
    assert pruned["run"] == PROGRAM["run"].replace("    build = make\n", "").replace(
        'build("a" if flag else "c", False, 3.0)', 'make("a" if flag else "c", 3.0)'
    )
    results = []
    for program in (PROGRAM, pruned):
        namespace: dict[str, Any] = {"R": "R", "T": "T"}
        namespace["F"] = type("F", (), {"mse_loss": staticmethod(lambda x, scale: (x, scale))})
        exec("\n".join([*program.values(), run]), namespace)
        results.append(namespace["result"])
    assert results[0] == results[1] == 2 * [(["a", 1, "R"], 3.0), (["c", "R"], 3.0)]


def test_pruned_folds_a_lookup_table_and_drops_what_follows_a_return() -> None:
    """A function that validates a name and looks it up in a table (theory's activation_pair)
    called with one known name: ``isinstance`` of a known value is decided, ``name in table``
    too, the lookup gives the entry (a tuple holding a lambda), the lines after the ``return``
    can never run, and the table and the name, read no more, go. A value named only to be
    returned (as mypy wants it typed) is returned."""
    program = {
        "pair": """\
def pair(name):
    table = {"tanh": (T, lambda x: 1 - x), "relu": (R, lambda x: x > 0)}
    if isinstance(name, str):
        if name not in table:
            raise ValueError(f"{name!r}: use one of {list(table)}")
        return table[name]
    raise TypeError(name)
""",
        "use": "def use(x):\n    phi, dphi = pair('relu')\n"
        "    out = phi, dphi(x)  # both\n    return out\n",
    }
    run = "result = use(x=3)"
    pruned = script.pruned(program, run)
    assert pruned == {
        "pair": "def pair():\n    return (R, lambda x: x > 0)\n",
        "use": "def use(x):\n    phi, dphi = pair()\n    return phi, dphi(x)  # both\n",
    }
    results = []
    for code in (program, pruned):
        namespace: dict[str, Any] = {"R": "R", "T": "T"}
        exec("\n".join([*code.values(), run]), namespace)
        results.append(namespace["result"])
    assert results[0] == results[1] == ("R", True)
