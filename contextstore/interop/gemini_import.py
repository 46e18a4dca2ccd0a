"""Moving Gemini CLI chats into a store, through the public ``ContextStore`` API only.

The file is read, converted and checked first (:func:`contextstore.interop.gemini.read_chat`);
then one conversation is created and every message is appended in one ``append_many`` call, so
the messages land in one transaction. If that call fails, the new conversation is
deleted: a failed import leaves nothing behind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from contextstore.core.content import normalize_message_dict
from contextstore.core.errors import ContextStoreError
from contextstore.interop.gemini import GeminiChat, read_chat
from contextstore.interop.gemini_convert import GeminiChatError
from contextstore.interop.store_api import InteropStore


@dataclass(frozen=True)
class GeminiImportResult:
    """What an import wrote.

    Attributes:
        conversation_id: the new conversation.
        messages: the messages appended (Anthropic format, as given to the store).
        skipped: one line per record or part left out or approximated.
        kind: ``"checkpoint"``, ``"legacy-checkpoint"`` or ``"session"``.
    """

    conversation_id: str
    messages: tuple[dict[str, Any], ...]
    skipped: tuple[str, ...] = ()
    kind: str = "checkpoint"


def import_gemini_chat(
    store: InteropStore,
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
    model_id: str | None = None,
    context_window: int | None = None,
) -> GeminiImportResult:
    """Import a Gemini CLI checkpoint or session recording as a new conversation.

    Args:
        store: an open :class:`contextstore.ContextStore`.
        path: ``checkpoint-<tag>.json`` (``/chat save``), a legacy bare-array checkpoint,
            or a ``session-*.jsonl`` recording.
        title: the conversation's title (default: the first line of the first user text).
        model_id: the model (default: the last model a session recorded).
        context_window: the window to manage the conversation with (default: unset).

    Returns:
        The new conversation's id, the messages written and the notes.

    Raises:
        GeminiChatError: the file is unreadable or malformed, or a message is over the
            store's size limit (nothing written).
    """
    chat = read_chat(path)
    _check_sizes(chat, store.max_message_bytes)
    conversation = store.create_conversation(
        model_id=model_id or chat.model_id,
        context_window=context_window,
        title=title or chat.title,
        metadata=chat.metadata,
    )
    try:
        store.append_many(conversation.id, chat.messages)
    except BaseException as exc:
        store.delete_conversation(conversation.id)
        if isinstance(exc, ContextStoreError):
            raise type(exc)(f"the import failed and was undone: {exc}") from exc
        raise
    return GeminiImportResult(
        conversation_id=conversation.id,
        messages=tuple(chat.messages),
        skipped=tuple(chat.skipped),
        kind=chat.kind,
    )


def _check_sizes(chat: GeminiChat, limit: int) -> None:
    for index, message in enumerate(chat.messages):
        normalized = normalize_message_dict(message)
        size = normalized.json_size()
        if size > limit:
            raise GeminiChatError(
                chat.path,
                f"converted message {index}",
                f"is {size:,} bytes as JSON, over the store's limit of {limit:,}; open the "
                "store with a larger max_message_bytes.",
            )


__all__ = ["GeminiImportResult", "InteropStore", "import_gemini_chat"]
