"""Distillation: lossless-looking shrinking of whitespace and repeated lines.

Tool outputs are full of padding: trailing spaces, long runs of blank lines, progress
bars and log lines printed hundreds of times. Removing them saves tokens without hiding
anything the model could use. Code inside fences is left as written apart from trailing
whitespace, because repeated lines there (test vectors, tables) are content.
"""

from __future__ import annotations

from typing import Any

from contextstore.core.errors import InvalidInputError
from contextstore.core.overlays import Block, BlockUpdate, Message
from contextstore.core.validate import shown
from contextstore.core.view import IndexedView
from contextstore.processors.base import shrink_texts
from contextstore.processors.triggers import Trigger

_FENCES = ("```", "~~~")


def repeat_marker(count: int) -> str:
    """Return the line that stands for ``count`` further copies of the line above it."""
    unit = "time" if count == 1 else "times"
    return f"[previous line repeated {count} more {unit}]"


def _is_fence(line: str) -> bool:
    return line.lstrip().startswith(_FENCES)


def _distill_once(text: str, min_repeats: int) -> str:
    lines = [line.rstrip() for line in text.split("\n")]
    out: list[str] = []
    in_fence = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _is_fence(line):
            in_fence = not in_fence
            out.append(line)
            i += 1
            continue
        if in_fence:
            out.append(line)
            i += 1
            continue
        run = 1
        while i + run < len(lines) and lines[i + run] == line:
            run += 1
        if line == "":
            out.extend([""] if run >= 3 else [""] * run)
        elif run >= min_repeats and len(repeat_marker(run - 1)) < (run - 1) * (len(line) + 1):
            out.extend([line, repeat_marker(run - 1)])
        else:
            out.extend([line] * run)
        i += run
    return "\n".join(out)


def distill_text(text: str, min_repeats: int = 3) -> str:
    """Return ``text`` with whitespace padding and repeated lines collapsed.

    * Trailing whitespace is removed from every line (a CRLF line ending becomes LF).
    * Outside code fences, runs of three or more blank lines become one blank line, and
      a line repeated ``min_repeats`` or more times in a row becomes the line followed by
      a :func:`repeat_marker`, when that is shorter.
    * Inside ````` or ``~~~`` fences only trailing whitespace changes.

    The result is a fixed point: distilling it again changes nothing.
    """
    current = text
    while True:
        distilled = _distill_once(current, min_repeats)
        if distilled == current:
            return current
        current = distilled


class Distiller:
    """Processor that removes whitespace padding and collapses repeated lines.

    Applies to every text block and tool-result text, in any role, and proposes an
    update only when the text actually shrinks.
    """

    independent = True
    local = True
    """Runs the store's own code only (no hook of the caller's): a prepare may run it while
    holding the conversation's write lock (see :attr:`Pipeline.local
    <contextstore.processors.pipeline.Pipeline.local>`)."""
    trigger: Trigger = Trigger.new_message()
    """Runs on each new message, given only the new messages (set another
    :class:`~contextstore.processors.triggers.Trigger` on the instance to change it)."""
    depends_on: tuple[str, ...] = ()

    def __init__(self, *, min_repeats: int = 3, name: str = "distill") -> None:
        """Create a distiller.

        Args:
            min_repeats: How many identical consecutive lines make a run worth collapsing
                (at least 2).
            name: The processor name recorded as each update's ``source``.

        Raises:
            InvalidInputError: ``min_repeats`` is not an integer of at least 2.
        """
        if isinstance(min_repeats, bool) or not isinstance(min_repeats, int) or min_repeats < 2:
            raise InvalidInputError(
                f"min_repeats must be an integer of at least 2, got {shown(min_repeats)}"
            )
        self.name = name
        self.min_repeats = min_repeats

    def config(self) -> dict[str, Any]:
        """Return the repeat threshold."""
        return {"min_repeats": self.min_repeats}

    def propose(self, view: IndexedView) -> list[BlockUpdate]:
        """Return an update for every text in ``view`` that distillation shortens."""

        def rewrite(
            _idx: int, _message: Message, _block_idx: int, _block: Block, text: str
        ) -> tuple[str, dict[str, Any]]:
            distilled = distill_text(text, self.min_repeats)
            return distilled, {"original_chars": len(text), "kept_chars": len(distilled)}

        return shrink_texts(self.name, view, rewrite)
