"""Benchmarks run side by side in one process, reported as ratios to a raw sqlite3 baseline.

Nothing here prints: :func:`run` returns rows that ``contextstore bench`` formats. Each
comparison runs the baseline and contextstore on the same machine, in the same process,
with the same durability (WAL, ``synchronous=FULL``, one transaction per message), so the
ratio is meaningful where absolute times are not.
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextstore.core.tokens import TiktokenCounter
from contextstore.processors.pipeline import Pipeline
from contextstore.storage import engine
from contextstore.store import ContextStore


@dataclass(frozen=True)
class BenchRow:
    """One measured operation: contextstore's time, the baseline's, and their ratio."""

    name: str
    contextstore_s: float
    baseline_s: float
    note: str

    @property
    def ratio(self) -> float:
        """contextstore time divided by baseline time."""
        return self.contextstore_s / self.baseline_s if self.baseline_s else float("inf")


@dataclass(frozen=True)
class PageSizeRow:
    """File size for one page size and one row size."""

    page_size: int
    row_bytes: int
    file_bytes: int
    payload_bytes: int

    @property
    def overhead(self) -> float:
        """Fraction of the file that is not payload."""
        return 1 - self.payload_bytes / self.file_bytes


def _messages(count: int, text_bytes: int) -> list[dict[str, Any]]:
    body = ("lorem ipsum dolor sit amet " * (text_bytes // 27 + 1))[:text_bytes]
    out: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "task"}]}]
    for i in range(count - 1):
        role = "assistant" if i % 2 == 0 else "user"
        out.append({"role": role, "content": [{"type": "text", "text": f"{i} {body}"}]})
    return out


def _timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _raw_connection(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=FULL")
    connection.execute(
        "CREATE TABLE m (conv TEXT, idx INTEGER, ts INTEGER, body TEXT, PRIMARY KEY (conv, idx))"
    )
    return connection


def _raw_append(connection: sqlite3.Connection, messages: list[dict[str, Any]]) -> None:
    for idx, message in enumerate(messages):
        connection.execute("BEGIN IMMEDIATE")
        connection.execute(
            "INSERT INTO m VALUES (?, ?, ?, ?)",
            ("c", idx, time.time_ns(), json.dumps(message)),
        )
        connection.execute("COMMIT")


def _raw_read(connection: sqlite3.Connection) -> list[Any]:
    rows = connection.execute("SELECT body FROM m WHERE conv = 'c' ORDER BY idx").fetchall()
    return [json.loads(row[0]) for row in rows]


def run(messages: int = 2_000, text_bytes: int = 2_000) -> list[BenchRow]:
    """Measure append, render and prepare against raw sqlite3 doing the least it could."""
    data = _messages(messages, text_bytes)
    with tempfile.TemporaryDirectory() as folder:
        raw = _raw_connection(Path(folder) / "raw.db")
        raw_append = _timed(lambda: _raw_append(raw, data))
        raw_read = _timed(lambda: _raw_read(raw))
        raw.close()
        counter = TiktokenCounter()
        counter.count("warm up the encoding")
        with ContextStore.open(
            Path(folder) / "cs.db", token_counter=counter, pipeline=Pipeline([])
        ) as store:
            conv = store.create_conversation(context_window=200_000)
            cs_append = _timed(lambda: [store.append(conv.id, [m]) for m in data])
            cs_render = _timed(lambda: store.render(conv.id, as_of=2**52))
            store.record_request(conv.id, tokens_in=10)
            cs_prepare = _timed(lambda: store.prepare_request(conv.id))
            masked = ContextStore(store.database, location=store.location, token_counter=counter)
            cs_render_masked = _timed(lambda: masked.render(conv.id, as_of=2**52))
    per = f"{messages:,} messages of ~{text_bytes:,} bytes"
    return [
        BenchRow(
            "append, one transaction per message",
            cs_append,
            raw_append,
            f"{per}; contextstore also validates, counts tokens, writes blocks",
        ),
        BenchRow(
            "render the whole conversation (uncached)",
            cs_render,
            raw_read,
            "SELECT + JSON decode of every row is the baseline",
        ),
        BenchRow(
            "prepare_request (decide, build payload, write request row)",
            cs_prepare,
            raw_read,
            "baseline: reading the rows once",
        ),
        BenchRow(
            "render with secret masking (uncached)",
            cs_render_masked,
            raw_read,
            "the default pipeline scans every visible text",
        ),
    ]


def _mixed_messages(count: int, seed: int = 1) -> list[dict[str, Any]]:
    """Messages whose text sizes are log-uniform from 100 bytes to 20 KB, like an agent's
    mix of short replies, commands and file contents."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(count):
        size = int(math.exp(rng.uniform(math.log(100), math.log(20_000))))
        role = "user" if i % 2 == 0 else "assistant"
        out.append({"role": role, "content": [{"type": "text", "text": "y" * size}]})
    return out


def store_page_sizes(count: int = 1_500) -> list[PageSizeRow]:
    """contextstore's own file size for the same mixed messages under each page size."""
    data = _mixed_messages(count)
    payload = sum(len(m["content"][0]["text"]) for m in data)
    results = []
    original = engine.PAGE_SIZE
    try:
        with tempfile.TemporaryDirectory() as folder:
            for size in (4_096, 8_192, 16_384):
                engine.PAGE_SIZE = size
                path = Path(folder) / f"store-{size}.db"
                with ContextStore.open(path, pipeline=Pipeline([])) as store:
                    conv = store.create_conversation()
                    store.append(conv.id, data)
                    with store.database.engine.connect() as connection:
                        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                connection2 = sqlite3.connect(path)
                connection2.execute("VACUUM")
                connection2.close()
                results.append(PageSizeRow(size, payload // count, path.stat().st_size, payload))
    finally:
        engine.PAGE_SIZE = original
    return results


def page_sizes(
    rows: int = 1_000, row_sizes: tuple[int, ...] = (1_000, 2_100, 3_000)
) -> list[PageSizeRow]:
    """File size for rows of several sizes under several page sizes (why 8 KiB)."""
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for row_bytes in row_sizes:
            payload = "x" * row_bytes
            for size in (4_096, 8_192, 16_384):
                path = Path(folder) / f"p{size}-{row_bytes}.db"
                connection = sqlite3.connect(path)
                connection.execute(f"PRAGMA page_size = {size}")
                connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
                connection.executemany("INSERT INTO t (body) VALUES (?)", [(payload,)] * rows)
                connection.commit()
                connection.execute("VACUUM")
                connection.close()
                results.append(PageSizeRow(size, row_bytes, path.stat().st_size, rows * row_bytes))
    return results
