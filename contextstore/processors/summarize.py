"""Summarisation through a hook the caller supplies.

contextstore imports no model SDK: the caller passes a function that turns a long text
into a short one, using whatever model and prompt suits them. A failing hook stops the
pipeline with a :class:`~contextstore.core.errors.ContextStoreError`, so the store
writes nothing rather than a half-processed view.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import astuple, dataclass
from typing import Any

from contextstore.core.errors import ContextStoreError, InvalidInputError
from contextstore.core.overlays import Block, BlockUpdate, Message, text_hash
from contextstore.core.validate import shown
from contextstore.core.view import IndexedView
from contextstore.processors.base import shrink_texts, tool_names
from contextstore.processors.triggers import Trigger

DEFAULT_MIN_CHARS = 20_000
"""Texts at or below this many characters are never summarised."""


@dataclass(frozen=True)
class SummaryRequest:
    """What the hook is told about the text it summarises.

    Attributes:
        message_idx: Original index of the message holding the text.
        block_idx: Index of the block within that message.
        role: ``"user"`` or ``"assistant"``.
        block_type: ``"text"`` or ``"tool_result"``.
        tool_name: For a tool result, the name of the tool that produced it, if the
            matching ``tool_use`` is in view; otherwise None.
        max_chars: The summary must be shorter than this to be used (the original length
            minus the marker).
    """

    message_idx: int
    block_idx: int
    role: str
    block_type: str
    tool_name: str | None
    max_chars: int


SummaryHook = Callable[[str, SummaryRequest], str]
"""``hook(text, request) -> summary``; return ``""`` to leave the text as it is."""


def summary_marker(original_chars: int) -> str:
    """Return the line placed before a summary, saying what it replaced."""
    return f"[summary of {original_chars:,} characters; the original is kept in the database]\n"


class Summarizer:
    """Processor that replaces long texts by a summary from a caller-supplied hook.

    Applies to text blocks and tool-result texts longer than ``min_chars``, in any role,
    except in message 0 (the task, which the agent must keep verbatim). A summary is used
    only when, with its marker, it is shorter than the original. Results are cached by the
    hash of the text and the request, so re-rendering the same history calls the hook only
    for new texts.
    """

    independent = True
    trigger: Trigger = Trigger.every_render()
    """Runs on the whole view every run (set another
    :class:`~contextstore.processors.triggers.Trigger` on the instance to change it, as the
    other processors take one: a typed caller's ``summarizer.trigger = ...`` had no
    attribute to set)."""
    depends_on: tuple[str, ...] = ()

    def __init__(
        self,
        hook: SummaryHook,
        min_chars: int = DEFAULT_MIN_CHARS,
        *,
        hook_version: str = "1",
        cache_size: int = 256,
        name: str = "summarize",
    ) -> None:
        """Create a summariser.

        Args:
            hook: ``hook(text, request) -> summary``.
            min_chars: Only texts longer than this are summarised.
            hook_version: Bump it when the hook's behaviour changes (another model or
                prompt) so that cached renders made with the old hook are not reused.
            cache_size: How many summaries to remember (0 disables the cache).
            name: The processor name recorded as each update's ``source``.

        Raises:
            InvalidInputError: ``hook`` is not callable, or ``min_chars`` or ``cache_size``
                is not a non-negative integer.
        """
        if not callable(hook):
            raise InvalidInputError(
                f"hook must be a function hook(text, request) -> str, got {shown(hook)}"
            )
        for setting, value in (("min_chars", min_chars), ("cache_size", cache_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInputError(
                    f"{setting} must be a non-negative integer, got {shown(value)}"
                )
        self.name = name
        self.hook = hook
        self.min_chars = min_chars
        self.hook_version = hook_version
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[Any, ...], str] = OrderedDict()
        self._lock = threading.Lock()

    def config(self) -> dict[str, Any]:
        """Return the threshold and the hook's identity (qualified name and version)."""
        hook_id = f"{getattr(self.hook, '__module__', '?')}." + str(
            getattr(self.hook, "__qualname__", type(self.hook).__qualname__)
        )
        return {"min_chars": self.min_chars, "hook": hook_id, "hook_version": self.hook_version}

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        """Return a summary update for every long text in ``view``.

        Raises:
            ContextStoreError: The hook raised or returned something other than a string;
                the hook's exception is chained as the cause.
        """
        names = tool_names(view)

        def rewrite(
            idx: int, message: Message, block_idx: int, block: Block, text: str
        ) -> tuple[str, dict[str, Any]] | None:
            if len(text) <= self.min_chars or idx == 0:
                return None
            marker = summary_marker(len(text))
            use_id = block.get("tool_use_id")
            request = SummaryRequest(
                message_idx=idx,
                block_idx=block_idx,
                role=str(message.get("role")),
                block_type=str(block.get("type")),
                tool_name=names.get(use_id) if isinstance(use_id, str) else None,
                max_chars=len(text) - len(marker),
            )
            summary = self._summarise(text, request)
            if not summary.strip():
                return None
            return marker + summary, {"original_chars": len(text), "summary_chars": len(summary)}

        return shrink_texts(self.name, view, rewrite)

    def _summarise(self, text: str, request: SummaryRequest) -> str:
        key = (text_hash(text), *astuple(request))
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        try:
            summary = self.hook(text, request)
        except Exception as exc:
            raise ContextStoreError(
                f"the summary hook failed on message {request.message_idx} block "
                f"{request.block_idx}: {exc}; nothing was written, fix the hook or remove "
                "the Summarizer from the pipeline"
            ) from exc
        if not isinstance(summary, str):
            raise ContextStoreError(
                f"the summary hook returned {type(summary).__name__}, not str, on message "
                f"{request.message_idx} block {request.block_idx}; make it return text"
            )
        if self.cache_size:
            with self._lock:
                self._cache[key] = summary
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return summary
