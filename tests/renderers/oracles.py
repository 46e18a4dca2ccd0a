"""The providers' official SDKs as oracles for a rendered request: their types, nothing else.

Only the request types are imported (``anthropic``, ``openai``, ``google-genai`` are test
dependencies); no client is created, so nothing can reach the network. Anthropic's and
OpenAI's request types are TypedDicts: pydantic validates a body against them, and since a
TypedDict silently drops keys it does not know, the validated body must also equal the
input (a renderer's unknown field, or a value pydantic had to coerce, shows up as a
difference). Gemini's types are pydantic models that forbid unknown fields themselves;
they are validated from JSON, so ``data`` fields are decoded as base64, as the API does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

GEMINI_BODY_KEYS = frozenset(
    {"model", "contents", "systemInstruction", "tools", "generationConfig"}
)


def _plain(value: Any) -> Any:
    """``value`` with pydantic's lazily validated iterables consumed into lists.

    Consuming them is what validates their items: ``Iterable[...]`` fields are checked
    item by item as they are read. A message's content may also validate as a response
    block (``MessageContentParam`` lists ``ContentBlock`` beside the params): it is read
    back as the fields that were given.
    """
    if isinstance(value, BaseModel):
        return _plain(value.model_dump(exclude_unset=True, by_alias=True))
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple | Iterator):
        return [_plain(item) for item in value]
    return value


@cache
def _anthropic() -> TypeAdapter[Any]:
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    return TypeAdapter(MessageCreateParamsNonStreaming)


@cache
def _anthropic_messages() -> TypeAdapter[Any]:
    from anthropic.types import MessageParam

    return TypeAdapter(list[MessageParam])


@cache
def _openai() -> TypeAdapter[Any]:
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

    return TypeAdapter(CompletionCreateParamsNonStreaming)


@cache
def _openai_messages() -> TypeAdapter[Any]:
    from openai.types.chat import ChatCompletionMessageParam

    return TypeAdapter(list[ChatCompletionMessageParam])


def _typed_dict_problems(adapter: TypeAdapter[Any], value: Any) -> list[str]:
    try:
        validated = _plain(adapter.validate_python(value))
    except ValidationError as exc:
        return [f"{error['loc']}: {error['msg']}" for error in exc.errors()[:5]]
    if validated != value:
        return [f"the SDK type drops or changes fields: {json.dumps(validated)[:300]}"]
    return []


def _gemini_problems(body: Any) -> list[str]:
    # google-genai 3.x needs Python 3.11 (pyproject's marker): on 3.10 the test skips here.
    types = pytest.importorskip("google.genai.types", reason="google-genai needs Python 3.11")

    problems: list[str] = []

    def check(model: Any, value: Any, where: str) -> None:
        try:
            model.model_validate_json(json.dumps(value))
        except ValidationError as exc:
            problems.extend(f"{where} {e['loc']}: {e['msg']}" for e in exc.errors()[:5])

    if isinstance(body, list):
        contents, extra = body, {}
    elif isinstance(body, Mapping):
        unknown = set(body) - GEMINI_BODY_KEYS
        if unknown:
            problems.append(f"fields the API does not define: {sorted(unknown)}")
        contents, extra = body.get("contents"), body
    else:
        return [f"not a request body: {body!r:.80}"]
    if not isinstance(contents, list):
        return [*problems, "contents is not a list"]
    for position, content in enumerate(contents):
        check(types.Content, content, f"contents[{position}]")
    if "systemInstruction" in extra:
        check(types.Content, extra["systemInstruction"], "systemInstruction")
    for position, tool in enumerate(extra.get("tools", [])):
        check(types.Tool, tool, f"tools[{position}]")
    if "generationConfig" in extra:
        check(types.GenerationConfig, extra["generationConfig"], "generationConfig")
    if "model" in extra and not isinstance(extra["model"], str):
        problems.append("model is not a string")
    return problems


def sdk_problems(format: str, payload: Any) -> list[str]:
    """Every way ``payload`` (a request body, or the bare message/contents list) breaks the
    provider's official request types; an empty list means the SDK accepts it."""
    if format == "gemini":
        return _gemini_problems(payload)
    bare = isinstance(payload, list)
    if format == "anthropic":
        return _typed_dict_problems(_anthropic_messages() if bare else _anthropic(), payload)
    if format == "openai":
        return _typed_dict_problems(_openai_messages() if bare else _openai(), payload)
    raise ValueError(f"unknown format {format!r}")
