"""The pydantic models of Anthropic-style content blocks, strict where a provider is strict.

Each model checks the shape of one block type (its required fields, and the type of every
field a renderer sends: ``cache_control``, citations, sources, ``is_error``) and keeps every
field it does not declare (``extra="allow"``), since agents add their own (Cline's
``call_id``, ``reasoning_details``). Strict: a value of the wrong type is refused, never
converted. :mod:`.content` runs them; :mod:`.block_errors` words what they refuse.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from contextstore.core.block_base import CacheControl as CacheControl
from contextstore.core.block_base import Setting, StrictBlock

_Block = StrictBlock
_Setting = Setting


class CitationsConfig(_Setting):
    """Whether the model may cite a document or search result: ``{"enabled": true}``."""

    enabled: bool = False


class CharLocation(_Block):
    """A citation of a plain-text document, by character offsets."""

    type: Literal["char_location"]
    cited_text: str
    document_index: int
    document_title: str | None
    start_char_index: int
    end_char_index: int


class PageLocation(_Block):
    """A citation of a PDF, by pages."""

    type: Literal["page_location"]
    cited_text: str
    document_index: int
    document_title: str | None
    start_page_number: int
    end_page_number: int


class ContentBlockLocation(_Block):
    """A citation of a content document, by blocks."""

    type: Literal["content_block_location"]
    cited_text: str
    document_index: int
    document_title: str | None
    start_block_index: int
    end_block_index: int


class SearchResultLocation(_Block):
    """A citation of a search result block."""

    type: Literal["search_result_location"]
    cited_text: str
    search_result_index: int
    source: str
    title: str | None
    start_block_index: int
    end_block_index: int


class WebSearchResultLocation(_Block):
    """A citation of a web search result."""

    type: Literal["web_search_result_location"]
    cited_text: str
    encrypted_index: str
    title: str | None
    url: str


Citation = Annotated[
    CharLocation
    | PageLocation
    | ContentBlockLocation
    | SearchResultLocation
    | WebSearchResultLocation,
    Field(discriminator="type"),
]


class Base64Source(_Block):
    """Inline media: ``{"type": "base64", "media_type": ..., "data": ...}``."""

    type: Literal["base64"]
    media_type: str
    data: str


class UrlSource(_Block):
    """Media referenced by URL."""

    type: Literal["url"]
    url: str


class TextSource(_Block):
    """A plain-text document source."""

    type: Literal["text"]
    media_type: str = "text/plain"
    data: str


class FileSource(_Block):
    """A document or image uploaded through a provider's files API."""

    type: Literal["file"]
    file_id: str


class TextBlock(_Block):
    """``{"type": "text", "text": ...}``."""

    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None
    citations: list[Citation] | None = None


ImageSource = Annotated[Base64Source | UrlSource | FileSource, Field(discriminator="type")]


class ImageBlock(_Block):
    """An image, inline (base64), by URL or by file id."""

    type: Literal["image"]
    source: ImageSource
    cache_control: CacheControl | None = None


class ContentSource(_Block):
    """A document made of text and image blocks (or of one string)."""

    type: Literal["content"]
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]]


DocumentSource = Annotated[
    Base64Source | UrlSource | TextSource | FileSource | ContentSource,
    Field(discriminator="type"),
]


class DocumentBlock(_Block):
    """A document (PDF, plain text or content blocks), inline, by URL or by file id."""

    type: Literal["document"]
    source: DocumentSource
    title: str | None = None
    context: str | None = None
    citations: CitationsConfig | None = None
    cache_control: CacheControl | None = None


class SearchResultBlock(_Block):
    """A search result given to the model in a tool result, with its text blocks."""

    type: Literal["search_result"]
    source: str
    title: str
    content: list[TextBlock]
    citations: CitationsConfig = CitationsConfig()
    cache_control: CacheControl | None = None


class ToolUseBlock(_Block):
    """An assistant's tool call; ``id`` pairs it with its result."""

    type: Literal["tool_use"]
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any]
    cache_control: CacheControl | None = None


class ToolResultBlock(_Block):
    """The result of a tool call; its content is a string or a list of text, image,
    document and search result blocks (each checked as a block of its own)."""

    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1)
    content: str | list[dict[str, Any]] = ""
    is_error: bool = False
    cache_control: CacheControl | None = None


class ThinkingBlock(_Block):
    """Extended thinking; the API requires its ``signature`` when sent back (a block
    without one is not sent)."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(_Block):
    """Encrypted thinking, passed back verbatim."""

    type: Literal["redacted_thinking"]
    data: str
