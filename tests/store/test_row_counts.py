"""``row_counts`` counts one conversation's rows, or every row of the database."""

from __future__ import annotations

from contextstore import ContextStore


def test_row_counts_per_conversation_and_for_the_whole_database(store: ContextStore) -> None:
    first = store.create_conversation()
    other = store.create_conversation()
    store.append(first.id, "user", "x")
    store.append(
        other.id, [{"role": "user", "content": "y"}, {"role": "assistant", "content": "z"}]
    )
    store.record_request(other.id, tokens_in=1)
    mine = store.row_counts(first.id)
    theirs = store.row_counts(other.id)
    everything = store.row_counts()
    assert (mine["conversations"], mine["messages"], mine["blocks"]) == (1, 1, 1)
    assert (theirs["conversations"], theirs["messages"], theirs["api_requests"]) == (1, 2, 1)
    assert mine["api_requests"] == 0
    assert (everything["conversations"], everything["messages"], everything["blocks"]) == (2, 3, 3)
    assert set(mine) == set(theirs) == set(everything)
    for table, count in everything.items():
        assert count == mine[table] + theirs[table], table
