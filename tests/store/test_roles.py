"""A PostgreSQL role that does not own the store: what it may do with the grants the README
lists, and what it is told when it lacks one (the grants to run, never the driver's
exception; nothing written). Each test makes its own login roles and drops them."""

from __future__ import annotations

import re
import select
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from contextstore import (
    ContextStore,
    DatabaseBusyError,
    DatabaseUnavailableError,
    MigrationError,
    ReadOnlyError,
    ReadOnlyLocationError,
)
from contextstore.storage import migrate
from tests import conftest
from tests.cli.conftest import run
from tests.conftest import POSTGRES_URL
from tests.pg_schemas import connect_args
from tests.store.internals import recorded_statements

pytestmark = pytest.mark.skipif(not POSTGRES_URL, reason="set CONTEXTSTORE_TEST_POSTGRES_URL")


def _admin(statements: str) -> None:
    """Run ``statements`` as the suite's own (administrating) user."""
    engine = sa.create_engine(str(POSTGRES_URL))
    try:
        with engine.begin() as connection:
            connection.exec_driver_sql(statements)
    finally:
        engine.dispose()


class Roles:
    """Login roles made for one test in one schema, and their store URLs."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.made: list[str] = []

    def make(self, *grants: str) -> str:
        """A new login role, given ``grants`` (``{schema}`` and ``{role}`` filled in)."""
        role = f"cs_test_{uuid.uuid4().hex[:10]}"
        database = sa.make_url(str(POSTGRES_URL)).database
        _admin(f'CREATE ROLE {role} LOGIN; GRANT CONNECT ON DATABASE "{database}" TO {role}')
        self.made.append(role)
        for grant in grants:
            _admin(grant.format(schema=self.schema, role=role))
        return role

    def url(self, role: str, schema: str | None = None) -> str:
        """A URL that connects as ``role`` with the search_path in its options."""
        where = schema or self.schema
        url = sa.make_url(str(POSTGRES_URL)).set(
            username=role, query={"options": f"-csearch_path={where}"}
        )
        return url.render_as_string(hide_password=False)

    def drop(self) -> None:
        database = sa.make_url(str(POSTGRES_URL)).database
        for role in self.made:
            _admin(
                f"DROP OWNED BY {role}; "
                f'REVOKE ALL ON DATABASE "{database}" FROM {role}; DROP ROLE {role}'
            )


@pytest.fixture
def roles() -> Iterator[Roles]:
    """Roles in a migrated schema (with two conversations), dropped afterwards."""
    pools = conftest._SCHEMAS
    assert pools is not None
    schema = pools.take()
    with ContextStore.open(str(POSTGRES_URL), engine_kwargs=connect_args(schema)) as owner:
        for title in ("first", "second"):
            owner.append(owner.create_conversation(title=title).id, "user", title)
    made = Roles(schema)
    try:
        yield made
    finally:
        made.drop()
        pools.give_back(schema)


READS = (
    "GRANT USAGE ON SCHEMA {schema} TO {role}",
    "GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}",
)


def _statements(message: str) -> list[str]:
    """The GRANT statements a message asks for, as it writes them."""
    return re.findall(r"GRANT [^;]+;", message)


def _titles(store: ContextStore) -> list[str | None]:
    return sorted(c.title for c in store.list_conversations())


def test_a_role_without_usage_on_the_schema_is_told_the_grants_that_let_it_read(
    roles: Roles,
) -> None:
    role = roles.make()
    # It was called an empty database needing 'contextstore migrate' (and the library
    # migrated, failing with "no schema has been selected to create in").
    for auto_migrate in (True, False):
        with pytest.raises(DatabaseUnavailableError) as refused:
            ContextStore.open(roles.url(role), auto_migrate=auto_migrate)
        message = str(refused.value)
        assert f"permission denied for schema {roles.schema}" in message
        assert "migrate" not in message
    grants = _statements(message)
    assert grants == [
        f"GRANT USAGE ON SCHEMA {roles.schema} TO {role};",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {roles.schema} TO {role};",
    ]
    _admin(" ".join(grants))
    with ContextStore.open(roles.url(role), read_only=True) as store:
        assert _titles(store) == ["first", "second"]


def test_a_role_without_select_is_told_the_grants_and_they_are_enough(roles: Roles) -> None:
    role = roles.make(READS[0])
    with pytest.raises(DatabaseUnavailableError, match="permission denied for table") as refused:
        ContextStore.open(roles.url(role))  # was SQLAlchemy's ProgrammingError
    _admin(" ".join(_statements(str(refused.value))))
    with ContextStore.open(roles.url(role), read_only=True) as store:
        conv = store.list_conversations()[0]
        assert store.messages(conv.id)[0]["content"] == conv.title
        assert store.audit(conv.id) is not None


def test_a_role_that_may_only_read_is_refused_writes_with_the_grants_to_run(
    roles: Roles,
) -> None:
    role = roles.make(*READS)
    with ContextStore.open(roles.url(role)) as store:
        conv = store.list_conversations()[0]
        writes: list[Callable[[], Any]] = [
            store.create_conversation,
            lambda: store.append(conv.id, "assistant", "more"),
            lambda: store.checkpoint(conv.id, label="cp"),
            lambda: store.delete_conversation(conv.id),
        ]
        for write in writes:
            # Each was the driver's InsufficientPrivilege (exit 70, an internal error).
            with pytest.raises(ReadOnlyLocationError, match="nothing was written") as refused:
                write()
            assert "permission denied for" in str(refused.value)
        assert _titles(store) == ["first", "second"]
        assert len(store.messages(conv.id)) == 1
        grants = _statements(str(refused.value))
        assert grants == [
            f"GRANT USAGE ON SCHEMA {roles.schema} TO {role};",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {roles.schema} "
            f"TO {role};",
            f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {roles.schema} TO {role};",
        ]
        _admin(" ".join(grants))
        for write in writes[:-1]:
            write()
        assert store.checkpoints(conv.id)[0].label == "cp"
        writes[-1]()
        assert conv.id not in {c.id for c in store.list_conversations()}


def test_a_role_whose_transactions_are_read_only_is_not_told_about_file_permissions(
    roles: Roles,
) -> None:
    """A role (or database) with default_transaction_read_only on, or a standby: the
    refusal said "the database cannot be written there (...); check the file's and its
    directory's permissions", advice for a SQLite file."""
    role = roles.make(
        *READS,
        "GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
        "GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
        "ALTER ROLE {role} SET default_transaction_read_only = on",
    )
    with ContextStore.open(roles.url(role)) as store:
        conv = store.list_conversations()[0]
        with pytest.raises(ReadOnlyLocationError) as refused:
            store.checkpoint(conv.id, label="cp")
        assert store.checkpoints(conv.id) == []
    message = str(refused.value)
    assert message.startswith(
        "PostgreSQL refuses writes on this connection (cannot execute UPDATE in a read-only "
        "transaction): the server is a standby, or default_transaction_read_only is on for "
        "the role, the database or the URL's options; "
    )
    assert "file" not in message and "permissions" not in message
    cli = run("checkpoint", conv.id, "--label", "cp", "--db", roles.url(role))
    assert cli.code == ReadOnlyLocationError.exit_code
    assert cli.err.endswith("or open the store with --read-only. Nothing was written.\n")
    _admin(f"ALTER ROLE {role} RESET default_transaction_read_only")
    with ContextStore.open(roles.url(role)) as store:
        assert store.checkpoint(conv.id, label="cp").label == "cp"


def test_the_command_line_names_the_grants_for_a_read_only_role(roles: Roles) -> None:
    reader = roles.make(*READS)
    url = roles.url(reader)
    listed = run("conversations", "--json", "--db", url)
    assert listed.code == 0, listed.err
    cid = listed.json()[0]["id"]
    refused = run("checkpoint", cid, "--label", "cp", "--db", url)
    assert refused.code == ReadOnlyLocationError.exit_code, refused.err
    assert "Traceback" not in refused.err and "internal error" not in refused.err
    assert f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {roles.schema} TO {reader};" in refused.err
    stranger = roles.make()
    unseen = run("conversations", "--db", roles.url(stranger))
    assert unseen.code == DatabaseUnavailableError.exit_code, unseen.err
    # Not "cannot open ...: permission denied ...; check --db", nor "run migrate".
    assert f"GRANT USAGE ON SCHEMA {roles.schema} TO {stranger};" in unseen.err
    assert "check --db" not in unseen.err and "migrate" not in unseen.err
    no_select = roles.make(READS[0])
    unread = run("conversations", "--db", roles.url(no_select))
    assert unread.code == DatabaseUnavailableError.exit_code, unread.err
    assert "check --db" not in unread.err
    assert f"GRANT SELECT ON ALL TABLES IN SCHEMA {roles.schema} TO {no_select};" in unread.err


def test_a_server_for_a_role_that_may_only_read_names_its_flag_and_the_grants(
    roles: Roles, tmp_path: Path
) -> None:
    """Over JSON-RPC the refusal said "opens the store with read_only=True (--read-only on
    the command line)": a Python argument and a command line no client writes."""
    from tests.server.conftest import start_stdio

    reader = roles.make(*READS)
    said = {}
    for flags in ((), ("--read-only",)):
        url: Any = roles.url(reader)  # start_stdio passes it on as --db
        process, client = start_stdio(url, tmp_path / "data", *flags)
        try:
            cid = client.result("list_conversations")[0]["id"]
            said[flags] = client.error("checkpoint", conversation_id=cid, label="cp")
        finally:
            process.stop()
    served, read_only = said[()], said[("--read-only",)]
    assert served["data"]["error_class"] == "ReadOnlyLocationError", served
    assert (
        "; nothing was written. A server for a role meant only to read is started with "
        "--read-only; the owner of schema " in served["message"]
    )
    assert (
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {roles.schema} TO {reader};" in (served["message"])
    )
    assert "read_only=" not in served["message"] and "command line" not in served["message"]
    assert read_only["message"] == (
        "this store was opened read-only; start the server without --read-only to write."
    )


def test_a_role_reaches_the_server_over_its_socket_named_as_libpq_names_it(
    roles: Roles,
) -> None:
    engine = sa.create_engine(str(POSTGRES_URL))
    with engine.connect() as connection:
        folders = str(connection.exec_driver_sql("SHOW unix_socket_directories").scalar())
    engine.dispose()
    folder = folders.split(",")[0].strip()
    if not folder or not Path(folder).is_dir():
        pytest.skip("the server listens on no Unix socket this machine sees")
    role = roles.make(*READS)
    url = sa.make_url(roles.url(role))
    libpq = url.render_as_string(hide_password=False).replace(
        f"@{url.host}:{url.port}" if url.port else f"@{url.host}",
        "@" + folder.replace("/", "%2F"),
    )
    with ContextStore.open(libpq, read_only=True) as store:
        assert _titles(store) == ["first", "second"]


def test_a_query_of_a_table_the_role_may_not_read_is_not_called_a_write(roles: Roles) -> None:
    role = roles.make(
        READS[0], "GRANT SELECT ON {schema}.conversations, {schema}.alembic_version TO {role}"
    )
    url = roles.url(role)
    with ContextStore.open(url, read_only=True) as store:
        # Was ReadOnlyError: "refused the statement because queries are read-only".
        with pytest.raises(DatabaseUnavailableError, match="permission denied for table blocks"):
            store.query("SELECT count(*) FROM blocks")
        with pytest.raises(ReadOnlyError, match="read-only"):
            store.query("SELECT nextval('checkpoints_id_seq')")
        assert store.query("SELECT count(*) FROM conversations").rows == [(2,)]
    shown = run("sql", "SELECT count(*) FROM blocks", "--db", url)
    assert shown.code == DatabaseUnavailableError.exit_code, shown.err
    assert f"GRANT SELECT ON ALL TABLES IN SCHEMA {roles.schema} TO {role};" in shown.err


def test_a_role_that_may_not_create_tables_is_told_to_migrate_as_the_owner() -> None:
    with conftest.new_postgres_schema() as schema:
        made = Roles(schema)
        try:
            role = made.make("GRANT USAGE ON SCHEMA {schema} TO {role}")
            with pytest.raises(MigrationError, match="unchanged") as refused:
                ContextStore.open(made.url(role))
            assert f"permission denied for schema {schema}" in str(refused.value)
            assert "run contextstore migrate" in str(refused.value)
            engine = sa.create_engine(str(POSTGRES_URL))
            with engine.connect() as connection:
                tables = connection.execute(
                    sa.text("SELECT count(*) FROM pg_tables WHERE schemaname = :s"), {"s": schema}
                ).scalar()
            engine.dispose()
            assert tables == 0
        finally:
            made.drop()


def test_a_search_path_naming_no_schema_is_said_so_and_nothing_is_made(roles: Roles) -> None:
    missing = f"cs_test_missing_{uuid.uuid4().hex[:8]}"
    # Was "no schema has been selected to create in", inside a MigrationError.
    with pytest.raises(DatabaseUnavailableError, match="names no schema that exists") as refused:
        ContextStore.open(roles.url(_owner(), missing))
    assert f"CREATE SCHEMA {missing}" in str(refused.value)


def _owner() -> str:
    user = sa.make_url(str(POSTGRES_URL)).username
    assert user is not None
    return user


def test_a_connection_the_server_ends_for_idleness_is_replaced_unseen(roles: Roles) -> None:
    """A long-lived store across the server's idle_session_timeout: the next call failed
    with psycopg's IdleSessionTimeout (no ContextStoreError), once per idle period."""
    role = roles.make(*READS)
    with ContextStore.open(roles.url(role), read_only=True) as store:
        conv = store.list_conversations()[0]
        with store.database.read() as connection:
            raw: Any = connection.connection.driver_connection
            raw.execute("SET idle_session_timeout = '10ms'")  # this session only
        ended_pid = raw.info.backend_pid
        # Waits for the server's word (its reason, then the end of the stream), not a time.
        assert select.select([raw.pgconn.socket], [], [], 60)[0]
        assert store.messages(conv.id)[0]["content"] == conv.title
        with store.database.read() as connection:
            assert connection.connection.driver_connection.info.backend_pid != ended_pid


def test_without_select_poll_an_ended_connection_is_still_replaced(
    roles: Roles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows has no ``select.poll``: every PostgreSQL call after a store's first failed
    there with AttributeError. The look at the idle socket uses ``select.select`` instead."""
    monkeypatch.delattr(select, "poll")
    role = roles.make(*READS)
    with ContextStore.open(roles.url(role), read_only=True) as store:
        conv = store.list_conversations()[0]
        assert store.messages(conv.id)[0]["content"] == conv.title
        with store.database.read() as connection:
            raw: Any = connection.connection.driver_connection
            raw.execute("SET idle_session_timeout = '10ms'")  # this session only
        ended_pid = raw.info.backend_pid
        assert select.select([raw.pgconn.socket], [], [], 60)[0]
        assert store.messages(conv.id)[0]["content"] == conv.title
        with store.database.read() as connection:
            assert connection.connection.driver_connection.info.backend_pid != ended_pid


def test_a_statement_the_role_s_statement_timeout_cancels_is_busy_and_not_retried(
    roles: Roles,
) -> None:
    writes = (
        "GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
        "GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
    )
    role = roles.make(*READS, *writes, "ALTER ROLE {role} SET statement_timeout = '50ms'")
    conninfo = str(POSTGRES_URL).replace("postgresql+psycopg://", "postgresql://", 1)
    with ContextStore.open(roles.url(role)) as store:
        conv = store.list_conversations()[0]
        with psycopg.connect(conninfo, options=f"-csearch_path={roles.schema}") as holder:
            # The row stays locked past the role's statement_timeout (50 ms), which ends the
            # writer's wait before the store's lock_timeout (5 s) would.
            holder.execute("SELECT id FROM conversations WHERE id = %s FOR UPDATE", (conv.id,))
            # Was the driver's QueryCanceled (an internal error, exit 70).
            with (
                recorded_statements(store) as statements,
                pytest.raises(DatabaseBusyError, match="statement_timeout") as refused,
            ):
                store.checkpoint(conv.id, label="cp")
            holder.rollback()
        assert "nothing was written" in str(refused.value)
        # Run once: each retry would wait out the timeout again.
        assert sum(s.lstrip().startswith("UPDATE conversations") for s in statements) == 1
        assert store.checkpoints(conv.id) == []


README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def _readme_grants() -> tuple[list[str], list[str]]:
    """The README's statements for the owner, application and auditor roles: those before
    its migration, and those after."""
    section = README.split("### PostgreSQL roles", 1)[1].split("\n### ", 1)[0]
    block = section.split("```\n", 2)[1]
    before, after = block.split("-- then:", 1)
    after = after.split("\n", 1)[1]
    return _split(before), _split(after)


def _split(statements: str) -> list[str]:
    return [" ".join(s.split()) for s in statements.split(";") if s.strip()]


def test_the_readme_grants_let_each_role_do_its_part_across_a_migration() -> None:
    suffix = uuid.uuid4().hex[:8]
    names = {
        "cs_owner": f"cs_test_owner_{suffix}",
        "cs_app": f"cs_test_app_{suffix}",
        "cs_auditor": f"cs_test_auditor_{suffix}",
        "agents": f"cs_test_agents_{suffix}",
    }

    def ours(statement: str) -> str:
        statement = statement.replace(" PASSWORD '...'", "")
        return re.sub(r"\b(cs_owner|cs_app|cs_auditor|agents)\b", lambda m: names[m[1]], statement)

    made = Roles(names["agents"])
    made.made = [names["cs_app"], names["cs_auditor"], names["cs_owner"]]
    before, after = _readme_grants()
    try:
        for statement in before:
            _admin(ours(statement))
        owner_url = made.url(names["cs_owner"])
        with ContextStore.open(owner_url) as owner:
            assert owner.revision_found is None
        for statement in after:
            _admin(ours(statement))
        with ContextStore.open(made.url(names["cs_app"])) as app:
            conv = app.create_conversation(model_id="claude-sonnet-4-5", context_window=200_000)
            app.append(conv.id, "user", "task")
            app.append(conv.id, "assistant", "done")
            ctx = app.prepare_request(conv.id)
            app.record_request(conv.id, request_id=ctx.request_id, tokens_in=10, tokens_out=2)
            app.checkpoint(conv.id, label="cp")
            app.append(conv.id, "user", "undo me")
            rolled = app.rollback(conv.id, to="cp")
            app.restore(conv.id, rolled.rollback_id)
            fork = app.fork(conv.id, at="cp")
            app.delete_conversation(fork.id)
        # A migration the owner runs later recreates views (0017 recreates four): the
        # default privileges give them to the other roles again.
        engine = sa.create_engine(owner_url)
        try:
            migrate.downgrade(engine, is_sqlite=False, revision="0016")
            migrate.upgrade(engine, is_sqlite=False)
        finally:
            engine.dispose()
        auditor_url = made.url(names["cs_auditor"])
        with ContextStore.open(auditor_url, read_only=True) as auditor:
            assert [m["content"] for m in auditor.messages(conv.id)][-1] == "undo me"
            assert auditor.audit(conv.id) is not None
            rows = auditor.query("SELECT count(*) AS n FROM active_nodes").rows
            assert rows[0][0] > 0
        shown = run("sql", "SELECT count(*) FROM audit_requests", "--json", "--db", auditor_url)
        assert shown.code == 0, shown.err
        with ContextStore.open(made.url(names["cs_app"])) as app:
            app.append(conv.id, "assistant", "after the migration")
    finally:
        _admin(f"DROP SCHEMA IF EXISTS {names['agents']} CASCADE")
        made.drop()
