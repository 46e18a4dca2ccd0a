"""The ``ContextStore`` facade: every public operation, each in one transaction.

The store owns an engine (SQLite by default, PostgreSQL by URL), keeps the schema at the
current migration, and turns caller calls into rows. Reads compute the view from rows;
writes stamp every row with the conversation's clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any

from sqlalchemy.exc import ArgumentError

from contextstore.core.errors import ContextStoreError, InvalidInputError
from contextstore.core.health import RecoveryReport
from contextstore.core.store_files import store_files
from contextstore.core.tokens import TokenCounter
from contextstore.core.validate import (
    MAX_MESSAGE_BYTES,
    check_flags,
    check_int,
    check_path,
    shown,
)
from contextstore.facade.audit import AuditMixin
from contextstore.facade.conversations import ConversationsMixin
from contextstore.facade.history import HistoryMixin
from contextstore.facade.interop import InteropMixin
from contextstore.facade.lineage import LineageMixin
from contextstore.facade.maintenance import MaintenanceMixin
from contextstore.facade.processors import ProcessorsMixin
from contextstore.facade.requests import RequestsMixin
from contextstore.facade.timeline import TimelineMixin
from contextstore.processors.pipeline import Pipeline
from contextstore.storage.database import Database
from contextstore.storage.driver_errors import classified_errors
from contextstore.storage.engine import (
    Durability,
    location_text,
    make_engine,
    refuse_database_url,
    resolve_target,
)
from contextstore.storage.migrate import ensure_schema
from contextstore.storage.paths import default_database_path, default_location, expand_user
from contextstore.storage.recovery import salvage
from contextstore.storage.writer_queue import writer_queue


def _check_options(
    *,
    auto_migrate: Any,
    read_only: Any,
    mask_secrets_on_write: Any,
    max_message_bytes: Any,
    token_counter: Any,
    pipeline: Any,
) -> None:
    """Refuse :meth:`ContextStore.open` options of the wrong type, before anything is opened
    (they were taken, and failed with a ``TypeError`` or ``AttributeError`` at the first
    append or render)."""
    check_flags(
        auto_migrate=auto_migrate, read_only=read_only, mask_secrets_on_write=mask_secrets_on_write
    )
    check_int("max_message_bytes", max_message_bytes, minimum=1, optional=False)
    if token_counter is not None and (
        isinstance(token_counter, str | bytes)  # str.count is no token counter
        or not callable(getattr(token_counter, "count", None))
    ):
        raise InvalidInputError(
            f"token_counter must have a count(text) -> int method, got {shown(token_counter)}; "
            "pass None for tiktoken's cl100k_base."
        )
    if pipeline is not None and not isinstance(pipeline, Pipeline):
        raise InvalidInputError(
            f"pipeline must be a Pipeline (or None for the default), got {shown(pipeline)}; "
            "wrap the processors: Pipeline([...])."
        )


def _missing_store_files(database: Path | None) -> list[Path]:
    """The files of the SQLite store at ``database`` (it and those beside it) and the
    folders above it that are not there yet, deepest first: what an open that is refused
    removes again."""
    if database is None:
        return []
    missing = [path for path, _ in store_files(database) if not os.path.lexists(path)]
    folder = database.parent
    while not os.path.lexists(folder) and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_made(paths: list[Path]) -> None:
    """Remove what a refused open made of ``paths`` (files, then empty folders)."""
    for path in paths:
        with contextlib.suppress(OSError):
            if path.is_dir():
                path.rmdir()
            else:
                path.unlink(missing_ok=True)


def _refused_at_connect(exc: BaseException) -> bool:
    """True for an error SQLAlchemy or the driver raises on the first connection for an
    ``engine_kwargs`` value it only checks then (an ``isolation_level`` the database does
    not have, a ``creator`` that is not callable): Python's own errors, where the store's
    would be ContextStoreError."""
    return isinstance(
        exc, (TypeError, ValueError, AttributeError, KeyError, ArgumentError)
    ) and not isinstance(exc, ContextStoreError)


class ContextStore(
    MaintenanceMixin,
    AuditMixin,
    ConversationsMixin,
    HistoryMixin,
    RequestsMixin,
    TimelineMixin,
    InteropMixin,
    LineageMixin,
    ProcessorsMixin,
):
    """A durable conversation store. Open it with :meth:`open`; close it or use ``with``.

    A store is safe to share between threads; several processes may open the same SQLite
    file (writers serialise on the database lock with bounded retries).
    """

    @classmethod
    def open(
        cls,
        location: str | os.PathLike[str] | None = None,
        *,
        auto_migrate: bool = True,
        durability: Durability = "full",
        read_only: bool = False,
        token_counter: TokenCounter | None = None,
        mask_secrets_on_write: bool = False,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        engine_kwargs: dict[str, Any] | None = None,
        pipeline: Pipeline | None = None,
    ) -> ContextStore:
        """Open (creating if needed) a store.

        Args:
            location: a file path, a SQLAlchemy URL (``sqlite:///...``,
                ``postgresql+psycopg://...``), ``":memory:"``, or None for
                ``$CONTEXTSTORE_DB`` or the per-user default location.
            auto_migrate: create a missing SQLite file and upgrade an empty or older
                database to the current schema; when False, a missing file raises
                :class:`NotFoundError` (nothing is created) and a stale database
                :class:`SchemaOutdatedError`.
            durability: ``"full"`` (default; a write that returned survives power loss:
                the store syncs the WAL after each commit, outside the write lock) or
                ``"normal"`` (SQLite ``synchronous=NORMAL``, no sync per write; the last
                transactions may be lost on power loss, never on a process crash).
            read_only: open without the ability to write (SQLite files open in read-only
                mode, ``immutable`` on a read-only medium; every write raises
                :class:`ReadOnlyError`).

            token_counter: counts tokens at append; tiktoken ``cl100k_base`` by default.
            mask_secrets_on_write: mask secrets in message content before it is stored.
            max_message_bytes: largest accepted message (JSON size).
            pipeline: processors applied to every render and prepare (default: masking of
                high-confidence secrets; pass ``Pipeline([])`` for none).
            engine_kwargs: extra arguments for SQLAlchemy's ``create_engine``.

        Raises:
            InvalidInputError: an option has the wrong type (a flag that is not True or
                False, ``max_message_bytes`` not a positive integer, a ``token_counter``
                without ``count``, a ``pipeline`` that is not a ``Pipeline``); nothing is
                opened or created.
            CorruptDatabaseError: the file is not a SQLite database, is truncated, or is an
                existing zero-length file (a missing file is created).
            NotFoundError: ``auto_migrate=False`` and there is no SQLite file at ``location``.
            ReadOnlyLocationError: opened for writing where nothing can be written.
            StorageFullError: a new store's schema did not fit on the disk.
        """
        _check_options(
            auto_migrate=auto_migrate,
            read_only=read_only,
            mask_secrets_on_write=mask_secrets_on_write,
            max_message_bytes=max_message_bytes,
            token_counter=token_counter,
            pipeline=pipeline,
        )
        text_location = default_location() if location is None else location_text(location)
        target = resolve_target(text_location, default_database_path())
        missing = _missing_store_files(target.sqlite_path)
        with classified_errors():
            engine = make_engine(
                target,
                durability=durability,
                read_only=read_only,
                create=auto_migrate,
                engine_kwargs=engine_kwargs,
            )
        database = Database(
            engine,
            is_sqlite=target.is_sqlite,
            read_only=read_only,
            serialize_reads=target.in_memory,
            writer_queue=writer_queue(target, read_only=read_only),
            sync_after_turn=(
                target.sqlite_path if durability == "full" and not read_only else None
            ),
        )
        try:
            with classified_errors(engine):
                found = ensure_schema(
                    engine,
                    auto_migrate=auto_migrate and not read_only,
                    is_sqlite=target.is_sqlite,
                )
        except BaseException as exc:
            engine.dispose()
            if engine_kwargs is not None and _refused_at_connect(exc):
                _remove_made(missing)
                raise InvalidInputError(
                    f"SQLAlchemy refused the engine_kwargs given when it connected: "
                    f"{type(exc).__name__}: {exc}; pass only arguments create_engine takes "
                    "for this database. Nothing was created."
                ) from exc
            raise
        store = cls(
            database,
            location=text_location,
            token_counter=token_counter,
            mask_secrets_on_write=mask_secrets_on_write,
            max_message_bytes=max_message_bytes,
            pipeline=pipeline,
        )
        store.revision_found = found
        return store

    @classmethod
    def recover(
        cls, source: str | os.PathLike[str], destination: str | os.PathLike[str]
    ) -> RecoveryReport:
        """Salvage what a damaged SQLite store still holds into a new store.

        ``source`` is never written (a copy is read). Each table is read in rowid order,
        skipping pages that cannot be read; a header that was overwritten is rebuilt. Each
        conversation keeps its history up to its first lost message (later rows are
        dropped, as a rollback would, so what remains is a history that existed); rows whose
        dependencies were lost are dropped, a conversation whose own row was lost is rebuilt
        from its rows. The new store is at the current schema and passes :meth:`check`
        (a problem it still finds is listed in the report's ``notes``).

        Returns what was recovered and lost, per table and per conversation.

        Raises:
            NotFoundError: there is nothing at ``source``.
            InvalidInputError: ``source`` is not a file, or ``destination`` already exists.
            ReadOnlyLocationError: ``destination``'s directory cannot be written.
            CorruptDatabaseError: nothing can be read (the file's table list is destroyed).
        """
        source_path = check_path("source", source)
        destination_path = check_path("destination", destination)
        refuse_database_url("source", source_path, "recover")
        refuse_database_url("destination", destination_path, "recover")
        report = salvage(expand_user(source_path), expand_user(destination_path))
        with cls.open(report.destination, auto_migrate=False) as recovered:
            found = recovered.check(raise_on_problems=False)
        if found.ok:
            return report
        return dataclasses.replace(
            report,
            notes=(*report.notes, *(f"check: {p.check}: {p.detail}" for p in found.problems)),
        )

    @property
    def path(self) -> Path | None:
        """The SQLite file, or None for in-memory and server databases."""
        return resolve_target(self.location, default_database_path()).sqlite_path

    def close(self) -> None:
        """Release the database connections. The store cannot be used afterwards."""
        if not self._closed:
            self._db.shut()
            self._closed = True

    def __enter__(self) -> ContextStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
