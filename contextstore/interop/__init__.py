"""Interoperability with other agents' on-disk histories: Cline tasks and sessions, Gemini
CLI chats.

Reading and mapping is pure file handling (:mod:`~contextstore.interop.cline`,
:mod:`~contextstore.interop.gemini` and their ``_plan`` modules); the import and export
functions below move histories into and out of a store through its public API only (the
:class:`~contextstore.interop.store_api.InteropStore` protocol), each returning a report.
"""

from __future__ import annotations

from contextstore.core.validate import MAX_JSON_DEPTH
from contextstore.interop.cline_import import export_cline, import_cline
from contextstore.interop.errors import (
    ClineSessionError,
    ClineTaskError,
    FileTooLargeError,
    GeminiChatError,
    ImportConflictError,
    ImportStateError,
    InteropError,
    NestingTooDeepError,
    OutsideFolderError,
    UnsafeInputError,
)
from contextstore.interop.files import MAX_FILE_BYTES, Note
from contextstore.interop.gemini_import import export_gemini, import_gemini
from contextstore.interop.report import ExportReport, ImportReport, ItemReport

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_JSON_DEPTH",
    "ClineSessionError",
    "ClineTaskError",
    "ExportReport",
    "FileTooLargeError",
    "GeminiChatError",
    "ImportConflictError",
    "ImportReport",
    "ImportStateError",
    "InteropError",
    "ItemReport",
    "NestingTooDeepError",
    "Note",
    "OutsideFolderError",
    "UnsafeInputError",
    "export_cline",
    "export_gemini",
    "import_cline",
    "import_gemini",
]
