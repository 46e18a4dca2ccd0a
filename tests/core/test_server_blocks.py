"""Anthropic's server tool blocks: accepted in the shapes the SDK's ``*BlockParam`` types
describe (the SDK is the oracle: a drift between its types and the store's models fails
here), refused with a clear error elsewhere."""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin, get_type_hints

import anthropic.types as sdk
import pytest
from pydantic import BaseModel, TypeAdapter
from typing_extensions import Required

from contextstore.core import server_blocks as ours
from contextstore.core.content import normalize_message
from contextstore.core.errors import InvalidMessageError
from tests.conftest import text, tool_use
from tests.renderers.oracles import _plain
from tests.server_tools import (
    ENCRYPTED,
    bash_result,
    code_result,
    code_use,
    container_upload,
    editor_result,
    encrypted_code_result,
    error_result,
    every_pair,
    fetch_result,
    fetch_use,
    search_result,
    search_use,
    tool_search_result,
    tool_search_use,
)

PAIRS: list[tuple[type[BaseModel], Any]] = [
    (ours.ServerToolUseBlock, sdk.ServerToolUseBlockParam),
    (ours.WebSearchToolResultBlock, sdk.WebSearchToolResultBlockParam),
    (ours.WebSearchResult, sdk.WebSearchResultBlockParam),
    (ours.WebSearchError, sdk.WebSearchToolRequestErrorObjectParam),
    (ours.WebFetchToolResultBlock, sdk.WebFetchToolResultBlockParam),
    (ours.WebFetchResult, sdk.WebFetchBlockParam),
    (ours.WebFetchError, sdk.WebFetchToolResultErrorBlockParam),
    (ours.CodeExecutionToolResultBlock, sdk.CodeExecutionToolResultBlockParam),
    (ours.CodeExecutionResult, sdk.CodeExecutionResultBlockParam),
    (ours.EncryptedCodeExecutionResult, sdk.EncryptedCodeExecutionResultBlockParam),
    (ours.CodeExecutionError, sdk.CodeExecutionToolResultErrorParam),
    (ours.CodeExecutionOutput, sdk.CodeExecutionOutputBlockParam),
    (ours.BashCodeExecutionToolResultBlock, sdk.BashCodeExecutionToolResultBlockParam),
    (ours.BashResult, sdk.BashCodeExecutionResultBlockParam),
    (ours.BashOutput, sdk.BashCodeExecutionOutputBlockParam),
    (ours.BashError, sdk.BashCodeExecutionToolResultErrorParam),
    (ours.TextEditorCodeExecutionToolResultBlock, sdk.TextEditorCodeExecutionToolResultBlockParam),
    (ours.TextEditorView, sdk.TextEditorCodeExecutionViewResultBlockParam),
    (ours.TextEditorCreate, sdk.TextEditorCodeExecutionCreateResultBlockParam),
    (ours.TextEditorStrReplace, sdk.TextEditorCodeExecutionStrReplaceResultBlockParam),
    (ours.TextEditorError, sdk.TextEditorCodeExecutionToolResultErrorParam),
    (ours.ToolSearchToolResultBlock, sdk.ToolSearchToolResultBlockParam),
    (ours.ToolSearchResult, sdk.ToolSearchToolSearchResultBlockParam),
    (ours.ToolSearchError, sdk.ToolSearchToolResultErrorParam),
    (ours.ToolReference, sdk.ToolReferenceBlockParam),
    (ours.ContainerUploadBlock, sdk.ContainerUploadBlockParam),
]
"""Each of the store's models beside the SDK type it follows."""


def _literals(annotation: Any) -> set[Any]:
    """The values of the Literals in ``annotation`` (through Optional, unions, Required)."""
    if get_origin(annotation) is Literal:
        return set(get_args(annotation))
    found: set[Any] = set()
    for arg in get_args(annotation):
        found |= _literals(arg)
    return found


@pytest.mark.parametrize(("model", "param"), PAIRS, ids=[m.__name__ for m, _ in PAIRS])
def test_each_model_has_the_fields_of_its_sdk_type(model: type[BaseModel], param: Any) -> None:
    required = {name for name, field in model.model_fields.items() if field.is_required()}
    optional = set(model.model_fields) - required
    hints = get_type_hints(param, include_extras=True)
    # The SDK's modules postpone annotations: Required shows in the hints, not in the keys.
    sdk_required = {name for name, hint in hints.items() if get_origin(hint) is Required}
    assert required == sdk_required
    assert optional == set(hints) - sdk_required
    for name in ("type", "name", "error_code", "file_type"):
        if name in hints:
            assert _literals(model.model_fields[name].annotation) == _literals(hints[name]), name


SAMPLES = {
    "search": [search_use(), search_result()],
    "fetch": [fetch_use(), fetch_result()],
    "code": [code_use(), code_result()],
    "encrypted code": [code_use(), encrypted_code_result()],
    "bash": [code_use("srvtoolu_04", "bash_code_execution"), bash_result()],
    "editor": [code_use("srvtoolu_05", "text_editor_code_execution"), editor_result()],
    "tool search": [tool_search_use(), tool_search_result()],
    **{
        f"{name} error": [use, error_result(kind, use["id"])]
        for name, use, kind in [
            ("search", search_use(), "web_search_tool_result"),
            ("fetch", fetch_use(), "web_fetch_tool_result"),
            ("code", code_use(), "code_execution_tool_result"),
            ("bash", code_use(name="bash_code_execution"), "bash_code_execution_tool_result"),
            (
                "editor",
                code_use(name="text_editor_code_execution"),
                "text_editor_code_execution_tool_result",
            ),
            ("tool search", tool_search_use(), "tool_search_tool_result"),
        ]
    },
}

_PARAMS = {
    "server_tool_use": sdk.ServerToolUseBlockParam,
    "web_search_tool_result": sdk.WebSearchToolResultBlockParam,
    "web_fetch_tool_result": sdk.WebFetchToolResultBlockParam,
    "code_execution_tool_result": sdk.CodeExecutionToolResultBlockParam,
    "bash_code_execution_tool_result": sdk.BashCodeExecutionToolResultBlockParam,
    "text_editor_code_execution_tool_result": sdk.TextEditorCodeExecutionToolResultBlockParam,
    "tool_search_tool_result": sdk.ToolSearchToolResultBlockParam,
    "container_upload": sdk.ContainerUploadBlockParam,
}


def _sdk_accepts(block: dict[str, Any]) -> bool:
    """The SDK's type of the block validates it and gives it back unchanged. (A web search
    error is checked by its own type: pydantic reads a dict as the ``Iterable`` of results
    the union tries first.)"""
    if block["type"] == "web_search_tool_result" and isinstance(block["content"], dict):
        error: TypeAdapter[Any] = TypeAdapter(sdk.WebSearchToolRequestErrorObjectParam)
        assert error.validate_python(block["content"]) == block["content"]
        block = {**block, "content": []}
    adapter: TypeAdapter[Any] = TypeAdapter(_PARAMS[block["type"]])
    return bool(_plain(adapter.validate_python(block)) == block)


@pytest.mark.parametrize("name", list(SAMPLES))
def test_the_sdk_and_the_store_accept_every_sample_unchanged(name: str) -> None:
    blocks = SAMPLES[name]
    for block in blocks:
        assert _sdk_accepts(block)
    assert normalize_message("assistant", blocks).blocks == blocks


def test_a_whole_turn_and_uploads_in_either_role_are_accepted() -> None:
    assert normalize_message("assistant", every_pair()).blocks == every_pair()
    assert normalize_message("user", [container_upload(), text("analyse it")]).blocks[0] == (
        container_upload()
    )
    assert normalize_message("assistant", [container_upload(), text("ok")])


def test_unknown_fields_are_kept_at_every_level() -> None:
    result = search_result()
    result["content"][0]["rank"] = 1
    use = {**search_use(), "call_id": "c1"}
    blocks = normalize_message("assistant", [use, {**result, "agent_note": "x"}]).blocks
    assert blocks[0]["call_id"] == "c1"
    assert blocks[1]["agent_note"] == "x" and blocks[1]["content"][0]["rank"] == 1


def _refused(role: str, blocks: list[dict[str, Any]]) -> str:
    with pytest.raises(InvalidMessageError) as caught:
        normalize_message(role, blocks)
    return str(caught.value)


@pytest.mark.parametrize(
    ("blocks", "words"),
    [
        ([{**search_use(), "name": "web_browse"}], ["content[0] (server_tool_use)", "name"]),
        ([{**search_use(), "id": ""}], ["content[0] (server_tool_use)", "id"]),
        ([{**search_use(), "input": "q"}], ["content[0] (server_tool_use)", "input"]),
        (
            [search_use(), {**search_result(), "content": "pages"}],
            ["content[1] (web_search_tool_result)", "content"],
        ),
        (
            [search_use(), error_result("web_search_tool_result", "srvtoolu_01", "oops")],
            ["content[1] (web_search_tool_result)", "content.error_code", "'oops'"],
        ),
        (
            [code_use(), {**code_result(), "content": {**code_result()["content"], "stdout": 1}}],
            ["content[1] (code_execution_tool_result)", "content.stdout"],
        ),
        (
            [
                code_use(),
                {
                    **encrypted_code_result(),
                    "content": {
                        "type": "encrypted_code_execution_result",
                        "return_code": 0,
                        "stderr": "",
                        "content": [],
                    },
                },
            ],
            ["content[1] (code_execution_tool_result)", "encrypted_stdout"],
        ),
        ([{"type": "container_upload"}], ["content[0] (container_upload)", "file_id"]),
        (
            [fetch_use(), {**fetch_result(), "tool_use_id": 7}],
            ["content[1] (web_fetch_tool_result)", "tool_use_id"],
        ),
    ],
)
def test_a_wrong_field_is_refused_naming_the_block_and_the_field(
    blocks: list[dict[str, Any]], words: list[str]
) -> None:
    message = _refused("assistant", blocks)
    for word in words:
        assert word in message


def test_server_tool_calls_and_results_belong_to_assistant_messages() -> None:
    for block in (search_use(), search_result()):
        assert "assistant message" in _refused("user", [block])


def test_a_result_answers_a_call_before_it_in_its_message_once_and_of_its_kind() -> None:
    assert "names no server_tool_use" in _refused("assistant", [text("searching"), search_result()])
    assert "names no server_tool_use" in _refused(
        "assistant", [search_use("srvtoolu_09"), text("x"), search_result()]
    )
    assert "already answers" in _refused(
        "assistant", [search_use(), search_result(), search_result()]
    )
    assert "answers web_search" in _refused(
        "assistant", [{**search_use(), "name": "web_fetch"}, search_result()]
    )
    assert "names no server_tool_use" in _refused(
        "assistant", [tool_use("srvtoolu_01", "web_search"), search_result()]
    )


def test_results_a_message_starts_with_continue_a_paused_turn() -> None:
    blocks = [search_result(), text("Found it.")]
    assert normalize_message("assistant", blocks).blocks == blocks
    assert normalize_message("assistant", [search_use()]).blocks == [search_use()]


def test_one_id_is_one_call_whether_a_tool_or_a_server_tool_makes_it() -> None:
    for blocks in (
        [search_use("srvtoolu_01"), tool_use("srvtoolu_01")],
        [search_use("srvtoolu_01"), search_result("srvtoolu_01"), search_use("srvtoolu_01")],
    ):
        assert "two calls with the id" in _refused("assistant", blocks)


def test_opaque_values_are_kept_exactly() -> None:
    (block,) = normalize_message("assistant", [code_use(), encrypted_code_result()]).blocks[1:]
    assert block["content"]["encrypted_stdout"] == ENCRYPTED


def test_the_sdk_knows_no_server_tool_the_store_refuses() -> None:
    hints = get_type_hints(sdk.ServerToolUseBlockParam, include_extras=True)
    assert _literals(hints["name"]) == set(get_args(ours.ServerToolName))
