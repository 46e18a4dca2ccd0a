"""Render stored messages as a Gemini ``generateContent`` request.

The mapping from Anthropic blocks to Gemini parts:

* ``text`` -> ``{"text"}``; a ``signature`` a Gemini turn left on the block (Cline keeps
  Gemini's thought signatures there) is sent back as ``thoughtSignature``;
* base64 images and documents -> ``inlineData``, an image with the type its data is
  (one of a type Gemini refuses, not in :data:`IMAGE_TYPES`, becomes a text part saying
  it was left out); URL images and documents ->
  ``fileData`` (the MIME type guessed from the URL); plain-text documents -> ``text``;
* ``tool_use`` -> ``functionCall`` (``id``, ``name``, ``args``);
* ``tool_result`` -> ``functionResponse`` named after the matching ``tool_use`` (or
  :data:`UNKNOWN_TOOL_NAME`), with ``{"output": text}`` or, when ``is_error``,
  ``{"error": text}``; images a result returned follow as ``inlineData`` parts of the
  same user turn;
* ``search_result`` (Anthropic's format for search results, in a tool result or a user
  message) -> text (:func:`~contextstore.core.overlays.search_result_text`), in the
  response's text or as a ``{"text"}`` part;
* ``thinking`` -> a ``thought`` text part, which hardening strips; ``redacted_thinking``
  is dropped;
* Anthropic's server tool blocks -> text parts in their place
  (:func:`~contextstore.renderers.server_text.server_block_text`), encrypted values left
  out, after the broken pairs are dropped as for Anthropic
  (:func:`~contextstore.core.server_tools.paired_server_blocks`).

The contents are then passed through :func:`~contextstore.core.hardening.harden_history`,
so the result always alternates roles, starts and ends with a user turn and pairs every
call with a response.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Mapping, Sequence
from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.hardening import (
    DEFAULT_CONTINUATION,
    DEFAULT_FINAL_USER_TEXT,
    DEFAULT_LOST_RESPONSE,
    Content,
    Part,
    harden_history,
)
from contextstore.core.media import image_type, left_out, unreadable, unreadable_image
from contextstore.core.overlays import Block
from contextstore.core.server_tools import SERVER_BLOCK_TYPES, paired_server_blocks
from contextstore.core.validate import json_copy
from contextstore.core.view import VIEW_RULES
from contextstore.renderers.anthropic import (
    SystemPrompt,
    Tool,
    check_messages,
    check_tools,
    content_blocks,
    search_result_text,
    system_text,
)
from contextstore.renderers.server_text import server_block_text

UNKNOWN_TOOL_NAME = "unknown_tool"
"""The name given to a response whose ``tool_use_id`` matches no ``tool_use``."""

FALLBACK_MIME_TYPE = "application/octet-stream"
"""The MIME type of a URL source whose type cannot be guessed from the URL."""

TEXT_SEPARATOR = "\n\n"

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"})
"""The image types Gemini's ``generateContent`` takes, as Google's image-understanding page
lists them (a GIF is answered "invalid argument" there). The SDK's ``Blob.mime_type`` is a
plain string; the ``Literal`` of ``ImageContentMimeType`` in
``google.genai._gaos.types.interactions.imagecontent``, for Google's newer interactions API,
holds these five and more (gif, bmp, tiff)."""

PROVIDER = "Gemini"
"""The provider's name in :func:`~contextstore.core.media.left_out`'s text."""

_ROLES = {"user": "user", "assistant": "model"}

_RESULT_ITEM_TYPES = frozenset({"image", "document", "search_result"})
"""The items of a tool result other than text that may have a part (:func:`content_part`)."""


def _signed(part: Part, block: Block) -> Part:
    # Cline keeps Gemini's signature as ``signature``; a chat imported from Gemini CLI keeps
    # it under Gemini's own name.
    signature = block.get("signature") or block.get("thoughtSignature")
    if isinstance(signature, str) and signature:
        part["thoughtSignature"] = signature
    return part


def _image_part(block: Block, rules: int) -> Part | None:
    """The part for an image; from version 7 of the view rules a base64 image is sent
    with the type its data is, and one of a type not in :data:`IMAGE_TYPES` becomes a
    text part saying it was left out (:func:`~contextstore.core.media.left_out`); from
    version 8 so does one of those types whose data is not base64 or is empty
    (:func:`~contextstore.core.media.unreadable_image`; Gemini reads HEIC and HEIF too,
    whose first bytes are not checked)."""
    source = block.get("source")
    if rules >= 7 and isinstance(source, Mapping) and source.get("type") == "base64":
        mime_type = image_type(source, "image/png")
        if mime_type not in IMAGE_TYPES:
            return {"text": left_out("image", mime_type, PROVIDER)}
        reason = unreadable_image(source, signed_only=False) if rules >= 8 else None
        if reason is not None:
            return {"text": unreadable("image", reason)}
        return {"inlineData": {"mimeType": mime_type, "data": source.get("data", "")}}
    return _media_part(block, "image/png")


def _guessed_type(url: str) -> str | None:
    """The media type ``url``'s file name suggests, or None.

    Python 3.13's ``mimetypes`` parses the URL first and refuses brackets around a host
    that is no IP address, even in the password (``https://u:[REDACTED:url_password]@...``,
    as secret masking writes it): the render failed with ValueError there. Escaped, the
    brackets leave the file name, all the type is read from, as it was."""
    try:
        return mimetypes.guess_type(url)[0]
    except ValueError:
        return mimetypes.guess_type(url.replace("[", "%5B").replace("]", "%5D"))[0]


def _media_part(block: Block, default_type: str) -> Part | None:
    """Return the part for an image or document source, or None if it cannot be sent."""
    source = block.get("source")
    if not isinstance(source, Mapping):
        return None
    kind = source.get("type")
    if kind == "base64":
        mime_type = source.get("media_type") or default_type
        return {"inlineData": {"mimeType": mime_type, "data": source.get("data", "")}}
    if kind == "url":
        url = str(source.get("url", ""))
        mime_type = _guessed_type(url) or FALLBACK_MIME_TYPE
        return {"fileData": {"mimeType": mime_type, "fileUri": url}}
    if kind == "text":
        return {"text": str(source.get("data", ""))}
    if kind == "content":
        inner = source.get("content")
        if isinstance(inner, str):
            return {"text": inner}
        texts = [str(b.get("text", "")) for b in inner or [] if isinstance(b, dict)]
        return {"text": TEXT_SEPARATOR.join(texts)}
    return None


def _result_payload(block: Block, rules: int) -> tuple[str, list[Part]]:
    """Return a tool result's text and the media parts it carries."""
    content = block.get("content")
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    media: list[Part] = []
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "text":
            texts.append(str(item.get("text", "")))
            continue
        part = content_part(item, rules) if item.get("type") in _RESULT_ITEM_TYPES else None
        if part is not None and "text" in part:
            texts.append(part["text"])
        elif part is not None:
            media.append(part)
    return TEXT_SEPARATOR.join(texts), media


def result_text(block: Block, rules: int = VIEW_RULES) -> str:
    """The text of a ``tool_result`` block's ``functionResponse``, as this renderer sends it
    by the view rules of version ``rules``: its text items, plain-text documents and search
    results (:func:`content_part`), separated by a blank line; images and other media are
    sent beside it as parts of their own and are not in it."""
    return _result_payload(block, rules)[0]


def _response_parts(block: Block, names: Mapping[str, str], rules: int) -> list[Part]:
    call_id = str(block.get("tool_use_id", ""))
    text, media = _result_payload(block, rules)
    key = "error" if block.get("is_error") else "output"
    response: dict[str, Any] = {
        "name": names.get(call_id, UNKNOWN_TOOL_NAME),
        "response": {key: text},
    }
    if call_id:
        response["id"] = call_id
    return [{"functionResponse": response}, *media]


def content_part(block: Block, rules: int = VIEW_RULES) -> Part | None:
    """The Gemini part of one block that maps to a single part (not a tool result), or
    None for a block Gemini has no part for (by the view rules of version ``rules``: a
    ``search_result`` has a text part from version 5; from version 7 a base64 image of a
    type Gemini refuses is a text part saying it was left out)."""
    kind = block.get("type")
    if kind == "text":
        return _signed({"text": str(block.get("text", ""))}, block)
    if kind == "image":
        return _image_part(block, rules)
    if kind == "document":
        return _media_part(block, "application/pdf")
    if kind == "tool_use":
        call = {
            "id": str(block.get("id", "")),
            "name": str(block.get("name", "")),
            "args": json_copy(block.get("input") or {}),
        }
        return _signed({"functionCall": call}, block)
    if kind == "thinking":
        return {"text": str(block.get("thinking", "")), "thought": True}
    if kind == "search_result" and rules >= 5:
        return {"text": search_result_text(block)}
    if kind in SERVER_BLOCK_TYPES:
        return {"text": server_block_text(block)}
    return None


def _parts(blocks: Sequence[Block], names: Mapping[str, str], rules: int) -> list[Part]:
    parts: list[Part] = []
    for block in blocks:
        if block.get("type") == "tool_result":
            parts.extend(_response_parts(block, names, rules))
            continue
        part = content_part(block, rules)
        # An empty text part is rejected by the API and says nothing.
        if part is not None and part.get("text") != "":
            parts.append(part)
    return parts


def _tool_names(messages: Sequence[Mapping[str, Any]], names: dict[str, str]) -> dict[str, str]:
    """``names`` with every ``tool_use`` id of ``messages`` mapped to its tool name (a
    later call of an id wins)."""
    for message in messages:
        for block in content_blocks(message):
            if block.get("type") == "tool_use" and block.get("id"):
                names[str(block["id"])] = str(block.get("name", ""))
    return names


def render_contents(
    messages: Sequence[Mapping[str, Any]],
    *,
    lost_response: str = DEFAULT_LOST_RESPONSE,
    continuation: str = DEFAULT_CONTINUATION,
    final_user_text: str = DEFAULT_FINAL_USER_TEXT,
    rules: int = VIEW_RULES,
) -> list[Content]:
    """Return the messages as hardened Gemini ``contents``.

    Args:
        messages: Anthropic-style messages, already cut and tool-paired. Not modified.
        lost_response: Error text for a call hardening finds unanswered.
        continuation: Text of the user turn added when the history starts with the model.
        final_user_text: Text of the user turn added when it ends with the model.
        rules: The version of the view rules to render by
            (:data:`~contextstore.core.view.VIEW_RULES`): a stored request is rebuilt by
            the version it was prepared with; before 5, ``search_result`` blocks are
            dropped, before 7, base64 images are sent with their stored media type,
            whatever it is, and before 11 every result is named after the last call of
            its id in the request.

    Returns:
        New ``Content`` dicts that satisfy Gemini's role and pairing rules.

    Raises:
        InvalidMessageError: The input is not a list of Anthropic-style messages.
    """
    check_messages(messages)
    # A result is named after the call its id answered last, so far (from version 11: an
    # agent that reuses ids made a result of one tool answer as another one).
    names = {} if rules >= 11 else _tool_names(messages, {})
    contents = []
    for message in paired_server_blocks(messages):  # type: ignore[arg-type]  # checked
        if rules >= 11:
            _tool_names([message], names)
        parts = _parts(content_blocks(message), names, rules)
        contents.append({"role": _ROLES[message["role"]], "parts": parts})
    return harden_history(
        contents,
        lost_response=lost_response,
        continuation=continuation,
        final_user_text=final_user_text,
    )


OPENAPI_SUBSET = frozenset(
    {
        "type",
        "format",
        "title",
        "description",
        "nullable",
        "enum",
        "maxItems",
        "minItems",
        "properties",
        "required",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "example",
        "anyOf",
        "propertyOrdering",
        "default",
        "items",
        "minimum",
        "maximum",
    }
)
"""The keywords of Gemini's ``Schema`` (its OpenAPI subset), which a function declaration's
``parameters`` takes; any other keyword there makes the API refuse the request."""


def fits_parameters(schema: Any) -> bool:
    """Whether ``schema`` holds only what Gemini's ``parameters`` reads: keywords of
    :data:`OPENAPI_SUBSET`, one ``type`` name, ``enum`` of strings, and sub-schemas
    (``properties``, ``items``, ``anyOf``) that fit too."""
    if not isinstance(schema, dict) or not schema.keys() <= OPENAPI_SUBSET:
        return False
    if "type" in schema and not isinstance(schema["type"], str):
        return False
    enum = schema.get("enum", [])
    if not isinstance(enum, list) or not all(isinstance(value, str) for value in enum):
        return False
    properties = schema.get("properties", {})
    if not isinstance(properties, dict) or not all(map(fits_parameters, properties.values())):
        return False
    if "items" in schema and not fits_parameters(schema["items"]):
        return False
    alternatives = schema.get("anyOf", [])
    return isinstance(alternatives, list) and all(map(fits_parameters, alternatives))


def render_tool(tool: Tool, rules: int = VIEW_RULES) -> dict[str, Any]:
    """Convert an Anthropic tool definition to a Gemini function declaration.

    The ``input_schema`` is passed unchanged as ``parameters`` when it holds only Gemini's
    OpenAPI subset (:func:`fits_parameters`), and otherwise as ``parametersJsonSchema``, the
    field that takes JSON Schema as it is: by view rules older than 12 (``rules``) it was
    always ``parameters``, and the API refused the request for a keyword outside the subset
    (``$schema``, ``const``, ``exclusiveMinimum``, ``oneOf``, ``additionalProperties``, a
    list of types, as MCP servers' schemas hold: "Unknown name ... at
    'tools[0].function_declarations[0].parameters'").

    Raises:
        InvalidInputError: The tool is an Anthropic server tool (a ``type`` other than
            ``custom``), which Gemini cannot run.
    """
    if tool.get("type", "custom") != "custom":
        raise InvalidInputError(
            f"tool {tool.get('name')!r} has type {tool.get('type')!r}, an Anthropic server "
            "tool; Gemini cannot run it, so leave it out of the tools for this format."
        )
    declaration: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description") is not None:
        declaration["description"] = tool["description"]
    schema = tool.get("input_schema") or {"type": "object", "properties": {}}
    as_json_schema = rules >= 12 and not fits_parameters(schema)
    declaration["parametersJsonSchema" if as_json_schema else "parameters"] = json_copy(schema)
    return declaration


def _model_resource(model: str) -> str:
    return model if model.startswith(("models/", "tunedModels/")) else f"models/{model}"


def build_request(
    messages: Sequence[Mapping[str, Any]],
    *,
    system: SystemPrompt | None = None,
    tools: Sequence[Tool] | None = None,
    model: str | None = None,
    max_tokens: int | None = None,
    rules: int = VIEW_RULES,
) -> dict[str, Any]:
    """Return a ``generateContent`` request body; arguments left as None are omitted.

    Args:
        messages: Anthropic-style messages, already cut and tool-paired. Not modified.
        system: The system prompt, sent as ``systemInstruction`` (text blocks joined by a
            blank line).
        tools: Tools in Anthropic's schema, sent as one ``functionDeclarations`` tool
            (:func:`render_tool`).
        model: The model id, sent as the request's ``model`` resource name
            (``models/<id>``), so that the body alone says which model it was for.
        max_tokens: The output token limit, sent as ``generationConfig.maxOutputTokens``.
        rules: The version of the view rules to render by (see :func:`render_contents`).

    Returns:
        ``{"model", "contents", "systemInstruction", "tools", "generationConfig"}``
        (present keys only).

    Raises:
        InvalidInputError: A message or a tool is malformed.
    """
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = _model_resource(model)
    body["contents"] = render_contents(messages, rules=rules)
    if system is not None:
        body["systemInstruction"] = {"parts": [{"text": system_text(system)}]}
    if tools is not None:
        check_tools(tools)
        declarations = [render_tool(tool, rules) for tool in tools]
        body["tools"] = [{"functionDeclarations": declarations}]
    if max_tokens is not None:
        body["generationConfig"] = {"maxOutputTokens": max_tokens}
    return body


def violations(contents: Sequence[Any], *, rules: int = VIEW_RULES) -> list[str]:
    """Return the ways ``contents`` break Gemini's role and function-call rules.

    Checked: roles are ``user``/``model`` and alternate, starting and ending with
    ``user``; no turn is empty; the turn after a model turn with ``functionCall`` parts
    holds exactly as many ``functionResponse`` parts, with the same ids; no response
    appears in any other turn; and, for a payload built by version 7 of the view rules
    or later (``rules``), no ``inlineData`` part holds an image (an ``image/`` MIME type)
    of a type not in :data:`IMAGE_TYPES`.
    """
    problems: list[str] = []
    calls: list[Any] = []
    for position, turn in enumerate(contents):
        if not isinstance(turn, Mapping):
            problems.append(f"contents[{position}] is not a dict")
            calls = []
            continue
        problems.extend(_turn_shape_problems(position, turn, len(contents)))
        parts = [p for p in turn.get("parts") or [] if isinstance(p, Mapping)]
        if rules >= 7:
            problems.extend(_image_type_problems(position, parts, rules))
        responses = [p["functionResponse"].get("id") for p in parts if "functionResponse" in p]
        if calls or responses:
            problems.extend(_pairing_problems(position, calls, responses))
        calls = [p["functionCall"].get("id") for p in parts if "functionCall" in p]
        if turn.get("role") != "model":
            calls = []
    if calls:
        problems.append("end of contents: the last model turn's calls are not answered")
    return problems


def _image_type_problems(
    position: int, parts: Sequence[Mapping[str, Any]], rules: int
) -> list[str]:
    """The inline images of one turn whose type Gemini refuses, and from version 8 of the
    view rules (``rules``) those whose data is not base64 or is empty."""
    refused = []
    unread = []
    for part in parts:
        inline = part.get("inlineData")
        if not isinstance(inline, Mapping):
            continue
        mime_type = inline.get("mimeType")
        if not isinstance(mime_type, str) or not mime_type.startswith("image/"):
            continue
        if mime_type not in IMAGE_TYPES:
            refused.append(mime_type[:60])
            continue
        reason = unreadable_image(inline, signed_only=False) if rules >= 8 else None
        if reason is not None:
            unread.append(reason)
    problems = []
    if refused:
        problems.append(f"contents[{position}] has images of types Gemini refuses: {refused}")
    if unread:
        problems.append(f"contents[{position}] has images Gemini cannot read: {unread}")
    return problems


def _turn_shape_problems(position: int, turn: Mapping[str, Any], count: int) -> list[str]:
    problems: list[str] = []
    role = turn.get("role")
    expected = "user" if position % 2 == 0 else "model"
    if role != expected:
        problems.append(f"contents[{position}] has role {role!r}, expected {expected!r}")
    if position == count - 1 and role != "user":
        problems.append(f"contents[{position}] is the last turn but not a user turn")
    if not turn.get("parts"):
        problems.append(f"contents[{position}] has no parts")
    return problems


def _pairing_problems(position: int, calls: Sequence[Any], responses: Sequence[Any]) -> list[str]:
    problems: list[str] = []
    if len(calls) != len(responses):
        problems.append(
            f"contents[{position}] has {len(responses)} function responses for "
            f"{len(calls)} function calls"
        )
    if sorted(map(str, calls)) != sorted(map(str, responses)):
        problems.append(
            f"contents[{position}]: response ids {list(responses)} do not match call ids "
            f"{list(calls)}"
        )
    return problems
