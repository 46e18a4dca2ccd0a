"""Interoperability with other agents' on-disk histories: Cline tasks and sessions, Gemini
CLI chats.

Reading and mapping is pure file handling (:mod:`~contextstore.interop.cline`,
:mod:`~contextstore.interop.gemini` and their ``_plan`` modules); the import and export
functions below move histories into and out of a store through its public API only (the
:class:`~contextstore.interop.store_api.InteropStore` protocol), each returning a report.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from contextstore.core.validate import MAX_JSON_DEPTH
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
from contextstore.interop.report import ExportReport, ImportReport, ItemReport

if TYPE_CHECKING:
    from contextstore.interop.cline_import import export_cline, import_cline
    from contextstore.interop.gemini_import import export_gemini, import_gemini

_LOADED_ON_USE = {
    "export_cline": "contextstore.interop.cline_import",
    "import_cline": "contextstore.interop.cline_import",
    "export_gemini": "contextstore.interop.gemini_import",
    "import_gemini": "contextstore.interop.gemini_import",
}


def __getattr__(name: str) -> Any:
    # The import and export functions (and with them the content models and the plans)
    # load on first use, so that the errors, limits and reports above cost no more than
    # themselves: the command line names them in its help.
    if name in _LOADED_ON_USE:
        return getattr(importlib.import_module(_LOADED_ON_USE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
