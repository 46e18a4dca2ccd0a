"""Library error messages in the terms of the command line.

The library speaks to Python callers ("pass overwrite", "auto_migrate=True"); a CLI user
should read flags and commands. Each rule rewrites one library phrase; a test triggers every
rule through the CLI, so a reworded library message shows up as a failing test rather than
as a Python term on a user's screen.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence

PROGRAM = ("contextstore",)
"""The words that run the command line, when no store was named (see
:func:`~contextstore.cli.common.program_words`)."""


def _roll_back_first(match: re.Match[str]) -> str:
    command = shlex.join([*PROGRAM, "rollback", match["cid"], "--to", match["ts"], "--yes"])
    return f"{match[1]} Roll back to that ts first ('{command}'), then run this restore again."


RULES: tuple[tuple[str, str | Callable[[re.Match[str]], str]], ...] = (
    (
        r"list them with ContextStore\.list_conversations\(\) or 'contextstore conversations'",
        "list them with 'contextstore conversations'",
    ),
    (r" \(or open the store with auto_migrate=True\)", ""),
    (
        r"only requests from prepare_request can be rebuilt",
        "only requests prepared through contextstore can be rebuilt",
    ),
    (r"pass overwrite to replace", "pass --force to replace"),
    (r"import again with replace=True", "import again with --replace"),
    (r"pass a larger max_file_bytes", "pass a larger --max-file-bytes"),
    (r"read_only=True \(--read-only on the command line\)", "--read-only"),
    (r"open it without read_only=True to write", "drop --read-only to write"),
    (r"pass force=True \(--force\)", "pass --force"),
    (r" \(ContextStore\.recover\)", ""),
    (
        r"(after rollback \S+ cutoff \(ts (?P<ts>[^)]+)\) in conversation '(?P<cid>[^'\\]*)' "
        r"since it ran; restoring would mix them with the archived ones\.) Roll back to that "
        r"ts first, then restore\.",
        _roll_back_first,
    ),
)
"""``(library phrase as a regular expression, CLI phrase)`` pairs, applied in order."""


def cli_wording(message: str, program: Sequence[str] = PROGRAM) -> str:
    """``message`` with library phrases replaced by their command-line equivalents; a
    command it suggests starts with ``program`` (``contextstore``, and the ``--db`` of the
    store the command ran on)."""
    for pattern, replacement in RULES:
        message = re.sub(pattern, replacement, message)
    if tuple(program) != PROGRAM:
        message = SUGGESTED_COMMAND.sub(f"'{shlex.join(program)} ", message)
    return message


SUGGESTED_COMMAND = re.compile(r"'contextstore (?!recover )")
"""The start of a command a library message suggests (``'contextstore migrate'``), which
runs on the store the failed command named; ``recover`` takes its files as arguments."""
