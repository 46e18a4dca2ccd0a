"""The pydantic models of Anthropic's server tool blocks: calls the API ran itself (web
search, web fetch, code execution, tool search) and their results, which the API returns
inside the assistant message, and the ``container_upload`` block.

Each model follows the Anthropic SDK's ``*BlockParam`` types (``anthropic.types``) field by
field, strict like the other blocks (:mod:`.block_models`), keeping fields it does not
declare. A result's opaque fields (``encrypted_content``, ``encrypted_index``,
``encrypted_stdout``) are checked as strings and never changed: the API reads them back.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from contextstore.core.block_base import CacheControl, StrictBlock
from contextstore.core.block_models import DocumentBlock

ServerToolName = Literal[
    "web_search",
    "web_fetch",
    "code_execution",
    "bash_code_execution",
    "text_editor_code_execution",
    "tool_search_tool_regex",
    "tool_search_tool_bm25",
]
"""The server tools a ``server_tool_use`` names (``ServerToolUseBlockParam.name``)."""


class DirectCaller(StrictBlock):
    """The model called the tool itself."""

    type: Literal["direct"]


class ServerToolCaller(StrictBlock):
    """Another server tool (code execution) called the tool."""

    type: Literal["code_execution_20250825", "code_execution_20260120"]
    tool_id: str


Caller = Annotated[DirectCaller | ServerToolCaller, Field(discriminator="type")]


class ServerToolUseBlock(StrictBlock):
    """A call of a server tool the API ran; ``id`` pairs it with its result."""

    type: Literal["server_tool_use"]
    id: str = Field(min_length=1)
    name: ServerToolName
    input: dict[str, Any]
    cache_control: CacheControl | None = None
    caller: Caller | None = None


class _ServerResult(StrictBlock):
    tool_use_id: str = Field(min_length=1)
    cache_control: CacheControl | None = None


class WebSearchResult(StrictBlock):
    """One page a web search found; ``encrypted_content`` is the page, for the API only."""

    type: Literal["web_search_result"]
    encrypted_content: str
    title: str
    url: str
    page_age: str | None = None


class WebSearchError(StrictBlock):
    """A web search that failed."""

    type: Literal["web_search_tool_result_error"]
    error_code: Literal[
        "invalid_tool_input",
        "unavailable",
        "too_many_requests",
        "max_uses_exceeded",
        "query_too_long",
        "request_too_large",
    ]


class WebSearchToolResultBlock(_ServerResult):
    """The pages a ``web_search`` call found, or its error."""

    type: Literal["web_search_tool_result"]
    content: list[WebSearchResult] | WebSearchError
    caller: Caller | None = None


class WebFetchResult(StrictBlock):
    """A fetched page, as a document block."""

    type: Literal["web_fetch_result"]
    url: str
    content: DocumentBlock
    retrieved_at: str | None = None


class WebFetchError(StrictBlock):
    """A fetch that failed."""

    type: Literal["web_fetch_tool_result_error"]
    error_code: Literal[
        "invalid_tool_input",
        "unavailable",
        "too_many_requests",
        "url_too_long",
        "url_not_allowed",
        "url_not_in_prior_context",
        "url_not_accessible",
        "unsupported_content_type",
        "max_uses_exceeded",
        "content_too_large",
    ]


class WebFetchToolResultBlock(_ServerResult):
    """The page a ``web_fetch`` call fetched, or its error."""

    type: Literal["web_fetch_tool_result"]
    content: Annotated[WebFetchResult | WebFetchError, Field(discriminator="type")]
    caller: Caller | None = None


class CodeExecutionOutput(StrictBlock):
    """A file the code wrote, by its Files API id."""

    type: Literal["code_execution_output"]
    file_id: str


class BashOutput(StrictBlock):
    """A file a shell command wrote, by its Files API id."""

    type: Literal["bash_code_execution_output"]
    file_id: str


class CodeExecutionResult(StrictBlock):
    """What Python code printed and returned."""

    type: Literal["code_execution_result"]
    content: list[CodeExecutionOutput]
    return_code: int
    stderr: str
    stdout: str


class EncryptedCodeExecutionResult(StrictBlock):
    """A code execution whose standard output is encrypted, for the API only."""

    type: Literal["encrypted_code_execution_result"]
    content: list[CodeExecutionOutput]
    encrypted_stdout: str
    return_code: int
    stderr: str


class CodeExecutionError(StrictBlock):
    """A code execution that failed."""

    type: Literal["code_execution_tool_result_error"]
    error_code: Literal[
        "invalid_tool_input", "unavailable", "too_many_requests", "execution_time_exceeded"
    ]


class CodeExecutionToolResultBlock(_ServerResult):
    """The outcome of a ``code_execution`` call."""

    type: Literal["code_execution_tool_result"]
    content: Annotated[
        CodeExecutionResult | EncryptedCodeExecutionResult | CodeExecutionError,
        Field(discriminator="type"),
    ]


class BashResult(StrictBlock):
    """What a shell command printed and returned."""

    type: Literal["bash_code_execution_result"]
    content: list[BashOutput]
    return_code: int
    stderr: str
    stdout: str


class BashError(StrictBlock):
    """A shell command that failed to run."""

    type: Literal["bash_code_execution_tool_result_error"]
    error_code: Literal[
        "invalid_tool_input",
        "unavailable",
        "too_many_requests",
        "execution_time_exceeded",
        "output_file_too_large",
    ]


class BashCodeExecutionToolResultBlock(_ServerResult):
    """The outcome of a ``bash_code_execution`` call."""

    type: Literal["bash_code_execution_tool_result"]
    content: Annotated[BashResult | BashError, Field(discriminator="type")]


class TextEditorView(StrictBlock):
    """A file the code execution's editor showed."""

    type: Literal["text_editor_code_execution_view_result"]
    content: str
    file_type: Literal["text", "image", "pdf"]
    num_lines: int | None = None
    start_line: int | None = None
    total_lines: int | None = None


class TextEditorCreate(StrictBlock):
    """A file the editor created or overwrote."""

    type: Literal["text_editor_code_execution_create_result"]
    is_file_update: bool


class TextEditorStrReplace(StrictBlock):
    """A replacement the editor made, with the lines around it."""

    type: Literal["text_editor_code_execution_str_replace_result"]
    lines: list[str] | None = None
    new_lines: int | None = None
    new_start: int | None = None
    old_lines: int | None = None
    old_start: int | None = None


class TextEditorError(StrictBlock):
    """An edit that failed."""

    type: Literal["text_editor_code_execution_tool_result_error"]
    error_code: Literal[
        "invalid_tool_input",
        "unavailable",
        "too_many_requests",
        "execution_time_exceeded",
        "file_not_found",
    ]
    error_message: str | None = None


class TextEditorCodeExecutionToolResultBlock(_ServerResult):
    """The outcome of a ``text_editor_code_execution`` call."""

    type: Literal["text_editor_code_execution_tool_result"]
    content: Annotated[
        TextEditorView | TextEditorCreate | TextEditorStrReplace | TextEditorError,
        Field(discriminator="type"),
    ]


class ToolReference(StrictBlock):
    """A tool a tool search found, by name."""

    type: Literal["tool_reference"]
    tool_name: str
    cache_control: CacheControl | None = None


class ToolSearchResult(StrictBlock):
    """The tools a tool search found."""

    type: Literal["tool_search_tool_search_result"]
    tool_references: list[ToolReference]


class ToolSearchError(StrictBlock):
    """A tool search that failed."""

    type: Literal["tool_search_tool_result_error"]
    error_code: Literal[
        "invalid_tool_input", "unavailable", "too_many_requests", "execution_time_exceeded"
    ]
    error_message: str | None = None


class ToolSearchToolResultBlock(_ServerResult):
    """The outcome of a ``tool_search_tool_regex`` or ``tool_search_tool_bm25`` call."""

    type: Literal["tool_search_tool_result"]
    content: Annotated[ToolSearchResult | ToolSearchError, Field(discriminator="type")]


class ContainerUploadBlock(StrictBlock):
    """A file (by its Files API id) put in the code execution container's input folder."""

    type: Literal["container_upload"]
    file_id: str
    cache_control: CacheControl | None = None


SERVER_RESULT_MODELS: dict[str, type[StrictBlock]] = {
    "web_search_tool_result": WebSearchToolResultBlock,
    "web_fetch_tool_result": WebFetchToolResultBlock,
    "code_execution_tool_result": CodeExecutionToolResultBlock,
    "bash_code_execution_tool_result": BashCodeExecutionToolResultBlock,
    "text_editor_code_execution_tool_result": TextEditorCodeExecutionToolResultBlock,
    "tool_search_tool_result": ToolSearchToolResultBlock,
}
"""The model of each server tool result type."""

SERVER_BLOCK_MODELS: dict[str, type[StrictBlock]] = {
    "server_tool_use": ServerToolUseBlock,
    **SERVER_RESULT_MODELS,
    "container_upload": ContainerUploadBlock,
}
"""The model of each server tool block type."""

ServerBlock = (
    ServerToolUseBlock
    | WebSearchToolResultBlock
    | WebFetchToolResultBlock
    | CodeExecutionToolResultBlock
    | BashCodeExecutionToolResultBlock
    | TextEditorCodeExecutionToolResultBlock
    | ToolSearchToolResultBlock
    | ContainerUploadBlock
)
"""Any server tool block (a union for the discriminated union of all blocks)."""
