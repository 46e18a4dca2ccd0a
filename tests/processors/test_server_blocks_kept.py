"""Server tool blocks are counted, typed ``server_tool`` and never rewritten: no processor
proposes an update for them, and secret masking leaves their encrypted values alone (the
API decrypts them when they are sent back; a changed one breaks the request)."""

from __future__ import annotations

import math
from typing import Any

from contextstore import ContextStore, optimize_file_reads
from contextstore.core.nodes import SERVER_TOOL, type_message
from contextstore.core.tokens import TiktokenCounter, block_tokens
from contextstore.processors import (
    Distiller,
    MediaDegrader,
    OutputTrimmer,
    Pipeline,
    SecretMasker,
)
from contextstore.processors.secrets import mask_message
from tests.conftest import assistant, text, user
from tests.server_tools import (
    code_result,
    code_use,
    container_upload,
    encrypted_code_result,
    every_pair,
    fetch_result,
    search_result,
    search_use,
)

COUNT = TiktokenCounter().count
"""The store's default counter."""

KEY = "sk-ant-api03-" + "Q7x" * 30
"""A key the high-confidence patterns find."""


def _leaky_turn() -> list[dict[str, Any]]:
    """Server tool blocks holding a secret in every visible field and in the opaque ones,
    with outputs far longer than a trimmer's limit, and a duplicated file mention."""
    found = search_result()
    found["content"][0]["title"] = f"leaked {KEY}"
    found["content"][0]["encrypted_content"] = KEY
    ran = code_result()
    ran["content"]["stdout"] = (f"token {KEY}\n" + "x" * 200 + "\n") * 20
    sealed = encrypted_code_result("srvtoolu_07")
    sealed["content"]["encrypted_stdout"] = KEY * 10
    fetched = fetch_result()
    fetched["content"]["content"]["source"]["data"] = '<file_content path="a.py">1</file_content>'
    return [
        search_use(query=f"who leaked {KEY}"),
        found,
        code_use(),
        ran,
        code_use("srvtoolu_07"),
        sealed,
        {"type": "server_tool_use", "id": "srvtoolu_02", "name": "web_fetch", "input": {}},
        fetched,
        {
            "type": "text",
            "text": "cited",
            "citations": [
                {
                    "type": "web_search_result_location",
                    "url": "https://a",
                    "title": "A",
                    "encrypted_index": KEY,
                    "cited_text": "c",
                }
            ],
        },
    ]


def test_every_server_block_is_a_server_tool_node() -> None:
    kinds = type_message("assistant", [*every_pair()[:-1], container_upload()])
    assert {kind.node_type for kind in kinds} == {SERVER_TOOL}
    assert type_message("user", [container_upload()])[0].node_type == SERVER_TOOL


def test_server_blocks_are_counted_with_opaque_values_at_four_characters_a_token() -> None:
    count = COUNT
    for block in [*every_pair()[:-1], container_upload()]:
        assert block_tokens(block, count) > 0, block["type"]
    use = search_use()
    assert block_tokens(use, count) == count("web_search") + count('{"query": "sqlite wal"}')
    short, long = encrypted_code_result(), encrypted_code_result()
    short["content"]["encrypted_stdout"] = ""
    long["content"]["encrypted_stdout"] = "A" * 4001
    assert block_tokens(long, count) - block_tokens(short, count) == math.ceil(4001 / 4)


def test_mask_message_masks_what_is_shown_and_keeps_the_opaque_values() -> None:
    masked = mask_message(assistant(*_leaky_turn()))["content"]
    assert KEY not in masked[0]["input"]["query"]
    assert KEY not in masked[1]["content"][0]["title"]
    assert masked[1]["content"][0]["encrypted_content"] == KEY
    assert KEY not in masked[3]["content"]["stdout"]
    assert masked[5]["content"]["encrypted_stdout"] == KEY * 10
    assert masked[8]["citations"][0]["encrypted_index"] == KEY
    upload = mask_message(user(container_upload("file_" + "Q7x" * 30)))["content"][0]
    assert upload == container_upload("file_" + "Q7x" * 30)


def test_no_processor_proposes_a_rewrite_of_a_server_block() -> None:
    view = [(0, user("task")), (1, assistant(*_leaky_turn())), (2, user("go on"))]
    pipeline = Pipeline(
        [
            SecretMasker(confidence="medium"),
            OutputTrimmer(max_chars=100),
            Distiller(),
            MediaDegrader(kinds=("image", "document")),
        ]
    )
    updates = pipeline.run(view)
    assert [(u.message_idx, u.block_idx) for u in updates if u.message_idx == 1] == []
    result = optimize_file_reads([m for _, m in view] * 2)
    assert not result.changed


def test_a_prepared_request_sends_the_stored_server_blocks_unchanged(
    store: ContextStore,
) -> None:
    cid = store.create_conversation(id="c").id
    store.append(cid, "user", "search it")
    turn = _leaky_turn()
    appended = store.append(cid, "assistant", turn)
    store.append(cid, "user", [text("thanks")])
    pipeline = Pipeline([SecretMasker(), OutputTrimmer(max_chars=100), Distiller()])
    payload = store.prepare_request(cid, pipeline=pipeline).payload
    sent = payload["messages"][1]["content"]
    assert sent[:8] == turn[:8]
    assert sent[8]["citations"] == turn[8]["citations"]
    nodes = store.nodes(cid)
    assert [n.node_type for n in nodes if n.id.startswith("m1.")][:8] == [SERVER_TOOL] * 8
    assert appended.token_count == 4 + sum(block_tokens(block, COUNT) for block in turn)
