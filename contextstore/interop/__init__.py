"""Interoperability with other agents' on-disk histories (Cline tasks, Gemini CLI chats).

:mod:`contextstore.interop.cline` and :mod:`contextstore.interop.gemini` read (and for Cline
write) the agents' files as plain values, with no database;
:mod:`contextstore.interop.cline_import` and :mod:`contextstore.interop.gemini_import` move
them into (and out of) a store through the public ``ContextStore`` API.
"""

from __future__ import annotations

from contextstore.interop.cline import ClineTaskError, read_task
from contextstore.interop.cline_import import (
    ClineExportResult,
    ClineImportResult,
    export_cline_task,
    import_cline_task,
)
from contextstore.interop.gemini import read_chat
from contextstore.interop.gemini_convert import GeminiChatError
from contextstore.interop.gemini_import import GeminiImportResult, import_gemini_chat

__all__ = [
    "ClineExportResult",
    "ClineImportResult",
    "ClineTaskError",
    "GeminiChatError",
    "GeminiImportResult",
    "export_cline_task",
    "import_cline_task",
    "import_gemini_chat",
    "read_chat",
    "read_task",
]
