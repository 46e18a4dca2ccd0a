"""Interoperability with other agents' on-disk histories (Cline task directories).

:mod:`contextstore.interop.cline` reads and writes Cline's JSON files as plain values (no
database); :mod:`contextstore.interop.cline_import` moves them into and out of a store
through the public ``ContextStore`` API.
"""

from __future__ import annotations

from contextstore.interop.cline import ClineTaskError, read_task
from contextstore.interop.cline_import import (
    ClineExportResult,
    ClineImportResult,
    export_cline_task,
    import_cline_task,
)

__all__ = [
    "ClineExportResult",
    "ClineImportResult",
    "ClineTaskError",
    "export_cline_task",
    "import_cline_task",
    "read_task",
]
