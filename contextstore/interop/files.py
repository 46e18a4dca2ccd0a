"""Reading another agent's files safely: inside the folder given, within the size and nesting
limits, and recovering what a damaged file still holds (with a note saying what was not).

Limits (refused with an :class:`~contextstore.interop.errors.UnsafeInputError` subclass
before anything is parsed or written):

* :data:`MAX_FILE_BYTES`: 256 MiB per file (Cline's largest histories reported by users
  are tens of MB); callers may pass another limit.
* :data:`~contextstore.core.validate.MAX_JSON_DEPTH`: 100 levels of nested arrays and
  objects, the limit of every JSON value the store takes (a real history nests fewer than
  10; much deeper values would exhaust the interpreter's stack further on).
* A symbolic link is followed only when its target stays inside the folder imported.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from contextstore.core.validate import MAX_JSON_DEPTH, MAX_NAME_LENGTH, json_depth
from contextstore.interop.errors import (
    FileTooLargeError,
    InteropError,
    NestingTooDeepError,
    OutsideFolderError,
)
from contextstore.interop.recovery import MAX_INT_DIGITS, recover

MAX_FILE_BYTES: Final = 256 * 1024 * 1024
"""Largest file an import reads (per file)."""

BYTE_ORDER_MARK = "\ufeff"
"""What a UTF-8 file may start with when an editor saved it; never part of the JSON."""


@dataclass(frozen=True)
class Note:
    """Something an import left out or repaired: which file, where, and why."""

    file: str
    position: str | None
    reason: str
    cut_short: bool = field(default=False, compare=False)
    """The file breaks off, or holds no JSON at all (a write the agent did not finish):
    what it lacks may still be on its way, so rows imported from it earlier are kept."""

    def __post_init__(self) -> None:
        # A file name that is not UTF-8 reaches here as Python keeps it, with lone
        # surrogates that no terminal, JSON reader or store takes: U+FFFD stands for each,
        # as in the paths and ids of the report.
        for name in ("file", "position", "reason"):
            value = getattr(self, name)
            if isinstance(value, str) and _SURROGATE.search(value):
                object.__setattr__(self, name, _SURROGATE.sub("\ufffd", value))

    def __str__(self) -> str:
        where = self.file if self.position is None else f"{self.file}, {self.position}"
        return f"{where}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        """The note as a JSON object (``file``, ``position``, ``reason``)."""
        return {"file": self.file, "position": self.position, "reason": self.reason}


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _leaves_replaced(value: Any, replaced: Callable[[Any], tuple[Any, int]]) -> tuple[Any, int]:
    """``value`` with every string (keys included) and number passed through ``replaced``,
    which returns the new leaf and how many replacements it made; and their total."""
    count = 0

    def walk(item: Any) -> Any:
        nonlocal count
        if isinstance(item, list):
            return [walk(member) for member in item]
        if isinstance(item, dict):
            return {walk(key): walk(member) for key, member in item.items()}
        leaf, found = replaced(item)
        count += found
        return leaf

    return walk(value), count


def without_lone_surrogates(text: str, value: Any) -> tuple[Any, int]:
    """``value`` (decoded from the JSON ``text``) with each lone surrogate in its strings
    and keys replaced by U+FFFD, and how many were: JSON may escape half of a UTF-16 pair
    (JavaScript writes one when it cuts a string inside an emoji), which no store of text
    can hold. Values of a text without such an escape come back as they are."""
    if not _SURROGATE_ESCAPE.search(text):
        return value, 0

    def fixed(item: Any) -> tuple[Any, int]:
        return _SURROGATE.subn("\ufffd", item) if isinstance(item, str) else (item, 0)

    return _leaves_replaced(value, fixed)


def surrogate_note(path: Path, position: str | None, count: int) -> Note:
    """The note for ``count`` lone surrogates replaced (see :func:`without_lone_surrogates`)."""
    return Note(
        str(path),
        position,
        f"{count} lone surrogate escape(s) (half of an emoji, as JavaScript can write) "
        "replaced by U+FFFD; the rest was read.",
    )


_NONFINITE_TEXT = re.compile(rf"NaN|Infinity|\d[eE][+]?\d{{3}}|\d{{{MAX_INT_DIGITS + 1}}}")


def without_nonfinite_numbers(text: str, value: Any) -> tuple[Any, int]:
    """``value`` (decoded from the JSON ``text``) with each NaN, Infinity or number too
    large for a double replaced by None, and how many were: Python's decoder accepts them,
    but JSON has no such numbers (JavaScript writes null for them) and no backend stores
    them. Values of a text that cannot hold one come back as they are."""
    if not _NONFINITE_TEXT.search(text):
        return value, 0

    def fixed(item: Any) -> tuple[Any, int]:
        return (None, 1) if isinstance(item, float) and not math.isfinite(item) else (item, 0)

    return _leaves_replaced(value, fixed)


def nonfinite_note(path: Path, position: str | None, count: int) -> Note:
    """The note for ``count`` numbers replaced (see :func:`without_nonfinite_numbers`)."""
    return Note(
        str(path),
        position,
        f"{count} number(s) JSON cannot hold (NaN, Infinity, or too large) read as null, "
        "as JavaScript writes them; the rest was read.",
    )


_NUL = "\x00"


def without_nul(value: Any) -> tuple[Any, int]:
    """``value`` with each NUL character in its strings (keys included) replaced by
    U+FFFD, and how many were: PostgreSQL cannot store one in JSON or in a name (so no
    backend does), and only a message's text keeps one exactly. A value without NUL comes
    back as it is."""
    if "\\u0000" not in json.dumps(value):  # how JSON writes every NUL
        return value, 0

    def fixed(item: Any) -> tuple[Any, int]:
        if isinstance(item, str) and _NUL in item:
            return item.replace(_NUL, "\ufffd"), item.count(_NUL)
        return item, 0

    return _leaves_replaced(value, fixed)


def is_name(value: Any) -> bool:
    """True for a string the store takes as a failure reason: 1 to :data:`MAX_NAME_LENGTH`
    characters, without NUL (a model id is held to more: see
    :func:`~contextstore.core.validate.is_model_id`)."""
    return isinstance(value, str) and 0 < len(value) <= MAX_NAME_LENGTH and _NUL not in value


def nul_note(path: Path | str, position: str | None, count: int) -> Note:
    """The note for ``count`` NUL characters replaced (see :func:`without_nul`)."""
    return Note(
        str(path),
        position,
        f"{count} NUL character(s) replaced by U+FFFD{' (the first here)' if position else ''}"
        ": the store keeps one only in a message's content, as PostgreSQL can hold one "
        "nowhere else; the rest was read.",
    )


def path_text(path: Path | str) -> str:
    """``path`` as text the store can hold: a name that is not UTF-8 (on Linux, Python keeps
    its bytes as lone surrogates, which no store takes) gets U+FFFD for them."""
    return os.fsencode(path).decode("utf-8", "replace")


def json_kind(value: Any) -> str:
    """What a decoded JSON value is, in JSON's words (``"an object"``, ``"null"``...), for
    messages about files."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _real_path(path: Path) -> Path:
    """``path`` with its symbolic links resolved.

    Raises:
        InteropError: a link cannot be followed (``/proc/1/cwd`` for another user).
    """
    try:
        return Path(os.path.realpath(path))
    except OSError as exc:
        raise InteropError(
            path,
            None,
            f"is a link that cannot be followed ({exc.strerror}); name a folder without it. "
            "Nothing was imported.",
        ) from exc


def not_a_file(path: Path) -> str:
    """What ``path``, which is no regular file, is instead, for messages about files."""
    if path.is_dir():
        return "is a folder, not a file"
    if path.exists():
        return "is not a regular file (a pipe, a device or a socket)"
    return "is missing"


class Folder:
    """The folder an import was given: every file read must stay inside it."""

    def __init__(self, root: Path, *, max_file_bytes: int = MAX_FILE_BYTES) -> None:
        """Remember the folder (its real path) and the size limit."""
        self.root = root
        self.real_root = _real_path(root)
        self.max_file_bytes = max_file_bytes

    def check(self, path: Path) -> Path:
        """Return ``path`` if it (after symbolic links) is inside the folder.

        Raises:
            OutsideFolderError: it resolves to a place outside the folder.
            InteropError: a link on the way cannot be followed (its target is not readable).
        """
        real = _real_path(path)
        if real != self.real_root and self.real_root not in real.parents:
            raise OutsideFolderError(
                path,
                None,
                f"leads (through a symbolic link) to {real}, outside the folder imported "
                f"({self.root}); copy the file into the folder instead. Nothing was imported.",
            )
        return path

    def is_file(self, path: Path) -> bool:
        """True when ``path`` is a file inside the folder (refusing links that leave it)."""
        if not (path.is_file() or path.is_symlink()):
            return False
        self.check(path)
        return path.is_file()

    def walk(self, top: Path) -> Iterator[Path]:
        """Every file under ``top``, sorted, without following links out of the folder (a
        link to a file is the caller's to check, when it reads the file).

        Raises:
            OutsideFolderError: a link to a folder under ``top`` leaves the folder.
        """
        for directory, subdirs, files in os.walk(top, followlinks=False):
            here = Path(directory)
            for name in list(subdirs):
                if (here / name).is_symlink():
                    self.check(here / name)
                    subdirs.remove(name)
            subdirs.sort()
            for name in sorted(files):
                yield here / name

    def read_text(self, path: Path, notes: list[Note]) -> str:
        """The file's text; bytes that are not UTF-8 become U+FFFD, with a note.

        Raises:
            OutsideFolderError: the file is a link that leaves the folder.
            FileTooLargeError: the file is over the size limit.
            InteropError: it cannot be read (permissions, an I/O error), or it is no
                regular file (a pipe would block the import until something writes to it).
        """
        self.check(path)
        try:
            status = path.stat()
        except OSError as exc:
            raise InteropError(
                path, None, f"cannot be read ({exc.strerror}); nothing was imported."
            ) from exc
        if not stat.S_ISREG(status.st_mode):
            raise InteropError(path, None, f"{not_a_file(path)}; it was not read.")
        size = status.st_size
        if size > self.max_file_bytes:
            raise FileTooLargeError(
                path,
                None,
                f"is {size:,} bytes, over the import limit of {self.max_file_bytes:,} "
                "(MAX_FILE_BYTES); if the file is genuine, pass a larger max_file_bytes. "
                "Nothing was imported.",
            )
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise InteropError(
                path, None, f"cannot be read ({exc.strerror}); nothing was imported."
            ) from exc
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            text = raw.decode("utf-8", errors="replace")
            count = text.count("\ufffd") - raw.decode("utf-8", errors="ignore").count("\ufffd")
            notes.append(
                Note(
                    str(path),
                    f"byte {exc.start}",
                    f"{max(count, 1)} invalid UTF-8 sequence(s) replaced by U+FFFD (the first "
                    "here); the rest of the file was read.",
                )
            )
            return text

    def read_json(self, path: Path, notes: list[Note], *, keep_depth: int = 0) -> Any:
        """Parse a JSON file, recovering the complete entries of a damaged one.

        Returns the value, or None when nothing could be read (a note says why). A leading
        byte order mark (an editor's, on Windows) is not part of the JSON and is ignored.

        Raises:
            NestingTooDeepError: the JSON nests deeper than :data:`MAX_JSON_DEPTH`.
        """
        text = self.read_text(path, notes).removeprefix(BYTE_ORDER_MARK)
        check_depth(text, path)
        value, damage = recover(text, keep_depth=keep_depth)
        value, surrogates = without_lone_surrogates(text, value)
        if surrogates:
            notes.append(surrogate_note(path, None, surrogates))
        value, nonfinite = without_nonfinite_numbers(text, value)
        if nonfinite:
            notes.append(nonfinite_note(path, None, nonfinite))
        if value is None and damage is None:
            notes.append(Note(str(path), None, "holds null; nothing in it was read."))
        if damage is not None:
            if value is None:
                reason = f"is not JSON ({damage.problem}); nothing in it could be read."
            elif damage.problem.startswith("Extra data"):
                reason = (
                    f"{damage.dropped_chars:,} characters after the end of the JSON value "
                    "were ignored (a stray write)."
                )
            else:
                reason = (
                    f"the JSON breaks off ({damage.problem}); the first {damage.kept} "
                    f"complete entries were kept and the remaining {damage.dropped_chars:,} "
                    "characters left out."
                )
            cut_short = value is None or not damage.problem.startswith("Extra data")
            notes.append(Note(str(path), damage.describe(), reason, cut_short=cut_short))
        return value


def check_depth(text: str, path: Path, where: str | None = None) -> None:
    """Refuse a JSON text nested deeper than :data:`MAX_JSON_DEPTH`.

    Raises:
        NestingTooDeepError: naming the file (and ``where``).
    """
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return
    depth = json_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise NestingTooDeepError(
            path,
            where,
            f"nests arrays and objects {depth} levels deep, over the limit of "
            f"{MAX_JSON_DEPTH}; no agent writes such a file. Nothing was "
            "imported.",
        )
