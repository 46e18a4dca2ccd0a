"""Keeping a store healthy: checking it for damage, and backing it up."""

from __future__ import annotations

import os

from contextstore.core.errors import (
    CorruptDatabaseError,
    IntegrityViolationError,
    InvalidInputError,
    PayloadMismatchError,
)
from contextstore.core.health import BackupResult, CheckProblem, CheckReport
from contextstore.core.validate import check_id, check_path
from contextstore.core.view import ensure_tool_results_follow_tool_use
from contextstore.facade.history import HistoryMixin
from contextstore.facade.requests import RequestsMixin
from contextstore.storage import backup as backup_files
from contextstore.storage import health
from contextstore.storage.engine import refuse_database_url, resolve_target
from contextstore.storage.paths import default_database_path

MAX_REPORTED_PROBLEMS = 20
"""Problems named in the message of the error :meth:`MaintenanceMixin.check` raises."""


class MaintenanceMixin(HistoryMixin, RequestsMixin):
    """Checks and backups."""

    def check(
        self,
        conversation_id: str | None = None,
        *,
        full: bool = False,
        raise_on_problems: bool = True,
    ) -> CheckReport:
        """Look for damage: the engine's page check, then the store's invariants.

        On SQLite, ``PRAGMA quick_check`` (``full``: ``PRAGMA integrity_check``, which also
        compares every index with its table; slower) and, for all conversations,
        ``PRAGMA foreign_key_check``; on PostgreSQL there is no page check to run (the
        server checksums pages itself, when initialised with ``--data-checksums``), so the
        invariants run alone. The invariants,
        for one conversation or all: ``message_count`` matches the rows, indices 0..n-1 with
        strictly increasing ``ts``, no row after the clock, blocks belong to messages and are
        numbered without gaps, updates address existing blocks, ranges never
        shrink, requests' options exist, archived rows belong to their rollbacks, token
        counts and costs are not negative, JSON columns hold JSON (SQLite), and every
        conversation renders with every tool call paired; with ``full``, every prepared
        request's payload is also rebuilt from the rows and compared with the hash stored
        when it was sent (one render per request: the slow part of a full check). The page
        check covers the whole file even for one conversation.

        Returns the report. With ``raise_on_problems`` (the default), a report with problems
        is raised instead, as :class:`CorruptDatabaseError` when pages are damaged, else
        :class:`IntegrityViolationError`, naming the first problems.

        Raises:
            ConversationNotFoundError: ``conversation_id`` names no conversation.
            CorruptDatabaseError: damaged pages (with ``raise_on_problems``).
            IntegrityViolationError: a broken invariant (with ``raise_on_problems``).
        """
        if conversation_id is not None:
            check_id(conversation_id)
        if not isinstance(full, bool) or not isinstance(raise_on_problems, bool):
            raise InvalidInputError("full and raise_on_problems must be True or False.")
        is_sqlite = self._db.is_sqlite
        problems: list[CheckProblem] = []
        with self._db.read() as connection:
            if conversation_id is not None:
                ids = [self._conversation(connection, conversation_id).id]
            else:
                ids, unreadable = health.conversation_ids(connection)
                problems += unreadable
            if is_sqlite:
                integrity = "integrity_check" if full else "quick_check"
                problems += health.page_problems(connection, full=full)
                if conversation_id is None:
                    problems += health.foreign_key_problems(connection)
            else:
                integrity = "skipped"
            problems += health.invariant_problems(connection, conversation_id, is_sqlite=is_sqlite)
        for cid in ids:
            problems += self._render_problems(cid)
            if full:
                problems += self._payload_problems(cid)
        report = CheckReport(
            backend="sqlite" if is_sqlite else "postgresql",
            integrity=integrity,
            conversations_checked=len(ids),
            checks=(
                *(("integrity",) if is_sqlite else ()),
                *(("foreign_keys",) if is_sqlite and conversation_id is None else ()),
                *health.invariant_names(is_sqlite=is_sqlite),
                "render",
                *(("payloads",) if full else ()),
            ),
            problems=tuple(problems),
            conversation_id=conversation_id,
        )
        if raise_on_problems and not report.ok:
            raise _problems_error(report)
        return report

    def _render_problems(self, conversation_id: str) -> list[CheckProblem]:
        try:
            view = self.render(conversation_id)
        except CorruptDatabaseError:
            return [CheckProblem("render", "cannot be read (damaged pages)", conversation_id)]
        except IntegrityViolationError as exc:
            return [CheckProblem("render", str(exc), conversation_id)]
        if ensure_tool_results_follow_tool_use(view) != view:
            return [CheckProblem("render", "renders with an unpaired tool call", conversation_id)]
        return []

    def _payload_problems(self, conversation_id: str) -> list[CheckProblem]:
        """Each prepared request of the conversation whose payload, rebuilt from the rows,
        no longer matches the hash stored when it was sent."""
        problems = []
        for record in self.requests(conversation_id):
            if record.payload_sha256 is None:
                continue  # recorded usage only: nothing was prepared to compare
            try:
                self.request_payload(conversation_id, record.id)
            except IntegrityViolationError as exc:  # damaged pages too
                detail = (
                    "rebuilt from rows, it no longer matches the payload hash stored when it "
                    "was sent"
                    if isinstance(exc, PayloadMismatchError)
                    else str(exc)
                )
                problems.append(
                    CheckProblem("payloads", f"request {record.id}: {detail}", conversation_id)
                )
        return problems

    def backup(self, destination: str | os.PathLike[str], *, force: bool = False) -> BackupResult:
        """Copy a SQLite store to ``destination`` while it stays in use.

        SQLite's online backup API copies the database as of one commit (writers go on
        meanwhile; none of their later commits is in the copy, none half). ``destination`` is
        a new file, or an existing directory (the copy is then named
        ``<name>-YYYYmmdd-HHMMSS.db`` inside it). An existing file is refused unless
        ``force``. The copy is checked (``PRAGMA quick_check``) and synced before it is put
        in place, so a failed backup leaves nothing at ``destination``; it is a store of its
        own, opened like any other.

        Raises:
            InvalidInputError: a PostgreSQL store (use ``pg_dump``), an existing file without
                ``force``, a missing directory, or the store's database or a file beside
                it (its write-ahead log, shared-memory index, journal or writer lock).
            StorageFullError: the copy did not fit.
            CorruptDatabaseError: the store is damaged (the copy fails SQLite's check).
        """
        self._db.check_open()
        if not self._db.is_sqlite:
            raise InvalidInputError(
                "backup copies SQLite stores; back up a PostgreSQL database with its own tools "
                "(pg_dump -Fc DATABASE_URL > backup.dump, pg_restore to bring it back)."
            )
        destination = check_path("destination", destination)
        refuse_database_url("destination", destination, "backup")
        if not isinstance(force, bool):
            raise InvalidInputError("force must be True or False.")
        source = resolve_target(self.location, default_database_path()).sqlite_path
        dest = backup_files.destination_path(destination)
        return backup_files.backup_to(self._db.engine, source, dest, force=force)


def _problems_error(report: CheckReport) -> IntegrityViolationError:
    shown = "; ".join(
        f"{p.check}{' in ' + p.conversation_id if p.conversation_id else ''}: {p.detail}"
        for p in report.problems[:MAX_REPORTED_PROBLEMS]
    )
    more = len(report.problems) - MAX_REPORTED_PROBLEMS
    suffix = f" (and {more} more)" if more > 0 else ""
    if report.corrupt:
        return CorruptDatabaseError(
            f"the database file is damaged: {shown}{suffix}; salvage what is still readable "
            "with 'contextstore recover SRC DEST' (ContextStore.recover), or restore a backup."
        )
    return IntegrityViolationError(
        f"{len(report.problems)} broken invariant(s): {shown}{suffix}; the rows were changed "
        "outside contextstore or by a bug: restore a backup, or roll the conversation back "
        "to a checkpoint before the damage."
    )
