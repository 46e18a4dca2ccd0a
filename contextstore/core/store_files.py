"""The files a SQLite store is made of: the database and the files beside it.

Every command that writes a file the user names (a backup, an export, a report) checks the
name against these first: written over, the database would be lost, and its write-ahead log
holds commits not yet folded into it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from contextstore.core.errors import InvalidInputError

WAL_SUFFIX: Final = "-wal"
"""SQLite's name for a database's write-ahead log: the file's name with this appended."""
WRITER_SUFFIX: Final = "-writer"
"""Appended to the database file's name to name the writer queue's lock file."""
SIDE_FILES: Final = (
    (WAL_SUFFIX, "write-ahead log"),
    ("-shm", "shared-memory index"),
    ("-journal", "rollback journal"),
    (WRITER_SUFFIX, "writer lock"),
)
"""The files beside a database, by the suffix of their name, with what each holds."""


def store_files(database: Path) -> list[tuple[Path, str]]:
    """The database file and the files beside it, each with what it is."""
    files = [(database, "database")]
    files += [(database.with_name(database.name + suffix), what) for suffix, what in SIDE_FILES]
    return files


def check_not_store_files(targets: Sequence[Path], database: Path | None) -> None:
    """Refuse to write any of ``targets`` when it is the store's database or a file beside
    it (``database`` None: the store is in memory or on a server, and has no files).

    Raises:
        InvalidInputError: a target is one of the store's files (nothing written).
    """
    if database is None:
        return
    for target in targets:
        for path, what in store_files(database):
            if _same_file(target, path):
                raise InvalidInputError(
                    f"{target} is the {what} of the store being read ({database}); writing "
                    "it would destroy the store. Name another file. Nothing was written."
                )


def _same_file(first: Path, second: Path) -> bool:
    try:
        if first.exists() and second.exists():
            return os.path.samefile(first, second)
        return first.resolve() == second.resolve()
    except OSError:  # a name too long, or a loop of links: the write reports it
        return False


def check_not_named_as_side_file(target: Path) -> None:
    """Refuse a new database file whose name ends as a file beside a database does
    (``x.db-wal``): SQLite takes it for part of the database named without the suffix, and
    the next open of that one reads it as its own log, or deletes it.

    Raises:
        InvalidInputError: ``target``'s name ends with a side file's suffix (nothing written).
    """
    for suffix, what in SIDE_FILES:
        if target.name.endswith(suffix) and len(target.name) > len(suffix):
            beside = target.with_name(target.name[: -len(suffix)])
            raise InvalidInputError(
                f"{target} is named as {beside}'s {what} would be: it would be taken for part "
                "of that database, and lost when that one is opened. Name the file without "
                f"the {suffix!r} ending. Nothing was written."
            )
