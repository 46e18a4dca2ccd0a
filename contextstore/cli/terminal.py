"""The terminal: the only code of the CLI that writes to stdout or stderr, or asks a question.

Results go to stdout (tables, JSON, CSV, ids), so ``CID=$(contextstore fork ...)`` captures
exactly what was asked for; notes, progress and errors go to stderr. rich draws the tables,
progress bars and prompts. Nothing printed is interpreted as rich markup, so stored text
such as ``[REDACTED:github_token]`` appears verbatim. Off a terminal, tables are drawn at
their natural width (no wrapping), which keeps piped output greppable.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import IO, Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.prompt import Confirm
from rich.table import Table
from rich.text import Text

PIPE_WIDTH = 1_000
"""Console width off a terminal: wide enough that rows never wrap."""


def _console(stream: IO[str]) -> Console:
    terminal = stream.isatty()
    return Console(
        file=stream,
        markup=False,
        highlight=False,
        emoji=False,
        soft_wrap=not terminal,
        width=None if terminal else PIPE_WIDTH,
        no_color=not terminal,
    )


def stdout() -> Console:
    """A console on the current standard output."""
    return _console(sys.stdout)


def stderr() -> Console:
    """A console on the current standard error."""
    return _console(sys.stderr)


def out(text: str = "") -> None:
    """Print a line of results on stdout."""
    stdout().print(Text(text), soft_wrap=True)


def note(text: str) -> None:
    """Print a line for the human on stderr (not part of the results)."""
    stderr().print(Text(text), soft_wrap=True)


def error(text: str) -> None:
    """Print an error as one line on stderr."""
    line = " ".join(text.split())
    stderr().print(Text(f"error: {line}"), soft_wrap=True)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    title: str | None = None,
    wrap: Sequence[str] = (),
    to_stderr: bool = False,
) -> None:
    """Print a table on stdout (or stderr, for details beside a result); numeric columns
    are right-aligned.

    Columns named in ``wrap`` may wrap on a narrow terminal; the others keep one line
    and shorten with an ellipsis.
    """
    grid = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    for position, header in enumerate(headers):
        numeric = bool(rows) and all(_is_number(row[position]) for row in rows)
        grid.add_column(
            header,
            justify="right" if numeric else "left",
            no_wrap=header not in wrap,
            overflow="fold" if header in wrap else "ellipsis",
        )
    for row in rows:
        grid.add_row(*(Text("" if cell is None else str(cell)) for cell in row))
    (stderr() if to_stderr else stdout()).print(grid)


def fields(pairs: Sequence[tuple[str, Any]]) -> None:
    """Print ``name  value`` lines, aligned (one record's fields)."""
    width = max((len(name) for name, _ in pairs), default=0)
    for name, value in pairs:
        out(f"{name.ljust(width)}  {'' if value is None else value}")


def json_default(value: Any) -> Any:
    """JSON for values :mod:`json` does not know: decimals as numbers, bytes as sqlite-utils
    spells them, anything else as its text."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        import base64

        return {"$base64": True, "encoded": base64.b64encode(bytes(value)).decode("ascii")}
    return str(value)


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout; a number JSON cannot hold (infinity or
    NaN, which SQL can compute) is printed as the string ``"Infinity"``, ``"-Infinity"`` or
    ``"NaN"``, so every output parses as strict JSON."""
    try:
        text = json.dumps(
            value, indent=2, ensure_ascii=False, default=json_default, allow_nan=False
        )
    except ValueError:
        text = json.dumps(
            _finite(value), indent=2, ensure_ascii=False, default=json_default, allow_nan=False
        )
    sys.stdout.write(text)
    sys.stdout.write("\n")


def _finite(value: Any) -> Any:
    """``value`` with each non-finite float replaced by its name (see :func:`print_json`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def print_csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print rows as CSV on stdout (header first; JSON values as JSON text)."""
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(
            [
                json.dumps(cell, default=json_default) if isinstance(cell, dict | list) else cell
                for cell in row
            ]
        )


def interactive() -> bool:
    """True when a person can answer a question: stdin and stderr are terminals."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def confirm(question: str) -> bool:
    """Ask a yes/no question on the terminal; the default is no."""
    return Confirm.ask(Text(question), console=stderr(), default=False)


@contextmanager
def progress(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr while the block runs; yields ``advance(steps)``.

    Off a terminal nothing is drawn (logs stay clean) and ``advance`` does nothing.
    """
    console = stderr()
    if not console.is_terminal:

        def ignore(_steps: int = 1) -> None:
            return None

        yield ignore
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with bar:
        task = bar.add_task(description, total=total)

        def advance(steps: int = 1) -> None:
            bar.advance(task, steps)

        yield advance


@contextmanager
def status(text: str) -> Iterator[None]:
    """A spinner with ``text`` on stderr while the block runs (a note off a terminal)."""
    console = stderr()
    if not console.is_terminal:
        note(text)
        yield
        return
    with console.status(Text(text)):
        yield


def discard_output() -> None:
    """Send what is left to print on standard output nowhere, the interpreter's last
    flush included: its reader went away (``| head``)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
