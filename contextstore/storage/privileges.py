"""What a PostgreSQL role may not do, said with the grants that let it.

A store on PostgreSQL is often opened as a role that does not own its tables: an
application role that reads and writes, an auditor that only reads. Such a role needs
``USAGE`` on the store's schema and ``SELECT`` on its tables to read, ``INSERT``, ``UPDATE``
and ``DELETE`` on them and ``USAGE`` on their sequences to write; migrating needs the
schema's owner. The server's refusal names the object (``permission denied for table
blocks``); these functions add who was refused, in which schema, and the statements that
grant it (the README's "PostgreSQL roles" lists them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, text

from contextstore.core.errors import (
    ContextStoreError,
    DatabaseUnavailableError,
    MigrationError,
    ReadOnlyLocationError,
)

INSUFFICIENT_PRIVILEGE = "42501"
INVALID_SCHEMA_NAME = "3F000"
"""PostgreSQL's SQLSTATE for a refused privilege, and for a statement that creates a table
with no usable schema on the ``search_path`` ("no schema has been selected to create in")."""

ROLES_SECTION = 'see "PostgreSQL roles" in the README'


@dataclass(frozen=True)
class Identity:
    """Who the store's connections are on the server, and where its tables are."""

    role: str
    schema: str | None
    """The schema the store's tables are in: the first schema of the ``search_path`` the
    role may use, else the first one it names that exists (None when none does)."""
    search_path: str
    """The connection's ``search_path`` setting, as the server shows it."""
    usable: bool
    """Whether the role may use a schema of its ``search_path`` (``USAGE``)."""


def _read_identity(connection: Connection) -> Identity:
    """The connection's role, its store's schema and its ``search_path``."""
    row = connection.execute(
        text(
            "SELECT current_user, current_schema(), current_setting('search_path'), "
            "ARRAY(SELECT nspname::text FROM pg_namespace)"
        )
    ).one()
    role, usable, search_path, existing = str(row[0]), row[1], str(row[2]), set(row[3])
    if usable is not None:
        return Identity(role, str(usable), search_path, True)
    named = [role if name == "$user" else name for name in search_path_names(search_path)]
    schema = next((name for name in named if name in existing), None)
    return Identity(role, schema, search_path, False)


def identity(engine: Engine) -> Identity | None:
    """:func:`_read_identity` on a new connection of ``engine``; None when it cannot be read
    (the message then names the role and schema generically)."""
    try:
        with engine.connect() as connection:
            return _read_identity(connection)
    except Exception:
        return None


def search_path_names(search_path: str) -> list[str]:
    """The schema names of a ``search_path`` setting (``"$user", public`` gives ``$user``
    and ``public``; a quoted name keeps its case, commas and doubled quotes)."""
    names = []
    for match in re.finditer(r'\s*(?:"((?:[^"]|"")*)"|([^,\s]+))\s*(?:,|$)', search_path):
        quoted, bare = match.group(1), match.group(2)
        if quoted is not None:
            names.append(quoted.replace('""', '"'))
        elif bare:
            names.append(bare.lower())
    return names


def quoted_name(name: str) -> str:
    """``name`` as SQL writes it: bare when PostgreSQL would read it back unchanged."""
    if re.fullmatch(r"[a-z_][a-z0-9_$]*", name):
        return name
    return '"' + name.replace('"', '""') + '"'


def _names(who: Identity | None) -> tuple[str, str]:
    role = quoted_name(who.role) if who is not None else "ROLE"
    schema = quoted_name(who.schema) if who is not None and who.schema else "SCHEMA"
    return role, schema


def read_grants(who: Identity | None) -> str:
    """The statements that let a role read the store."""
    role, schema = _names(who)
    return (
        f"GRANT USAGE ON SCHEMA {schema} TO {role}; "
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role};"
    )


def write_grants(who: Identity | None) -> str:
    """The statements that let a role read and write the store."""
    role, schema = _names(who)
    return (
        f"GRANT USAGE ON SCHEMA {schema} TO {role}; "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}; "
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role};"
    )


def _who(who: Identity | None) -> str:
    return f"role {quoted_name(who.role)}" if who is not None else "the role connected"


def _owner(who: Identity | None) -> str:
    schema = _names(who)[1]
    return f"the owner of schema {schema}" if schema != "SCHEMA" else "the schema's owner"


def refused(reason: str, who: Identity | None, *, writing: bool) -> ContextStoreError:
    """The error for a privilege the server refused ``who`` (``reason``: its words).

    A refused read is :class:`DatabaseUnavailableError`, as a SQLite file this user may not
    read is; a refused write :class:`ReadOnlyLocationError`, as a file this user may not
    write is (a role meant only to read opens the store read-only)."""
    if not writing:
        return DatabaseUnavailableError(
            f"PostgreSQL refused {_who(who)} a privilege the store needs to read ({reason}); "
            f"{_owner(who)} grants what a role that reads needs ({ROLES_SECTION}): "
            f"{read_grants(who)}"
        )
    situation = f"PostgreSQL refused {_who(who)} a privilege the write needs ({reason})"
    return ReadOnlyLocationError(
        f"{situation}; nothing was written. A role meant only to read opens the store with "
        f"read_only=True (--read-only on the command line); {_owner(who)} grants what a "
        f"role that writes needs ({ROLES_SECTION}): {write_grants(who)}",
        situation=situation,
    )


def migration_refused(reason: str, who: Identity | None) -> MigrationError:
    """The error for a migration the server refused ``who`` (``reason``: its words)."""
    return MigrationError(
        f"the upgrade was refused and rolled back, so the database is unchanged: PostgreSQL "
        f"refused {_who(who)} a privilege the migration needs ({reason}); connected as "
        f"{_owner(who)}, run contextstore migrate (a migration creates and alters its "
        f"tables), then grant other roles what they need ({ROLES_SECTION})."
    )


def check_schema_usable(engine: Engine) -> None:
    """Refuse a ``search_path`` that leads to no schema the role may use, before the store
    calls the database empty and advises a migration (which could not run there either).

    Raises:
        DatabaseUnavailableError: the schema exists but the role lacks ``USAGE`` on it, or
            no schema the path names exists.
    """
    who = identity(engine)
    if who is None or who.usable:
        return
    if who.schema is not None:
        raise refused(f"permission denied for schema {who.schema}", who, writing=False)
    named = search_path_names(who.search_path)
    schema = quoted_name(named[0]) if named else "SCHEMA"
    raise DatabaseUnavailableError(
        f"the connection's search_path ({who.search_path}) names no schema that exists, so "
        "there is no store there and none can be made; fix the search_path (the URL's "
        f"options=-csearch_path%3D{schema}), or create the schema (CREATE SCHEMA {schema} "
        "AUTHORIZATION OWNER) and run 'contextstore migrate' as its owner."
    )
