"""A SQLite file as a file: creating a new one atomically, and telling a database from
damage (and a place a store cannot be written) before SQLite is asked to open it.

The checks here read the 100-byte header and the file's size only (microseconds, whatever
the file's size); damage inside the file is found by ``PRAGMA quick_check`` (``contextstore
check``) or when a read reaches it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path

from contextstore.core.errors import (
    CorruptDatabaseError,
    DatabaseUnavailableError,
    InvalidInputError,
    NotFoundError,
    ReadOnlyLocationError,
    StorageFullError,
)
from contextstore.core.os_errors import os_error

MAGIC = b"SQLite format 3\x00"
HEADER_BYTES = 100

RECOVER_HINT = (
    "salvage what is still readable into a new file with 'contextstore recover SRC DEST' "
    "(ContextStore.recover), or restore a backup"
)
"""What to do about a damaged file, in every message that reports one."""


@dataclass(frozen=True)
class Header:
    """The fields of a SQLite header that tell whether the file is whole."""

    page_size: int
    page_count: int | None
    """Pages the header says the file has (None when the header's count is stale)."""


def parse_header(data: bytes) -> Header | None:
    """The header's page size and count, or None when ``data`` is not a SQLite header."""
    if len(data) < HEADER_BYTES or not data.startswith(MAGIC):
        return None
    raw = int.from_bytes(data[16:18], "big")
    page_size = 65_536 if raw == 1 else raw
    if page_size < 512 or page_size > 65_536 or page_size & (page_size - 1):
        return None
    change_counter = int.from_bytes(data[24:28], "big")
    valid_for = int.from_bytes(data[92:96], "big")
    count = int.from_bytes(data[28:32], "big")
    return Header(page_size, count if count and valid_for == change_counter else None)


def check_before_open(path: Path, *, read_only: bool, create: bool = True) -> None:
    """Refuse to open ``path`` when SQLite would fail on it later, or succeed wrongly.

    A read-only store needs an existing file; a writable one needs a location it can write
    (the file and its directory), and an existing file unless ``create`` (an opening that
    will not build the schema would leave an empty file behind). Either way the file, if
    present, must look whole (:func:`inspect_database_file`).

    Raises:
        InvalidInputError: ``path`` is a directory, or a path the system refuses to look up
            (:func:`unusable_path`).
        NotFoundError: there is no file at ``path``, and ``create`` is False or the store
            is read-only.
        DatabaseUnavailableError: this user may not read the file (:func:`unreadable`).
        CorruptDatabaseError: the file is not a whole SQLite database (an existing
            zero-length file included).
        InvalidInputError: also when the file is another application's SQLite database
            (tables, and no contextstore schema).
        ReadOnlyLocationError: the store was opened for writing where nothing can be written.
    """
    try:
        _check_before_open(path, read_only=read_only, create=create)
    except OSError as exc:
        raise unusable_path(path, exc) from exc


def unusable_path(path: Path, exc: OSError) -> InvalidInputError:
    """The error for a database path the system refuses to look up (a name too long, a
    file where a folder should be, a loop of symbolic links, a folder that cannot be
    searched): a wrong path, not damage."""
    return InvalidInputError(
        f"cannot use {path} as a database file: {exc.strerror or exc}; name another path."
    )


def unreadable(path: Path) -> DatabaseUnavailableError:
    """The error for a database file this user may not read (another user's file, or a
    mode without read permission): neither damage nor a read-only location."""
    return DatabaseUnavailableError(
        f"cannot read {path}: permission denied (the file belongs to another user or its "
        "mode lets nobody read it); run as a user who may read it, or give this user read "
        "permission (chmod, chown)."
    )


def _check_before_open(path: Path, *, read_only: bool, create: bool) -> None:
    if path.is_dir():
        raise InvalidInputError(
            f"{path} is a directory; name a database file, for example {path / 'contextstore.db'}."
        )
    if path.exists() and not os.access(path, os.R_OK):
        raise unreadable(path)
    if read_only:
        if not path.exists():
            raise NotFoundError(
                f"there is no database at {path}; check the path (a store opened read-only "
                "is never created)."
            )
    elif not create and not path.exists():
        raise NotFoundError(
            f"there is no database at {path}; check the path, or open it with "
            "auto_migrate=True to create a new store there."
        )
    elif not writable_location(path):
        situation = (
            f"{path} is in a location that cannot be written (a read-only file, directory or "
            "medium)"
        )
        raise ReadOnlyLocationError(
            f"{situation}; open it with read_only=True (--read-only on the command line) to "
            "read it, or copy it somewhere writable.",
            situation=situation,
        )
    inspect_database_file(path)
    _refuse_other_application(path)


def _refuse_other_application(path: Path) -> None:
    """Refuse a SQLite database that holds tables but no contextstore schema (no
    ``alembic_version``): another application's file, named by mistake. Opening it for
    writing would put contextstore's tables among that application's (and switch the file
    to WAL mode); opening it to read would call it an empty store. Read before anything
    opens the file for writing, so nothing in it changes.

    Raises:
        InvalidInputError: naming a few of its tables.
    """
    others = _other_tables(path)
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise InvalidInputError(
            f"{path} holds {len(others)} tables of another application ({shown}) and no "
            "contextstore schema; contextstore keeps its tables only in a database of its own "
            "(or a new, empty one), so nothing was changed: name a contextstore database or a "
            "new file."
        )


def _other_tables(path: Path) -> list[str]:
    """The tables of the database at ``path`` when none of them is contextstore's, SQLite's
    own (``sqlite_*``) aside; empty for a contextstore database (a damaged one included), a
    new or empty file, and one SQLite cannot read here (its own open then says why)."""
    if not path.is_file() or path.stat().st_size == 0:
        return []
    try:
        with contextlib.closing(sqlite3.connect(read_only_uri(path), uri=True)) as connection:
            names = [row[0] for row in connection.execute(_TABLE_NAMES)]
    except sqlite3.Error:
        return []
    if {"alembic_version", "conversations", "messages"} & set(names):
        return []  # a contextstore database, even one whose revision table was lost
    return sorted(name for name in names if not name.startswith("sqlite_"))


_TABLE_NAMES = "SELECT name FROM sqlite_master WHERE type = 'table'"
"""The names of a SQLite database's tables."""


def inspect_database_file(path: Path) -> None:
    """Refuse a file that is plainly not a whole SQLite database.

    A missing file is fine (it will be created) unless its write-ahead log or rollback
    journal is still there. Refused: an existing zero-length file (SQLite
    would silently make it a new, empty store, hiding that a database was lost), a file
    without SQLite's header (a text file, an overwritten header), and a truncated file
    (smaller than its header says, or not a whole number of pages), unless a write-ahead
    log or rollback journal beside it may still hold the missing pages. A pipe, a device or
    a socket is a wrong path, not damage.

    Raises:
        CorruptDatabaseError: naming what is wrong and what to do.
        InvalidInputError: ``path`` is not a regular file (nor a directory, which SQLite's
            own refusal names).
    """
    try:
        found = path.stat()
    except FileNotFoundError:
        _refuse_orphaned_log(path)
        return
    except OSError as exc:
        if exc.errno == errno.EIO:
            raise CorruptDatabaseError(f"cannot read {path}: {exc.strerror}.") from exc
        raise unusable_path(path, exc) from exc
    if stat.S_ISDIR(found.st_mode):
        return  # not damage but a wrong path: SQLite's refusal says so
    if not stat.S_ISREG(found.st_mode):
        # A pipe or a device (/dev/null) reads as zero bytes: it was called an empty
        # database file that lost its contents, to be restored from a backup.
        raise InvalidInputError(
            f"{path} is not a regular file (a device, a pipe or a socket); name a database file."
        )
    size = found.st_size
    if size == 0:
        raise CorruptDatabaseError(
            f"{path} is an empty (zero-length) file, not a contextstore database: a database "
            "that lost its contents, or a file made by something else. If it should hold a "
            "store, restore a backup; to start a new store there, delete the empty file "
            "first (contextstore creates new files itself)."
        )
    try:
        with path.open("rb") as handle:
            data = handle.read(HEADER_BYTES)
    except PermissionError:
        raise unreadable(path) from None
    except OSError as exc:
        raise CorruptDatabaseError(f"cannot read {path}: {exc.strerror}.") from exc
    header = parse_header(data)
    if header is None:
        raise CorruptDatabaseError(
            f"{path} is not a SQLite database (its header is missing or overwritten; "
            f"{size} bytes); {RECOVER_HINT}."
        )
    if _wal_may_hold_pages(path):
        return
    expected = None if header.page_count is None else header.page_count * header.page_size
    if size % header.page_size or (expected is not None and size < expected):
        raise CorruptDatabaseError(
            f"{path} is truncated: {size} bytes where its header says "
            f"{expected if expected is not None else 'whole pages of ' + str(header.page_size)}"
            f" bytes; {RECOVER_HINT}."
        )


def _refuse_orphaned_log(path: Path) -> None:
    """Refuse a missing file whose write-ahead log or rollback journal is still there.

    SQLite would read such a log into the new, empty file it creates: the pages of another
    database, so the new store is damaged from its first write.

    Raises:
        CorruptDatabaseError: naming the log and what to do.
    """
    for suffix, kind in (("-wal", "write-ahead log"), ("-journal", "rollback journal")):
        log = path.with_name(path.name + suffix)
        try:
            size = log.stat().st_size
        except OSError:
            continue
        if size > 0:
            raise CorruptDatabaseError(
                f"there is no database at {path}, but its {kind} {log} is there "
                f"({size} bytes): the rest of a database whose file was moved or deleted. "
                "Put the database file back beside it; to start a new store there instead, "
                f"move {log} (and any {path.name}-shm) away first."
            )


def _wal_may_hold_pages(path: Path) -> bool:
    """A write-ahead log (or a hot rollback journal) beside the file that SQLite will use to
    bring it whole: its size is then no sign of damage."""
    for suffix in ("-wal", "-journal"):
        try:
            if path.with_name(path.name + suffix).stat().st_size > 0:
                return True
        except OSError:
            continue
    return False


def writable_location(path: Path) -> bool:
    """Whether a store at ``path`` could be written: the file (if it exists) and its
    directory (SQLite writes its write-ahead log and shared-memory files beside it)."""
    directory = _existing_ancestor(path.parent)
    if not os.access(directory, os.W_OK):
        return False
    return not path.exists() or os.access(path, os.W_OK)


def _existing_ancestor(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def read_only_uri(path: Path) -> str:
    """The SQLite URI a read-only store opens ``path`` with.

    ``mode=ro`` normally: the store sees other processes' commits. Where the directory
    cannot be written and no shared-memory file exists (a read-only medium, a directory
    without write permission), SQLite cannot open a WAL database that way, so the file is
    opened ``immutable=1``: nobody can be writing it there.
    """
    # SQLite decodes '%xx' in a URI's path and ends the path at '?' or '#'.
    quoted = str(path).replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    shm = path.with_name(path.name + "-shm")
    if not os.access(path.parent, os.W_OK) and not shm.exists():
        return f"file:{quoted}?mode=ro&immutable=1"
    return f"file:{quoted}?mode=ro"


def _first_page_refused(path: Path, reason: str) -> StorageFullError:
    """The error for a new database whose first page the disk would not take."""
    return StorageFullError(
        f"cannot create a database at {path}: SQLite could not write its first page "
        f"({reason}); nothing was created. Free space (or lift the file size limit, "
        "ulimit -f) and retry."
    )


def create_database_file(path: Path, page_size: int) -> None:
    """Create a new SQLite database at ``path`` if nothing is there, atomically.

    The file is made beside ``path`` (owner-only permissions, in a 0700 directory when the
    directory is new), given its page size and WAL mode, and linked into place: ``path``
    never exists as a zero-length file, so a zero-length file found there is damage, not a
    store being born. When several processes create the same database at once, the first
    link wins and the others use its file.

    Raises:
        ReadOnlyLocationError: the directory cannot be written.
        StorageFullError: the disk (or the process's file size limit) would not take the
            file's first page; nothing is left behind.
    """
    if path.exists():
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError as exc:
        if isinstance(exc, (PermissionError,)) or exc.errno == 30:  # EROFS
            situation = f"cannot create a database at {path}: {exc.strerror}"
            raise ReadOnlyLocationError(
                f"{situation}; pick a writable location (or open an existing store there "
                "with read_only=True, --read-only on the command line).",
                situation=situation,
            ) from exc
        raise os_error(exc, f"create a database at {path}") from exc
    try:
        try:
            connection = sqlite3.connect(temporary)
            try:
                connection.execute(f"PRAGMA page_size = {int(page_size)}")
                # The change is made, and fails on a full disk, when its row is read:
                # unread, a file of no bytes was linked into place (then refused as damage).
                (mode,) = connection.execute("PRAGMA journal_mode = WAL").fetchone()
            finally:
                connection.close()
        except sqlite3.Error as exc:
            raise _first_page_refused(path, str(exc)) from exc
        if mode != "wal" or temporary.stat().st_size == 0:
            raise _first_page_refused(path, f"journal mode {mode}")
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another process created it first: use theirs
        except OSError:
            # No hard links here (some network and FAT file systems): create in place.
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    finally:
        for leftover in (
            temporary,
            *(temporary.with_name(temporary.name + s) for s in ("-wal", "-shm")),
        ):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
