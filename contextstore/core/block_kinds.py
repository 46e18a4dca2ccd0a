"""Every content block type the store accepts, each with its model: the blocks of any
provider's history (:mod:`.block_models`) and Anthropic's server tool blocks
(:mod:`.server_blocks`), in one discriminated union that validates a block by its ``type``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from contextstore.core.block_base import StrictBlock
from contextstore.core.block_models import (
    DocumentBlock,
    ImageBlock,
    RedactedThinkingBlock,
    SearchResultBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from contextstore.core.server_blocks import SERVER_BLOCK_MODELS, ServerBlock

ContentBlock = Annotated[
    TextBlock
    | ImageBlock
    | DocumentBlock
    | SearchResultBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ServerBlock,
    Field(discriminator="type"),
]
"""Any content block, a search result (held by tool results) included."""

BLOCK_MODELS: dict[str, type[StrictBlock]] = {
    "text": TextBlock,
    "image": ImageBlock,
    "document": DocumentBlock,
    "search_result": SearchResultBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
    "thinking": ThinkingBlock,
    "redacted_thinking": RedactedThinkingBlock,
    **SERVER_BLOCK_MODELS,
}
"""The model of each block type, search results (inside tool results) included."""

BLOCK_ADAPTER: TypeAdapter[Any] = TypeAdapter(ContentBlock)
"""Validates any block, choosing its model by its ``type``."""
