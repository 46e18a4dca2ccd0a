"""The stores the benchmark compares, behind one small interface.

Each subject holds one conversation and offers the operations the workloads time: load
(untimed bulk fill), append one message in its own durable transaction, append a batch in
one transaction, and read the conversation back. The floor subjects (raw ``sqlite3``, raw
``psycopg``) do the least a store could: one JSON row per message. The peers are what other
agents use: the OpenAI Agents SDK's ``SQLiteSession``, LangGraph's ``SqliteSaver``, and a
model of Cline's ``api_conversation_history.json`` (the whole list rewritten per message,
through a temporary file and a rename, as Cline does). Peers are optional
(``pip install "contextstore[bench]"``); :func:`peer_subjects` says why one is missing.

Every SQLite file runs in WAL mode, and each message is on disk when its append returns on
every subject but Cline's (which never calls ``fsync``): the floor and the peers commit with
``synchronous=FULL``, contextstore with its default durability (the WAL synced just after the
commit, see :mod:`contextstore.storage.wal_sync`).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from contextstore.core.overlays import Message
from contextstore.processors.pipeline import Pipeline
from contextstore.store import ContextStore

FLOOR_SQLITE = "raw sqlite3"
FLOOR_POSTGRES = "raw psycopg"
CONTEXTSTORE = "contextstore"
SQLITE_SESSION = "openai-agents SQLiteSession"
LANGGRAPH = "LangGraph SqliteSaver"
CLINE = "Cline whole-file rewrite"


class Subject(Protocol):
    """One store holding one conversation."""

    name: str

    def load(self, messages: list[Message]) -> None:
        """Add ``messages`` as fast as the store allows (untimed set-up)."""

    def append_one(self, message: Message) -> None:
        """Append one message in its own durable transaction."""

    def append_batch(self, messages: list[Message]) -> None:
        """Append ``messages`` in one transaction."""

    def read(self) -> int:
        """Read the conversation back as messages; returns how many."""

    def file_bytes(self) -> int:
        """Bytes on disk (database, WAL and side files), after folding the WAL in."""

    def close(self) -> None:
        """Release the store."""


def _files_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def _sqlite_folded_size(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    return _files_size(path)


def _durable(connection: sqlite3.Connection) -> None:
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")


class _Floor:
    """What both floors share: one ``(conv, idx, ts, body)`` row per message."""

    conv = "c"
    next_idx = 0
    visible_after = 1
    """Messages ``2..visible_after`` are hidden from :meth:`read` (as a deleted range)."""

    def _rows(self, messages: list[Message]) -> list[tuple[Any, ...]]:
        first = self.next_idx
        self.next_idx += len(messages)
        now = time.time_ns()
        return [(self.conv, first + i, now + i, json.dumps(m)) for i, m in enumerate(messages)]

    def append_batch(self, messages: list[Message]) -> None:
        raise NotImplementedError

    def load(self, messages: list[Message]) -> None:
        """The same as a batch: the floor has no faster way."""
        self.append_batch(messages)


class FloorSqlite(_Floor):
    """Raw ``sqlite3``: one JSON row per message, ``BEGIN IMMEDIATE``/``INSERT``/``COMMIT``."""

    name = FLOOR_SQLITE

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        _durable(self.connection)
        self.connection.executescript(
            "CREATE TABLE IF NOT EXISTS m (conv TEXT, idx INTEGER, ts INTEGER, body TEXT, "
            "PRIMARY KEY (conv, idx));"
            "CREATE TABLE IF NOT EXISTS archive (conv TEXT, idx INTEGER, ts INTEGER, body TEXT);"
        )

    def append_one(self, message: Message) -> None:
        (row,) = self._rows([message])
        self.connection.execute("BEGIN IMMEDIATE")
        self.connection.execute("INSERT INTO m VALUES (?, ?, ?, ?)", row)
        self.connection.execute("COMMIT")

    def append_batch(self, messages: list[Message]) -> None:
        self.connection.execute("BEGIN IMMEDIATE")
        self.connection.executemany("INSERT INTO m VALUES (?, ?, ?, ?)", self._rows(messages))
        self.connection.execute("COMMIT")

    def read(self) -> int:
        """The floor's select-and-decode of the visible messages (0, 1, then the tail)."""
        rows = self.connection.execute(
            "SELECT body FROM m WHERE conv = ? AND (idx < 2 OR idx > ?) ORDER BY idx",
            (self.conv, self.visible_after),
        ).fetchall()
        return len([json.loads(body) for (body,) in rows])

    def remove_from(self, idx: int, *, archive: bool) -> int:
        """Delete the messages from ``idx`` on (keeping them in ``archive`` when asked)."""
        self.connection.execute("BEGIN IMMEDIATE")
        if archive:
            self.connection.execute(
                "INSERT INTO archive SELECT conv, idx, ts, body FROM m WHERE conv = ? AND idx >= ?",
                (self.conv, idx),
            )
        removed = self.connection.execute(
            "DELETE FROM m WHERE conv = ? AND idx >= ?", (self.conv, idx)
        ).rowcount
        self.connection.execute("COMMIT")
        self.next_idx = idx
        return int(removed)

    def file_bytes(self) -> int:
        return _sqlite_folded_size(self.path)

    def close(self) -> None:
        self.connection.close()


POSTGRES_FLOOR_TABLES = """
CREATE TABLE IF NOT EXISTS contextstore_bench_floor (
    conv text, idx integer, ts bigint, body jsonb, PRIMARY KEY (conv, idx));
CREATE TABLE IF NOT EXISTS contextstore_bench_floor_archive (
    conv text, idx integer, ts bigint, body jsonb)
"""


class FloorPostgres(_Floor):
    """Raw ``psycopg``: one ``jsonb`` row per message, ``INSERT`` then ``COMMIT``.

    Every floor conversation lives in one table (``contextstore_bench_floor``), told apart
    by ``conv``; :func:`drop_postgres_floor` removes the tables after the run.
    """

    name = FLOOR_POSTGRES

    def __init__(self, url: str, conv: str) -> None:
        import psycopg

        self.connection = psycopg.connect(_libpq_url(url))
        self.conv = conv
        for statement in POSTGRES_FLOOR_TABLES.split(";"):
            self.connection.execute(statement)
        self.connection.commit()

    def append_one(self, message: Message) -> None:
        (row,) = self._rows([message])
        self.connection.execute("INSERT INTO contextstore_bench_floor VALUES (%s, %s, %s, %s)", row)
        self.connection.commit()

    def append_batch(self, messages: list[Message]) -> None:
        with self.connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO contextstore_bench_floor VALUES (%s, %s, %s, %s)",
                self._rows(messages),
            )
        self.connection.commit()

    def read(self) -> int:
        """Select the visible rows; psycopg decodes ``jsonb`` as it reads."""
        rows = self.connection.execute(
            "SELECT body FROM contextstore_bench_floor WHERE conv = %s AND (idx < 2 OR idx > %s) "
            "ORDER BY idx",
            (self.conv, self.visible_after),
        ).fetchall()
        self.connection.commit()
        return len(rows)

    def remove_from(self, idx: int, *, archive: bool) -> int:
        """Delete the messages from ``idx`` on (keeping them in the archive when asked)."""
        if archive:
            self.connection.execute(
                "INSERT INTO contextstore_bench_floor_archive SELECT * FROM "
                "contextstore_bench_floor WHERE conv = %s AND idx >= %s",
                (self.conv, idx),
            )
        removed = self.connection.execute(
            "DELETE FROM contextstore_bench_floor WHERE conv = %s AND idx >= %s", (self.conv, idx)
        ).rowcount
        self.connection.commit()
        self.next_idx = idx
        return int(removed)

    def file_bytes(self) -> int:
        """Not measured on PostgreSQL (the table is shared by every floor conversation)."""
        return 0

    def close(self) -> None:
        self.connection.close()


def drop_postgres_floor(url: str) -> None:
    """Remove the floor's tables from the PostgreSQL database."""
    import psycopg

    with psycopg.connect(_libpq_url(url)) as connection:
        connection.execute("DROP TABLE IF EXISTS contextstore_bench_floor")
        connection.execute("DROP TABLE IF EXISTS contextstore_bench_floor_archive")


def unreachable_postgres(url: str) -> str | None:
    """Why the PostgreSQL database at ``url`` (a SQLAlchemy URL) cannot be reached, in the
    driver's words; None when a connection opens. Tried before a run, so that a wrong
    ``--url`` is reported before the SQLite workloads have taken their time."""
    try:
        import psycopg
    except ImportError:
        return 'psycopg is not installed (pip install "contextstore[postgres]")'
    try:
        with psycopg.connect(_libpq_url(url), connect_timeout=10):
            return None
    except psycopg.Error as exc:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _libpq_url(url: str) -> str:
    """A SQLAlchemy URL (``postgresql+psycopg://...``) as libpq takes it."""
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


class ContextStoreSubject:
    """contextstore through its public API (one conversation, any location)."""

    name = CONTEXTSTORE

    def __init__(self, location: str | Path, *, pipeline: Pipeline | None = None) -> None:
        self.store = ContextStore.open(location, pipeline=pipeline)
        self.location = location
        self.conversation_id = self.store.create_conversation(context_window=200_000).id

    def load(self, messages: list[Message]) -> None:
        for start in range(0, len(messages), 1_000):
            self.store.append_many(self.conversation_id, messages[start : start + 1_000])

    def append_one(self, message: Message) -> None:
        self.store.append(self.conversation_id, message["role"], message["content"])

    def append_batch(self, messages: list[Message]) -> None:
        self.store.append_many(self.conversation_id, messages)

    def read(self) -> int:
        """An uncached render (the cache is emptied first)."""
        self.store.render_cache.clear()
        return len(self.store.render(self.conversation_id))

    def file_bytes(self) -> int:
        path = self.store.path
        if path is None:
            with self.store.database.read() as connection:
                value = connection.exec_driver_sql(
                    "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                    "JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
                ).scalar()
            return int(value or 0)
        self.store.close()
        size = _sqlite_folded_size(path)
        self.store = ContextStore.open(self.location, pipeline=self.store.pipeline)
        return size

    def close(self) -> None:
        if self.store.path is None:
            self.store.delete_conversation(self.conversation_id)
        self.store.close()


LAYOUT_FLOOR = "contextstore's tables by hand"


class LayoutFloor:
    """contextstore's own tables moved by hand: the least a rollback of the newest messages
    can do on this layout (their blocks and message rows deleted, copied first into the
    archives when archiving, ``message_count`` set back), as plain statements on a raw
    driver connection in one transaction. No clock, no label, no counts, no other table:
    between the floor (one row per message) and contextstore, it tells what the layout
    costs from what contextstore's code adds."""

    name = LAYOUT_FLOOR

    def __init__(self, ours: ContextStoreSubject) -> None:
        self.cid = ours.conversation_id
        path = ours.store.path
        self.sqlite = path is not None
        if path is not None:
            self.connection: Any = sqlite3.connect(path, isolation_level=None)
            self.connection.execute("PRAGMA synchronous=FULL")
        else:
            import psycopg

            self.connection = psycopg.connect(_libpq_url(str(ours.location)))
        (self.rollback_id,) = self._run(
            [
                (
                    "INSERT INTO rollbacks (conversation_id, cutoff_ts, ran_at, target, purged, "
                    "counts) VALUES (?, 0, 0, 'bench by hand', false, '{}') RETURNING id",
                    (self.cid,),
                )
            ],
            read=True,
        )

    def _run(
        self, statements: list[tuple[str, tuple[Any, ...]]], *, read: bool = False
    ) -> list[Any]:
        """Run ``statements`` (``?`` placeholders) in one transaction (one round trip on
        PostgreSQL); their row counts, or with ``read`` the first value each returned."""
        if self.sqlite:
            self.connection.execute("BEGIN IMMEDIATE")
            cursors = [self.connection.execute(sql, params) for sql, params in statements]
            found = [c.fetchone()[0] if read else c.rowcount for c in cursors]
            self.connection.execute("COMMIT")
            return found
        with self.connection.pipeline():
            cursors = [
                self.connection.execute(sql.replace("?", "%s"), params)
                for sql, params in statements
            ]
            self.connection.commit()
        return [c.fetchone()[0] if read else c.rowcount for c in cursors]

    def remove_from(self, idx: int, *, archive: bool) -> int:
        """Delete messages from ``idx`` on and their blocks (archived first when asked)."""
        keys = {"messages": "idx", "blocks": "message_idx"}
        tail = {
            t: f"conversation_id = ? AND {k} BETWEEN ? AND {2**31 - 1}" for t, k in keys.items()
        }
        statements: list[tuple[str, tuple[Any, ...]]] = []
        for table in ("blocks", "messages") if archive else ():
            columns = ", ".join(_table_columns(table))
            copy = f"INSERT INTO archived_{table} (rollback_id, {columns}) SELECT ?, {columns}"
            statements.append(
                (f"{copy} FROM {table} WHERE {tail[table]}", (self.rollback_id, self.cid, idx))
            )
        for table in ("blocks", "messages"):
            delete = f"DELETE FROM {table} WHERE {tail[table]}"  # noqa: S608 (constants)
            statements.append((delete, (self.cid, idx)))
        reset = "UPDATE conversations SET message_count = ? WHERE id = ?"
        statements.append((reset, (idx, self.cid)))
        return int(self._run(statements)[-2])

    def close(self) -> None:
        self.connection.close()


def _table_columns(name: str) -> list[str]:
    from contextstore.storage.tables import metadata

    return [column.name for column in metadata.tables[name].c]


class SQLiteSessionSubject:
    """The OpenAI Agents SDK's ``SQLiteSession``: ``add_items`` and ``get_items``."""

    name = SQLITE_SESSION

    def __init__(self, path: Path) -> None:
        from agents import SQLiteSession

        self.path = path
        self.session = SQLiteSession("bench", str(path))
        # add_items runs on worker threads, each with a connection of its own (opened on
        # first use, in whichever thread of the executor runs the call): make every one of
        # them durable, not only the one a single configuring call happens to reach.
        configure_connection = self.session._configure_connection

        def durable(connection: sqlite3.Connection) -> Any:
            found = configure_connection(connection)
            connection.execute("PRAGMA synchronous=FULL")
            return found

        self.session._configure_connection = durable
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._configure())

    async def _configure(self) -> None:
        def configure() -> None:
            self.session._get_connection().execute("PRAGMA synchronous=FULL")

        await asyncio.to_thread(configure)

    def load(self, messages: list[Message]) -> None:
        self.append_batch(messages)

    def append_one(self, message: Message) -> None:
        self.loop.run_until_complete(self.session.add_items([message]))

    def append_batch(self, messages: list[Message]) -> None:
        self.loop.run_until_complete(self.session.add_items(messages))

    def read(self) -> int:
        return len(self.loop.run_until_complete(self.session.get_items()))

    def file_bytes(self) -> int:
        return _sqlite_folded_size(self.path)

    def close(self) -> None:
        self.session.close()
        self.loop.close()


class LangGraphSubject:
    """LangGraph's ``SqliteSaver`` under a one-node graph: a step per message appended."""

    name = LANGGRAPH

    def __init__(self, path: Path) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, MessagesState, StateGraph

        self.path = path
        self.connection = sqlite3.connect(path, check_same_thread=False)
        _durable(self.connection)
        graph = StateGraph(MessagesState)
        graph.add_node("store", lambda state: {})
        graph.add_edge(START, "store")
        graph.add_edge("store", END)
        self.app = graph.compile(checkpointer=SqliteSaver(self.connection))
        self.config: Any = {"configurable": {"thread_id": "bench"}}

    @staticmethod
    def _converted(messages: list[Message]) -> list[Any]:
        from langchain_core.messages import AIMessage, HumanMessage

        kinds = {"user": HumanMessage, "assistant": AIMessage}
        return [kinds[m["role"]](content=m["content"]) for m in messages]

    def load(self, messages: list[Message]) -> None:
        self.append_batch(messages)

    def append_one(self, message: Message) -> None:
        self.append_batch([message])

    def append_batch(self, messages: list[Message]) -> None:
        self.app.invoke({"messages": self._converted(messages)}, self.config)

    def read(self) -> int:
        return len(self.app.get_state(self.config).values["messages"])

    def file_bytes(self) -> int:
        self.connection.commit()
        return _sqlite_folded_size(self.path)

    def close(self) -> None:
        self.connection.close()


class ClineFileSubject:
    """Cline's ``api_conversation_history.json``: the whole list, compact JSON, rewritten
    through a temporary file and a rename after every message (no ``fsync``)."""

    name = CLINE

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "api_conversation_history.json"
        self.history: list[Message] = []
        self.rng = random.Random(0)

    def _save(self) -> None:
        temporary = self.path.with_name(
            f"{self.path.name}.tmp.{time.time_ns() // 1_000_000}.{self.rng.random():.8f}.json"
        )
        temporary.write_text(json.dumps(self.history, separators=(",", ":")), encoding="utf-8")
        os.replace(temporary, self.path)

    def load(self, messages: list[Message]) -> None:
        self.append_batch(messages)

    def append_one(self, message: Message) -> None:
        self.history.append(message)
        self._save()

    def append_batch(self, messages: list[Message]) -> None:
        self.history.extend(messages)
        self._save()

    def read(self) -> int:
        return len(json.loads(self.path.read_text(encoding="utf-8")))

    def file_bytes(self) -> int:
        return self.path.stat().st_size

    def close(self) -> None:
        pass


PeerFactory = Callable[[Path], Subject]

PEERS: tuple[tuple[str, str, PeerFactory], ...] = (
    (SQLITE_SESSION, "openai-agents", lambda folder: SQLiteSessionSubject(folder / "agents.db")),
    (
        LANGGRAPH,
        "langgraph-checkpoint-sqlite",
        lambda folder: LangGraphSubject(folder / "langgraph.db"),
    ),
    (CLINE, "", lambda folder: ClineFileSubject(folder / "cline")),
)
"""Each peer: its name, the distribution it needs (none for Cline's model), its factory."""


def peer_available(distribution: str) -> str | None:
    """None when the peer's distribution is installed, else why it is skipped."""
    if not distribution:
        return None
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return f'{distribution} is not installed (pip install "contextstore[bench]")'
    return None


def versions() -> dict[str, str]:
    """Versions of contextstore, its drivers and every installed peer."""
    found: dict[str, str] = {}
    for name in (
        "contextstore",
        "SQLAlchemy",
        "psycopg",
        "openai-agents",
        "langgraph",
        "langgraph-checkpoint-sqlite",
    ):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    found["sqlite"] = sqlite3.sqlite_version
    return found
