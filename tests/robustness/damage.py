"""Stores to damage: a realistic SQLite file with every kind of row, and ways to break it."""

from __future__ import annotations

import contextlib
import random
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contextstore import ContextStore

PAGE = 8192


@dataclass(frozen=True)
class Seeded:
    """A store file and what it holds."""

    path: Path
    conversations: tuple[str, ...]
    views: dict[str, list[dict[str, Any]]]
    """Each conversation's stored messages (``store.messages``), to compare a recovery with."""


def seed_store(store: ContextStore, *, conversations: int = 3, messages: int = 60) -> list[str]:
    """Conversations with messages, a prepared and a recorded request, a checkpoint, a
    context update, a truncation and a rollback (archived rows)."""
    ids = []
    for n in range(conversations):
        conv = store.create_conversation(model_id="claude-sonnet-4-5", title=f"damage {n}")
        for i in range(messages):
            role = "user" if i % 2 == 0 else "assistant"
            store.append(conv.id, role, [{"type": "text", "text": f"{n}/{i} " + "word " * 400}])
        store.prepare_request(conv.id, system="be brief")
        store.record_request(conv.id, tokens_in=1_000, tokens_out=50, cost=0.01)
        store.checkpoint(conv.id, label="middle")
        store.add_context_update(conv.id, 1, 0, "rewritten", kind="processor", source="test")
        store.append(conv.id, "user", "a turn to roll back")
        store.rollback(conv.id, to="middle")
        store.truncate(conv.id, keep="half")
        ids.append(conv.id)
    return ids


def seeded_file(path: Path, **kwargs: Any) -> Seeded:
    """A closed store file at ``path``, seeded by :func:`seed_store`."""
    with ContextStore.open(path) as store:
        ids = seed_store(store, **kwargs)
        views = {cid: store.messages(cid) for cid in ids}
    return Seeded(path, tuple(ids), views)


def overwrite_middle_page(path: Path, *, seed: int = 7, table: str = "blocks") -> int:
    """Overwrite one whole page in the middle of the leaf pages of ``table`` (SQLite's
    ``dbstat`` says which pages hold them; the schema's empty tables take pages of their
    own) with random bytes; returns it."""
    with contextlib.closing(sqlite3.connect(path)) as connection:
        pages = [
            row[0]
            for row in connection.execute(
                "SELECT pageno FROM dbstat WHERE name = ? AND pagetype = 'leaf' ORDER BY pageno",
                (table,),
            )
        ]
    page = pages[len(pages) // 2] - 1
    data = bytearray(path.read_bytes())
    data[page * PAGE : (page + 1) * PAGE] = random.Random(seed).randbytes(PAGE)
    path.write_bytes(bytes(data))
    return page


def truncate(path: Path, fraction: float = 0.95) -> None:
    """Cut the file after ``fraction`` of it (not on a page boundary): the last block pages
    go, and with them the messages they belong to."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * fraction) // PAGE * PAGE + 123])


def overwrite_header(path: Path) -> None:
    """Overwrite the file's first 100 bytes (SQLite's header) with text."""
    data = bytearray(path.read_bytes())
    data[:100] = b"this is not a header " * 4 + b"x" * 16
    path.write_bytes(bytes(data))
