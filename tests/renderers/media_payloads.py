"""Stored images and the payloads they become, shared by the media tests of each
provider: headers of the image types, and readers of what a payload sends."""

from __future__ import annotations

import base64
from typing import Any

from tests.conftest import assistant, tool_result, tool_use, user

HEADERS = {
    "image/png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01",
    "image/jpeg": b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00",
    "image/gif": b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04",
    "image/webp": b"RIFF\x24\x00\x00\x00WEBPVP8 \x18\x00\x00\x000\x01\x00\x9d\x01*",
}
"""The first bytes of a file of each type Anthropic and OpenAI take (Gemini all but GIF)."""

UNKNOWN_DATA = base64.b64encode(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" * 2).decode()
"""Data whose header names none of the sniffed types (an ISO-BMFF box, as HEIC starts)."""

NOT_SIGNED = "its data is not a PNG, JPEG, GIF or WebP image"
"""Why Anthropic and OpenAI cannot read data that begins as none of their four types."""


def image_history(image: dict[str, Any]) -> list[dict[str, Any]]:
    """The image in a user message and in a tool result, between text that must stay."""
    return [
        user("Before the picture.", image, "After the picture."),
        assistant(tool_use("toolu_shot", "screenshot")),
        user(tool_result("toolu_shot", [{"type": "text", "text": "Captured."}, image])),
        assistant("Seen."),
        user("Next?"),
    ]


def images(format: str, payload: dict[str, Any]) -> list[str]:
    """The media type of every image the payload sends, in order."""
    found: list[str] = []
    if format == "anthropic":
        for message in payload["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                items = block.get("content") if block["type"] == "tool_result" else [block]
                for item in items if isinstance(items, list) else []:
                    if item["type"] == "image":
                        found.append(item["source"]["media_type"])
    elif format == "openai":
        for message in payload["messages"]:
            for part in message["content"] if isinstance(message["content"], list) else []:
                if part["type"] == "image_url":
                    found.append(part["image_url"]["url"][5:].split(";")[0])
    else:
        for turn in payload["contents"]:
            found.extend(p["inlineData"]["mimeType"] for p in turn["parts"] if "inlineData" in p)
    return found


def texts(value: Any) -> str:
    """Every string the payload holds, one a line, to search."""
    if isinstance(value, dict):
        return "\n".join(texts(item) for item in value.values())
    if isinstance(value, list):
        return "\n".join(texts(item) for item in value)
    return value if isinstance(value, str) else ""
