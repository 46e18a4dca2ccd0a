"""The context window a Cline task ran against, read from what Cline told the model.

Cline's task files do not record the window (Cline reads it from its provider's model
table), but its environment details, which it adds to a user turn, end with

    # Context Window Usage
    129,352 / 200K tokens used (65%)

where ``200K`` is the window divided by 1,000 and written with JavaScript's
``toLocaleString()``: in every user turn of older versions, and in later ones, for Claude 4
and GPT-5 models, only in the turns sent at 60 % of the window or more (when the window
matters). The newest such line gives the window; the turns are in the API history
and in the ``request`` of each ``api_req_started`` UI message (a task whose API history is
gone still has those). Only the en-US form of the number is read (``1,048.576K``); a line
written in another locale is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from contextstore.core.validate import MAX_INT32
from contextstore.interop.cline_ui_rows import request_info

_USAGE: Final = re.compile(
    r"# Context Window Usage\n[\d,]+ / (\d{1,3}(?:,\d{3})*(?:\.\d{1,3})?)K tokens used "
    r"\(\d+%\)"
)


def stated_window(
    messages: Sequence[Mapping[str, Any]], ui_messages: Sequence[Mapping[str, Any]]
) -> int | None:
    """The window of the newest ``# Context Window Usage`` line of a task's user turns
    (the API history first, then the UI messages' requests), or None when none holds one."""
    for text in _newest_first(messages, ui_messages):
        found = list(_USAGE.finditer(text))
        if found:
            window = round(float(found[-1].group(1).replace(",", "")) * 1000)
            return window if 1 <= window <= MAX_INT32 else None
    return None


def _newest_first(
    messages: Sequence[Mapping[str, Any]], ui_messages: Sequence[Mapping[str, Any]]
) -> Iterator[str]:
    for message in reversed(messages):
        if message.get("role") == "user":
            yield from reversed(_texts(message.get("content")))
    for ui in reversed(ui_messages):
        if ui.get("type") == "say" and ui.get("say") == "api_req_started":
            request = (request_info(ui) or {}).get("request")
            if isinstance(request, str):
                yield request


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        block["text"]
        for block in content
        if isinstance(block, Mapping) and isinstance(block.get("text"), str)
    ]
