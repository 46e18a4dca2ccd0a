"""What interop refuses: files it cannot read safely, and imports that would not fit the store.

Every error names the file (and the position in it when there is one) and says what to do;
when one is raised, nothing has been written.
"""

from __future__ import annotations

from pathlib import Path

from contextstore.core.errors import InvalidInputError


class InteropError(InvalidInputError):
    """A file of another agent cannot be imported, or an export cannot be written.

    Attributes:
        path: the offending file or folder.
        position: where in it (``"line 3 column 9 (char 41)"``, ``"message 4"``...), or
            None when the whole file is at fault.
    """

    def __init__(self, path: Path, position: str | None, problem: str) -> None:
        self.path = path
        self.position = position
        where = f"{path}" if position is None else f"{path}, {position}"
        super().__init__(f"{where}: {problem}")


class ClineTaskError(InteropError):
    """A Cline task folder or file cannot be imported (or exported to)."""


class ClineSessionError(ClineTaskError):
    """A Cline 4 session folder (``sessions/<id>/``) or one of its files cannot be imported:
    of a version this contextstore does not read, not a session file, or holding nothing."""


class GeminiChatError(InteropError):
    """A Gemini CLI chat file cannot be imported (or exported to)."""


class UnsafeInputError(InteropError):
    """A file is refused before it is parsed: it could exhaust memory or leave the folder."""


class OutsideFolderError(UnsafeInputError):
    """A symbolic link leads out of the folder being imported."""


class FileTooLargeError(UnsafeInputError):
    """A file is larger than the import limit (``MAX_FILE_BYTES`` unless raised)."""


class NestingTooDeepError(UnsafeInputError):
    """A JSON file nests arrays and objects deeper than ``MAX_JSON_DEPTH``."""


class ImportConflictError(InteropError):
    """The conversation an import would continue holds a different history.

    Raised when the file no longer starts with what was imported before (Cline restored a
    checkpoint, the file was replaced), when it holds less than was imported and nothing
    newer (an older copy, whose import would delete the newest imported rows), or when the
    conversation was changed in contextstore since it was imported. Import with
    ``replace=True`` (``--replace``) to start the conversation over from the file.
    """


class ImportStateError(ImportConflictError):
    """The bookkeeping an earlier import left in a conversation's metadata (``$.import``:
    the rows it wrote, their digests and timestamps; ``$.cline.files``: the task files it
    read) is in a form no import writes (edited by hand, a damaged row).

    Importing again cannot tell what is new in the file, and an export cannot tell the
    imported rows from those written in contextstore since; nothing is written. Import
    with ``replace=True`` (``--replace``) to start the conversation over from the files.
    """
