"""A PostgreSQL connection the server ended while it sat idle, found before it is used.

Each thread holds its connection between calls (see :mod:`.database`), so a long-lived
process (a server, an agent between turns) keeps connections idle for as long as nobody
calls. A server that ends idle sessions (a role's or database's ``idle_session_timeout``)
or terminates them (an administrator, a shutdown) sends its reason and closes the socket;
the client learns of it only when it next reads, so the next call failed on its first
statement. Before the held connection is used, :func:`ended_while_idle` looks whether the
server said anything since: a poll of the socket with no wait (no round trip), and, only
when something came, libpq's parsing of it (an error the server sends an idle connection
reaches the connection's notice handlers).
"""

from __future__ import annotations

import select
from typing import Any

IDLE_SESSION_TIMEOUT = "57P05"
"""The SQLSTATE of a session the server ended for its ``idle_session_timeout``: the call
about to run had not reached it, so running it on a new connection repeats nothing."""


def _readable(fd: int) -> bool:
    """True when the socket ``fd`` has something to read, looked at without waiting.

    ``select.poll`` where there is one (``select.select`` refuses descriptors from 1024 on);
    Windows has none, and there ``select.select`` takes any socket (naming ``select.poll``
    failed every PostgreSQL call after the first)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


def ended_while_idle(raw: Any) -> BaseException | None:
    """The error with which the server ended ``raw`` (a psycopg connection outside any
    transaction) since its last call, as the driver would raise it; None when it is still
    open (or inside a transaction, where nothing is read)."""
    import psycopg
    from psycopg import pq

    pgconn = raw.pgconn
    if raw.closed or pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return None
    if not _readable(pgconn.socket):
        return None
    said: list[tuple[str | None, str | None, str | None]] = []

    def hear(diagnostic: Any) -> None:
        # Read now: the result it wraps is freed when the handler returns.
        said.append(
            (
                diagnostic.severity_nonlocalized,
                diagnostic.sqlstate,
                diagnostic.message_primary,
            )
        )

    lost: BaseException | None = None
    raw.add_notice_handler(hear)
    try:
        pgconn.consume_input()
        pgconn.is_busy()  # parses what came: an error sent while idle goes to the handlers
        if pgconn.status == pq.ConnStatus.OK and _readable(pgconn.socket):
            pgconn.consume_input()  # the end of the stream, when the server closed it
    except psycopg.OperationalError as exc:
        lost = exc
    finally:
        raw.remove_notice_handler(hear)
    for severity, sqlstate, message in said:
        if severity in ("FATAL", "PANIC"):
            try:
                kind = psycopg.errors.lookup(sqlstate or "")
            except KeyError:
                kind = psycopg.OperationalError
            error: BaseException = kind(message or "the server closed the connection")
            return error
    if lost is not None or pgconn.status != pq.ConnStatus.OK:
        return lost or psycopg.OperationalError("the server closed the connection")
    return None
