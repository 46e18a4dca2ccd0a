"""Reading a damaged SQLite file: a copy that SQLite can open, and scans that read every
row they can.

The damaged file is never written: it is copied (with its write-ahead log), and a header
that is missing or overwritten is rebuilt in the copy from what the rest of the file shows
(its page size is the one whose page starts look like b-tree pages). A table is read in
rowid order; when a read meets a damaged page the scan skips ahead to the next rowid that
can be read (found by doubling, then bisecting), so what lies beyond one damaged page is
still read. A table without rowids is read in key order, one conversation at a time past a
damaged page. :mod:`.recovery` writes what the scans found into a new store.
"""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contextstore.storage.sqlite_file import HEADER_BYTES, MAGIC, parse_header

PAGE_SIZES = (8192, 4096, 16384, 32768, 65536, 1024, 2048, 512)
"""Page sizes tried, most likely first, when a header must be rebuilt."""
BTREE_PAGE_TYPES = {2, 5, 10, 13}
"""First byte of a b-tree page (interior/leaf, index/table)."""
MAX_ROWID = 2**63 - 1


# -- the damaged file's copy -------------------------------------------------------------


def guess_page_size(data: bytes) -> int:
    """The page size under which the most page starts (after page 1) are b-tree pages."""

    def score(size: int) -> float:
        starts = range(size, len(data), size)
        if not starts:
            return 0.0
        return sum(data[i] in BTREE_PAGE_TYPES for i in starts) / len(starts)

    candidates = [s for s in PAGE_SIZES if len(data) >= 2 * s] or [PAGE_SIZES[0]]
    return max(candidates, key=lambda s: (score(s), -PAGE_SIZES.index(s)))


def rebuilt_header(page_size: int, page_count: int) -> bytes:
    """A valid 100-byte header for a UTF-8 database of ``page_count`` pages (rollback
    journal, no free-list: enough for SQLite to read the pages after it)."""
    header = bytearray(HEADER_BYTES)
    header[0:16] = MAGIC
    header[16:18] = (1 if page_size == 65_536 else page_size).to_bytes(2, "big")
    header[18], header[19], header[20] = 1, 1, 0
    header[21], header[22], header[23] = 64, 32, 32
    header[24:28] = (1).to_bytes(4, "big")
    header[28:32] = page_count.to_bytes(4, "big")
    header[40:44] = (1).to_bytes(4, "big")
    header[44:48] = (4).to_bytes(4, "big")
    header[56:60] = (1).to_bytes(4, "big")
    header[92:96] = (1).to_bytes(4, "big")
    major, minor, patch = sqlite3.sqlite_version_info
    header[96:100] = (major * 1_000_000 + minor * 1000 + patch).to_bytes(4, "big")
    return bytes(header)


def readable_copy(source: Path, copy: Path) -> bool:
    """Copy ``source`` (and its write-ahead log) to ``copy``, whole pages, with a header
    SQLite accepts; returns True when the header had to be rebuilt."""
    data = bytearray(source.read_bytes())
    repaired = False
    header = parse_header(bytes(data[:HEADER_BYTES]))
    page_size = header.page_size if header is not None else guess_page_size(bytes(data))
    if len(data) % page_size:
        data += bytes(page_size - len(data) % page_size)
    if header is not None and header.page_count is not None:
        # SQLite refuses a file shorter than its header says: the lost pages read as zeros.
        data += bytes(max(0, header.page_count * page_size - len(data)))
    if header is None:
        data[:HEADER_BYTES] = rebuilt_header(page_size, len(data) // page_size)
        repaired = True
    copy.write_bytes(bytes(data))
    wal = source.with_name(source.name + "-wal")
    if wal.exists() and not repaired:
        shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
    return repaired


# -- reading what can be read ------------------------------------------------------------


def table_names(connection: sqlite3.Connection) -> list[str]:
    """The damaged file's tables (SQLite's own and Alembic's left out)."""
    rows = connection.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    return [str(r[0]) for r in rows]


def column_names(connection: sqlite3.Connection, table: str) -> list[str]:
    """A table's columns, in order."""
    return [str(r[1]) for r in connection.execute(f'PRAGMA table_info("{table}")').fetchall()]


def stored_revision(connection: sqlite3.Connection) -> str | None:
    """The Alembic revision the damaged file was at, when it can still be read."""
    try:
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    except sqlite3.DatabaseError:
        return None
    return None if row is None else str(row[0])


@dataclass
class Scan:
    """What a tolerant scan of one table read."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    skipped: int = 0
    """Rowids jumped over because the pages holding them could not be read."""
    tail_lost: bool = False
    """The scan could not get past a damaged page and the end of the table is unknown."""
    keyed_loss: bool = False
    """A scan in key order (a table without rowids) met damaged pages: some rows were not
    read, and how many is unknown."""


def _fetch_from(connection: sqlite3.Connection, select: str, start: int) -> tuple[Any, ...] | None:
    """The first row with rowid >= ``start`` (raises where the pages are damaged)."""
    row = connection.execute(
        f"{select} WHERE rowid >= ? ORDER BY rowid LIMIT 1", (start,)
    ).fetchone()
    if row is not None and (not isinstance(row[0], int) or row[0] < start):
        raise sqlite3.DatabaseError("a damaged page answered with a row out of order")
    return None if row is None else tuple(row)


def _readable_from(connection: sqlite3.Connection, select: str, start: int) -> bool:
    try:
        _fetch_from(connection, select, start)
    except sqlite3.DatabaseError:
        return False
    return True


def scan_table(connection: sqlite3.Connection, table: str, columns: list[str]) -> Scan:
    """Every row of ``table`` that can be read, in rowid order, skipping damaged pages."""
    quoted = ", ".join(f'"{c}"' for c in columns)
    select = f'SELECT rowid, {quoted} FROM "{table}"'  # noqa: S608
    scan = Scan()
    last = -1  # rowids SQLite assigns start at 1; no table here stores others
    while True:
        try:
            for row in connection.execute(f"{select} WHERE rowid > ? ORDER BY rowid", (last,)):
                if not isinstance(row[0], int) or row[0] <= last:
                    # Damaged pages can yield a row out of order before the error.
                    raise sqlite3.DatabaseError("a damaged page yielded a row out of order")
                scan.rows.append(tuple(row))
                last = int(row[0])
            return scan
        except sqlite3.DatabaseError:
            pass
        # Find the next rowid from which reading works: double the step, then bisect.
        step, good = 1, None
        while last + step <= MAX_ROWID:
            if _readable_from(connection, select, last + step):
                good = last + step
                break
            step *= 2
        if good is None:
            scan.tail_lost = True
            return scan
        low = max(last + step // 2, last + 1)
        while low < good:
            middle = (low + good) // 2
            if _readable_from(connection, select, middle):
                good = middle
            else:
                low = middle + 1
        following = _fetch_from(connection, select, good)
        if following is None:
            scan.tail_lost = True
            return scan
        if int(following[0]) < good:
            # Damaged pages can answer a seek with a row before it: skip past the seek.
            scan.skipped += good - last
            last = good
            continue
        scan.skipped += int(following[0]) - last - 1
        scan.rows.append(following)
        last = int(following[0])


def has_rowids(connection: sqlite3.Connection, table: str) -> bool:
    """False for a ``WITHOUT ROWID`` table (SQLite refuses the column when compiling, before
    any page is read)."""
    try:
        connection.execute(f'SELECT rowid FROM "{table}" LIMIT 0')  # noqa: S608
    except sqlite3.OperationalError as exc:
        if "rowid" in str(exc):
            return False
        raise
    return True


def key_columns(connection: sqlite3.Connection, table: str) -> list[str]:
    """A table's primary key columns, in key order."""
    info = connection.execute(f'PRAGMA table_info("{table}")').fetchall()
    return [str(r[1]) for r in sorted((r for r in info if r[5]), key=lambda r: int(r[5]))]


def scan_by_key(
    connection: sqlite3.Connection, table: str, columns: list[str], known: set[str]
) -> Scan:
    """Every row of ``table`` (a table without rowids whose key starts with
    ``conversation_id``) that can be read, in key order.

    Past a damaged page the scan goes on with the next conversation it knows of (``known``:
    the conversation ids the other tables' rows hold), reading each one's rows until its own
    first damaged page, and then the conversations after the last one known. A
    conversation's rows beyond a damaged page are not looked for: its history is cut at its
    first lost message anyway. Each row is given a position in place of a rowid.
    """
    order = ", ".join(f'"{c}"' for c in key_columns(connection, table))
    quoted = ", ".join(f'"{c}"' for c in columns)
    select = f'SELECT "conversation_id", {quoted} FROM "{table}"'  # noqa: S608
    scan = Scan()
    last: list[str] = []

    def read(where: str, params: tuple[Any, ...]) -> None:
        try:
            for row in connection.execute(f"{select} {where} ORDER BY {order}", params):
                scan.rows.append((len(scan.rows) + 1, *row[1:]))
                last[:] = [str(row[0])]
        except sqlite3.DatabaseError:
            scan.keyed_loss = True

    read("", ())
    if not scan.keyed_loss:
        return scan
    for conversation_id in sorted(known):
        if not last or conversation_id > last[0]:
            read('WHERE "conversation_id" = ?', (conversation_id,))
            last[:] = [conversation_id]
    if last:
        read('WHERE "conversation_id" > ?', (last[0],))
    return scan
