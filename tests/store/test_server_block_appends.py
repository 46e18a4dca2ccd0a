"""Appending server tool blocks on every backend: kept exactly, and a refused one names the
block and the field and writes nothing."""

from __future__ import annotations

import pytest

from contextstore import ContextStore, InvalidMessageError
from tests.conftest import assistant, user
from tests.server_tools import container_upload, every_pair, search_result, search_use


def test_a_turn_of_every_server_tool_comes_back_as_appended(store: ContextStore) -> None:
    cid = store.create_conversation(id="c").id
    messages = [user(container_upload(), "go"), assistant(*every_pair())]
    store.append_many(cid, messages)
    assert store.messages(cid) == messages


@pytest.mark.parametrize(
    ("role", "blocks", "words"),
    [
        ("assistant", [search_use(), {**search_result(), "content": {"type": "x"}}], "content"),
        ("assistant", [search_use(), search_use()], "two calls"),
        ("user", [search_use()], "server tool block"),
        ("assistant", [{**search_use(), "name": "web_browse"}], "name"),
    ],
)
def test_a_refused_block_writes_nothing(
    store: ContextStore, role: str, blocks: list[dict[str, object]], words: str
) -> None:
    cid = store.create_conversation(id="c").id
    store.append(cid, "user", "q")
    before = store.row_counts(cid)
    with pytest.raises(InvalidMessageError, match=words) as raised:
        store.append(cid, role, blocks)
    assert "content[" in str(raised.value)
    assert store.row_counts(cid) == before
