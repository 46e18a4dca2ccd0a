"""The terminal: the only code of the CLI that writes to stdout or stderr, or asks a question.

Results go to stdout (tables, JSON, CSV, ids), so ``CID=$(contextstore fork ...)`` captures
exactly what was asked for; notes, progress and errors go to stderr. rich draws the tables,
progress bars and prompts. Nothing printed is interpreted as rich markup, so stored text
such as ``[REDACTED:github_token]`` appears verbatim. Off a terminal, tables are drawn at
their natural width (no wrapping), which keeps piped output greppable.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import IO, Any

import click
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.prompt import Confirm
from rich.table import Table
from rich.text import Text

PIPE_WIDTH = 1_000
"""Console width off a terminal: wide enough that rows never wrap."""


class _Console(Console):
    """rich's console, but a reader that went away (``| head``) raises
    :class:`BrokenPipeError` to the command, which ends with the documented exit code 141;
    rich's own handling exits with status 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError

    def text(self, value: str) -> Text:
        """``value`` as rich text for this console: verbatim off a terminal; on one, with
        its control characters shown as symbols (:func:`visible`)."""
        return Text(visible(value) if self.is_terminal else value)

    def write_line(self, value: str) -> None:
        """Print ``value`` and a line break: on a terminal with its control characters shown
        as symbols (:func:`visible`); off one as it is (rich's text deleted carriage
        returns, bells, backspaces, vertical tabs and form feeds, and expanded tabs)."""
        if self.is_terminal:
            self.print(Text(visible(value)), soft_wrap=True)
        else:
            self.file.write(f"{value}\n")


_UNSAFE_ON_A_TERMINAL = r"\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"
"""The characters stored text never sends to a terminal, as a regular expression's class: the
C0 controls but line feed and tab, DEL, the C1 controls, and the bidirectional embeddings,
overrides and isolates (an override left open in one cell would show the rest of the line
reversed on a terminal that reorders). Tables and lines show them as symbols
(:func:`visible`), CSV too, and JSON escapes them (:func:`print_json`)."""
_CONTROL = re.compile(f"[{_UNSAFE_ON_A_TERMINAL}]")
"""The characters :func:`visible` shows as symbols (:data:`_UNSAFE_ON_A_TERMINAL`)."""
_RAW_IN_JSON = re.compile(r"[\x7f-\x9f\ud800-\udfff]")
"""What :mod:`json` writes as it is and :func:`print_json` escapes: DEL and the C1
controls, and lone surrogates (a path whose name is not UTF-8, as Python keeps it), which
no UTF-8 stream takes."""
_RAW_IN_JSON_ON_A_TERMINAL = re.compile(f"[{_UNSAFE_ON_A_TERMINAL}\\ud800-\\udfff]")
"""What :func:`print_json` escapes on a terminal: every character :func:`visible` shows as a
symbol (the bidirectional overrides among them, which :mod:`json` writes raw), and lone
surrogates."""


def _symbol(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # the Control Pictures: ␛ for ESC, ␀ for NUL
    if code == 0x7F:
        return "\u2421"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character but line feed and tab shown as a symbol
    (``␛`` for ESC, ``\\x9b`` for a C1 control, ``\\u202e`` for a right-to-left override),
    so that stored text (a tool's coloured output, a hostile escape sequence) cannot move
    the cursor, clear the screen, retitle the window or write the clipboard of the terminal
    it is shown on, nor reverse what the auditor reads after it on the line. The marks that
    right-to-left text needs (U+200E, U+200F, U+061C) are kept."""
    return _CONTROL.sub(_symbol, text)


def _console(stream: IO[str]) -> _Console:
    terminal = stream.isatty()
    return _Console(
        file=stream,
        markup=False,
        highlight=False,
        emoji=False,
        soft_wrap=not terminal,
        width=None if terminal else PIPE_WIDTH,
        no_color=not terminal,
    )


def stdout() -> _Console:
    """A console on the current standard output."""
    return _console(sys.stdout)


def stderr() -> _Console:
    """A console on the current standard error."""
    return _console(sys.stderr)


def out(text: str = "") -> None:
    """Print a line of results on stdout."""
    stdout().write_line(text)


def document(text: str) -> None:
    """Write a whole document (a report's HTML) on stdout byte for byte: no wrapping, no
    symbols for control characters, as a file would hold it: UTF-8, which the page declares,
    whatever the output's encoding (a legacy locale's stream would write ``\\U0001f600``
    into the page's text for a character it has no room for)."""
    stream = sys.stdout
    buffer = getattr(stream, "buffer", None)
    if buffer is None or _utf8(stream):
        stream.write(text)
        return
    stream.flush()
    buffer.write(text.encode("utf-8"))
    buffer.flush()


def note(text: str) -> None:
    """Print a line for the human on stderr (not part of the results)."""
    _to_stderr(text)


def error(text: str) -> None:
    """Print an error as one line on stderr."""
    line = " ".join(text.split())
    _to_stderr(f"error: {line}")


def click_error(exc: click.ClickException) -> int:
    """Print an error click raised (a usage error, a bad value) as click does; return its
    exit code. A reader of stderr that went away does not change the code (see
    :func:`_to_stderr`)."""
    try:
        exc.show()
    except BrokenPipeError:
        _discard(sys.stderr)
    return exc.exit_code


def _to_stderr(line: str) -> None:
    """Print ``line`` on stderr; when its reader went away (``2>&1 | true``), the line and
    whatever follows it there go nowhere, and the command ends with its own exit code, as
    with stderr closed (``2>&-``): an error printed there ended with exit 1 (click's
    handling of the broken pipe), not the error's code."""
    try:
        stderr().write_line(line)
    except BrokenPipeError:
        _discard(sys.stderr)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


KEPT_WHOLE_WIDTH = 40
"""Cells up to this width (ids, times, numbers, labels, hashes) are never shortened on a
narrow terminal: the row grows longer than the terminal, which wraps it, instead."""
WRAPPED_MIN_WIDTH = 20
"""The narrowest a wrapping column (a title, a message's content) is folded to."""


def _cells(text: str) -> int:
    """Terminal cells of the longest line of ``text``."""
    return max(cell_len(line) for line in text.split("\n"))


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

    Columns named in ``wrap`` may wrap on a narrow terminal; the others keep one line, and
    only a value wider than :data:`KEPT_WHOLE_WIDTH` shortens, with an ellipsis. Where even
    that does not fit, the rows are longer than the terminal is wide: it wraps them, and no
    id, time or number is ever cut (they were cut to ``…``, or their column dropped).
    """
    console = stderr() if to_stderr else stdout()
    on_terminal = console.is_terminal
    plain = [
        ["" if cell is None else visible(str(cell)) if on_terminal else str(cell) for cell in row]
        for row in rows
    ]
    widths = [
        max([_cells(header), *(_cells(line[i]) for line in plain)])
        for i, header in enumerate(headers)
    ]
    numeric = [bool(rows) and all(_is_number(row[i]) for row in rows) for i in range(len(headers))]
    # Each column is padded by a space either side but the outer ones, and divided from the
    # next by one more.
    narrow = on_terminal and sum(widths) + 3 * (len(headers) - 1) > console.width
    if not on_terminal:
        # Drawn directly whatever the cells hold: rich's layout deleted carriage returns,
        # bells, backspaces, vertical tabs and form feeds from stored text, and expanded
        # tabs (then cut the cell with "…").
        box_ = ASCII_BOX if console.options.ascii_only else LINE_BOX
        laid_out = _laid_out(headers, plain, widths, numeric, box_, padded=False)
        _print_drawn(console, title, laid_out)
        return
    # A stream that cannot encode the box's rule gets rich's ASCII box, which rich draws.
    if not narrow and not console.options.ascii_only:
        drawn = _drawn(headers, plain, widths, numeric)
        if drawn is not None and (title is None or not on_terminal or _fits(title, drawn)):
            _print_drawn(console, title, drawn)
            return
    shown = [[Text(cell) for cell in line] for line in plain]
    _print_grid(console, headers, shown, widths, numeric, title=title, wrap=wrap, narrow=narrow)


def _print_grid(
    console: _Console,
    headers: Sequence[str],
    shown: Sequence[Sequence[Text]],
    widths: Sequence[int],
    numeric: Sequence[bool],
    *,
    title: str | None,
    wrap: Sequence[str],
    narrow: bool,
) -> None:
    """Print a table with rich's own layout (:func:`table`; for one that does not fit the
    terminal, or whose cells rich must lay out)."""
    grid = Table(
        title=None if title is None else console.text(title),
        box=box.SIMPLE_HEAD,
        title_justify="left",
        show_edge=False,
        pad_edge=False,
    )
    gaps = 3 * (len(headers) - 1)
    least = [
        min(width, WRAPPED_MIN_WIDTH if header in wrap else KEPT_WHOLE_WIDTH)
        for header, width in zip(headers, widths, strict=True)
    ]
    for position, header in enumerate(headers):
        wraps = header in wrap
        grid.add_column(
            header,
            justify="right" if numeric[position] else "left",
            no_wrap=not wraps,
            overflow="fold" if wraps else "ellipsis",
            min_width=least[position] if narrow else None,
            # On a narrow terminal a long value that does not wrap is shortened, rather
            # than the columns beside it.
            max_width=KEPT_WHOLE_WIDTH if narrow and not wraps else None,
        )
    for line in shown:
        grid.add_row(*line)
    if narrow and sum(least) + gaps > console.width:
        # rich would squeeze every column, cutting ids and numbers to "…" and dropping
        # whole columns: rows longer than the terminal instead, which it wraps.
        console.width = sum(least) + gaps
    if not console.is_terminal:
        # Off a terminal a table keeps its natural width: rich cut rows wider than the
        # console's with "…" (a long text in 'sql' output lost its end).
        console.width = max(console.width, sum(widths) + gaps)
    console.print(grid)


_LAID_OUT_BY_RICH = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""Characters whose cells rich lays out itself on a terminal (line breaks, tabs, other
controls)."""
RULE = "\u2500"
"""The line under a table's header (rich's ``SIMPLE_HEAD`` box)."""


@dataclass(frozen=True)
class Box:
    """How a table is ruled, as rich draws its ``SIMPLE_HEAD`` box without edges."""

    divider: str
    """Between two columns: a space, the box's vertical, a space."""
    rule: str
    """The line under the header."""
    crossing: str
    """Where the line under the header crosses a vertical."""


LINE_BOX = Box("   ", RULE, RULE)
"""The box on a stream that takes box-drawing characters."""
ASCII_BOX = Box(" | ", "-", "+")
"""rich's ASCII box, for a stream that cannot encode :data:`RULE` (a legacy locale)."""


def _drawn(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    widths: Sequence[int],
    numeric: Sequence[bool],
) -> list[str] | None:
    """The lines of a table that fits its console, as rich draws it (``SIMPLE_HEAD``, no
    edge, cells padded to their column and divided by three spaces), drawn directly: rich
    took about a quarter of a millisecond a row, seconds for an audit of thousands of
    requests or files. None when a cell holds a line break, a tab or another control
    character, or a column's text takes no cell at all: rich lays those out itself."""

    if 0 in widths or any(_LAID_OUT_BY_RICH.search(cell) for row in rows for cell in row):
        return None
    if any(_LAID_OUT_BY_RICH.search(header) for header in headers):
        return None
    return _laid_out(headers, rows, widths, numeric, LINE_BOX)


def _laid_out(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    widths: Sequence[int],
    numeric: Sequence[bool],
    box_: Box,
    *,
    padded: bool = True,
) -> list[str]:
    """The lines of a table at its natural width, as rich lays one out (cells padded to
    their column, numbers right-aligned, a cell of several lines making its row as tall),
    each cell's text written as it is: off a terminal, what is stored (:func:`table`).

    Unless ``padded``, a line ends where its last text does: the blanks that would only
    pad it to the table's width are left out (a cell of 2,000 lines beside one of 5,000
    characters made 10 MB of blanks)."""

    def line(cells: Sequence[str]) -> str:
        pieces = []
        end = at = 0  # where the line's last text ends; where the next piece starts
        for cell, width, flush in zip(cells, widths, numeric, strict=True):
            if flush:  # rich drops a right-aligned cell's trailing white space
                cell = cell.rstrip()
            room = " " * (width - cell_len(cell))
            piece = room + cell if flush else cell + room
            if cell:
                end = at + (len(piece) if flush else len(cell))
            pieces.append(piece)
            at += len(piece) + len(box_.divider)
        text = box_.divider.join(pieces)
        return text if padded else text[:end]

    def row_lines(cells: Sequence[str], *, bottom: bool = False) -> Iterator[str]:
        parts = [cell.split("\n") for cell in cells]
        height = max(len(part) for part in parts)
        if bottom:  # rich aligns the header's cells with its last line
            parts = [[""] * (height - len(part)) + part for part in parts]
        for depth in range(height):
            yield line([part[depth] if depth < len(part) else "" for part in parts])

    rule = (box_.rule + box_.crossing + box_.rule).join(box_.rule * width for width in widths)
    lines = [*row_lines(headers, bottom=True), rule]
    for row in rows:
        lines.extend(row_lines(row))
    return lines


def _fits(title: str, drawn: Sequence[str]) -> bool:
    """Whether ``title`` is no wider than the table drawn (a wider one rich wraps)."""
    return "\n" not in title and cell_len(title) <= cell_len(drawn[1])


def _print_drawn(console: _Console, title: str | None, drawn: Sequence[str]) -> None:
    """Print a table :func:`_drawn` drew, its title in italics and its header in bold on
    a terminal, as rich styles them."""
    if not console.is_terminal:
        # Written as rich would write it, without its rendering (a tenth of a second for
        # 10,000 lines); a reader that went away raises BrokenPipeError all the same.
        console.file.write("\n".join([*([] if title is None else [title]), *drawn, ""]))
        return
    shown = console.text(title or "").plain
    shown += " " * (cell_len(drawn[1]) - cell_len(shown))  # rich pads a title to the table
    head = [] if title is None else [Text(shown, style="italic")]
    head.append(Text(drawn[0], style="bold"))
    console.print(*head, Text("\n".join(drawn[1:])), sep="\n", soft_wrap=True, crop=False)


def fields(pairs: Sequence[tuple[str, Any]]) -> None:
    """Print ``name  value`` lines, aligned (one record's fields)."""
    width = max((len(name) for name, _ in pairs), default=0)
    for name, value in pairs:
        out(f"{name.ljust(width)}  {'' if value is None else value}")


def json_default(value: Any) -> Any:
    """JSON for values :mod:`json` does not know: decimals as numbers (one no float can
    hold, as PostgreSQL's ``numeric`` ``NaN`` or ``1e400``, as a string, as
    :func:`print_json` prints a float's), bytes as sqlite-utils spells them, anything else
    as its text."""
    if isinstance(value, Decimal):
        number = float(value)
        if math.isfinite(number):
            return number
        if value.is_nan():
            return "NaN"
        return str(value) if value.is_finite() else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes | bytearray | memoryview):
        import base64

        return {"$base64": True, "encoded": base64.b64encode(bytes(value)).decode("ascii")}
    return str(value)


def _utf8(stream: IO[str]) -> bool:
    """True when ``stream`` encodes every character (UTF-8, whatever the spelling)."""
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    return encoding in ("utf8", "utf8sig")


def tolerate_encoding(stream: IO[str]) -> None:
    """Make ``stream`` escape (``\\u6211``) the characters its encoding has no room for
    instead of failing: a legacy locale (``LANG=en_US.ISO-8859-1``, Windows' cp1252 behind
    a redirection, ``PYTHONIOENCODING=ascii``) would end the command at the first stored
    character it cannot encode. JSON is written with ASCII escapes there (:func:`print_json`),
    so it stays the same JSON. A UTF-8 stream that is strict about it (a ``en_US.UTF-8``
    desktop, ``PYTHONIOENCODING=utf-8``) has no room for a lone surrogate, which is how
    Python keeps a file name that is not UTF-8: it is escaped too (the C locale's
    ``surrogateescape`` writes the name's own bytes, and is left as it is)."""
    if not isinstance(stream, io.TextIOWrapper):
        return
    if not _utf8(stream) or stream.errors == "strict":
        stream.reconfigure(errors="backslashreplace")


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout; a number JSON cannot hold (infinity or
    NaN, which SQL can compute) is printed as the string ``"Infinity"``, ``"-Infinity"`` or
    ``"NaN"``, so every output parses as strict JSON; on a stream that is not UTF-8, every
    character beyond ASCII is escaped too. Every control character is escaped
    (``\\u009b``), DEL and the C1 controls too, which :mod:`json` writes raw: the same JSON,
    but stored text cannot drive a terminal it is printed on. On a terminal the
    bidirectional embeddings, overrides and isolates are escaped too (``\\u202e``), as
    :func:`visible` shows them; off one they stay as :mod:`json` writes them."""
    console = stdout()
    stream = console.file
    ascii_only = not _utf8(stream)
    try:
        text = json.dumps(
            value, indent=2, ensure_ascii=ascii_only, default=json_default, allow_nan=False
        )
    except ValueError:
        text = json.dumps(
            _finite(value), indent=2, ensure_ascii=ascii_only, default=json_default, allow_nan=False
        )
    raw = _RAW_IN_JSON_ON_A_TERMINAL if console.is_terminal else _RAW_IN_JSON
    stream.write(raw.sub(lambda m: f"\\u{ord(m.group()):04x}", text))
    stream.write("\n")


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
    """Print rows as CSV on stdout (header first). A cell holds what the same value holds
    in :func:`print_json`'s output: JSON values and bytes as JSON text, a number no float
    can hold as its name (``Infinity``); Python's own spellings (``b'...'``, ``inf``) are
    no reader's. On a terminal a text's control characters and bidirectional overrides are
    shown as symbols (:func:`visible`), as a table shows them; off one (a pipe, a file) every
    cell is written as stored."""
    console = stdout()
    shown = _csv_visible if console.is_terminal else _csv_verbatim
    writer = csv.writer(console.file, lineterminator="\n")
    writer.writerow([shown(name) for name in columns])
    for row in rows:
        writer.writerow([shown(text_cell(cell)) for cell in row])


def _csv_visible(cell: Any) -> Any:
    """A CSV cell for a terminal: text as :func:`visible` shows it."""
    return visible(cell) if isinstance(cell, str) else cell


def _csv_verbatim(cell: Any) -> Any:
    """A CSV cell off a terminal: as it is."""
    return cell


def text_cell(cell: Any) -> Any:
    """One value of a query's row as :func:`print_csv` writes it, and as the ``sql``
    command's table shows it (where bytes showed as ``b'...'`` and an infinite number as
    ``inf``)."""
    if isinstance(cell, dict | list):
        return json.dumps(_finite(cell), default=json_default)
    if isinstance(cell, bytes | bytearray | memoryview):
        return json.dumps(json_default(cell))
    if isinstance(cell, float):
        return _finite(cell)
    if isinstance(cell, Decimal):  # CSV is text: PostgreSQL's numeric keeps every digit
        return str(cell) if cell.is_finite() else json_default(cell)
    return cell


def interactive() -> bool:
    """True when a person can answer a question: stdin and stderr are terminals."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def confirm(question: str) -> bool:
    """Ask a yes/no question on the terminal; the default is no, and so is the end of the
    input (Ctrl-D), which ended the command in an internal error."""
    try:
        return Confirm.ask(Text(question), console=stderr(), default=False)
    except EOFError:
        stderr().print()
        return False


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


def flush_output() -> None:
    """Write out what is left in the standard output's buffer (its errors are the
    command's: a full disk, a reader that went away)."""
    if sys.stdout is not None:
        sys.stdout.flush()


def discard_output() -> None:
    """Send what is left to print on standard output nowhere, the interpreter's last
    flush included: its reader went away (``| head``)."""
    _discard(sys.stdout)


def _discard(stream: IO[str]) -> None:
    """Point ``stream``'s file descriptor at the null device, so that what is left in its
    buffer, and what is written to it later, goes nowhere instead of failing again (the
    interpreter's last flush would end the process with status 120)."""
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's buffer)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)
