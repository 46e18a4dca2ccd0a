"""JSON-RPC 2.0 as its specification says, on both transports: the error codes, batches and
notifications of the specification's own examples, and a server that goes on serving."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextstore import ContextStore
from contextstore.server.jsonrpc import Dispatcher
from tests.server.conftest import RpcClient, StdioClient


def _send(rpc: RpcClient, text: str) -> Any:
    return rpc.send(text.encode())


# The specification's examples (section 7), with the method names of this server.
SPEC_INVALID = [
    ('{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]', -32700),
    ('{"jsonrpc": "2.0", "method": 1, "params": "bar"}', -32600),
    ('[{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},{"jsonrpc"', -32700),
    ("[]", -32600),
]  # fmt: skip


@pytest.mark.parametrize(("text", "code"), SPEC_INVALID)
def test_the_specifications_invalid_messages(text: str, code: int, rpc: RpcClient) -> None:
    response = _send(rpc, text)
    assert response["jsonrpc"] == "2.0" and response["id"] is None
    assert response["error"]["code"] == code
    assert rpc.result("list_conversations") is not None  # still serving


@pytest.mark.parametrize("text", ["[1]", "[1,2,3]"])
def test_a_batch_of_non_requests_answers_each_with_invalid_request(
    text: str, rpc: RpcClient
) -> None:
    responses = _send(rpc, text)
    assert [r["error"]["code"] for r in responses] == [-32600] * len(json.loads(text))
    assert all(r["id"] is None for r in responses)


@pytest.mark.parametrize(
    "message",
    [
        {"jsonrpc": "1.0", "method": "list_conversations", "id": 1},
        {"method": "list_conversations", "id": 1},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "method": "list_conversations", "id": {"a": 1}},
        {"jsonrpc": "2.0", "method": "list_conversations", "id": True},
    ],
)
def test_malformed_requests_are_invalid_request(message: dict[str, Any], rpc: RpcClient) -> None:
    response = _send(rpc, json.dumps(message))
    assert response["error"]["code"] == -32600
    assert response["id"] == (
        1 if isinstance(message.get("id"), int) and message["id"] is not True else None
    )


def test_unknown_method_and_positional_params(rpc: RpcClient) -> None:
    missing = rpc.error("subtract", {"minuend": 42})
    assert missing["code"] == -32601 and "'subtract'" in missing["message"]
    positional = rpc.error("get_conversation", ["abc"])
    assert positional["code"] == -32602 and "by name" in positional["message"]


def test_params_by_position_carry_data_like_any_invalid_params(rpc: RpcClient) -> None:
    """The README's table: every -32602 has data with the class, the exit code and the
    problems, so a client handles them all with one code path."""
    error = rpc.error("get_conversation", ["abc"])
    assert error["code"] == -32602
    assert error["message"].endswith("not an array")
    assert error["data"] == {
        "error_class": "InvalidParamsError",
        "message": error["message"],
        "exit_code": 2,
        "problems": [{"param": "params", "message": "must be an object of named parameters"}],
    }


@pytest.mark.parametrize(
    ("params", "named"),
    [("null", "null"), ('"abc"', "a string"), ("5", "a number"), ("true", "a boolean")],
)
def test_params_that_are_not_structured_make_an_invalid_request(
    params: str, named: str, rpc: RpcClient
) -> None:
    """JSON-RPC 2.0, 4.2: params, when present, MUST be an object or an array; ``null`` is
    not a way to leave it out. Refused before the method is looked up, with the same data
    as any refused params, and nothing is called."""
    before = rpc.result("list_conversations")
    text = f'{{"jsonrpc": "2.0", "id": 7, "method": "create_conversation", "params": {params}}}'
    response = _send(rpc, text)
    assert response["id"] == 7 and "result" not in response
    error = response["error"]
    assert error["code"] == -32600
    assert error["message"] == (
        f"invalid request: params must be an object of named parameters, or left out, not {named}"
    )
    assert error["data"] == {
        "error_class": "InvalidParamsError",
        "message": error["message"],
        "exit_code": 2,
        "problems": [{"param": "params", "message": "must be an object of named parameters"}],
    }
    assert rpc.result("list_conversations") == before  # create_conversation never ran
    unknown = _send(rpc, '{"jsonrpc": "2.0", "id": 8, "method": "subtract", "params": null}')
    assert unknown["error"]["code"] == -32600  # the request is invalid before its method


def test_a_notification_with_null_params_is_an_invalid_request_answered(
    rpc: RpcClient,
) -> None:
    """Without a valid params there is no valid notification: the answer comes with a null
    id (the specification's example answers such a message), and nothing runs."""
    before = rpc.result("list_conversations")
    response = _send(rpc, '{"jsonrpc": "2.0", "method": "create_conversation", "params": null}')
    assert response["id"] is None and response["error"]["code"] == -32600
    batch = _send(
        rpc,
        '[{"jsonrpc": "2.0", "method": "create_conversation", "params": null},'
        ' {"jsonrpc": "2.0", "method": "create_conversation"}]',
    )
    assert [(r["id"], r["error"]["code"]) for r in batch] == [(None, -32600)]
    after = rpc.result("list_conversations")
    assert len(after) == len(before) + 1  # only the valid notification ran


def test_nan_is_not_json(rpc: RpcClient) -> None:
    text = '{"jsonrpc": "2.0", "id": 1, "method": "record_request", "params": {"cost": NaN}}'
    assert _send(rpc, text)["error"]["code"] == -32700


@pytest.mark.parametrize("request_id", ["1e999", "-1e999"])
def test_an_id_out_of_the_numbers_range_is_refused_before_the_call(
    rpc: RpcClient, request_id: str
) -> None:
    """``1e999`` is valid JSON that reads as infinity, which cannot be sent back as the id."""
    cid = rpc.result("create_conversation")["id"]
    params = json.dumps({"conversation_id": cid, "role": "user", "content": "x"})
    text = f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "append", "params": {params}}}'
    response = _send(rpc, text)
    assert response["id"] is None and response["error"]["code"] == -32600
    assert "finite number" in response["error"]["message"]
    assert rpc.result("messages", conversation_id=cid) == []


def test_json_nested_past_what_the_parser_reads_is_named_as_such(rpc: RpcClient) -> None:
    deep = "[" * 5_000 + "]" * 5_000
    text = f'{{"jsonrpc": "2.0", "id": 1, "method": "list_conversations", "params": {deep}}}'
    error = _send(rpc, text)["error"]
    assert error["code"] == -32700
    assert "too deeply" in error["message"] and "not JSON" not in error["message"]


@pytest.mark.parametrize("depth", [700, 1_200, 5_000])
def test_how_deep_a_message_is_read_does_not_depend_on_the_python(
    rpc: RpcClient, depth: int
) -> None:
    """Python's parser reads about 1,000 levels on 3.11, 1,500 on 3.12, 10,000 on 3.13:
    the same message was a parse error on one and invalid params on another. Past 500
    levels it is a parse error on every Python; up to there, invalid params."""
    deep = '{"metadata": {"x": ' + "[" * depth + "]" * depth + "}}"
    text = f'{{"jsonrpc": "2.0", "id": 1, "method": "create_conversation", "params": {deep}}}'
    error = _send(rpc, text)["error"]
    assert error["code"] == -32700 and "too deeply" in error["message"]
    shallow = '{"metadata": {"x": ' + "[" * 400 + "]" * 400 + "}}"
    text = f'{{"jsonrpc": "2.0", "id": 2, "method": "create_conversation", "params": {shallow}}}'
    error = _send(rpc, text)["error"]
    assert error["code"] == -32602 and "more than 100 levels deep" in error["message"]


def test_ids_come_back_as_sent(rpc: RpcClient) -> None:
    for request_id in ("abc", 7, 2.5, None):
        message = {"jsonrpc": "2.0", "id": request_id, "method": "list_conversations"}
        response = _send(rpc, json.dumps(message))
        assert response["id"] == request_id and "result" in response


def test_notifications_are_applied_and_never_answered(rpc: RpcClient) -> None:
    cid = rpc.result("create_conversation")["id"]
    notification = {
        "jsonrpc": "2.0",
        "method": "append",
        "params": {"conversation_id": cid, "role": "user", "content": "note"},
    }
    assert _send(rpc, json.dumps(notification)) is None
    failing = {"jsonrpc": "2.0", "method": "no_such_method"}
    assert _send(rpc, json.dumps(failing)) is None
    assert _send(rpc, json.dumps([notification, notification])) is None
    # The next answer is the next request's: nothing was written for the notifications.
    messages = rpc.result("messages", conversation_id=cid)
    assert [m["content"] for m in messages] == ["note", "note", "note"]


def test_a_batch_answers_its_requests_in_any_order_by_id(rpc: RpcClient) -> None:
    cid = rpc.result("create_conversation")["id"]
    batch = [
        {"jsonrpc": "2.0", "id": "a", "method": "append",
         "params": {"conversation_id": cid, "role": "user", "content": "one"}},
        {"jsonrpc": "2.0", "method": "append",
         "params": {"conversation_id": cid, "role": "assistant", "content": "two"}},
        {"jsonrpc": "2.0", "id": "b", "method": "get_conversation",
         "params": {"conversation_id": "?"}},
        {"jsonrpc": "2.0", "id": "c", "method": "messages", "params": {"conversation_id": cid}},
        {"foo": "boo"},
    ]  # fmt: skip
    responses = {r["id"]: r for r in _send(rpc, json.dumps(batch))}
    assert set(responses) == {"a", "b", "c", None}
    assert responses["a"]["result"]["index"] == 0
    assert responses["b"]["error"]["data"]["error_class"] == "ConversationNotFoundError"
    assert [m["content"] for m in responses["c"]["result"]] == ["one", "two"]
    assert responses[None]["error"]["code"] == -32600


def test_text_round_trips_exactly(rpc: RpcClient) -> None:
    cid = rpc.result("create_conversation")["id"]
    text = 'naïve → 漢字 🙂 \u2028 line\nbreak "quoted" \\ back'
    rpc.result("append", conversation_id=cid, role="user", content=text)
    assert rpc.result("messages", conversation_id=cid)[0]["content"] == text


def test_stdio_answers_one_line_per_message(transports: dict[str, Any]) -> None:
    stdio: StdioClient = transports["stdio"]
    stdio.write(b"")  # blank lines are skipped, not answered
    stdio.write(b'{"jsonrpc":"2.0","id":1,"method":"list_conversations"}')
    assert stdio.read()["id"] == 1


# -- the dispatcher alone ----------------------------------------------------------------


class _Broken:
    """A stand-in store whose method fails as a bug would."""

    def list_conversations(self) -> Any:
        raise RuntimeError("boom")


def test_an_unexpected_failure_is_an_internal_error_and_the_log_has_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dispatcher = Dispatcher(_Broken())  # type: ignore[arg-type]
    answer = dispatcher.handle_bytes(b'{"jsonrpc":"2.0","id":1,"method":"list_conversations"}')
    assert answer is not None
    error = json.loads(answer)["error"]
    assert error["code"] == -32603 and "boom" not in error["message"]
    assert "RuntimeError: boom" in caplog.text


def test_a_lone_surrogate_goes_back_out_as_its_escape() -> None:
    with ContextStore.open(":memory:") as store:
        dispatcher = Dispatcher(store)
        answer = dispatcher.handle_bytes(
            b'{"jsonrpc":"2.0","id":"\\ud800","method":"list_conversations"}'
        )
    assert answer is not None
    assert b'"id":"\\ud800"' in answer and json.loads(answer)["id"] == "\ud800"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"jsonrpc":"2.0","id":1' + b"0" * 5000 + b',"method":"list_conversations"}',
            "parse error: the message holds an integer of 5,001 digits, more than the server "
            "reads (4,300); send such a number as a string.",
        ),
        (
            b'{"jsonrpc":"2.0","id":"\xc3(","method":"list_conversations"}',
            "parse error: the message is not UTF-8 text (the byte 0xc3 at offset 23 cannot be "
            "read); send JSON encoded as UTF-8.",
        ),
        (
            '{"jsonrpc":"2.0","id":1,"method":"list_conversations"}'.encode("utf-16"),
            "parse error: the message is not UTF-8 text (the byte 0xff at offset 0 cannot be "
            "read); send JSON encoded as UTF-8.",
        ),
        (
            '{"jsonrpc":"2.0","id":1,"method":"list_conversations"}'.encode("utf-32-le"),
            "parse error: the message is not JSON (Expecting property name enclosed in double "
            "quotes: line 1 column 2 (char 1))",
        ),
    ],
    ids=["integer of 5,001 digits", "not UTF-8", "UTF-16 with its mark", "UTF-32"],
)
def test_unreadable_text_is_a_parse_error_in_the_clients_terms(body: bytes, message: str) -> None:
    """Python's own words were passed on: a codec's name, and advice to call
    sys.set_int_max_str_digits(), which a client of the server cannot follow."""
    with ContextStore.open(":memory:") as store:
        answer = Dispatcher(store).handle_bytes(body)
    assert answer is not None
    assert json.loads(answer) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": message},
    }


def test_utf8_with_a_byte_order_mark_is_read() -> None:
    with ContextStore.open(":memory:") as store:
        answer = Dispatcher(store).handle_bytes(
            b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"list_conversations"}'
        )
    assert answer is not None and json.loads(answer)["result"] == []


def test_an_integer_param_takes_a_number_with_a_zero_fraction(rpc: RpcClient) -> None:
    """JSON Schema counts 5.0 as an integer (a JavaScript client's 2 ** 31 - 1 serialised
    by some encoders as 2147483647.0); strict validation refused it. 5.5, true and "5"
    are still refused, and so is what lies beyond a parameter's range."""
    created = rpc.result("create_conversation", context_window=200_000.0, created_ts=1e12)
    assert (created["context_window"], created["created_ts"]) == (200_000, 10**12)
    assert isinstance(created["context_window"], int)
    cid = created["id"]
    rpc.result("append", conversation_id=cid, role="user", content="hi")
    usage = rpc.result("record_request", conversation_id=cid, tokens_in=1.2e3, tokens_out=-0.0)
    assert (usage["tokens_in"], usage["tokens_out"]) == (1200, 0)
    assert rpc.result("messages", conversation_id=cid, as_of=usage["ts"] * 1.0) != []
    refusals = {
        5.5: "input should be a valid integer",
        True: "input should be a valid integer",
        "5": "input should be a valid integer",
        -1.0: "tokens_in must be an integer from 0 to 2,147,483,647, got -1",
        2.0**31: "tokens_in must be an integer from 0 to 2,147,483,647, got 2147483648",
        2.0**60: "only up to 2**53 (9,007,199,254,740,992), beyond which it may not be",
    }
    for value, message in refusals.items():
        response = rpc.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "record_request",
                    "params": {"conversation_id": cid, "tokens_in": value},
                }
            ).encode()
        )
        assert response["error"]["code"] == -32602, value
        assert message in response["error"]["message"], value
    assert len(rpc.result("requests", conversation_id=cid)) == 1  # refused: nothing written


def test_an_unknown_method_s_name_is_repeated_clipped(rpc: RpcClient) -> None:
    """A 1 MB method name came back whole in the error message."""
    name = "x" * 2**20
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": name}).encode()
    error = rpc.send(body)["error"]
    assert error["code"] == -32601
    assert error["message"] == (
        f"method not found: {'x' * 100!r}... (1,048,576 characters); "
        "'contextstore serve --describe' lists the methods"
    )
    exact = rpc.send(json.dumps({"jsonrpc": "2.0", "id": 8, "method": "y" * 100}).encode())
    assert f"method not found: {'y' * 100!r};" in exact["error"]["message"]
