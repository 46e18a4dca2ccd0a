"""A demo that stops before its end leaves no half demo behind: it deletes the conversations
it had written, or, when the database refuses that too, names them and the command that
deletes them. It left its first conversation (messages, requests) in the user's database,
under the refusal "nothing was written"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore, StorageFullError
from tests import conftest
from tests.cli.conftest import run
from tests.conftest import POSTGRES_URL
from tests.pg_schemas import connect_args
from tests.store.test_roles import Roles

WRITES = (
    "GRANT USAGE ON SCHEMA {schema} TO {role}",
    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
    "GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
)


@pytest.fixture
def roles() -> Iterator[Roles]:
    """Roles made in a migrated schema holding one conversation of the owner's."""
    pools = conftest._SCHEMAS
    if pools is None:
        pytest.skip("set CONTEXTSTORE_TEST_POSTGRES_URL to run the PostgreSQL backend")
    schema = pools.take()
    with ContextStore.open(str(POSTGRES_URL), engine_kwargs=connect_args(schema)) as owner:
        owner.append(owner.create_conversation(title="the owner's").id, "user", "kept")
    made = Roles(schema)
    try:
        yield made
    finally:
        made.drop()
        pools.give_back(schema)


def test_a_demo_that_fails_midway_deletes_both_conversations_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "demo.db"
    with ContextStore.open(db) as store:
        store.append(store.create_conversation(title="the user's").id, "user", "kept")
        before = store.row_counts()
    real = ContextStore.prepare_request
    calls: list[str] = []

    def full_at_the_secrets_part(self: ContextStore, *args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        if len(calls) == 5:  # the overflow part prepares four requests
            raise StorageFullError("the disk or quota is full; nothing was written.")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ContextStore, "prepare_request", full_at_the_secrets_part)
    failed = run("--db", str(db), "demo", "--crash-kills", "0")
    assert failed.code == 8
    assert "request 4 (previous used 52,800)" in failed.out  # the second part ran whole
    assert "secrets in a file the agent read" in failed.out
    note, error = failed.err.splitlines()
    assert error == "error: the disk or quota is full; nothing was written."
    assert note.startswith("the demo stopped before its end; the 2 conversations it had written (")
    assert note.endswith(") were deleted: none of it is left.")
    with ContextStore.open(db) as store:
        assert store.row_counts() == before
        assert [c.title for c in store.list_conversations()] == ["the user's"]


def test_a_demo_whose_role_may_not_checkpoint_leaves_nothing(roles: Roles) -> None:
    role = roles.make(*WRITES, "REVOKE INSERT ON {schema}.checkpoints FROM {role}")
    with ContextStore.open(roles.url(role)) as store:
        before = store.row_counts()
    failed = run("--db", roles.url(role), "demo", "--crash-kills", "0")
    assert failed.code == 9
    note, error = failed.err.splitlines()
    assert error.startswith(
        f"error: PostgreSQL refused role {role} a privilege the write needs (permission denied "
        "for table checkpoints); nothing was written."
    )
    assert note.startswith("the demo stopped before its end; the conversation it had written (")
    with ContextStore.open(roles.url(role)) as store:
        assert store.row_counts() == before
        assert [c.title for c in store.list_conversations()] == ["the owner's"]


def test_a_demo_that_may_not_delete_what_it_left_names_it_and_the_command(
    roles: Roles,
) -> None:
    role = roles.make(
        *WRITES,
        "REVOKE INSERT ON {schema}.checkpoints FROM {role}",
        "REVOKE DELETE ON {schema}.conversations FROM {role}",
    )
    failed = run("--db", roles.url(role), "demo", "--crash-kills", "0")
    assert failed.code == 9
    note = failed.err.splitlines()[0]
    with ContextStore.open(roles.url(role)) as store:
        left = [c.id for c in store.list_conversations() if str(c.title).startswith("demo 1:")]
    assert len(left) == 1
    assert note.startswith(
        "the demo stopped before its end and could not delete what it had written: "
        f"conversation {left[0]} is left unfinished; delete with: contextstore --db "
    )
    assert note.endswith(f" delete {left[0]} --yes")
