"""Images and documents of media types a provider refuses (view rules 7).

The accepted types are the providers' own, read from the SDKs installed offline:

* Anthropic: the ``Literal`` of ``media_type`` in ``anthropic/types/base64_image_source_param.py``
  (image/jpeg, image/png, image/gif, image/webp) and ``anthropic/types/base64_pdf_source_param.py``
  (application/pdf); the SDK's request type is also the oracle of every Anthropic payload
  below (``oracles.sdk_problems``), and it refuses any other image type.
* OpenAI: ``openai/types/chat/chat_completion_content_part_image_param.py`` leaves the URL a
  plain string and links the vision guide, which lists PNG, JPEG, WebP and non-animated GIF;
  there is no SDK literal to compare with, so these tests hold the renderer to that list.
* Gemini: ``google/genai/types.py``'s ``Blob.mime_type`` is a plain string; Google's
  image-understanding page lists png, jpeg, webp, heic and heif for ``generateContent``, the
  API the Gemini format is for (a GIF is answered "invalid argument" there). The ``Literal`` of
  ``ImageContentMimeType`` in ``google/genai/_gaos/types/interactions/imagecontent.py``, for
  the newer interactions API, holds those five and gif, bmp and tiff: the tests check the
  five are among them.

A stored image of another type is sent as a text block saying it was left out; a base64
image whose data header names another type than its ``media_type`` is sent with the type
of its data (Anthropic refuses the mismatch: "image does not match the provided media
type"). Every test here fails under view rules 6.
"""

from __future__ import annotations

import base64
import typing
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import sdk_problems

from contextstore import ContextStore
from contextstore.core.media import left_out, sniffed_image_type, unreadable
from contextstore.renderers import anthropic_media, gemini, openai
from contextstore.renderers.registry import FORMATS, build_request, validate_provider_payload
from tests.conftest import assistant, tool_result, tool_use, user
from tests.renderers.media_payloads import (
    HEADERS,
    NOT_SIGNED,
    UNKNOWN_DATA,
    image_history,
    images,
    texts,
)

MEDIA_TYPES = [
    "image/jpeg",
    "image/png",
    "image/gif",
    "image/webp",
    "image/heic",
    "image/heif",
    "image/bmp",
    "image/tiff",
    "image/svg+xml",
    "undefined",
    "image/x-made-up",
]

ACCEPTED = {
    "anthropic": {"image/jpeg", "image/png", "image/gif", "image/webp"},
    "openai": {"image/jpeg", "image/png", "image/gif", "image/webp"},
    "gemini": {"image/jpeg", "image/png", "image/webp", "image/heic", "image/heif"},
}

PROVIDER = {"anthropic": "Anthropic", "openai": "OpenAI", "gemini": "Gemini"}


def _data(header: bytes) -> str:
    return base64.b64encode(header + bytes(16)).decode()


def _image(media_type: Any, data: str = UNKNOWN_DATA) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _literal(annotation: Any) -> set[str]:
    """The strings of the ``Literal`` inside ``annotation`` (through Required and Union)."""
    found: set[str] = set()
    for arg in typing.get_args(annotation):
        if isinstance(arg, str):
            found.add(arg)
        else:
            found |= _literal(arg)
    return found


def test_the_accepted_types_are_the_sdks() -> None:
    from anthropic.types import Base64ImageSourceParam, Base64PDFSourceParam

    pytest.importorskip("google.genai", reason="google-genai needs Python 3.11")
    from google.genai._gaos.types.interactions.imagecontent import ImageContentMimeType

    image = typing.get_type_hints(Base64ImageSourceParam, include_extras=True)["media_type"]
    pdf = typing.get_type_hints(Base64PDFSourceParam, include_extras=True)["media_type"]
    assert anthropic_media.IMAGE_TYPES == _literal(image) == ACCEPTED["anthropic"]
    assert anthropic_media.DOCUMENT_TYPES == _literal(pdf) == {"application/pdf"}
    assert ACCEPTED["gemini"] == gemini.IMAGE_TYPES
    assert _literal(ImageContentMimeType) > gemini.IMAGE_TYPES
    assert ACCEPTED["openai"] == openai.IMAGE_TYPES


@pytest.mark.parametrize("media_type", MEDIA_TYPES)
def test_prepare_request_sends_an_image_only_of_a_type_the_provider_takes(
    store: ContextStore, media_type: str
) -> None:
    """Each image's data is of its type where the type has a header here (else data of
    no header the store knows, as HEIC begins)."""
    conv = store.create_conversation()
    data = _data(HEADERS[media_type]) if media_type in HEADERS else UNKNOWN_DATA
    store.append(conv.id, image_history(_image(media_type, data)))
    for format in FORMATS:
        ctx = store.prepare_request(conv.id, format=format, model="m", max_tokens=64)
        payload = ctx.payload
        assert validate_provider_payload(format, payload) == []
        if format != "gemini":
            assert sdk_problems(format, payload) == []
        said = texts(payload)
        assert "Before the picture." in said and "After the picture." in said
        assert "Captured." in said and "Seen." in said
        if media_type in ACCEPTED[format]:
            assert images(format, payload) == [media_type, media_type]
        else:
            assert images(format, payload) == []
            assert said.count(left_out("image", media_type, PROVIDER[format])) == 2
        assert store.request_payload(conv.id, ctx.request_id) == payload


def test_the_left_out_text_names_the_type_and_the_provider() -> None:
    assert left_out("image", "image/heic", "Anthropic") == (
        "[image omitted: image/heic, a type the Anthropic API does not accept; "
        "the original is kept in the database]"
    )
    assert "'image/png; x'" in left_out("image", "image/png; x", "OpenAI")
    assert "no media type" in left_out("image", None, "Gemini")


def test_the_anthropic_sdk_refuses_what_rules_6_sent() -> None:
    """The oracle the end-to-end test relies on: rules 6 sent HEIC as it was, which the
    SDK's type (and the API) refuse; rules 7 sends the stand-in."""
    history = image_history(_image("image/heic"))
    old = build_request("anthropic", history, model="m", max_tokens=64, rules=6)
    assert sdk_problems("anthropic", old) != []
    assert validate_provider_payload("anthropic", old, rules=6) == []
    assert validate_provider_payload("anthropic", old, rules=7) != []
    new = build_request("anthropic", history, model="m", max_tokens=64, rules=7)
    assert sdk_problems("anthropic", new) == []


@pytest.mark.parametrize("sniffed", sorted(HEADERS))
@pytest.mark.parametrize("claimed", ["image/jpeg", "image/png", "image/heic", "undefined", None])
@pytest.mark.parametrize("format", FORMATS)
def test_an_image_is_sent_with_the_type_its_data_is(
    format: str, claimed: str | None, sniffed: str
) -> None:
    """A PNG labelled image/jpeg, a JPEG labelled image/heic, a GIF labelled ``undefined``:
    every provider gets the type of the data, and a type it refuses (a GIF, for Gemini) is
    left out as any image of that type is."""
    data = _data(HEADERS[sniffed])
    assert sniffed_image_type(data) == sniffed
    payload = build_request(format, image_history(_image(claimed, data)), model="m", max_tokens=64)
    sent = [sniffed, sniffed] if sniffed in ACCEPTED[format] else []
    assert images(format, payload) == sent
    assert validate_provider_payload(format, payload) == []
    if format != "gemini":
        assert sdk_problems(format, payload) == []


def test_an_anthropic_document_must_be_a_pdf() -> None:
    """A base64 document of another type is left out for Anthropic (Base64PDFSourceParam);
    OpenAI and Gemini get it as before."""
    pdf = base64.b64encode(b"%PDF-1.7\n").decode()
    docx = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/msword", "data": pdf},
    }
    good = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
    }
    history = [user("Read these.", docx, good)]
    payload = build_request("anthropic", history, model="m", max_tokens=64)
    content = payload["messages"][0]["content"]
    assert content[1] == {
        "type": "text",
        "text": left_out("document", "application/msword", "Anthropic"),
    }
    assert content[2] == good
    assert sdk_problems("anthropic", payload) == []
    old = build_request("anthropic", history, model="m", max_tokens=64, rules=6)
    assert validate_provider_payload("anthropic", old) != []
    for format in ("openai", "gemini"):
        assert build_request(format, history, rules=7) == build_request(format, history, rules=6)


def _text_document(**source: Any) -> dict[str, Any]:
    return {"type": "document", "source": {"type": "text", "data": "notes", **source}}


@pytest.mark.parametrize(
    "source",
    [{}, {"media_type": "text/markdown"}, {"media_type": "text/plain"}],
    ids=["no-media-type", "markdown", "plain"],
)
@pytest.mark.parametrize("in_result", [False, True], ids=["message", "tool-result"])
def test_an_anthropic_text_document_is_sent_as_text_plain(
    store: ContextStore, source: dict[str, Any], in_result: bool
) -> None:
    """The store takes a text document without a media_type (its model's default is
    text/plain) or with another text type; the API requires text/plain
    (PlainTextSourceParam) and refused the request on every turn."""
    document = _text_document(**source)
    if in_result:
        history = [
            user("Read."),
            assistant(tool_use("t1", "read")),
            user(tool_result("t1", [document])),
        ]
    else:
        history = [user("Read this.", document)]
    conv = store.create_conversation()
    store.append(conv.id, history)
    payload = store.prepare_request(conv.id, model="m", max_tokens=64).payload
    sent = payload["messages"][-1]["content"]
    sent = sent[0]["content"] if in_result else sent
    assert _text_document(media_type="text/plain") in sent
    assert sdk_problems("anthropic", payload) == []
    assert store.messages(conv.id)[-1]["content"] == history[-1]["content"]
    old = build_request("anthropic", history, model="m", max_tokens=64, rules=11)
    assert validate_provider_payload("anthropic", old, rules=11) == []
    if source.get("media_type") != "text/plain":
        assert sdk_problems("anthropic", old) != []
        assert validate_provider_payload("anthropic", old) != []


def test_a_left_out_image_keeps_its_cache_breakpoint() -> None:
    image = {**_image("image/heic"), "cache_control": {"type": "ephemeral"}}
    payload = build_request("anthropic", [user("See.", image)], model="m", max_tokens=64)
    assert payload["messages"][0]["content"][1]["cache_control"] == {"type": "ephemeral"}
    assert sdk_problems("anthropic", payload) == []


@pytest.mark.parametrize(
    ("format", "payload"),
    [
        (
            "anthropic",
            {"messages": [user("Look.", _image("image/heic"))]},
        ),
        (
            "anthropic",
            {"messages": [user("Look.", _image("image/jpeg", _data(HEADERS["image/png"])))]},
        ),
        (
            "anthropic",
            {
                "messages": [
                    user("Shoot."),
                    assistant(tool_use("t1", "shot")),
                    user(tool_result("t1", [_image("image/svg+xml")])),
                ]
            },
        ),
        (
            "openai",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image_url",
                                "image_url": {"url": "data:image/heic;base64,AA=="},
                            }
                        ],
                    }
                ]
            },
        ),
        (
            "gemini",
            {
                "contents": [
                    {
                        "role": "user",
                        "parts": [{"inlineData": {"mimeType": "image/svg+xml", "data": "AA=="}}],
                    }
                ]
            },
        ),
    ],
    ids=[
        "anthropic-heic",
        "anthropic-mismatch",
        "anthropic-result-svg",
        "openai-heic",
        "gemini-svg",
    ],
)
def test_the_provider_check_reports_refused_images_in_payloads_built_elsewhere(
    format: str, payload: dict[str, Any]
) -> None:
    problems = validate_provider_payload(format, payload)
    assert len(problems) == 1
    assert "refuse" in problems[0]
    assert validate_provider_payload(format, payload, rules=6) == []


_MEDIA_TYPE = st.one_of(st.sampled_from(MEDIA_TYPES), st.text(max_size=20), st.none())
_HEADER = st.sampled_from([None, *sorted(HEADERS)])


@settings(max_examples=150, deadline=None)
@given(media_type=_MEDIA_TYPE, header=_HEADER, in_result=st.booleans())
def test_any_stored_image_renders_a_payload_every_provider_takes(
    media_type: Any, header: str | None, in_result: bool
) -> None:
    data = UNKNOWN_DATA if header is None else _data(HEADERS[header])
    image = _image(media_type, data)
    if in_result:
        history = [
            user("Shoot."),
            assistant(tool_use("t1", "shot")),
            user(tool_result("t1", [image])),
        ]
    else:
        history = [user("Look.", image)]
    for format in FORMATS:
        payload = build_request(format, history, model="m", max_tokens=64)
        assert validate_provider_payload(format, payload) == []
        if format != "gemini":
            assert sdk_problems(format, payload) == []
        default = media_type or ("image/png" if format != "anthropic" else None)
        sent = header or default
        readable = header is not None or format == "gemini"  # Gemini: any base64 data
        if sent in ACCEPTED[format] and readable:
            assert images(format, payload) == [sent]
        elif sent in ACCEPTED[format]:
            assert images(format, payload) == []
            assert unreadable("image", NOT_SIGNED) in texts(payload)
        else:
            assert images(format, payload) == []
            assert left_out("image", sent, PROVIDER[format]) in texts(payload)
