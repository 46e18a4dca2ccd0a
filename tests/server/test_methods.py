"""Every public store method over both transports: its happy path against the Python API on
the same database (the oracle), and its errors mapped as the protocol says."""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.server.methods import (
    EXCLUDED,
    FUNCTIONS,
    METHODS,
    PYTHON_ONLY_PARAMETERS,
    public_method_names,
    to_json,
)
from tests.server.conftest import RpcClient

TOOLS = [{"name": "read_file", "description": "Read a file", "input_schema": {"type": "object"}}]


def test_every_public_store_method_is_served_or_excluded_with_a_reason() -> None:
    public = set(public_method_names(ContextStore))
    assert public == (set(METHODS) - set(FUNCTIONS)) | set(EXCLUDED)
    assert not set(METHODS) & set(EXCLUDED)
    assert all(reason for reason in EXCLUDED.values())
    assert {"append", "prepare_request", "rollback", "request_payload"} <= set(METHODS)


DESIGN_PURE_FUNCTIONS = {
    "context_window_info",
    "should_compact",
    "next_truncation_range",
    "truncated_messages",
    "ensure_tool_results_follow_tool_use",
    "optimize_file_reads",
    "harden_history",
}
"""The pure functions DESIGN.md lists as importable from ``contextstore``."""


def test_every_pure_function_of_the_python_api_is_served_as_itself() -> None:
    import contextstore

    assert set(FUNCTIONS) == DESIGN_PURE_FUNCTIONS
    for name, function in FUNCTIONS.items():
        assert getattr(contextstore, name) is function
        assert METHODS[name].function is function


def test_a_store_method_and_a_pure_function_cannot_share_a_name() -> None:
    from contextstore.server.methods import build_table

    class Clashing(ContextStore):
        def should_compact(self, conversation_id: str) -> bool:
            """A store method named like a pure function."""
            return False

    with pytest.raises(TypeError, match="should_compact"):
        build_table(Clashing)


def test_a_method_added_to_the_class_is_served_without_touching_the_table() -> None:
    from contextstore.server.methods import build_table

    class Extended(ContextStore):
        def shout(self, conversation_id: str, *, times: int = 2) -> list[str]:
            """Say it louder."""
            return [conversation_id.upper()] * times

    table = build_table(Extended)
    assert set(table) == set(METHODS) | {"shout"}
    assert table["shout"].validate({"conversation_id": "a", "times": 3}) == {
        "conversation_id": "a",
        "times": 3,
    }


def test_parameters_are_the_python_signature_less_python_only_ones() -> None:
    for name, method in METHODS.items():
        if name == "append":  # its wire signature is written beside it
            continue
        function = FUNCTIONS.get(name) or getattr(ContextStore, name)
        python = [
            p
            for p in inspect.signature(function).parameters
            if p != "self" and p not in PYTHON_ONLY_PARAMETERS
        ]
        assert list(method.params.model_fields) == python, name
    assert list(METHODS["append"].params.model_fields) == [
        "conversation_id",
        "role",
        "content",
        "meta",
        "ts",
    ]
    assert "summarizer" not in METHODS["prepare_request"].params.model_fields
    assert "pipeline" not in METHODS["render"].params.model_fields


def test_validation_is_strict_and_names_the_params() -> None:
    from contextstore.server.methods import InvalidParamsError

    with pytest.raises(InvalidParamsError) as caught:
        METHODS["append"].validate({"conversation_id": "c", "role": 1, "ts": "5", "extra": 0})
    problems = {p["param"]: p["message"] for p in caught.value.problems}
    assert problems == {
        "role": "input should be a valid string",
        "content": "required",
        "ts": "input should be a valid integer",
        "extra": "unknown parameter",
    }
    assert "append takes conversation_id, role, content, meta, ts" in str(caught.value)
    with pytest.raises(InvalidParamsError):  # a boolean is not an integer on the wire
        METHODS["record_request"].validate({"conversation_id": "c", "tokens_in": True})


def test_a_parameter_name_with_a_lone_surrogate_is_named_as_such() -> None:
    """JSON allows ``{"\\ud800": 1}``; pydantic cannot read such a key, and its own words
    ("unable to parse raw data as a unicode string") reached the client."""
    from contextstore.server.methods import InvalidParamsError

    with pytest.raises(InvalidParamsError) as caught:
        METHODS["get_conversation"].validate({"conversation_id": "c", "\ud800": 1})
    assert caught.value.problems == [
        {"param": "params", "message": "a parameter name is not valid Unicode text"}
    ]


def test_records_become_json_with_field_names_properties_and_lists() -> None:
    from contextstore.core.records import PreparedRequest, TruncationDecision

    decision = TruncationDecision("truncate", "half", (2, 5), None, 10, (3, 4), 0.5, "why")
    encoded = to_json(PreparedRequest("c", [], (2, 5), decision, request_id=7))
    assert encoded["deleted_range"] == [2, 5]
    assert encoded["decision"]["deduplicated"] == [3, 4]
    assert encoded["truncated"] is True
    assert encoded["request_id"] == 7


def test_a_named_tuple_becomes_an_object_of_its_fields() -> None:
    from contextstore import context_window_info

    assert to_json(context_window_info(8192)) == {
        "context_window": 8192,
        "max_allowed_size": 6553.6,
    }
    assert to_json((2, 5)) == [2, 5]


# -- every method over both transports ---------------------------------------------------


def _conversation(rpc: RpcClient) -> dict[str, Any]:
    """A conversation with a tool call answered, a checkpoint, a prepared request."""
    conv = rpc.result("create_conversation", model_id="claude-sonnet-4-5", context_window=200_000)
    cid = conv["id"]
    rpc.result("append", conversation_id=cid, role="user", content="<task>fix it</task>")
    rpc.result(
        "append_many",
        conversation_id=cid,
        new_messages=[
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}},
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
            {"role": "assistant", "content": "Done reading."},
            {"role": "user", "content": "Now fix it."},
        ],
    )
    checkpoint = rpc.result("checkpoint", conversation_id=cid, label="cp")
    prepared = rpc.result("prepare_request", conversation_id=cid, system="Be careful.", tools=TOOLS)
    return {"cid": cid, "checkpoint": checkpoint, "prepared": prepared}


def _same_as_python(db: Path, name: str, params: dict[str, Any], result: Any) -> None:
    with ContextStore.open(db) as store:
        assert result == to_json(getattr(store, name)(**params)), name


Case = Callable[[RpcClient, dict[str, Any], Path], None]
READS = {
    "audit": {},
    "checkpoint_at": {"label": "cp"},
    "checkpoints": {},
    "context_updates": {},
    "deleted_range": {},
    "get_conversation": {},
    "message_count": {},
    "messages": {},
    "nodes": {"view": "active"},
    "render": {"format": "openai"},
    "requests": {},
    "row_counts": {},
    "source_records": {},
    "removed_source_records": {},
    "message_timestamps": {},
    "timeline": {},
    "viewed_messages": {},
    "lineage_edges": {},
    "processor_runs": {},
}


def _read_case(name: str) -> Case:
    def case(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
        params = {"conversation_id": state["cid"], **READS[name]}
        _same_as_python(db, name, params, rpc.result(name, **params))

    return case


def _search(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    params = {"text": "fix it", "conversation_id": state["cid"]}
    hits = rpc.result("search", **params)
    assert [h["message_idx"] for h in hits] == [4, 0]  # newest first
    _same_as_python(db, "search", params, hits)


def _list_conversations(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    listed = rpc.result("list_conversations")
    assert state["cid"] in [c["id"] for c in listed]
    _same_as_python(db, "list_conversations", {}, listed)


def _request_payload(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    prepared = state["prepared"]
    params = {"conversation_id": state["cid"], "request_id": prepared["request_id"]}
    payload = rpc.result("request_payload", **params)
    assert payload == prepared["payload"]
    _same_as_python(db, "request_payload", params, payload)


def _prepare_request(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    prepared = rpc.result(
        "prepare_request", conversation_id=state["cid"], system="S", tools=TOOLS, format="openai"
    )
    assert prepared["format"] == "openai" and prepared["truncated"] is False
    assert prepared["payload"]["messages"][0] == {"role": "system", "content": "S"}
    with ContextStore.open(db) as store:
        assert store.request_payload(state["cid"], prepared["request_id"]) == prepared["payload"]


def _record_request(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    request_id = state["prepared"]["request_id"]
    record = rpc.result(
        "record_request",
        conversation_id=state["cid"],
        request_id=request_id,
        tokens_in=1200,
        tokens_out=80,
        cost=0.25,
    )
    assert (record["id"], record["tokens_in"], record["total_tokens"]) == (request_id, 1200, 1280)
    with ContextStore.open(db) as store:
        assert to_json(store.requests(state["cid"])[-1]) == record


def _append(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    content = [{"type": "text", "text": "more"}]
    written = rpc.result("append", conversation_id=state["cid"], role="user", content=content)
    assert (written["index"], written["role"]) == (5, "user") and written["token_count"] > 0
    with ContextStore.open(db) as store:
        assert store.messages(state["cid"])[5]["content"] == content


def _append_many(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    written = rpc.result(
        "append_many",
        conversation_id=state["cid"],
        new_messages=[{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
    )
    assert [w["index"] for w in written] == [5, 6]
    with ContextStore.open(db) as store:
        assert [m["content"] for m in store.messages(state["cid"])[5:]] == ["a", "b"]


def _add_context_update(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    ts = rpc.result(
        "add_context_update",
        conversation_id=state["cid"],
        message_idx=1,
        block_idx=0,
        text="Rewritten.",
    )
    with ContextStore.open(db) as store:
        assert [u["ts"] for u in store.context_updates(state["cid"])][-1] == ts
        assert store.render(state["cid"])[1]["content"][0]["text"] == "Rewritten."


def _check(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    assert rpc.result("check", conversation_id=state["cid"])["problems"] == []


def _checkpoint(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    made = rpc.result("checkpoint", conversation_id=state["cid"], label="later", note="n")
    assert (made["label"], made["note"]) == ("later", "n")
    with ContextStore.open(db) as store:
        assert to_json(store.checkpoints(state["cid"])[-1]) == made


def _create_conversation(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    made = rpc.result("create_conversation", title="T", metadata={"k": [1]}, context_window=8192)
    with ContextStore.open(db) as store:
        assert to_json(store.get_conversation(made["id"])) == made
    assert made["metadata"] == {"k": [1]}


def _create_subagent(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    child = rpc.result("create_subagent", parent_id=state["cid"], title="helper")
    assert child["parent_id"] == state["cid"] and child["metadata"] == {"subagent": True}


def _delete_conversation(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    counts = rpc.result("delete_conversation", conversation_id=state["cid"])
    assert counts["messages"] == 5
    assert rpc.error("get_conversation", conversation_id=state["cid"])["code"] == -32003


def _fork(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    forked = rpc.result("fork", conversation_id=state["cid"], at="cp", title="fork")
    assert forked["forked_at_ts"] == state["checkpoint"]["ts"]
    with ContextStore.open(db) as store:
        assert store.messages(forked["id"]) == store.messages(state["cid"])


def _rollback(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    cid = state["cid"]
    preview = rpc.result("rollback", conversation_id=cid, to="cp", dry_run=True)
    assert preview["dry_run"] is True and preview["removed"]["api_requests"] == 1
    report = rpc.result("rollback", conversation_id=cid, to=state["checkpoint"]["ts"])
    assert report["removed"] == preview["removed"] and report["archived"] is True
    assert report["total_removed"] == sum(report["removed"].values())
    with ContextStore.open(db) as store:
        assert store.requests(cid) == []


def _restore(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    cid = state["cid"]
    report = rpc.result("rollback", conversation_id=cid, to="cp")
    restored = rpc.result("restore", conversation_id=cid, rollback_id=report["rollback_id"])
    assert restored["restored"] == report["removed"]
    with ContextStore.open(db) as store:
        assert len(store.requests(cid)) == 1


def _set_auto_condense(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    assert rpc.result("set_auto_condense", conversation_id=state["cid"], threshold=0.5) is None
    with ContextStore.open(db) as store:
        assert store.get_conversation(state["cid"]).metadata["auto_condense"] == 0.5


def _set_conversation_metadata(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    params = {"conversation_id": state["cid"], "metadata": {"source": "tool", "n": [1]}}
    assert rpc.result("set_conversation_metadata", **params) is None
    with ContextStore.open(db) as store:
        assert store.get_conversation(state["cid"]).metadata == {"source": "tool", "n": [1]}


def _set_conversation_model(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    cid = state["cid"]
    more = [
        {"role": "assistant", "content": f"a{n}"}
        if n % 2 == 0
        else {"role": "user", "content": f"u{n}"}
        for n in range(8)
    ]
    rpc.result("append_many", conversation_id=cid, new_messages=more)
    rpc.result(
        "record_request",
        conversation_id=cid,
        request_id=state["prepared"]["request_id"],
        tokens_in=150_000,
    )
    changed = rpc.result(
        "set_conversation_model", conversation_id=cid, model_id="gpt-4o", context_window=128_000
    )
    assert (changed["model_id"], changed["context_window"]) == ("gpt-4o", 128_000)
    # 150,000 tokens was under 200,000's maximum (160,000); it is over 128,000's (98,000).
    prepared = rpc.result("prepare_request", conversation_id=cid, system="Be careful.", tools=TOOLS)
    assert prepared["decision"]["action"] == "truncate", prepared["decision"]
    assert "128,000-token window" in prepared["decision"]["reason"]
    with ContextStore.open(db) as store:
        conv = store.get_conversation(cid)
        assert (conv.model_id, conv.context_window) == ("gpt-4o", 128_000)
        assert [r.context_window for r in store.audit(cid).requests] == [200_000, 128_000]


def _set_deleted_range(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    ts = rpc.result("set_deleted_range", conversation_id=state["cid"], end=2, reason="test")
    assert rpc.result("deleted_range", conversation_id=state["cid"]) == [2, 2]
    assert rpc.result("deleted_range", conversation_id=state["cid"], as_of=ts - 1) is None


def _truncate(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    more = [{"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
    rpc.result("append_many", conversation_id=state["cid"], new_messages=more)
    decision = rpc.result("truncate", conversation_id=state["cid"], keep="last_two", summary="s")
    assert decision["action"] == "truncate" and decision["keep"] == "last_two"
    with ContextStore.open(db) as store:
        assert list(store.deleted_range(state["cid"]) or ()) == decision["deleted_range"]


def _run_processors(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
    runs = rpc.result("run_processors", conversation_id=state["cid"])
    assert runs == []  # prepare_request already ran the store's pipeline on every message
    rpc.result("append", conversation_id=state["cid"], role="assistant", content="done")
    (run,) = rpc.result("run_processors", conversation_id=state["cid"])
    assert run["processor"] == "secret_mask" and run["first_message_idx"] == 5
    with ContextStore.open(db) as store:
        assert to_json(store.processor_runs(state["cid"])[-1]) == run


CASES: dict[str, Case] = {
    **{name: _read_case(name) for name in READS},
    "run_processors": _run_processors,
    "add_context_update": _add_context_update,
    "append": _append,
    "append_many": _append_many,
    "check": _check,
    "checkpoint": _checkpoint,
    "create_conversation": _create_conversation,
    "create_subagent": _create_subagent,
    "delete_conversation": _delete_conversation,
    "fork": _fork,
    "list_conversations": _list_conversations,
    "prepare_request": _prepare_request,
    "record_request": _record_request,
    "request_payload": _request_payload,
    "restore": _restore,
    "rollback": _rollback,
    "search": _search,
    "set_auto_condense": _set_auto_condense,
    "set_conversation_metadata": _set_conversation_metadata,
    "set_conversation_model": _set_conversation_model,
    "set_deleted_range": _set_deleted_range,
    "truncate": _truncate,
}


BODY = "line\n" * 400


def _read_turn(call_id: str, path: str) -> list[dict[str, Any]]:
    """An assistant reading ``path`` and the user's answer, in Cline's text form."""
    call = {"type": "tool_use", "id": call_id, "name": "read_file", "input": {"path": path}}
    result = f"[read_file for '{path}'] Result:\n{BODY}"
    return [
        {"role": "assistant", "content": [call]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call_id, "content": result}],
        },
    ]


HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "<task>read a.py twice</task>"},
    {"role": "assistant", "content": "Reading."},
    {"role": "user", "content": "Go on."},
    *_read_turn("t1", "a.py"),
    *_read_turn("t2", "a.py"),
    {"role": "assistant", "content": "Done."},
    {"role": "user", "content": "Thanks."},
]
"""A history held by a client, not by the store: the pure functions' argument."""


def _pure(name: str, **params: Any) -> Case:
    """A pure function's call, checked against the function itself in this process."""

    def case(rpc: RpcClient, state: dict[str, Any], db: Path) -> None:
        result = rpc.result(name, **params)
        assert result == to_json(FUNCTIONS[name](**params)), name
        CHECKS[name](result)

    return case


CHECKS: dict[str, Callable[[Any], None]] = {
    "context_window_info": lambda r: _equal(
        r, {"context_window": 200_000, "max_allowed_size": 160_000.0}
    ),
    "should_compact": lambda r: _equal(r, True),
    "next_truncation_range": lambda r: _equal(r, [2, 3]),
    "truncated_messages": lambda r: _equal(r, [HISTORY[0], HISTORY[1], *HISTORY[5:]]),
    "ensure_tool_results_follow_tool_use": lambda r: _equal(
        r[4]["content"][0],
        {"type": "tool_result", "tool_use_id": "t1", "content": "result missing"},
    ),
    "optimize_file_reads": lambda r: _equal(
        (r["changed"], r["indices"], r["need_to_truncate"], len(r["messages"])),
        (True, [4], False, len(HISTORY)),
    ),
    "harden_history": lambda r: _equal([c["role"] for c in r], ["user", "model", "user"]),
}


def _equal(found: Any, expected: Any) -> None:
    assert found == expected


FUNCTION_CASES: dict[str, Case] = {
    "context_window_info": _pure("context_window_info", window=200_000),
    # 150,000 is under 200,000's maximum (160,000) but reaches the threshold's 100,000.
    "should_compact": _pure(
        "should_compact", total_tokens=150_000, context_window=200_000, threshold=0.5
    ),
    "next_truncation_range": _pure(
        "next_truncation_range", messages=HISTORY, current_range=None, keep="half"
    ),
    "truncated_messages": _pure("truncated_messages", messages=HISTORY, deleted_range=[2, 4]),
    "ensure_tool_results_follow_tool_use": _pure(
        "ensure_tool_results_follow_tool_use",
        messages=[*HISTORY[:4], {"role": "user", "content": "The file was empty."}],
    ),
    "optimize_file_reads": _pure("optimize_file_reads", messages=HISTORY),
    "harden_history": _pure(
        "harden_history", contents=[{"role": "model", "parts": [{"text": "hi"}]}]
    ),
}
CASES.update(FUNCTION_CASES)


def test_every_served_method_has_a_happy_path_test() -> None:
    assert set(CASES) == set(METHODS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_happy_path(name: str, rpc: RpcClient, transports: dict[str, Any]) -> None:
    state = _conversation(rpc)
    CASES[name](rpc, state, transports["db"])


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(METHODS))
def test_an_unknown_parameter_is_invalid_params_naming_it(name: str, rpc: RpcClient) -> None:
    error = rpc.error(name, {"no_such_parameter": 1})
    assert error["code"] == -32602
    assert error["data"]["error_class"] == "InvalidParamsError"
    assert error["data"]["exit_code"] == 2
    assert {"param": "no_such_parameter", "message": "unknown parameter"} in error["data"][
        "problems"
    ]
    assert "no_such_parameter: unknown parameter" in error["message"]


def _valid_params(name: str) -> dict[str, Any]:
    """Well-typed params naming a conversation that does not exist."""
    values = {
        "conversation_id": "no-such-conversation",
        "parent_id": "no-such-conversation",
        "role": "user",
        "content": "x",
        "new_messages": [{"role": "user", "content": "x"}],
        "message_idx": 0,
        "block_idx": 0,
        "text": "x",
        "request_id": 1,
        "rollback_id": 1,
        "to": "cp",
        "label": "cp",
        "end": 2,
        "threshold": 0.5,
        "metadata": {},
    }
    fields = METHODS[name].params.model_fields
    return {k: values[k] for k, f in fields.items() if f.is_required()}


NOT_ABOUT_A_CONVERSATION = {
    "check",  # its conversation_id is optional: without it, every conversation is checked
    "create_conversation",
    "list_conversations",
    "row_counts",
    "search",
    *FUNCTIONS,
}


@pytest.mark.parametrize("name", sorted(set(METHODS) - NOT_ABOUT_A_CONVERSATION))
def test_an_unknown_conversation_is_a_not_found_error(name: str, rpc: RpcClient) -> None:
    error = rpc.error(name, _valid_params(name))
    assert error["code"] == -32003, error
    # request_payload looks the request up by (conversation, id): no such request.
    expected = "RequestNotFoundError" if name == "request_payload" else "ConversationNotFoundError"
    assert error["data"]["error_class"] == expected
    assert error["data"]["exit_code"] == 3
    assert error["data"]["message"] == error["message"]
    assert "no-such-conversation" in error["message"] or name == "request_payload"


@pytest.mark.parametrize(
    ("name", "params", "error_class", "code"),
    [
        ("render", {"format": "xml"}, "InvalidInputError", -32602),
        ("truncate", {"keep": "most"}, "InvalidInputError", -32602),
        ("request_payload", {"request_id": 999}, "RequestNotFoundError", -32003),
        ("rollback", {"to": "no-such-label"}, "CheckpointNotFoundError", -32003),
        ("restore", {"rollback_id": 999}, "RollbackNotFoundError", -32003),
        ("append", {"role": "user", "content": "x", "ts": 1}, "TimelineError", -32602),
        ("append", {"role": "robot", "content": "x"}, "InvalidMessageError", -32602),
        ("checkpoint", {"note": "a\x00b"}, "InvalidInputError", -32602),
        ("fork", {"at": "no-such-label"}, "CheckpointNotFoundError", -32003),
        ("prepare_request", {"system": []}, "InvalidInputError", -32602),
    ],
)
def test_store_errors_carry_their_class_and_exit_code(
    name: str, params: dict[str, Any], error_class: str, code: int, rpc: RpcClient
) -> None:
    state = _conversation(rpc)
    error = rpc.error(name, {"conversation_id": state["cid"], **params})
    assert (error["code"], error["data"]["error_class"]) == (code, error_class), error
    assert error["data"]["exit_code"] == (2 if code == -32602 else 3)
    assert rpc.result("get_conversation", conversation_id=state["cid"])["id"] == state["cid"]


LONG_CALL_ID = "fc_0f0e50a1476a6c35006912c58dc9f8819192c25864eb16f07f"


def test_openai_renders_over_the_wire_shorten_long_tool_call_ids(
    rpc: RpcClient, transports: dict[str, Any]
) -> None:
    """``render`` and ``prepare_request`` in the OpenAI format go through the store's
    renderer: a call id over 40 characters is sent short, the same in call and result."""
    cid = rpc.result("create_conversation")["id"]
    rpc.result(
        "append_many",
        conversation_id=cid,
        new_messages=[
            {"role": "user", "content": "list"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": LONG_CALL_ID, "name": "ls", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": LONG_CALL_ID, "content": "a"}],
            },
        ],
    )
    rendered = rpc.result("render", conversation_id=cid, format="openai")
    prepared = rpc.result("prepare_request", conversation_id=cid, format="openai")
    assert prepared["payload"]["messages"] == rendered
    (call,) = rendered[1]["tool_calls"]
    assert len(call["id"]) <= 40 and rendered[2]["tool_call_id"] == call["id"]
    rebuilt = rpc.result("request_payload", conversation_id=cid, request_id=prepared["request_id"])
    assert rebuilt == prepared["payload"]


def test_a_system_prompt_of_text_blocks_is_passed_through(
    rpc: RpcClient, transports: dict[str, Any]
) -> None:
    """``system`` takes Anthropic text blocks over the wire too; a bad block is named in
    the terms of the JSON params."""
    state = _conversation(rpc)
    system = [
        {"type": "text", "text": "Be careful.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Be brief."},
    ]
    prepared = rpc.result("prepare_request", conversation_id=state["cid"], system=system)
    assert prepared["payload"]["system"] == system
    rebuilt = rpc.result(
        "request_payload", conversation_id=state["cid"], request_id=prepared["request_id"]
    )
    assert rebuilt == prepared["payload"]
    openai = rpc.result(
        "prepare_request", conversation_id=state["cid"], system=system, format="openai"
    )
    assert openai["payload"]["messages"][0] == {
        "role": "system",
        "content": "Be careful.\n\nBe brief.",
    }
    error = rpc.error(
        "prepare_request",
        conversation_id=state["cid"],
        system=[{"type": "text", "text": "a", "extra": 1}],
    )
    assert error["message"].startswith("system[0] has the field(s) 'extra'")


def test_a_refused_call_writes_nothing(rpc: RpcClient, transports: dict[str, Any]) -> None:
    state = _conversation(rpc)
    before = rpc.result("row_counts", conversation_id=state["cid"])
    rpc.error("append", conversation_id=state["cid"], role="assistant", content=[{"type": "?"}])
    rpc.error("prepare_request", conversation_id=state["cid"], tools=[{"no": "name"}])
    assert rpc.result("row_counts", conversation_id=state["cid"]) == before


def test_a_blank_model_id_is_refused_naming_the_member_and_changes_nothing(
    rpc: RpcClient,
) -> None:
    """``"model_id": " "`` was taken, and the conversation's requests named model " "."""
    state = _conversation(rpc)
    cid = state["cid"]
    conversations = len(rpc.result("list_conversations"))
    before = rpc.result("row_counts", conversation_id=cid)
    for method, params, member in [
        ("create_conversation", {"model_id": " "}, "model_id"),
        ("set_conversation_model", {"conversation_id": cid, "model_id": " "}, "model_id"),
        ("create_subagent", {"parent_id": cid, "model_id": "\t"}, "model_id"),
        ("prepare_request", {"conversation_id": cid, "model": " gpt-4o"}, "model"),
        ("record_request", {"conversation_id": cid, "tokens_in": 1, "model_id": ""}, "model_id"),
    ]:
        error = rpc.error(method, **params)
        assert error["code"] == -32602, (method, error)
        assert error["message"].startswith(f"{member} must"), (method, error["message"])
        assert (
            "blank" in error["message"]
            or "whitespace" in error["message"]
            or ("non-empty" in error["message"])
        ), (method, error["message"])
    assert rpc.result("row_counts", conversation_id=cid) == before
    assert len(rpc.result("list_conversations")) == conversations
    assert rpc.result("get_conversation", conversation_id=cid)["model_id"] == "claude-sonnet-4-5"


@pytest.mark.parametrize(
    ("method", "params", "problem"),
    [
        ("append", {"role": "user", "content": "x", "meta": [1]}, "input should be an object"),
        ("append_many", {"new_messages": {}}, "input should be an array"),
        ("append_many", {"new_messages": [1]}, "item 0: input should be an object"),
        (
            "append",
            {"role": "user", "content": 5},
            "input should be a valid string or input should be an array",
        ),
        ("prepare_request", {"tools": "read_file"}, "input should be an array, not a string"),
        (
            "prepare_request",
            {"system": 5},
            "input should be a valid string or input should be an array",
        ),
        ("run_processors", {"demand": "trim"}, "input should be an array, not a string"),
        ("create_conversation", {"metadata": "x"}, "input should be an object"),
    ],
)
def test_wrong_types_are_said_in_json_terms(
    method: str, params: dict[str, Any], problem: str, rpc: RpcClient
) -> None:
    """Objects and arrays, as the client wrote them; never dictionary, list or Sequence."""
    if "conversation_id" in METHODS[method].params.model_fields:
        params = {"conversation_id": "c", **params}
    error = rpc.error(method, params)
    assert error["code"] == -32602
    (bad,) = [p for p in error["data"]["problems"] if p["param"] != "conversation_id"]
    assert bad["message"] == problem
    for python in ("dictionary", "valid list", "Sequence", "'str'", "instance of"):
        assert python not in error["message"]


def test_store_errors_name_methods_not_python_calls(rpc: RpcClient) -> None:
    """Every JSON-RPC wording rule, triggered by a real call."""
    from contextstore.server.wording import RPC_RULES

    missing = rpc.error("get_conversation", conversation_id="nope")
    assert missing["message"].endswith("list them with the list_conversations method.")
    assert missing["data"]["message"] == missing["message"]
    cid = rpc.result("create_conversation")["id"]
    system = rpc.error("append", conversation_id=cid, role="system", content="be brief")
    assert "pass a system prompt as prepare_request's system param" in system["message"]
    infinite = rpc.send(
        b'{"jsonrpc":"2.0","id":"inf","method":"create_conversation",'
        b'"params":{"metadata":{"x":1e999}}}'
    )["error"]
    assert "metadata.x is inf" in infinite["message"]
    assert "send null or a string instead" in infinite["message"]
    threshold = rpc.error("should_compact", total_tokens=1, context_window=None, threshold=1.5)
    assert threshold["message"].endswith(
        "send null (or leave threshold out) to compact at the maximum allowed size"
    )
    a_range = rpc.error("next_truncation_range", messages=[], current_range=[2], keep="half")
    assert a_range["message"].startswith(
        "a deleted range is an array of two integers, [start, end], got [2]"
    ), a_range
    for error in (missing, system, infinite, threshold, a_range):
        assert "ContextStore." not in error["message"] and "(system=" not in error["message"]
        assert "None" not in error["message"]
    # The others: test_a_read_only_location_names_the_server_flag and the tests below it.
    assert len(RPC_RULES) == 19


@pytest.mark.parametrize(
    ("method", "params", "said"),
    [
        (
            "append",
            {"content": [{"type": "text", "text": None}]},
            "text must be a string, got null.",
        ),
        (
            "append",
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "a", "name": "b", "input": None}],
            },
            "content[0] (tool_use): input must be an object, got null.",
        ),
        (
            "append",
            {"content": [{"type": "text", "text": "x", "cache_control": 5}]},
            'content[0] (text): cache_control must be {"type": "ephemeral"} (with an optional '
            "'ttl' of '5m' or '1h'), or null, got 5.",
        ),
        ("append", {"content": [{}]}, "content[0] has unknown type null; use one of "),
        ("run_processors", {"demand": ["nope"]}, 'got ["nope"].'),
        (
            "prepare_request",
            {"tools": [{"name": "a"}]},
            'such as {"type": "object", "properties": {}}.',
        ),
    ],
)
def test_values_in_an_error_are_shown_as_the_json_a_client_sent(
    rpc: RpcClient, method: str, params: dict[str, Any], said: str
) -> None:
    """The library shows a refused value as Python (``got None``, ``['nope']``,
    ``{'type': 'ephemeral'}``); a JSON-RPC client reads it as JSON."""
    cid = rpc.result("create_conversation")["id"]
    rpc.result("append", conversation_id=cid, role="user", content="hi")
    if method == "append":
        params = {"role": "user", **params}
    error = rpc.error(method, conversation_id=cid, **params)
    assert error["code"] == -32602, error
    assert said in error["message"], error["message"]
    assert "None" not in error["message"] and "dict" not in error["message"]


@pytest.mark.parametrize(
    ("sent", "said"),
    [
        ({"type": "text", "text": None}, "system[0].text must be a string, got null."),
        ({"type": "text", "text": {}}, "system[0].text must be a string, got an object."),
        ({"type": "text", "text": "x", "cache_control": 5}, "got a number."),
        ({"type": "text", "text": "x", "cache_control": 1.5}, "got a number."),
        ({"type": "text", "text": "x", "cache_control": True}, "got a boolean."),
        ({"type": "text", "text": "x", "cache_control": "x"}, "got a string."),
        ({"type": "text", "text": "x", "cache_control": []}, "got an array."),
    ],
)
def test_a_refused_value_is_named_by_its_json_type(
    sent: dict[str, Any], said: str, rpc: RpcClient
) -> None:
    """The library names the Python type of a value it refuses (``got NoneType``); a client
    sent JSON, and reads its type's JSON name."""
    cid = rpc.result("create_conversation")["id"]
    rpc.result("append", conversation_id=cid, role="user", content="hi")
    error = rpc.error("prepare_request", conversation_id=cid, system=[sent])
    assert error["code"] == -32602
    assert error["message"].endswith(said), error["message"]
    assert error["data"]["message"] == error["message"]


def test_a_read_only_location_names_the_server_flag(tmp_path: Path) -> None:
    """The library's own error for a file it cannot write (SQLite's SQLITE_READONLY),
    answered by the dispatcher: the server's flag, not read_only=True."""
    import sqlite3

    from contextstore.server.jsonrpc import Dispatcher
    from contextstore.storage.driver_errors import classify_database_error

    path = tmp_path / "ro.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        with pytest.raises(sqlite3.OperationalError) as caught:
            connection.execute("INSERT INTO t VALUES (1)")
    finally:
        connection.close()
    refused = classify_database_error(caught.value)
    assert refused is not None

    class _ReadOnly:
        def list_conversations(self) -> None:
            raise refused

    dispatcher = Dispatcher(_ReadOnly())  # type: ignore[arg-type]
    answer = json.loads(
        dispatcher.handle_bytes(b'{"jsonrpc":"2.0","id":1,"method":"list_conversations"}') or b""
    )
    assert answer["error"]["code"] == -32009
    assert "start the server with --read-only" in answer["error"]["message"]
    assert "read_only=True" not in answer["error"]["message"] + answer["error"]["data"]["message"]


def _answer(store: Any, method: str, **params: Any) -> dict[str, Any]:
    """The error a client gets for one call the dispatcher answers from ``store``."""
    from contextstore.server.jsonrpc import Dispatcher

    request = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = json.loads(Dispatcher(store).handle_bytes(json.dumps(request)) or b"")
    error: dict[str, Any] = answer["error"]
    assert error["data"]["message"] == error["message"]
    return error


def test_a_role_refused_a_write_is_told_how_a_server_is_started_for_it() -> None:
    """A PostgreSQL role that may not write, served without --read-only: the refusal said
    "A role meant only to read opens the store with read_only=True (--read-only on the
    command line)", a Python argument and a command line no client writes."""
    from contextstore.storage.privileges import refused

    error = refused("permission denied for table conversations", None, writing=True)

    class _MayOnlyRead:
        def create_conversation(self) -> None:
            raise error

    answer = _answer(_MayOnlyRead(), "create_conversation")
    assert answer["code"] == -32009
    assert answer["data"]["error_class"] == "ReadOnlyLocationError"
    assert answer["message"].startswith(
        "PostgreSQL refused the role connected a privilege the write needs (permission denied "
        "for table conversations); nothing was written. A server for a role meant only to "
        "read is started with --read-only; the schema's owner grants "
    )
    assert "read_only=" not in answer["message"] and "command line" not in answer["message"]


def test_a_damaged_store_points_at_the_check_method(tmp_path: Path) -> None:
    """A row or file damaged behind the server: the errors said to run 'contextstore
    check', a command of the server's machine, where the client has the check method."""
    import sqlite3

    db = tmp_path / "damaged.db"
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "hi")
        request_id = store.prepare_request(cid).request_id
        other = store.create_conversation().id
        store.append(other, [{"role": "user", "content": "word " * 500}] * 200)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE request_options SET data = json_set(data, '$.view_rules', 99)")
        connection.execute("UPDATE conversations SET metadata = '{' WHERE id = ?", (cid,))
    with ContextStore.open(db) as store:
        said = {
            "row": _answer(store, "get_conversation", conversation_id=cid)["message"],
            "rules": _answer(store, "request_payload", conversation_id=cid, request_id=request_id)[
                "message"
            ],
        }
        size = db.stat().st_size
        with db.open("r+b") as handle:
            handle.seek(size * 2 // 5)
            handle.write(b"\xde\xad" * (size // 10))
        said["file"] = _answer(store, "messages", conversation_id=other)["message"]
        checked = _answer(store, "check")  # the method the messages point at
    assert checked["data"]["error_class"] == "CorruptDatabaseError"
    assert said["row"].endswith(
        "holds a value that is not valid JSON; the row is damaged. Call the check method and "
        "restore the database from a backup."
    )
    assert said["rules"].endswith("upgrade contextstore, or call the check method.")
    assert said["file"].startswith("the database is damaged (")
    assert "; the check method shows where; salvage what is still readable" in said["file"]
    for message in said.values():
        assert "contextstore check" not in message and "ContextStore." not in message


def _python_or_cli(message: str) -> list[str]:
    """The Python and command-line terms a JSON-RPC error message must not use."""
    terms = ("read_only=", "max_message_bytes", "ContextStore.", "None", "'type'", "'name'")
    return [term for term in (*terms, "contextstore audit", "a list") if term in message]


@pytest.mark.parametrize(
    ("method", "params", "said"),
    [
        (
            "restore",
            {"rollback_id": 99},
            "has no rollback 99; the audit method lists them (its rollbacks).",
        ),
        (
            "prepare_request",
            {"system": [{"text": "be brief"}]},
            'system[0] has no "type": "text"; a system prompt\'s blocks are text blocks like '
            '{"type": "text", "text": "..."}.',
        ),
        (
            "prepare_request",
            {"system": []},
            'system is an empty array; give it at least one text block like {"type": "text", '
            '"text": "..."}, or leave system out for no system prompt.',
        ),
        (
            "prepare_request",
            {"tools": [{"description": "no name"}]},
            'tools must be an array of tool definitions, each an object with a string "name", '
            'like {"name": ..., "description": ..., "input_schema": {...}}.',
        ),
    ],
)
def test_store_errors_speak_json_and_methods_not_python_or_the_cli(
    method: str, params: dict[str, Any], said: str, rpc: RpcClient
) -> None:
    """A rollback that is not there pointed at an SQL view and a CLI command, though the
    audit method lists rollbacks; a system block without a type was "None", examples were
    Python dicts and arrays "lists"."""
    cid = rpc.result("create_conversation")["id"]
    rpc.result("append", conversation_id=cid, role="user", content="hi")
    error = rpc.error(method, conversation_id=cid, **params)
    assert error["message"].endswith(said), error["message"]
    assert error["data"]["message"] == error["message"]
    assert _python_or_cli(error["message"]) == []


def test_a_parameter_an_error_names_is_the_json_member_that_sends_it(rpc: RpcClient) -> None:
    """A checkpoint's id sent as the moment to roll back or fork to was refused with
    "pass to='cp' for that checkpoint (its label), or to=0", and a rewrite of a block that
    has no text with "use mode='block'": Python keyword arguments, which a client sends as
    members of params ("to": "cp")."""
    cid = rpc.result("create_conversation")["id"]
    rpc.result("append", conversation_id=cid, role="user", content="task")
    rpc.result(
        "append",
        conversation_id=cid,
        role="assistant",
        content=[{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}],
    )
    labelled = rpc.result("checkpoint", conversation_id=cid, label="it's done")
    unlabelled = rpc.result("checkpoint", conversation_id=cid)
    said = {
        "rollback": rpc.error("rollback", conversation_id=cid, to=labelled["id"])["message"],
        "fork": rpc.error("fork", conversation_id=cid, at=unlabelled["id"])["message"],
        "text": rpc.error(
            "add_context_update", conversation_id=cid, message_idx=1, block_idx=0, text="x"
        )["message"],
        "tool_input": rpc.error(
            "add_context_update",
            conversation_id=cid,
            message_idx=0,
            block_idx=0,
            text="{}",
            mode="tool_input",
        )["message"],
    }
    assert said["rollback"].startswith(f'"to": {labelled["id"]} reads as {labelled["id"]} ms ')
    assert said["rollback"].endswith(
        'pass "to": "it\'s done" for that checkpoint (its label), or "to": 0 for the moment '
        "before everything."
    )
    assert f'pass "at": {unlabelled["ts"]} for that checkpoint (its ts)' in said["fork"]
    assert 'use "mode": "block" to replace it with text.' in said["text"]
    assert said["tool_input"] == '"mode": "tool_input" applies to tool_use blocks only.'
    for message in said.values():
        assert "to=" not in message and "at=" not in message and "mode=" not in message
    assert rpc.result("message_count", conversation_id=cid) == 2


def test_a_write_to_a_read_only_server_names_its_flag(tmp_path: Path) -> None:
    """A server started with --read-only refused a write with "open it without
    read_only=True", a Python argument no client can pass."""
    from tests.server.conftest import start_stdio

    db = tmp_path / "ro.db"
    ContextStore.open(db).close()
    process, client = start_stdio(db, tmp_path / "data", "--read-only")
    try:
        error = client.error("create_conversation", title="refused")
        # The pure functions write nothing: a read-only server answers them.
        hardened = client.result("harden_history", contents=[{"role": "user", "parts": []}])
    finally:
        process.stop()
    assert hardened == to_json(FUNCTIONS["harden_history"]([{"role": "user", "parts": []}]))
    assert error["code"] == -32006 and error["data"]["error_class"] == "ReadOnlyError"
    assert error["message"] == (
        "this store was opened read-only; start the server without --read-only to write."
    )


def test_a_message_over_the_store_limit_names_no_store_option(tmp_path: Path) -> None:
    """The library's advice to open the store with a larger max_message_bytes is not a
    client's to take (the server opens its store)."""
    from contextstore.server.jsonrpc import Dispatcher

    with ContextStore.open(tmp_path / "small.db", max_message_bytes=1024) as store:
        cid = store.create_conversation().id
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "append",
            "params": {"conversation_id": cid, "role": "user", "content": "x" * 5000},
        }
        answer = json.loads(Dispatcher(store).handle_bytes(json.dumps(request)) or b"")
        assert store.message_count(cid) == 0
    assert answer["error"]["data"]["error_class"] == "ContentTooLargeError"
    assert answer["error"]["message"].endswith(
        "over the limit of 1,024; split it, or store large files outside the conversation."
    )
    assert _python_or_cli(answer["error"]["message"]) == []


def test_a_damaged_file_is_reported_without_python_calls(tmp_path: Path) -> None:
    """A file damaged while the server runs: check's error named ContextStore.recover."""
    from contextstore.server.jsonrpc import Dispatcher

    db = tmp_path / "damaged.db"
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, [{"role": "user", "content": "word " * 500}] * 200)
    with ContextStore.open(db) as store:
        size = db.stat().st_size
        with db.open("r+b") as handle:
            handle.seek(size * 2 // 5)
            handle.write(b"\xde\xad" * (size // 10))
        answer = json.loads(
            Dispatcher(store).handle_bytes(b'{"jsonrpc":"2.0","id":1,"method":"check"}') or b""
        )
    message = answer["error"]["message"]
    assert answer["error"]["data"]["error_class"] == "CorruptDatabaseError"
    assert "with 'contextstore recover SRC DEST', or restore a backup" in message
    assert "ContextStore." not in message
