"""The ``normlab`` command line: thin, parse -> run_experiment -> print or save.

Commands::

    normlab list [--json]
    normlab run NAME [--param value ...] [--json] [--plot FILE]
    normlab lab [--host HOST] [--port PORT]

Experiment flags are generated from each experiment's declared parameters (``--depth 20``,
``--gains 0.9,1,1.1``, ``--batch-norm`` / ``--no-batch-norm``). Bad input exits with status 2
and one line naming the parameter and what it allows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from normlab.experiments import (
    Experiment,
    ParameterError,
    ParameterTypeError,
    Result,
    Table,
    UnknownExperiment,
    get_experiment,
    list_experiments,
    run_experiment,
)

PLOT_SUFFIXES = (".png", ".svg")
EXIT_USAGE = 2


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="normlab",
        description="normlab: signal propagation in deep networks",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p_list = sub.add_parser("list", help="the experiments and their parameters", allow_abbrev=False)
    p_list.add_argument("--json", action="store_true", help="print the registry as JSON")
    p_run = sub.add_parser(
        "run",
        help="run one experiment",
        allow_abbrev=False,
        epilog="Experiment parameters: see `normlab list`.",
    )
    p_run.add_argument("name", help="experiment name (see `normlab list`)")
    p_run.add_argument("--json", action="store_true", help="print the result as JSON")
    p_run.add_argument("--plot", metavar="FILE", help="also save a figure (.png or .svg)")
    p_lab = sub.add_parser("lab", help="start the web lab", allow_abbrev=False)
    p_lab.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p_lab.add_argument("--port", type=_port, default=8000, help="port (default 8000)")
    p_lab.add_argument(
        "--token",
        type=_token,
        default=None,
        help="require this token on every request (default: none on loopback, a fresh random "
        "one on any other host; also read from $NORMLAB_TOKEN)",
    )
    return parser


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


def _cmd_lab(args: argparse.Namespace) -> None:
    import uvicorn

    from normlab.lab.app import create_app
    from normlab.lab.security import is_loopback, new_token

    token: str | None = args.token
    if token is None and os.environ.get("NORMLAB_TOKEN"):
        try:
            token = _token(os.environ["NORMLAB_TOKEN"])
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"$NORMLAB_TOKEN: {exc}") from None
    if token is None and not is_loopback(args.host):
        token = new_token()  # off loopback a token is never optional (Jupyter's rule)
    app = create_app(warm=True, token=token)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{shown}:{args.port}/" + (f"?token={token}" if token else "")
    print(f"normlab lab: serving on {url} (Ctrl+C stops)", flush=True)
    if token:
        print("normlab lab: every request needs the token in that URL", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


def parse_params(experiment: Experiment, tokens: Sequence[str]) -> dict[str, Any]:
    """Turn ``--name value`` tokens into validated parameter values for ``experiment``."""
    by_flag = {p.flag: p for p in experiment.parameters}
    values: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        flag, eq, inline = token.partition("=")
        negated = flag.startswith("--no-") and "--" + flag[5:] in by_flag
        spec = by_flag.get("--" + flag[5:] if negated else flag)
        if spec is None:
            valid = " ".join(by_flag)
            raise UsageError(
                f"unknown option {flag!r} for {experiment.name!r}, use one of: {valid}"
            )
        if spec.kind == "bool" and not eq:
            nxt = tokens[i + 1].lower() if i + 1 < len(tokens) else ""
            if not negated and nxt in ("true", "false", "yes", "no", "on", "off", "1", "0"):
                values[spec.name] = spec.parse(nxt)
                i += 2
            else:
                values[spec.name] = not negated
                i += 1
            continue
        if negated:
            raise UsageError(f"option {flag!r} takes no value")
        if eq:
            text = inline
            i += 1
        elif i + 1 < len(tokens):
            text = tokens[i + 1]
            i += 2
        else:
            raise UsageError(f"option {flag!r} needs a value: {spec.allowed()}")
        values[spec.name] = spec.parse(text)
    return values


def _check_plot_path(path: str) -> Path:
    target = Path(path)
    if target.suffix.lower() not in PLOT_SUFFIXES:
        raise UsageError(
            f"--plot {path!r}: suffix {target.suffix or '(none)'!r} not supported, "
            f"use one of {', '.join(PLOT_SUFFIXES)}"
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


def _run(experiment: Experiment, params: dict[str, Any], err: Console) -> Result:
    if not experiment.trains or not err.is_terminal:
        return run_experiment(experiment.name, **params)
    columns = (
        TextColumn(f"training {experiment.name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("steps"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("train", total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return run_experiment(experiment.name, progress=advance, **params)


def _cmd_run(args: argparse.Namespace, extra: list[str], console: Console) -> None:
    experiment = get_experiment(args.name)
    params = parse_params(experiment, extra)
    plot_path = _check_plot_path(args.plot) if args.plot else None
    result = _run(experiment, params, Console(stderr=True))
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        _print_tables(console, result.tables())
    if plot_path is not None:
        from normlab import plots

        plots.save(result, plot_path)
        (Console(stderr=True) if args.json else console).print(f"plot written to {plot_path}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``normlab`` script; returns the exit status."""
    console = Console()
    try:
        args, extra = _build_parser().parse_known_args(argv)
        if args.command == "list":
            if extra:
                raise UsageError(f"unrecognized arguments: {' '.join(extra)}")
            _cmd_list(args.json, console)
        elif args.command == "lab":
            if extra:
                raise UsageError(f"unrecognized arguments: {' '.join(extra)}")
            _cmd_lab(args)
        else:
            _cmd_run(args, extra, console)
    except (UsageError, ParameterError, ParameterTypeError, UnknownExperiment) as exc:
        print(f"normlab: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
