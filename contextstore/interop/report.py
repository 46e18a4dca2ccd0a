"""What an import or an export did, per task or file: returned by the Python API and printed
by the CLI (``--json`` prints :meth:`ImportReport.to_json`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from contextstore.interop.files import Note

IMPORTED: Final = "imported"
"""A new conversation was created from the file."""
UPDATED: Final = "updated"
"""The file grew since it was imported: only its new rows were added."""
UNCHANGED: Final = "unchanged"
"""The file holds nothing new: nothing was written."""
REPLACED: Final = "replaced"
"""The conversation was started over from the file (``replace=True``)."""
SKIPPED: Final = "skipped"
"""Nothing in the task or file could be imported (the notes say why)."""
CONFLICT: Final = "conflict"
"""The file no longer continues its conversation: nothing was written for it."""


@dataclass(frozen=True)
class ItemReport:
    """One task folder or chat file.

    Attributes:
        path: the task folder or file.
        conversation_id: the conversation it is (None when skipped).
        status: :data:`IMPORTED`, :data:`UPDATED`, :data:`UNCHANGED`, :data:`REPLACED`,
            :data:`SKIPPED` or :data:`CONFLICT`.
        added: rows written per table.
        skipped: what was left out or repaired, each naming the file, position and reason.
        replaced: rows of an earlier import that the file rewrote, replaced by its own.
        replaced_rollback: the rollback that archived those rows (``contextstore audit``
            lists it; ``restore`` puts them back once the rows written over them are
            rolled back), or None when none were replaced.
    """

    path: str
    conversation_id: str | None
    status: str
    added: dict[str, int] = field(default_factory=dict)
    skipped: tuple[Note, ...] = ()
    replaced: int = 0
    replaced_rollback: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The item as a JSON object."""
        return {
            "path": self.path,
            "conversation_id": self.conversation_id,
            "status": self.status,
            "added": dict(self.added),
            "replaced": self.replaced,
            "replaced_rollback": self.replaced_rollback,
            "skipped": [note.to_json() for note in self.skipped],
        }


@dataclass(frozen=True)
class ImportReport:
    """Every task or file an import looked at, in the order imported."""

    source: str
    items: tuple[ItemReport, ...]
    seconds: float = 0.0

    @property
    def conversation_id(self) -> str:
        """The conversation of a one-item import.

        Raises:
            ValueError: the import had several items (look at ``items``).
        """
        found = [i.conversation_id for i in self.items if i.conversation_id is not None]
        if len(found) != 1:
            raise ValueError(f"this import has {len(found)} conversations; read .items.")
        return found[0]

    def added(self) -> dict[str, int]:
        """Rows written per table, over every item."""
        total: dict[str, int] = {}
        for item in self.items:
            for table, count in item.added.items():
                total[table] = total.get(table, 0) + count
        return total

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object (what ``--json`` prints)."""
        return {
            "source": self.source,
            "items": [item.to_json() for item in self.items],
            "added": self.added(),
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class ExportReport:
    """What an export wrote."""

    conversation_id: str
    files: tuple[Path, ...]
    skipped: tuple[Note, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object (what ``--json`` prints)."""
        return {
            "conversation_id": self.conversation_id,
            "files": [str(p) for p in self.files],
            "counts": dict(self.counts),
            "skipped": [note.to_json() for note in self.skipped],
        }
