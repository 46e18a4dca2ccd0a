from __future__ import annotations

import base64
import copy
import hashlib
from typing import Any

import pytest

from contextstore.core.errors import InvalidInputError
from contextstore.core.overlays import UpdateMode, apply_overlays, text_hash
from contextstore.processors import MediaDegrader, media_pointer, readable_text
from contextstore.processors.degrade import format_size

RAW = bytes(range(256)) * 193
IMAGE = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(RAW).decode()},
}
DOCUMENT = {
    "type": "document",
    "title": "spec.pdf",
    "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQ="},
}


def test_pointer_names_type_size_and_digest() -> None:
    digest = hashlib.sha256(RAW).hexdigest()
    assert media_pointer(IMAGE) == (
        f"[image omitted: image/png, 48.2 KB, sha256 {digest[:12]}; "
        "the original is kept in the database]"
    )
    assert media_pointer(DOCUMENT).startswith("[document omitted: 'spec.pdf', application/pdf, 8 B")
    url_image = {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}
    assert media_pointer(url_image).startswith("[image omitted: url https://x.test/a.png, sha256")


def test_format_size() -> None:
    assert [format_size(n) for n in (0, 1023, 1024, 5 * 1024 * 1024)] == [
        "0 B",
        "1023 B",
        "1.0 KB",
        "5.0 MB",
    ]


def _view() -> list[tuple[int, dict[str, Any]]]:
    return [
        (0, {"role": "user", "content": [{"type": "text", "text": "look"}, IMAGE, DOCUMENT]}),
        (
            3,
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "is_error": False,
                        "content": [
                            {"type": "text", "text": "screenshot taken"},
                            IMAGE,
                        ],
                    },
                    {"type": "tool_result", "tool_use_id": "t2", "content": "plain"},
                ],
            },
        ),
    ]


def test_degrader_proposals() -> None:
    view = _view()
    before = copy.deepcopy(view)
    updates = MediaDegrader().propose(view)
    assert view == before
    assert [(u.address, u.mode) for u in updates] == [
        ((0, 1), UpdateMode.BLOCK),
        ((0, 2), UpdateMode.BLOCK),
        ((3, 0), UpdateMode.BLOCK),
    ]
    assert updates[0].base_hash == text_hash(readable_text(IMAGE, UpdateMode.BLOCK) or "")
    assert updates[0].metadata == {"degraded": [hashlib.sha256(RAW).hexdigest()]}
    result = apply_overlays(view[1][1], 3, {u.address: u for u in updates})
    assert result["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "t1",
        "is_error": False,
        "content": "screenshot taken\n\n" + media_pointer(IMAGE),
    }
    top = apply_overlays(view[0][1], 0, {u.address: u for u in updates})
    assert top["content"][1] == {"type": "text", "text": media_pointer(IMAGE)}


def test_degrader_kinds() -> None:
    updates = MediaDegrader(kinds=["document"]).propose(_view())
    assert [u.address for u in updates] == [(0, 2)]
    assert MediaDegrader(kinds=("image",)).config() == {"kinds": ["image"]}
    with pytest.raises(InvalidInputError):
        MediaDegrader(kinds=("video",))
    with pytest.raises(InvalidInputError):
        MediaDegrader(kinds=())
