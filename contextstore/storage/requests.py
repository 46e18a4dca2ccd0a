"""Statements on model requests: their rows, their usage, and the options they were built with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select, update

from contextstore.core.errors import CorruptRowError
from contextstore.core.records import RequestRecord
from contextstore.core.validate import payload_sha256
from contextstore.storage.clock import NO_LIMIT
from contextstore.storage.codec import decode_json, decode_object, encode_json
from contextstore.storage.sql import Statement
from contextstore.storage.tables import api_requests, request_options

_a, _o = api_requests.c, request_options.c

USAGE_FIELDS = ("tokens_in", "tokens_out", "cache_writes", "cache_reads", "cost", "failure")
"""The columns ``record_request`` fills in."""

_RECORD_COLUMNS = (
    _a.id,
    _a.conversation_id,
    _a.ts,
    _a.tokens_in,
    _a.tokens_out,
    _a.cache_writes,
    _a.cache_reads,
    _a.cost,
    _a.model_id,
    _a.format,
    _a.payload_sha256,
    _a.failure,
    _a.details,
)


def _record(row: tuple[Any, ...]) -> RequestRecord:
    values = list(row)
    if values[-1] is not None:
        # JSON null (what SQLAlchemy's JSON type writes for None) reads as no details.
        details = decode_json(values[-1], f"request {row[0]} details")
        if details is not None and not isinstance(details, dict):
            raise CorruptRowError(f"request {row[0]} details is not a JSON object.")
        values[-1] = details
    return RequestRecord(*values)


_INSERT_COLUMNS = (
    "conversation_id",
    "ts",
    "model_id",
    "format",
    "options_sha256",
    "system_sha256",
    "tools_sha256",
    "payload_sha256",
    "message_count",
    *USAGE_FIELDS,
)
_INSERT = Statement(
    lambda: (
        insert(api_requests)
        .values({name: bindparam(name) for name in _INSERT_COLUMNS})
        .returning(_a.id)
    )
)


def insert_request(connection: Connection, conversation_id: str, ts: int, **values: Any) -> int:
    """Insert a request row (columns not given are NULL); returns its id."""
    row: dict[str, Any] = dict.fromkeys(_INSERT_COLUMNS)
    row.update(values, conversation_id=conversation_id, ts=ts)
    return int(_INSERT.scalar(connection, row))


_GET = Statement(
    lambda: select(*_RECORD_COLUMNS).where(
        _a.id == bindparam("id"), _a.conversation_id == bindparam("cid")
    )
)


def find_request(
    connection: Connection, conversation_id: str, request_id: int
) -> RequestRecord | None:
    """The conversation's request ``request_id``, or None."""
    row = _GET.first(connection, {"id": request_id, "cid": conversation_id})
    return None if row is None else _record(row)


def _set_column(name: str) -> Any:
    """``UPDATE api_requests`` setting one column of one request."""
    return update(api_requests).where(_a.id == bindparam("id")).values({name: bindparam(name)})


_SET_USAGE = {
    name: Statement(lambda name=name: _set_column(name))  # type: ignore[misc]
    for name in (*USAGE_FIELDS, "model_id")
}


def set_usage(connection: Connection, request_id: int, values: Mapping[str, Any]) -> None:
    """Fill in the given usage columns of a request row (one statement per column, each
    built once: at most seven, and usually four)."""
    for name, value in values.items():
        _SET_USAGE[name].run(connection, {"id": request_id, name: value}).close()


_LIST = Statement(
    lambda: (
        select(*_RECORD_COLUMNS)
        .where(_a.conversation_id == bindparam("cid"), _a.ts <= bindparam("as_of"))
        .order_by(_a.ts)
    )
)


def list_requests(
    connection: Connection, conversation_id: str, as_of: int = NO_LIMIT
) -> list[RequestRecord]:
    """The conversation's requests with ``ts <= as_of``, oldest first."""
    return [
        _record(row) for row in _LIST.rows(connection, {"cid": conversation_id, "as_of": as_of})
    ]


_LAST_USAGE = Statement(
    lambda: (
        select(_a.tokens_in, _a.tokens_out, _a.cache_writes, _a.cache_reads)
        .where(_a.conversation_id == bindparam("cid"), _a.ts <= bindparam("as_of"))
        .order_by(_a.ts.desc())
        .limit(1)
    )
)


def last_request_total(
    connection: Connection, conversation_id: str, as_of: int = NO_LIMIT
) -> int | None:
    """Token total of the newest request, or None if it has no usage recorded (yet).

    As in Cline, only the previous request counts: a prepared request whose usage was
    never recorded (a failed call, a retry) decides nothing, rather than letting an older
    total trigger a second truncation.
    """
    row = _LAST_USAGE.first(connection, {"cid": conversation_id, "as_of": as_of})
    if row is None or all(value is None for value in row):
        return None
    return sum(int(v or 0) for v in row)


_HAS_OPTIONS = Statement(lambda: select(_o.sha256).where(_o.sha256 == bindparam("sha256")))
_INSERT_OPTIONS = Statement(
    lambda: insert(request_options).values(sha256=bindparam("sha256"), data=bindparam("data"))
)


def store_options(connection: Connection, options: Mapping[str, Any]) -> str:
    """Keep a request's options (system prompt, tools, settings) once per content; returns
    their SHA-256."""
    digest = payload_sha256(options)
    if _HAS_OPTIONS.first(connection, {"sha256": digest}) is None:
        _INSERT_OPTIONS.run(
            connection, {"sha256": digest, "data": encode_json(dict(options))}
        ).close()
    return digest


_OPTIONS = Statement(
    lambda: (
        select(_o.data)
        .select_from(api_requests.join(request_options))
        .where(_a.id == bindparam("id"))
    )
)


def load_options(connection: Connection, request_id: int) -> dict[str, Any] | None:
    """The options request ``request_id`` was prepared with, or None (not prepared here)."""
    row = _OPTIONS.first(connection, {"id": request_id})
    return None if row is None else decode_object(row[0], f"options of request {request_id}")
