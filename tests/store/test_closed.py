"""A closed store refuses every call with one clear error: a file store used to open new
connections nothing closed again, and an in-memory one, its tables gone with its connection,
raised the driver's ``OperationalError: no such table: conversations``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore, InvalidInputError

CALLS: dict[str, Callable[[ContextStore, str], Any]] = {
    "append": lambda s, c: s.append(c, "user", "after close"),
    "messages": lambda s, c: s.messages(c),
    "render": lambda s, c: s.render(c, format="openai"),
    "prepare_request": lambda s, c: s.prepare_request(c),
    "list_conversations": lambda s, c: s.list_conversations(),
    "create_conversation": lambda s, c: s.create_conversation(),
    "checkpoint": lambda s, c: s.checkpoint(c, label="late"),
    "check": lambda s, c: s.check(),
    "query": lambda s, c: s.query("SELECT 1"),
    "search": lambda s, c: s.search("close"),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_every_call_on_a_closed_store_is_refused_with_what_to_do(
    store: ContextStore, call: str
) -> None:
    conversation = store.create_conversation(title="closed")
    store.append(conversation.id, "user", "before close")
    store.close()
    with pytest.raises(InvalidInputError, match=r"^this store is closed .*ContextStore\.open"):
        CALLS[call](store, conversation.id)


def test_the_end_of_a_with_block_closes_it_and_the_file_keeps_what_was_written(
    tmp_path: Path,
) -> None:
    with ContextStore.open(tmp_path / "agent.db") as store:
        conversation = store.create_conversation()
        store.append(conversation.id, "user", "kept")
    with pytest.raises(InvalidInputError, match="closed"):
        store.append(conversation.id, "user", "lost")
    with pytest.raises(InvalidInputError, match="closed"):
        store.backup(tmp_path / "copy.db")
    assert not (tmp_path / "copy.db").exists()
    store.close()  # a second close is harmless
    with ContextStore.open(tmp_path / "agent.db") as again:
        assert again.messages(conversation.id) == [{"role": "user", "content": "kept"}]
