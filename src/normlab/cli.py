"""The ``normlab`` command line: thin, parse -> run_experiment -> print or save.

Commands::

    normlab list [--json]
    normlab run NAME [--param value ...] [--json] [--plot FILE]
    normlab run NAME --help          NAME's parameters: default, allowed values, meaning
    normlab train [--dataset D] [--depth N] [--PARAMETER VALUE ...] [--steps N]
                  [--json] [--plot FILE] [--code]
    normlab lab [--host HOST] [--port PORT] [--db PATH] [--watch-log FILE.jsonl] [--no-warm]
                [--threads N] [--answers PATH | --no-answers] [--sweeps PATH]
    normlab doctor FILE.py:FACTORY --input-shape N,D[,...] [--steps K] [--data FILE.pt]
                   [--seed S] [--tokens V] [--dtype D] [--output FIELD] [--json] [--html FILE]
                   [--fix METHOD --out FILE.pt [--fix-tied]] [--traceback]
                   [--no-check | --check-seeds K --check-steps S]
    normlab doctor FILE.py:FACTORY --widths N,N[,...] --input-shape N,D[,...] [--json]
    normlab sweep NAME [--grid NAME=SPEC ...] [--seeds N] [--file SWEEP.toml] [--store PATH]
                  [--retry-errors] [--export FILE] [--json] [--ray auto|ADDRESS]
                  [--summary] [--plot FILE] [--x AXIS] [--y AXIS] [--value V] [--fix AXIS=VALUE]

``run`` has one argparse sub-parser per registered experiment, its flags generated from the
experiment's declared parameters (``--depth 20``, ``--gains 0.9,1,1.1``, ``--batch-norm``,
``--batch-norm false``, ``--no-batch-norm``). argparse finds the flags and their texts; each text
is then parsed by its declaration (:meth:`~normlab.experiments.Parameter.parse`), so that a bad
value is answered in the declaration's words. Bad input exits with status 2 and one line naming
the parameter and what it allows.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from normlab import trainview
from normlab.doctor import FIX_METHODS
from normlab.experiments import (
    Experiment,
    Parameter,
    ParameterError,
    ParameterTypeError,
    Result,
    Table,
    UnknownExperiment,
    get_experiment,
    list_experiments,
    params_dict,
    run_experiment,
    script,
)
from normlab.experiments.base.params import MAX_SEED
from normlab.sweep import DEFAULT_STORE, Backend, RunSummary, Store, StoreError, Sweep, distributed
from normlab.sweep.grid import grid_items
from normlab.sweep.sweeps import check_export

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command stopped by Ctrl+C


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


class _Exit(Exception):
    """argparse has answered by itself (``--help``): the command line ends with ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (a :class:`UsageError`) and whose exits return.

    ``run``'s NAME picks one of its sub-parsers, one per experiment: the registry answers a wrong
    NAME (its message lists the valid names, as the one for a missing NAME does).
    """

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.dest == "name":  # run's NAME
            get_experiment(value)  # raises UnknownExperiment, naming the valid ones
        super()._check_value(action, value)

    def error(self, message: str) -> NoReturn:
        if message == "the following arguments are required: name":  # run's NAME
            message += f" (one of: {_names()})"
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            print(message, file=sys.stderr, end="")
        raise _Exit(status)


class _Flag(argparse.Action):
    """A declared parameter's flag (a bool's has a ``--no-`` form too). It records the option
    and the text that followed it (``None`` when none did) under ``flags``; :func:`_values`
    parses them afterwards, so that ``--help`` wins over the other flags."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, param: Parameter, **kwargs: Any
    ) -> None:
        super().__init__(option_strings, dest, nargs="?", default=argparse.SUPPRESS, **kwargs)
        self.param = param

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        text = values if isinstance(values, str) else None
        option = option_string or self.param.flag
        namespace.flags = {**namespace.flags, self.param.name: (option, text)}


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's layout, except that lines never break inside a hyphenated word
    (``bn-lr-sweep``, ``--no-batch-norm``), and that a parameter's value shows as required
    (``--lr X``) and a bool's as optional (``--batch-norm [true|false]``, in help both forms)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(
            " ".join(text.split()),
            width,
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
        )

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        if isinstance(action, _Flag) and action.param.kind != "bool":
            return str(action.metavar)  # nargs="?" only to word a missing value ourselves
        return super()._format_args(action, default_metavar)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if isinstance(action, _Flag) and action.param.kind == "bool":
            return ", ".join(action.option_strings)
        return super()._format_action_invocation(action)


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="normlab",
        description="normlab: signal propagation in deep networks",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p_list = sub.add_parser("list", help="the experiments and their parameters", allow_abbrev=False)
    p_list.add_argument("--json", action="store_true", help="print the registry as JSON")
    _add_run_parser(sub)
    _add_train_parser(sub)
    _add_doctor_parser(sub)
    _add_sweep_parser(sub)
    _add_notebook_parser(sub)
    p_lab = sub.add_parser("lab", help="start the web lab", allow_abbrev=False)
    p_lab.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p_lab.add_argument("--port", type=_port, default=8000, help="port (default 8000)")
    p_lab.add_argument(
        "--token",
        type=_token,
        default=None,
        help="require this token on every request (default: none on a loopback address, "
        "127.0.0.0/8, ::1 or localhost; a fresh random one on any other host). Other users "
        "of this machine can read a flag in the process list: prefer $NORMLAB_TOKEN",
    )
    p_lab.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help="the SQLite file keeping your exercise progress and saved code (default "
        "$XDG_DATA_HOME/normlab/progress.sqlite3, else ~/.local/share/normlab/...)",
    )
    p_lab.add_argument(
        "--watch-log",
        metavar="FILE.jsonl",
        default=None,
        help="show this normlab.watch log live at /watch as the training run writes it "
        "(it may not exist yet)",
    )
    p_lab.add_argument(
        "--sweeps",
        metavar="PATH",
        default=DEFAULT_STORE,
        help=f"the sweep store /sweeps shows, live (default {DEFAULT_STORE}, normlab sweep's)",
    )
    p_lab.add_argument(
        "--threads",
        type=_threads,
        default=1,
        help="torch threads for each computation (default 1: runs are small and several go at "
        "once; with more, OpenMP's idle threads sleep rather than spin: OMP_WAIT_POLICY=PASSIVE)",
    )
    answers = p_lab.add_mutually_exclusive_group()
    answers.add_argument(
        "--answers",
        metavar="PATH",
        default=None,
        help="the SQLite file keeping the lessons' computed numbers between runs of the lab, "
        "for this machine, thread count and normlab version (default $NORMLAB_ANSWERS, else "
        "$XDG_CACHE_HOME/normlab/answers.sqlite3, else ~/.cache/normlab/...)",
    )
    answers.add_argument(
        "--no-answers",
        dest="answers",
        action="store_const",
        const=False,
        help="keep no numbers between runs: every start computes the lessons' numbers afresh",
    )
    p_lab.add_argument(
        "--no-warm",
        dest="warm",
        action="store_false",
        help="serve at once; each lesson computes its figures on its first visit (default: "
        "every lesson's figures are computed at startup, in the background)",
    )
    return parser


# -- normlab run -------------------------------------------------------------------------------

_METAVARS = {"int": "N", "float": "X", "float_list": "X[,X...]", "bool": "true|false"}


def _add_run_parser(sub: Any) -> None:
    """``run``, and under it one sub-parser per registered experiment."""
    p_run = sub.add_parser(
        "run",
        help="run one experiment",
        usage="normlab run NAME [--json] [--plot FILE] [--PARAMETER VALUE ...]",
        description="Run one experiment and print its tables (or JSON); optionally save a figure.",
        epilog="`normlab run NAME --help` lists NAME's parameters.",
        formatter_class=_HelpFormatter,
        allow_abbrev=False,
    )
    _add_output_flags(p_run, defaults=True)  # also before NAME: normlab run --json drift
    runs = p_run.add_subparsers(
        title="experiments (see `normlab list`)",
        dest="name",
        metavar="name",
        required=True,
        prog="normlab run",
        parser_class=_Parser,
    )
    for experiment in list_experiments():
        _add_experiment_parser(runs, experiment)


def _add_output_flags(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """``--json`` and ``--plot``. Only ``run``'s own pair has defaults: an experiment's
    sub-parser would otherwise overwrite the ``--json`` given before its NAME."""
    unset = argparse.SUPPRESS
    group = parser.add_argument_group("output")
    group.add_argument(
        "--json",
        action="store_true",
        default=False if defaults else unset,
        help="print the result as JSON",
    )
    group.add_argument(
        "--plot",
        metavar="FILE",
        default=None if defaults else unset,
        help="also save a figure (.png or .svg)",
    )
    group.add_argument(
        "--code",
        action="store_true",
        default=False if defaults else unset,
        help="print the plain PyTorch script that computes this result (needs no normlab), "
        "instead of running it",
    )
    group.add_argument(
        "--notebook",
        metavar="FILE",
        default=None if defaults else unset,
        help="also write that code as a Jupyter notebook (.ipynb), with what it printed and drew",
    )


def _add_experiment_parser(runs: Any, experiment: Experiment) -> None:
    """``normlab run NAME``: the flags generated from ``experiment``'s declaration, each with its
    default, what it allows and what it means."""
    parser = runs.add_parser(
        experiment.name,
        help=experiment.summary,
        description=f"{experiment.title}: {experiment.summary}.",
        formatter_class=_HelpFormatter,
        add_help=False,  # -h is added last, and hidden: the parameters are the help
        allow_abbrev=False,
    )
    parser.set_defaults(flags={})
    _add_output_flags(parser, defaults=False)
    _add_parameter_flags(parser, experiment.parameters)


def _add_parameter_flags(parser: argparse.ArgumentParser, parameters: Sequence[Parameter]) -> None:
    """One flag per declared parameter, with its default, what it allows and what it means;
    a hidden ``-h`` last."""
    group = parser.add_argument_group("parameters (missing ones take their default)")
    for p in parameters:
        text = f"{p.help}; default {_default(p.default)}"
        names: tuple[str, ...]
        if p.kind == "bool":
            names = (p.flag, "--no-" + p.flag[2:])
        else:
            names = (p.flag,)
            text += f"; {p.allowed()}"
        metavar = "{" + ",".join(p.choices or ()) + "}" if p.kind == "choice" else _METAVARS[p.kind]
        group.add_argument(*names, action=_Flag, param=p, metavar=metavar, help=_escaped(text))
    parser.add_argument("-h", "--help", action="help", help=argparse.SUPPRESS)


def _escaped(text: str) -> str:
    return text.replace("%", "%%")  # argparse %-formats help strings


def _values(experiment: Experiment, flags: Mapping[str, tuple[str, str | None]]) -> dict[str, Any]:
    """The texts the flags recorded (see :class:`_Flag`), each parsed and validated by its
    declaration, in the order the flags came."""
    return _parsed(experiment.parameters, flags)


def _parsed(
    parameters: Sequence[Parameter], flags: Mapping[str, tuple[str, str | None]]
) -> dict[str, Any]:
    """:func:`_values` for any declared parameters (``normlab train``'s too)."""
    declared = {p.name: p for p in parameters}
    values: dict[str, Any] = {}
    for name, (option, text) in flags.items():
        p = declared[name]
        if option != p.flag:  # a bool's --no- form
            if text is not None:
                raise UsageError(f"option {option!r} takes no value")
            text = "false"
        elif text is None:
            if p.kind != "bool":
                raise UsageError(f"option {option!r} needs a value: {p.allowed()}")
            text = "true"
        values[name] = p.parse(text)
    return values


def _unknown_options(args: argparse.Namespace, extra: Sequence[str]) -> str:
    """The message for what no parser took: for ``run NAME``, the first one and NAME's flags."""
    if args.command not in ("run", "train"):
        return f"unrecognized arguments: {' '.join(extra)}"
    name = args.name if args.command == "run" else "train"
    parameters = get_experiment(name).parameters if args.command == "run" else TRAIN_PARAMETERS
    flags = " ".join(p.flag for p in parameters)
    option = extra[0].partition("=")[0]
    return f"unknown option {option!r} for {name!r}, use one of: {flags}"


def _names() -> str:
    """Every experiment's name, in registry order, for help and errors."""
    return ", ".join(e.name for e in list_experiments())


def _threads(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of threads") from None
    most = os.cpu_count() or 1
    if not 1 <= value <= most:
        raise argparse.ArgumentTypeError(f"{value} threads: give 1 to {most} (the cores here)")
    return value


def _passive_wait(argv: Sequence[str]) -> None:
    """Start ``normlab`` again with ``OMP_WAIT_POLICY=PASSIVE`` unless it is set: OpenMP reads
    it once, when torch loads, and with several threads a run's idle ones would otherwise spin
    on cores another run needs (issue 32, finding 3). ``argv``: this command's arguments."""
    if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
        return
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    os.execve(sys.executable, [sys.executable, "-m", "normlab", *argv], env)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port, use an integer in [0, 65535]")
    return port


def _token(text: str) -> str:
    if len(text) < 16 or not text.isascii() or not text.replace("-", "").replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(
            "a token needs at least 16 characters, letters, digits, '-' or '_'"
        )
    return text


def _cmd_lab(args: argparse.Namespace, argv: Sequence[str]) -> None:
    from normlab.lab.app import create_app, serve
    from normlab.lab.progress import ProgressStoreError, default_db_path
    from normlab.lab.security import is_loopback, new_token
    from normlab.lab.state import state_of
    from normlab.lab.watchlog import WatchLogError

    if args.threads > 1:
        _passive_wait(argv)
    token: str | None = args.token
    if token is not None:
        print(
            "normlab lab: warning: --token is visible to other users in the process list; "
            "pass it as $NORMLAB_TOKEN instead",
            file=sys.stderr,
            flush=True,
        )
    if token is None and os.environ.get("NORMLAB_TOKEN"):
        try:
            token = _token(os.environ["NORMLAB_TOKEN"])
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"$NORMLAB_TOKEN: {exc}") from None
    if token is None and not is_loopback(args.host):
        token = new_token()  # off loopback a token is never optional (Jupyter's rule)
    db = args.db if args.db is not None else default_db_path()
    answers: Path | Literal["default"] | None = "default"  # no flag: the user's cache folder
    if args.answers is False:  # --no-answers
        answers = None
    elif args.answers is not None:
        answers = Path(args.answers)
    if Path(args.sweeps).is_dir():
        raise UsageError(f"--sweeps {args.sweeps!r}: a folder, give the store's file")
    try:
        app = create_app(
            warm=args.warm,
            token=token,
            db_path=db,
            watch_log=args.watch_log,
            answers=answers,
            sweeps_store=args.sweeps,
        )
    except WatchLogError as exc:
        raise UsageError(_one_line(f"--watch-log {args.watch_log!r}: {exc}")) from None
    except ProgressStoreError as exc:
        raise UsageError(f"--db {str(db)!r}: {exc}") from None
    shown = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{shown}:{args.port}/" + (f"?token={token}" if token else "")
    print(f"normlab lab: serving on {url} (Ctrl+C stops)", flush=True)
    if token:
        print("normlab lab: every request needs the token in that URL", flush=True)
    watch = state_of(app).watch
    if watch is not None:
        waits = "" if watch.path.exists() else " (waiting for it to appear)"
        page = url.replace("/?", "/watch?") if token else f"{url}watch"
        print(f"normlab lab: {page} follows {watch.path}{waits}", flush=True)
    serve(app, args.host, args.port, threads=args.threads)


def _check_plot_path(path: str) -> Path:
    from normlab import plots  # matplotlib: only for a command that draws

    target = Path(path)
    if target.suffix.lower() not in plots.FORMATS:
        raise UsageError(
            f"--plot {path!r}: suffix {target.suffix or '(none)'!r} not supported, "
            f"use one of {', '.join(plots.FORMATS)}"
        )
    if not target.parent.is_dir():
        raise UsageError(f"--plot {path!r}: folder {str(target.parent)!r} does not exist")
    return target


def _print_tables(console: Console, tables: Sequence[Table]) -> None:
    for table in tables:
        rich_table = RichTable(title=table.title, title_justify="left")
        for i, column in enumerate(table.columns):
            rich_table.add_column(column, justify="left" if i == 0 else "right")
        for row in table.rows:
            rich_table.add_row(*row)
        console.print(rich_table)
        for note in table.notes:
            console.print(f"  {note}")


def _cmd_list(as_json: bool, console: Console) -> None:
    experiments = list_experiments()
    if as_json:
        registry = [
            {
                "name": e.name,
                "title": e.title,
                "summary": e.summary,
                "parameters": [p.schema() for p in e.parameters],
            }
            for e in experiments
        ]
        print(json.dumps(registry, indent=2))
        return
    table = RichTable(
        title="normlab experiments (run: normlab run NAME [--param value ...])",
        title_justify="left",
        show_lines=True,
    )
    table.add_column("experiment", style="bold")
    table.add_column("what it shows")
    table.add_column("parameters (default, allowed)")
    for e in experiments:
        params = "\n".join(f"{p.flag} {_default(p.default)}  ({p.allowed()})" for p in e.parameters)
        table.add_row(e.name, e.summary, params)
    console.print(table)


def _default(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(f"{v:g}" for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _run(experiment: Experiment, params: Any, err: Console) -> Result:
    """Run ``experiment`` on its validated ``Params``, with a progress bar on a terminal when it
    counts its steps (a training run's optimizer steps, another's stages)."""
    values = params_dict(params)
    total = experiment.steps(params)
    if total is None or not err.is_terminal:
        return run_experiment(experiment.name, **values)
    columns = (
        TextColumn(f"{'training' if experiment.trains else 'running'} {experiment.name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(f"{experiment.unit}s"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("run", total=total)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return run_experiment(experiment.name, progress=advance, **values)


def _cmd_run(args: argparse.Namespace, console: Console) -> None:
    experiment = get_experiment(args.name)
    params = experiment.make_params(_values(experiment, args.flags))  # the one validated set
    if args.code:
        print(script.render(experiment, params), end="")
        return
    plot_path = _check_plot_path(args.plot) if args.plot else None
    notebook_path = _check_notebook_path(args.notebook) if args.notebook else None
    result = _run(experiment, params, Console(stderr=True))
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        _print_tables(console, result.tables())
    said = Console(stderr=True) if args.json else console
    if plot_path is not None:
        from normlab import plots

        plots.save(result, plot_path)
        said.print(f"plot written to {plot_path}", soft_wrap=True)
    if notebook_path is not None:
        from normlab import notebook

        drawn = [f.to_dict() for f in result.figures()]
        nb = notebook.notebook(experiment, params, script.output(experiment, result), drawn)
        notebook_path.write_text(notebook.dumps(nb))
        said.print(f"notebook written to {notebook_path}", soft_wrap=True)


def _check_notebook_path(path: str) -> Path:
    """``--notebook``'s file, refused at once (before the run) when it cannot be written."""
    target = Path(path)
    if target.suffix != ".ipynb":
        raise UsageError(f"--notebook {path!r}: the file must end in .ipynb")
    if not target.parent.is_dir():
        raise UsageError(f"--notebook {path!r}: folder {str(target.parent)!r} does not exist")
    return target


# -- normlab train -------------------------------------------------------------------------------

TRAIN_PARAMETERS = (*trainview.PARAMETERS, trainview.STEPS)
"""``normlab train``'s flags: the training view's setup, and how many steps to train."""


def _add_train_parser(sub: Any) -> None:
    """``normlab train``: the training view's loop, its flags generated from its declaration."""
    parser = sub.add_parser(
        "train",
        help="train a small classifier on a toy dataset, as the lab's training view does",
        usage="normlab train [--json] [--plot FILE] [--code] [--PARAMETER VALUE ...]",
        description="Train a small classifier on a 2-D toy dataset with the training view's "
        "loop (plain PyTorch, one optimizer step at a time) and print the losses, the "
        "accuracies and the doctor's labels of every layer at the end. `--json` prints one "
        'JSON line per step: {"step", "train_loss", "test_loss", "test_accuracy"}.',
        formatter_class=_HelpFormatter,
        add_help=False,
        allow_abbrev=False,
    )
    parser.set_defaults(flags={})
    group = parser.add_argument_group("output")
    group.add_argument(
        "--json", action="store_true", help="print one JSON line per step instead of the tables"
    )
    group.add_argument(
        "--plot", metavar="FILE", help="also save the loss curves and the final boundary"
    )
    group.add_argument(
        "--code",
        action="store_true",
        help="print the plain PyTorch script that trains this setup and prints the same losses "
        "(needs no normlab), instead of running it",
    )
    _add_parameter_flags(parser, TRAIN_PARAMETERS)


def _cmd_train(args: argparse.Namespace, console: Console) -> None:
    values = _parsed(TRAIN_PARAMETERS, args.flags)
    steps = values.pop("steps", trainview.STEPS.default)
    setup = trainview.make_setup(values)  # the one validated set
    if args.code:
        print(trainview.script(setup, steps), end="")
        return
    plot_path = _check_plot_path(args.plot) if args.plot else None
    err = Console(stderr=True)
    run = _train(setup, steps, args.json, err)
    if not args.json:
        _print_tables(console, run.tables())
    if plot_path is not None:
        from normlab import plots

        plots.save(run, plot_path)
        (err if args.json else console).print(f"plot written to {plot_path}", soft_wrap=True)


def _train(setup: trainview.Setup, steps: int, as_json: bool, err: Console) -> trainview.Run:
    """Train with a progress bar on a terminal; with ``as_json``, one JSON line per step."""

    def emit(record: dict[str, Any]) -> None:
        if as_json:
            print(json.dumps(record, allow_nan=False), flush=True)

    if not err.is_terminal:
        return trainview.run(setup, steps, emit)
    columns = (
        TextColumn(f"training on {setup.dataset}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("steps, loss {task.fields[loss]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("train", total=steps, loss="-")

        def advance(record: dict[str, Any]) -> None:
            emit(record)
            loss = record["train_loss"]
            bar.update(task, advance=1, loss="-" if loss is None else f"{loss:.4f}")

        return trainview.run(setup, steps, advance)


# -- normlab doctor ------------------------------------------------------------------------------

DOCTOR_DTYPES = ("float32", "float64", "float16", "bfloat16")
MAX_INPUT_VALUES = 2**26  # a random input batch larger than this is refused (memory)
MAX_DOCTOR_STEPS = 100
CHECK_SEEDS, CHECK_STEPS = (2, 10), (10, 1000)  # normlab.doctor.training's MIN/MAX_SEEDS, _STEPS


def _add_doctor_parser(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="diagnose your own model layer by layer",
        allow_abbrev=False,
        description="Build a model from FACTORY in FILE.py, run a few forward and backward "
        "passes, and label each layer non-finite, vanishing, exploding, dead, saturated, "
        "symmetric or ok. "
        "The model's output must be a tensor, a tuple whose first element is a tensor, or a "
        "dict or Hugging Face ModelOutput (its logits or last_hidden_state, or --output).",
    )
    p.add_argument(
        "target", metavar="FILE.py:FACTORY", nargs="?", help="file and function building the model"
    )
    p.add_argument(
        "--log", metavar="FILE.jsonl", help="report a normlab.watch log instead of a model"
    )
    p.add_argument("--input-shape", metavar="N,D[,...]", help="shape of a random input batch")
    p.add_argument("--steps", type=_doctor_steps, default=3, help="passes (default 3)")
    p.add_argument("--data", metavar="FILE.pt", help="input tensor (torch.save), every pass")
    p.add_argument("--seed", type=_doctor_seed, default=0, help="seed of the random input")
    p.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    p.add_argument("--fix", metavar="METHOD", help=f"re-initialize: {', '.join(FIX_METHODS)}")
    p.add_argument("--out", metavar="FILE.pt", help="where --fix saves the state_dict")
    p.add_argument("--fix-tied", action="store_true", help="--fix re-initializes tied weights too")
    p.add_argument(
        "--no-check", action="store_true", help="do not try the advice (or --fix) in training"
    )
    p.add_argument(
        "--check-seeds",
        type=_check_seeds,
        metavar="K",
        help=f"seeds of each training check (default 3, {CHECK_SEEDS[0]}..{CHECK_SEEDS[1]})",
    )
    p.add_argument(
        "--check-steps",
        type=_check_steps,
        metavar="S",
        help=f"Adam steps of each training check (default 100, {CHECK_STEPS[0]}..{CHECK_STEPS[1]})",
    )
    p.add_argument(
        "--tokens",
        type=_doctor_tokens,
        metavar="V",
        help="random integer token ids in [0, V) of --input-shape, not normal floats",
    )
    p.add_argument("--output", metavar="FIELD", help="the output field to read (dict, ModelOutput)")
    p.add_argument(
        "--dtype",
        choices=DOCTOR_DTYPES,
        default="float32",
        help="dtype of the random input (default float32)",
    )
    p.add_argument(
        "--traceback", action="store_true", help="show the model's own traceback on an error"
    )
    p.add_argument(
        "--widths",
        metavar="N,N[,...]",
        help="coordinate check: build FACTORY(n) at each hidden width n (e.g. 64,128,256), "
        "train each --steps Adam steps, flag the layers whose size grows with n (muP: none)",
    )


def _int_in(text: str, low: int, high: int, what: str = "an integer") -> int:
    """``text`` as an integer in [low, high], for argparse (its message names the range)."""
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed, use {what} in [{low}, {high}]")
    return value


def _doctor_tokens(text: str) -> int:
    return _int_in(text, 1, MAX_SEED, "a vocabulary size")


def _doctor_steps(text: str) -> int:
    return _int_in(text, 1, MAX_DOCTOR_STEPS)


def _doctor_seed(text: str) -> int:
    return _int_in(text, 0, MAX_SEED)


def _check_seeds(text: str) -> int:
    return _int_in(text, *CHECK_SEEDS)


def _check_steps(text: str) -> int:
    return _int_in(text, *CHECK_STEPS)


def _check_options(args: argparse.Namespace) -> dict[str, Any]:
    """``examine``'s training-check keywords from ``--no-check``, ``--check-seeds/-steps``."""
    from normlab import doctor

    options = (("--check-seeds", args.check_seeds), ("--check-steps", args.check_steps))
    given = [option for option, value in options if value is not None]
    if args.no_check and given:
        raise UsageError(f"{given[0]} sets the training checks: give no --no-check with it")
    return {
        "check": not args.no_check,
        "seeds": args.check_seeds or doctor.TRIAL_SEEDS,
        "trial_steps": 0 if args.no_check else args.check_steps or doctor.TRIAL_STEPS,
    }


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _input_shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(part) for part in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) < 2 or any(d < 1 for d in dims):
        raise UsageError(
            f"--input-shape {text!r}: use positive integers separated by commas, "
            "N,D[,...] (e.g. 64,32)"
        )
    if math.prod(dims) > MAX_INPUT_VALUES:
        raise UsageError(
            f"--input-shape {text!r}: {math.prod(dims)} values, use at most {MAX_INPUT_VALUES}"
        )
    return dims


def _load_factory(target: str) -> tuple[Any, str]:
    """Import ``FILE.py`` by path and return its ``FACTORY`` (and the factory's name)."""
    path_text, colon, name = target.rpartition(":")
    if not colon or not path_text or not name:
        raise UsageError(f"model {target!r}: use FILE.py:FACTORY, e.g. mymodel.py:build")
    path = Path(path_text)
    if not path.is_file():
        raise UsageError(f"model {target!r}: file {path_text!r} not found")
    spec = importlib.util.spec_from_file_location(f"normlab_doctor_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise UsageError(f"model {target!r}: {path_text!r} is not a Python file, use FILE.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import would (dataclasses look the module up)
    sys.path.insert(0, str(path.resolve().parent))  # its sibling modules import as in a script
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        del sys.modules[spec.name]
        raise UsageError(
            _one_line(f"model {target!r}: importing it raised {type(exc).__name__}: {exc}")
        ) from None
    finally:
        sys.path.pop(0)
    factory = getattr(module, name, None)
    if not callable(factory):
        defined = sorted(
            n
            for n, v in vars(module).items()
            if callable(v) and not n.startswith("_") and getattr(v, "__module__", "") == spec.name
        )
        raise UsageError(
            f"model {target!r}: no function {name!r} in {path_text!r}, "
            f"use one of: {', '.join(defined) or '(none defined)'}"
        )
    return factory, name


def _doctor_inputs(args: argparse.Namespace) -> list[Any]:
    import torch

    shape = _input_shape(args.input_shape) if args.input_shape is not None else None
    if args.data is None:
        if shape is None:
            raise UsageError("doctor needs --input-shape N,D[,...] (or --data FILE.pt)")
        g = torch.Generator().manual_seed(args.seed)
        if args.tokens is not None:
            return [torch.randint(args.tokens, shape, generator=g) for _ in range(args.steps)]
        dtype = getattr(torch, args.dtype)
        return [torch.randn(shape, generator=g).to(dtype) for _ in range(args.steps)]
    if args.tokens is not None:
        raise UsageError("--tokens draws a random input: use it with --input-shape, not --data")
    if not Path(args.data).is_file():
        raise UsageError(f"--data {args.data!r}: file not found")
    try:
        data = torch.load(args.data, weights_only=True)
    except Exception as exc:
        raise UsageError(_one_line(f"--data {args.data!r}: torch.load failed: {exc}")) from None
    if isinstance(data, list):  # one input per step
        if not data or not all(_is_input(x) for x in data):
            raise UsageError(f"--data {args.data!r}: {_INPUTS}, or a non-empty list of them")
        return data
    if not _is_input(data):
        raise UsageError(f"--data {args.data!r}: holds {type(data).__name__}, {_INPUTS}")
    if not isinstance(data, torch.Tensor):
        return [data] * args.steps  # positional or keyword inputs, every pass
    if shape is not None and tuple(data.shape) != shape:
        raise UsageError(
            f"--input-shape {args.input_shape!r} does not match --data's shape "
            f"{tuple(data.shape)}, give one of them"
        )
    return [data] * args.steps


_INPUTS = "use a tensor (model(x)), a tuple of tensors (model(*x)) or a dict of them (model(**x))"


def _is_input(value: object) -> bool:
    import torch

    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return any(isinstance(v, torch.Tensor) for v in value.values())
    return isinstance(value, tuple) and any(isinstance(v, torch.Tensor) for v in value)


def _writable(option: str, path_text: str) -> Path:
    path = Path(path_text)
    if not path.parent.is_dir():
        raise UsageError(f"{option} {path_text!r}: folder {str(path.parent)!r} does not exist")
    return path


def _doctor_outputs(args: argparse.Namespace) -> tuple[Path | None, Path | None]:
    """``--fix``, ``--out`` and ``--html`` checked together: where the state_dict and the report
    go (``None`` for neither)."""
    if args.fix is not None and args.fix not in FIX_METHODS:
        raise UsageError(
            f"--fix {args.fix!r} is not a method, use one of: {', '.join(FIX_METHODS)}"
        )
    if args.fix is not None and args.out is None:
        raise UsageError("--fix needs --out FILE.pt, where the re-initialized state_dict goes")
    if args.out is not None and args.fix is None:
        raise UsageError("--out is only used with --fix METHOD")
    if args.fix_tied and args.fix is None:
        raise UsageError("--fix-tied is only used with --fix METHOD")
    out_path = _writable("--out", args.out) if args.out is not None else None
    html_path = _writable("--html", args.html) if args.html is not None else None
    return out_path, html_path


def _print_fix(console: Console, exam: Any) -> None:
    """What the fix left alone, and whether training said it was a cure."""
    for name, why in exam.fix.skipped:
        console.print(f"left as it was: {name} ({why})", markup=False, highlight=False)
    if exam.trial is not None:
        console.print(exam.trial.words(), markup=False, highlight=False)


def _traceback(args: argparse.Namespace, exc: BaseException) -> None:
    """With ``--traceback``: the traceback of what the model raised (its cause), on stderr."""
    if args.traceback:
        import traceback

        cause = exc.__cause__ or exc
        traceback.print_exception(type(cause), cause, cause.__traceback__, file=sys.stderr)


def _build_model(target: str) -> Any:
    """Call ``FACTORY`` of ``FILE.py:FACTORY``; what it builds must be a ``torch.nn.Module``."""
    from torch import nn

    factory, name = _load_factory(target)
    try:
        model = factory()
    except Exception as exc:
        raise UsageError(
            _one_line(f"model {target!r}: {name}() raised {type(exc).__name__}: {exc}")
        ) from None
    if not isinstance(model, nn.Module):
        raise UsageError(
            f"model {target!r}: {name}() returned {type(model).__name__}, "
            "use a factory that returns a torch.nn.Module"
        )
    return model


def _cmd_doctor_log(args: argparse.Namespace, console: Console) -> None:
    """``normlab doctor --log FILE``: a watch log's changes, its last record, the report."""
    from normlab import report
    from normlab.watching import events, read_log

    given = [o for o, v in (("FILE.py:FACTORY", args.target), ("--fix", args.fix)) if v]
    if given:
        raise UsageError(f"--log reports a log: give no {given[0]} with it")
    if not Path(args.log).is_file():
        raise UsageError(f"--log {args.log!r}: file not found")
    html_path = _writable("--html", args.html) if args.html is not None else None
    try:
        records = list(read_log(args.log))
        page = report.log_report(records, title=args.log)
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(_one_line(f"--log {args.log!r}: {exc}")) from None
    changes = events(records)
    if args.json:
        print(json.dumps({"records": len(records), "events": changes, "last": records[-1]}))
    else:
        title = f"{args.log}: step {records[-1]['step']}"
        _print_tables(console, report.log_tables(records[-1], title))
        for change in changes:
            console.print(change, markup=False, highlight=False)
    if html_path is not None:
        html_path.write_text(page, encoding="utf-8")
        (Console(stderr=True) if args.json else console).print(
            f"report written to {html_path}", soft_wrap=True
        )


def _doctor_widths(text: str) -> list[int]:
    from normlab import doctor

    try:
        return doctor.check_widths([int(part) for part in text.split(",")])
    except (ValueError, TypeError):
        raise UsageError(
            f"--widths {text!r}: use {doctor.WIDTHS_ALLOWED}, separated by commas (e.g. 64,128,256)"
        ) from None


def _cmd_doctor_widths(args: argparse.Namespace, console: Console) -> None:
    """``normlab doctor FILE.py:FACTORY --widths 64,128,256``: the coordinate check."""
    from normlab import doctor

    widths = _doctor_widths(args.widths)
    options = (("--log", args.log), ("--fix", args.fix), ("--out", args.out), ("--html", args.html))
    if given := [o for o, v in options if v is not None]:
        raise UsageError(f"--widths runs the coordinate check: give no {given[0]} with it")
    if args.target is None:
        raise UsageError("--widths needs FILE.py:FACTORY, a factory that takes the width")
    batches = _doctor_inputs(args)
    factory, name = _load_factory(args.target)

    def build(width: int) -> Any:
        try:
            return factory(width)
        except Exception as exc:
            raise UsageError(
                _one_line(
                    f"model {args.target!r}: {name}({width}) raised {type(exc).__name__}: {exc} "
                    "(--widths calls the factory with the width)"
                )
            ) from None

    try:
        check = doctor.coord_check(
            build, widths, batches, steps=args.steps, seed=args.seed, output=args.output
        )
    except (RuntimeError, ValueError, TypeError) as exc:
        _traceback(args, exc)
        raise UsageError(_one_line(f"model {args.target!r} with --widths: {exc}")) from None
    if args.json:
        print(json.dumps({"model": args.target, **check.to_dict()}))
    else:
        _print_tables(console, [Table(**table) for table in check.tables()])


def _cmd_doctor(args: argparse.Namespace, console: Console) -> None:
    import torch

    if args.widths is not None:
        return _cmd_doctor_widths(args, console)
    if args.log is not None:
        return _cmd_doctor_log(args, console)
    if args.target is None:
        raise UsageError("doctor needs FILE.py:FACTORY (or --log FILE.jsonl)")

    from normlab import doctor
    from normlab.doctor.view import diagnosis_tables

    out_path, html_path = _doctor_outputs(args)
    batches = _doctor_inputs(args)
    model = _build_model(args.target)
    g = torch.Generator().manual_seed(args.seed)
    checks = _check_options(args)
    try:
        exam = doctor.examine(
            model, batches, fix=args.fix, generator=g, output=args.output, tied=args.fix_tied,
            **checks,
        )  # fmt: skip
    except (doctor.ModelInputError, doctor.ModelOutputError, doctor.CannotDiagnose) as exc:
        _traceback(args, exc)
        raise UsageError(_one_line(f"model {args.target!r}: {exc}")) from None
    except ValueError as exc:
        if args.fix is None:
            raise
        _traceback(args, exc)  # fix found nothing to re-initialize, or LSUV could not rescale
        raise UsageError(_one_line(f"--fix {args.fix!r}: {exc}")) from None
    if out_path is not None:
        torch.save(model.state_dict(), out_path)
    notes = Console(stderr=True) if args.json else console
    if args.json:
        d: dict[str, Any] = {"model": args.target, **exam.to_dict()}
        if "fix" in d:
            d["fix"]["out"] = str(out_path)
        print(json.dumps(d))
    else:
        title = f"{args.target}: as given"
        _print_tables(console, diagnosis_tables(exam.before, title, advice=exam.advice))
        if exam.advice_note is not None:
            console.print(exam.advice_note, markup=False, highlight=False)
        if exam.after is not None:
            title = f"{args.target}: after --fix {args.fix}"
            _print_tables(console, diagnosis_tables(exam.after, title))
            _print_fix(console, exam)
    if out_path is not None:
        notes.print(f"re-initialized ({args.fix}) state_dict written to {out_path}", soft_wrap=True)
    if html_path is not None:
        from normlab import report as html_report

        html_report.write_html(
            html_path,
            exam.before,
            title=args.target,
            after=exam.after,
            fix=exam.fix,
            trial=exam.trial,
        )
        notes.print(f"report written to {html_path}", soft_wrap=True)


# -- normlab sweep -------------------------------------------------------------------------------

SWEEP_ROWS = 40
"""The most result rows ``normlab sweep`` prints as a table (``--export`` writes them all)."""


def _add_sweep_parser(sub: Any) -> None:
    """``normlab sweep``: a grid over one experiment's declared parameters, into a store."""
    p = sub.add_parser(
        "sweep",
        help="run a grid of one experiment's settings into a store (resumable)",
        usage="normlab sweep NAME [--grid NAME=SPEC ...] [--seeds N] [--file SWEEP.toml] "
        "[--store PATH] [--retry-errors] [--export FILE] [--json] [--ray auto|ADDRESS] "
        "[--summary] [--plot FILE] [--x AXIS] [--y AXIS] [--value V] [--fix AXIS=VALUE]",
        description="Run every cell of a grid over one experiment's parameters (the others keep "
        "their default). Every cell is validated before the first runs. Each result is stored "
        "as it arrives, keyed by a hash of the experiment, its code's version and the cell's "
        "parameters: run the same command again after an interruption and only the missing "
        "cells run.",
        epilog="Example: normlab sweep bn-lr --grid lr=0.1:3:12 --grid batch_norm=true,false "
        "--grid init=he,xavier --seeds 3. The parameters and what each allows: "
        "`normlab run NAME --help`.",
        formatter_class=_HelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument(
        "experiment",
        nargs="?",
        metavar="NAME",
        help="the experiment (see `normlab list`); optional with --file",
    )
    p.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="NAME=SPEC",
        help="one axis (repeat for more): a list, true,false or he,xavier or 0.1,0.3 (a list "
        "parameter's lists separated by ;), or a range A:B:N, N points from A to B: geometric "
        "when A and B are above 0 and span a decade or more (B/A >= 10), else linear; "
        "A:B:N:log or A:B:N:lin chooses. One value fixes the parameter",
    )
    p.add_argument("--seeds", type=int, default=None, metavar="N", help="seeds 0..N-1 (an axis)")
    p.add_argument(
        "--file",
        metavar="SWEEP.toml",
        default=None,
        help="a sweep file: experiment = NAME, seeds = N, and a [grid] table of NAME = SPEC "
        "(a text as --grid takes, a list, or one value); --grid and --seeds replace its own",
    )
    p.add_argument(
        "--store",
        metavar="PATH",
        default=DEFAULT_STORE,
        help=f"the SQLite file of results (default {DEFAULT_STORE} in the working folder)",
    )
    p.add_argument(
        "--retry-errors",
        action="store_true",
        help="run again the cells that raised (by default a stored error is kept)",
    )
    p.add_argument(
        "--export",
        metavar="FILE",
        default=None,
        help="also write the results: .parquet or .csv (a row per cell: parameters, status, key "
        "numbers) or .jsonl (each cell's whole record)",
    )
    p.add_argument("--json", action="store_true", help="print the summary and rows as JSON")
    p.add_argument(
        "--ray",
        metavar="auto|ADDRESS",
        default=None,
        help="run the groups as Ray tasks, results stored here (pip install 'normlab[ray]'): "
        "auto joins the Ray this machine runs ($RAY_ADDRESS, or one `ray start` left) or else "
        "starts a local one on every core; HOST:PORT (on a node of the cluster) or "
        "ray://HOST:10001 (from outside it, with ray[client]) joins that cluster, whose nodes "
        "need normlab installed",
    )
    _add_sweep_view_flags(p)


def _add_sweep_view_flags(p: argparse.ArgumentParser) -> None:
    """The summary and heat map of a sweep (:mod:`normlab.sweep.views`)."""
    from normlab.sweep.summary import VALUES

    # no argparse choices: an experiment adds its own values (sweep_values), checked by view()
    p.add_argument(
        "--summary",
        action="store_true",
        help="print per cell (mean over seeds) the final and best loss, the loss at init, the "
        "diverged runs, and each setting's learning-rate sensitivity (Wortsman et al. 2023)",
    )
    p.add_argument("--plot", metavar="FILE", help="write the heat map (.png or .svg)")
    p.add_argument("--x", metavar="AXIS", help="the heat map's x axis (default: lr, or the first)")
    p.add_argument("--y", metavar="AXIS", help="the heat map's y axis (default: the next axis)")
    p.add_argument(
        "--value",
        default="final",
        metavar="V",
        help=f"what the heat map shows: {', '.join(VALUES)}, or a number the experiment's "
        "result declares per run (its sweep_values, e.g. chi_1) (default final)",
    )
    p.add_argument(
        "--fix",
        action="append",
        default=[],
        metavar="AXIS=VALUE",
        help="show the cells at this value of another axis (repeat; the others are averaged)",
    )


def _sweep_view(args: argparse.Namespace, sweep: Sweep, summary: Any = None) -> Any:
    """The summary's view the flags ask for, checked (on an empty summary before the run)."""
    from normlab.sweep.summary import summarize
    from normlab.sweep.views import view

    try:
        if summary is None:
            axes = [(a.name, a.values) for a in sweep.grid.axes]
            summary = summarize(sweep.experiment, axes, [])
        chosen = view(summary, args.x, args.y, args.value, args.fix)
    except ParameterError:
        raise
    except ValueError as exc:  # an experiment without a loss curve
        raise UsageError(f"--summary/--plot: {exc}") from None
    if args.plot and chosen.x is None:
        raise UsageError("--plot: the sweep has no axis of two values or more to map")
    return chosen


def _sweep_of(args: argparse.Namespace) -> Sweep:
    """The sweep the command line describes, every cell validated (nothing runs)."""
    if args.file is not None:
        grid = grid_items(args.grid)
        return Sweep.from_file(args.file, args.store, grid, args.seeds, args.experiment)
    if args.experiment is None:
        raise UsageError(f"the following arguments are required: NAME (one of: {_names()})")
    return Sweep(args.experiment, args.grid, args.seeds, args.store)


def _sweep_backend(args: argparse.Namespace) -> Backend | None:
    """What runs the sweep's groups: None, in this process; with ``--ray``, Ray tasks.

    Ray is joined (or started) here, before any cell runs, so that a missing Ray or an address
    where none answers is one line and exit 2. The backend then finds this connection; Ray stops
    a local instance it started when the command ends.
    """
    if args.ray is None:
        return None
    try:
        distributed.connect(args.ray)
    except (distributed.RayNotInstalled, distributed.RayUnreachable) as exc:
        raise UsageError(f"--ray: {exc}") from None
    return distributed.RayBackend(args.ray)


def _run_sweep(
    sweep: Sweep, retry_errors: bool, err: Console, backend: Backend | None
) -> RunSummary:
    """Run ``sweep`` on ``backend``, with a progress bar on a terminal."""
    if not err.is_terminal:
        return sweep.run(retry_errors=retry_errors, backend=backend)
    columns = (
        TextColumn(f"sweep {sweep.experiment}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("configurations"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("sweep", total=len(sweep.configs))

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return sweep.run(advance, retry_errors, backend)


def _cmd_sweep(args: argparse.Namespace, console: Console) -> None:
    sweep = _sweep_of(args)
    export = Path(args.export) if args.export else None
    if export is not None:
        check_export(export)
    viewing = args.summary or args.plot
    plot = _check_plot_path(args.plot) if args.plot else None
    if viewing:
        _sweep_view(args, sweep)  # a bad view option stops the sweep before it runs
    try:
        Store(sweep.store).close()  # a store that cannot be opened: refused before any run
    except StoreError as exc:
        raise UsageError(f"--store: {exc}") from None
    summary = _run_sweep(sweep, args.retry_errors, Console(stderr=True), _sweep_backend(args))
    if not args.summary:  # else the summary takes the rows' place
        rows = sweep.table()
        if args.json:
            out = {"store": str(sweep.store), "experiment": sweep.experiment, **vars(summary)}
            print(json.dumps({**out, "rows": rows}))
        else:
            _print_sweep(console, sweep, summary, rows)
    if viewing:
        _show_sweep_view(args, console, sweep, plot)
    if export is not None:
        sweep.export(export)
        said = Console(stderr=True) if args.json else console
        said.print(f"results written to {export}", soft_wrap=True)


def _show_sweep_view(
    args: argparse.Namespace, console: Console, sweep: Sweep, plot: Path | None
) -> None:
    """Print the summary (``--summary``, as JSON with ``--json``) and write the heat map."""
    from normlab.sweep.summary import summarize_sweep

    chosen = _sweep_view(args, sweep, summarize_sweep(sweep))
    if args.summary and args.json:
        print(json.dumps(chosen.summary.to_dict()))
    elif args.summary:
        _print_tables(console, chosen.tables())
    if plot is not None:
        from normlab import plots

        plots.save(chosen, plot)
        Console(stderr=True).print(f"heat map written to {plot}", soft_wrap=True)


def _print_sweep(
    console: Console, sweep: Sweep, summary: RunSummary, rows: Sequence[Mapping[str, Any]]
) -> None:
    """The swept parameters, status and key numbers of each cell, then what the run did."""
    axes = [a.name for a in sweep.grid.axes if len(a.values) > 1]
    fixed = {"id", "status", "seconds", "error", *sweep.configs[0].params} if rows else set()
    numbers = [k for k in rows[0] if k not in fixed] if rows else []
    table = RichTable(title=f"sweep {summary.sweep_id} ({sweep.experiment})", title_justify="left")
    for column in ("id", *axes, "status", *numbers):
        table.add_column(column, justify="left" if column in ("id", "status") else "right")
    for row in rows[:SWEEP_ROWS]:
        table.add_row(*(_cell(row.get(c)) for c in ("id", *axes, "status", *numbers)))
    console.print(table)
    if len(rows) > SWEEP_ROWS:
        console.print(f"  ({len(rows) - SWEEP_ROWS} more rows: --export FILE writes them all)")
    console.print(
        f"{summary.total} configurations: {summary.ran} run now ({summary.errors} raised), "
        f"{summary.stored_before} already stored in {sweep.store}",
        soft_wrap=True,
    )


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else _default(value)


PIPE_WIDTH = 160
"""Width of tables written to a file or a pipe (no terminal to fit, unless ``COLUMNS`` says)."""


def _stdout_console() -> Console:
    """rich's console, but 160 columns wide into a file or a pipe rather than rich's 80.

    A terminal is fitted as rich does. Elsewhere 80 columns would cut wide tables' cells to "…"
    (the doctor's nine columns need about 92), and nobody reads the file at a fixed width.
    """
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = PIPE_WIDTH
    return console


# -- normlab notebook --------------------------------------------------------------------------


def _add_notebook_parser(sub: Any) -> None:
    p = sub.add_parser(
        "notebook",
        help="write a lesson as a Jupyter notebook (.ipynb) or a marimo app (.py)",
        allow_abbrev=False,
    )
    p.add_argument("lesson", metavar="LESSON", help="the lesson's name, as in /lessons/NAME")
    p.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        required=True,
        help="FILE.ipynb: a Jupyter notebook; FILE.py: a marimo app (needs marimo installed)",
    )


def _cmd_notebook(args: argparse.Namespace, console: Console) -> None:
    """``normlab notebook LESSON -o FILE``: check the input, then one call writes the file."""
    from normlab.lab import lessonbook

    target = Path(args.output)
    if target.suffix not in (".ipynb", ".py"):
        raise UsageError(f"-o {args.output!r}: the file must end in .ipynb or .py (marimo)")
    if not target.parent.is_dir():
        raise UsageError(f"-o {args.output!r}: folder {str(target.parent)!r} does not exist")
    if target.suffix == ".py" and importlib.util.find_spec("marimo") is None:
        raise UsageError(f"-o {args.output!r}: a marimo app needs marimo: pip install marimo")
    try:
        lessonbook.lesson(args.lesson)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    lessonbook.write(args.lesson, target)
    console.print(f"lesson {args.lesson} written to {target}", soft_wrap=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); return the exit status."""
    try:
        console = _stdout_console()
        argv = list(sys.argv[1:] if argv is None else argv)
        args, extra = _build_parser().parse_known_args(argv)
        if extra:
            raise UsageError(_unknown_options(args, extra))
        if args.command == "list":
            _cmd_list(args.json, console)
        elif args.command == "lab":
            _cmd_lab(args, argv)
        elif args.command == "doctor":
            _cmd_doctor(args, console)
        elif args.command == "train":
            _cmd_train(args, console)
        elif args.command == "sweep":
            _cmd_sweep(args, console)
        elif args.command == "notebook":
            _cmd_notebook(args, console)
        else:
            _cmd_run(args, console)
    except _Exit as done:  # argparse printed the help
        return done.status
    except (UsageError, ParameterError, ParameterTypeError, UnknownExperiment) as exc:
        print(f"normlab: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl+C: a line, not a traceback through torch's imports
        print("normlab: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":  # python -m normlab.cli: through the entry point, as python -m normlab
    from normlab.__main__ import main as _entry_point

    sys.exit(_entry_point())
