"""Online backup of a SQLite store through SQLite's backup API.

The copy is taken in one step of ``sqlite3.Connection.backup``: one read transaction on the
source, so the copy is the database as of one commit, while other connections go on writing
(in WAL mode a reader never blocks a writer). It is written beside its destination under a
temporary name, checked with ``PRAGMA quick_check``, synced, and only then put in place, so a
failed backup (a full disk) leaves no half-written file at the destination.

A backup killed before it ends (SIGKILL, a power cut) cannot remove its temporary file. It
holds an exclusive ``flock`` of that file while it runs, which the kernel releases when the
process dies, so the next backup to the same destination finds the files of its own naming
that no one holds, and removes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import sqlite3
import stat
import time
from pathlib import Path

from sqlalchemy import Engine

from contextstore.core.errors import CorruptDatabaseError, InvalidInputError, StorageFullError
from contextstore.core.health import BackupResult
from contextstore.core.os_errors import check_folder_exists, check_regular_targets, os_errors
from contextstore.core.store_files import check_not_named_as_side_file, check_not_store_files
from contextstore.storage.driver_errors import sqlite_code
from contextstore.storage.engine import check_utf8_name, make_engine, sqlite_file_target
from contextstore.storage.paths import expand_user

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
"""The files SQLite may make beside the temporary copy while it is written."""

PARTIAL_ATTEMPTS = 5
"""How many new temporary names a backup tries when another backup's clean-up removed the
one it just created (before it could lock it)."""


def destination_path(text: str) -> Path:
    """The path a backup destination names (``~`` expanded).

    A destination written with a trailing separator (``backups/``) names a directory, which
    must exist: without this check the separator would be lost and the copy written as a file
    named like the directory (or, with ``force``, over a file of that name).

    Raises:
        InvalidInputError: ``text`` ends with a separator and is not an existing directory.
    """
    path = expand_user(text)
    separators = (os.sep, os.altsep) if os.altsep else (os.sep,)
    if text.endswith(separators) and not path.is_dir():
        what = "is a file, not a directory" if path.exists() else "does not exist"
        raise InvalidInputError(
            f"the directory {text} {what}; create the directory first, or name the backup "
            "file without the trailing separator."
        )
    return path


def _stem(source: Path | None) -> str:
    return source.stem if source is not None else "contextstore"


def partial_name(dest_name: str) -> str:
    """A new temporary name for a backup to the file ``dest_name``, in the same directory."""
    return f".{dest_name}.{secrets.token_hex(4)}.partial"


def leftover_pattern(dest: Path, source: Path | None) -> re.Pattern[str]:
    """The names the temporary files of backups to ``dest`` have (:func:`partial_name`),
    side files included: of the file ``dest``, or, for a directory, of any file
    :func:`backup_destination` names there for the store at ``source``."""
    if dest.is_dir():
        name = re.escape(_stem(source)) + r"-[0-9]{8}-[0-9]{6}(?:-[0-9]+)?\.db"
    else:
        name = re.escape(dest.name)
    sides = "|".join(re.escape(s) for s in SIDE_SUFFIXES)
    return re.compile(rf"\.{name}\.[0-9a-f]{{8}}\.partial(?:{sides})?")


def backup_destination(dest: Path, source: Path | None) -> Path:
    """The file a backup to ``dest`` writes: ``dest`` itself, or inside a directory a new
    timestamped name (``<source stem>-YYYYmmdd-HHMMSS.db``, ``-2``, ``-3``... when taken)."""
    if not dest.is_dir():
        return dest
    base = f"{_stem(source)}-{time.strftime('%Y%m%d-%H%M%S')}"
    candidate = dest / f"{base}.db"
    number = 2
    while candidate.exists():
        candidate = dest / f"{base}-{number}.db"
        number += 1
    return candidate


def backup_to(engine: Engine, source: Path | None, dest: Path, *, force: bool) -> BackupResult:
    """:func:`backup_sqlite` of the store at ``source`` (None: in memory) to ``dest``, a
    file or a directory (see :func:`backup_destination`).

    Raises:
        InvalidInputError: ``dest`` is the store's database or a file beside it (its
            write-ahead log...), is named as such a file of another database
            (``x.db-wal``), is not UTF-8 text (``ContextStore.open`` refuses such a name),
            or as :func:`backup_sqlite`.
    """
    target = backup_destination(dest, source)
    check_not_store_files([target], source)
    check_not_named_as_side_file(target)
    check_utf8_name(str(target), "the backup's file")  # a copy no store could open
    return backup_sqlite(engine, target, force=force, leftovers=leftover_pattern(dest, source))


def backup_file(source: Path, dest: Path, *, force: bool) -> BackupResult:
    """:func:`backup_to` of the SQLite file ``source``, opened read-only without looking at
    its schema: a store that needs ``contextstore migrate`` can be copied before it is
    upgraded.

    Raises:
        InvalidInputError: there is no file at ``source``, or as :func:`backup_to`.
        CorruptDatabaseError: ``source`` is not a whole SQLite database.
    """
    target = sqlite_file_target(source)
    engine = make_engine(target, read_only=True, create=False)
    try:
        return backup_to(engine, source, dest, force=force)
    finally:
        engine.dispose()


def backup_sqlite(
    engine: Engine, dest: Path, *, force: bool, leftovers: re.Pattern[str] | None = None
) -> BackupResult:
    """Copy the database behind ``engine`` to the new file ``dest`` (``force``: replace an
    existing file). Returns what was written.

    First removes the temporary files of interrupted backups beside ``dest`` whose names
    ``leftovers`` matches (by default those of backups to ``dest``) and that no running
    backup holds (see :func:`remove_leftovers`).

    Raises:
        InvalidInputError: ``dest`` exists (without ``force``) or is not a regular file,
            or its directory does not exist.
        StorageFullError: the copy did not fit; nothing is left at ``dest``.
        ReadOnlyLocationError: its directory cannot be written.
        CorruptDatabaseError: the copy fails SQLite's check (the source is damaged).
    """
    check_regular_targets([dest])  # first: --force would not help with /dev/null
    if dest.exists() and not force:
        raise InvalidInputError(
            f"{dest} already exists; name a new file or a directory, or pass force=True "
            "(--force) to replace it."
        )
    check_folder_exists(dest, "the backup")
    pattern = leftovers if leftovers is not None else leftover_pattern(dest, None)
    with os_errors("write the backup", dest):
        removed = remove_leftovers(dest.parent, pattern)
        result = _backup_beside(engine, dest, force=force)
    return dataclasses.replace(result, removed_leftovers=[str(path) for path in removed])


def remove_leftovers(directory: Path, pattern: re.Pattern[str]) -> list[Path]:
    """Remove the regular files in ``directory`` whose whole name ``pattern`` matches that
    are left over from an interrupted backup: a temporary copy whose ``flock`` no process
    holds (a running backup holds its own), and its side files; a side file is removed only
    once its copy is gone. Returns what was removed, copies first. Without ``flock``
    (Windows) nothing is removed: a running backup's file cannot be told from a dead one's.
    """
    if fcntl is None:  # pragma: no cover - Windows
        return []
    try:
        names = sorted(name for name in os.listdir(directory) if pattern.fullmatch(name))
    except OSError:
        return []  # a directory that may be written but not listed: nothing is looked at
    copies = [n for n in names if n.endswith(".partial")]
    removed = [directory / n for n in copies if _remove_if_unheld(directory / n)]
    for name in names:
        if name in copies or (directory / name.rsplit("-", 1)[0]).exists():
            continue  # a side file of a copy still there: its backup is running
        path = directory / name
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG(os.lstat(path).st_mode):
                path.unlink()
                removed.append(path)
    return removed


def _remove_if_unheld(path: Path) -> bool:
    """Remove the temporary copy at ``path`` if it is a regular file no process holds a
    ``flock`` of; True when it was removed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # gone meanwhile, or a symbolic link: not a copy a backup made
    try:
        held = os.fstat(fd)
        if not stat.S_ISREG(held.st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a running backup's
        now = os.lstat(path)
        if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
            return False
        path.unlink()
        for suffix in SIDE_SUFFIXES:
            with contextlib.suppress(FileNotFoundError):
                path.with_name(path.name + suffix).unlink()
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)


def _locked_partial(dest: Path) -> tuple[Path, int | None]:
    """A new, empty temporary file beside ``dest`` and a descriptor holding its ``flock``,
    which tells another backup's :func:`remove_leftovers` that this one is running (None
    without ``flock``: a file Windows holds open could not be put in place or removed)."""
    for _ in range(PARTIAL_ATTEMPTS):
        temporary = dest.with_name(partial_name(dest.name))
        flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(temporary, flags, 0o600)
        if fcntl is None:
            os.close(fd)
            return temporary, None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            created = os.fstat(fd)
            now = os.stat(temporary)
            if (now.st_dev, now.st_ino) == (created.st_dev, created.st_ino):
                return temporary, fd
        except (BlockingIOError, FileNotFoundError):
            pass
        # another backup's clean-up took the new file for a leftover and removed it
        os.close(fd)
    raise InvalidInputError(
        f"the temporary files of this backup beside {dest} were removed as soon as they "
        "were made; is another program cleaning that directory? Back up elsewhere."
    )


def _backup_beside(engine: Engine, dest: Path, *, force: bool) -> BackupResult:
    """The copy, made under a temporary name beside ``dest`` and put in place."""
    temporary, lock = _locked_partial(dest)
    try:
        pages, conversations = _copy(engine, temporary)
        with temporary.open("rb+") as handle:
            os.fsync(handle.fileno())
        if force:
            os.replace(temporary, dest)
        else:
            try:
                os.link(temporary, dest)
            except FileExistsError as exc:
                raise InvalidInputError(
                    f"{dest} was created by someone else during the backup; name a new file."
                ) from exc
        _sync_directory(dest.parent)
    finally:
        for leftover in (
            temporary,
            *(temporary.with_name(temporary.name + s) for s in SIDE_SUFFIXES),
        ):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        if lock is not None:
            os.close(lock)
    return BackupResult(
        path=str(dest), bytes=dest.stat().st_size, pages=pages, conversations=conversations
    )


def _copy(engine: Engine, temporary: Path) -> tuple[int, int]:
    raw = engine.raw_connection()
    try:
        source = raw.driver_connection
        assert isinstance(source, sqlite3.Connection)
        target = sqlite3.connect(temporary)
        try:
            try:
                source.backup(target)
            except sqlite3.OperationalError as exc:
                if sqlite_code(exc).startswith("SQLITE_FULL"):
                    raise StorageFullError(
                        f"the backup did not fit on the disk ({exc}); nothing was written to "
                        "the destination. Free space and retry."
                    ) from exc
                raise
            target.execute("PRAGMA journal_mode = DELETE").fetchall()
            try:
                checked = target.execute("PRAGMA quick_check").fetchall()
                if checked == [("ok",)]:
                    pages = int(target.execute("PRAGMA page_count").fetchone()[0])
                    conversations = int(
                        target.execute("SELECT COUNT(*) FROM conversations").fetchone()[0]
                    )
            except sqlite3.DatabaseError as exc:
                # damage SQLite stops at, rather than lists (a page of garbage)
                checked = [(str(exc),)]
            if checked != [("ok",)]:
                raise CorruptDatabaseError(
                    f"the backup copy fails SQLite's check ({checked[0][0]}), so the store "
                    "itself is damaged; nothing was written to the destination. Run "
                    "'contextstore check', then 'contextstore recover SRC DEST'."
                )
        finally:
            target.close()
    finally:
        raw.close()
    return pages, conversations


def _sync_directory(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
