"""The CLI's tables: drawn directly when they fit, exactly as rich draws them.

rich laid out every table cell by cell, about a quarter of a millisecond a row: an audit of a
conversation with thousands of requests or files read spent seconds printing. A table that
fits its console is now drawn directly; rich itself is the oracle it is checked against.
"""

from __future__ import annotations

from io import BytesIO, StringIO, TextIOWrapper
from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from contextstore.cli import terminal

TEXT = st.text(
    alphabet=st.characters(
        codec="utf-8", categories=("L", "M", "N", "P", "S", "Zs"), exclude_characters="\x85"
    ),
    max_size=12,
)
LINES = st.lists(TEXT, min_size=1, max_size=3).map("\n".join)
"""Text of one or more lines (a tool's output, a query's value)."""
CELL = st.one_of(
    st.none(),
    TEXT,
    LINES,
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["漢字", "e\u0301", "😀", "✓", "\u200b", ""]),
)


@st.composite
def tables(draw: Any) -> tuple[list[str], list[list[Any]], str | None]:
    columns = draw(st.integers(1, 5))
    headers = draw(st.lists(LINES.filter(bool), min_size=columns, max_size=columns))
    rows = draw(st.lists(st.lists(CELL, min_size=columns, max_size=columns), max_size=6))
    title = draw(st.one_of(st.none(), TEXT.filter(bool)))
    return headers, rows, title


def _both(
    console: Any, headers: list[str], rows: list[list[Any]], title: str | None
) -> tuple[str, str]:
    """What :func:`terminal.table` prints, and what rich's own layout prints."""
    screen = console.file
    terminal.table(headers, rows, title=title)
    drawn = screen.getvalue()
    screen.seek(0)
    screen.truncate()
    shown = [[console.text("" if c is None else str(c)) for c in row] for row in rows]
    widths = [
        max([terminal._cells(h), *(terminal._cells(line[i].plain) for line in shown)])
        for i, h in enumerate(headers)
    ]
    numeric = [
        bool(rows) and all(terminal._is_number(r[i]) for r in rows) for i in range(len(headers))
    ]
    terminal._print_grid(
        console, headers, shown, widths, numeric, title=title, wrap=(), narrow=False
    )
    return drawn, screen.getvalue()


def _console(on_terminal: bool) -> Any:
    """A console on a new buffer: a pipe's, or a colourless terminal's of 200 columns."""
    if not on_terminal:
        return terminal._console(StringIO())
    return terminal._Console(
        file=StringIO(), force_terminal=True, width=200, color_system=None, markup=False
    )


@pytest.mark.parametrize("on_terminal", [False, True], ids=["piped", "terminal"])
@settings(max_examples=300, deadline=None)
@given(table=tables())
@example(table=(["\xa0"], [[0]], None))  # rich drops a right-aligned cell's trailing blanks
@example(table=(["\U0001f3fb"], [], None))  # a column of no cells: rich gives it one
@example(table=(["0"], [[-1]], "0"))  # a title on a terminal: padded to the table
@example(table=(["a", "n"], [["x\ny\n", 1], ["", 22]], None))  # a row of several lines
@example(table=(["n\n\xa0"], [[1]], None))  # a right-aligned header of two lines
@example(table=(["a", "b"], [["x ", "y"], ["", ""]], None))  # a text's own trailing blank
@example(table=(["0"], [], " "))  # a title's own trailing blank
def test_a_table_is_drawn_as_rich_draws_it(
    on_terminal: bool, table: tuple[list[str], list[list[Any]], str | None]
) -> None:
    headers, rows, title = table
    if not on_terminal:
        # rich gives a column whose text takes no cell a width of its own choosing (one
        # cell, or none and a row of one line); a piped table keeps it as wide as its text.
        assume(all(terminal._cells(h) for h in headers))
    console = _console(on_terminal)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(terminal, "stdout", lambda: console)
        drawn, rich = _both(console, headers, rows, title)
    if on_terminal:
        assert drawn == rich
        return
    # Off a terminal a line ends with its last text: the blanks rich adds after it, which
    # only pad the line to the table's width, are left out; nothing else differs.
    texts = [*headers, *(str(cell) for row in rows for cell in row if cell is not None)]
    texts += [title] if title is not None else []  # a title's own trailing blank stays too
    own_blank = any(line.endswith(" ") for text in texts for line in text.split("\n"))
    assert len(drawn.split("\n")) == len(rich.split("\n"))
    for mine, theirs in zip(drawn.split("\n"), rich.split("\n"), strict=True):
        assert theirs.startswith(mine) and not theirs[len(mine) :].strip(" ")
        assert own_blank or mine == theirs.rstrip(" ")


def test_a_table_whose_cells_rich_must_lay_out_is_left_to_rich() -> None:
    assert terminal._drawn(["a"], [["two\nlines"]], [5], [False]) is None
    assert terminal._drawn(["a"], [["tab\there"]], [8], [False]) is None
    assert terminal._drawn(["a"], [["c1 \x9b"]], [4], [False]) is None
    assert terminal._drawn(["a", "b"], [["x", "yy"]], [1, 2], [False, False]) == [
        "a   b ",
        "─" * 6,
        "x   yy",
    ]


def test_a_piped_table_pads_no_line_past_its_last_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off a terminal every line of a table was padded to the table's width: a cell of
    2,000 lines beside one of 5,000 characters printed 10 MB, nearly all blanks (CSV:
    15 KB); ``sql "select * from blocks"`` on a megabyte of real history printed 329 MB."""
    console = terminal._console(StringIO())
    monkeypatch.setattr(terminal, "stdout", lambda: console)
    many = "\n".join(["line"] * 2_000)
    terminal.table(["a", "b"], [[many, "x" * 5_000]])
    shown = console.file.getvalue()
    assert len(shown) < 40_000
    lines = shown.split("\n")
    assert lines[:2] == ["a      b", "─" * 5_007] and lines[2] == "line   " + "x" * 5_000
    assert lines[3:] == ["line"] * 1_999 + [""]
    terminal.table(["n", "text", "note"], [[1, "kept  ", None], [22, "", "b"]])
    assert console.file.getvalue()[len(shown) :].split("\n") == [
        " n   text     note",
        "─" * 18,
        " 1   kept  ",
        "22            b",
        "",
    ]


@pytest.mark.parametrize("text", ["x" * 1_500, "first line\n" + "y" * 1_500])
def test_a_piped_table_keeps_a_cell_longer_than_a_thousand_characters_whole(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """Off a terminal rich drew tables 1,000 columns wide and cut longer rows with "…":
    a long text in 'sql' output lost its end."""
    console = terminal._console(StringIO())
    monkeypatch.setattr(terminal, "stdout", lambda: console)
    terminal.table(["id", "text"], [[1, text]])
    shown = console.file.getvalue()
    assert "…" not in shown
    assert text.split("\n")[-1] in shown


def test_a_table_of_thousands_of_rows_that_fits_is_not_laid_out_by_rich(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The audit of a 10,000-message conversation spent 3.5 of its 3.8 seconds in rich's
    table layout; a table that fits is drawn without it."""
    console = terminal._console(StringIO())
    monkeypatch.setattr(terminal, "stdout", lambda: console)

    def laid_out_by_rich(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("rich laid out a table that fits")

    monkeypatch.setattr(terminal, "_print_grid", laid_out_by_rich)
    rows = [[n, f"src/file_{n}.py", n * 3] for n in range(5_000)]
    terminal.table(["#", "path", "reads"], rows, title="files read")
    lines = console.file.getvalue().splitlines()
    assert len(lines) == 5_003 and lines[0] == "files read"
    assert lines[-1] == "4999   src/file_4999.py   14997"


@pytest.mark.parametrize("encoding", ["latin-1", "ascii"])
def test_a_stream_that_cannot_encode_the_rule_gets_richs_ascii_table(encoding: str) -> None:
    stream = TextIOWrapper(BytesIO(), encoding=encoding, errors="backslashreplace")
    console = terminal._console(stream)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(terminal, "stdout", lambda: console)
        terminal.table(["id", "label"], [[1, "a"], [22, "bb"]])
    stream.flush()
    assert stream.buffer.getvalue().decode(encoding).splitlines() == [  # type: ignore[attr-defined]
        "id | label",
        "---+------",
        " 1 | a",
        "22 | bb",
    ]
