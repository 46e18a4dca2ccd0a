"""Library error messages in the terms of the command line.

The library speaks to Python callers ("pass overwrite", "auto_migrate=True"); a CLI user
should read flags and commands. Each rule rewrites one library phrase; a test triggers every
rule through the CLI, so a reworded library message shows up as a failing test rather than
as a Python term on a user's screen.
"""

from __future__ import annotations

import re

RULES: tuple[tuple[str, str], ...] = (
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
        r"\(ts ([^)]+)\) since it ran; restoring would mix them with the archived ones\. "
        r"Roll back to that ts first, then restore\.",
        r"(ts \1) since it ran; restoring would mix them with the archived ones. Roll back "
        r"to that ts first ('contextstore rollback CID --to \1 --yes'), then run this restore "
        r"again.",
    ),
)
"""``(library phrase as a regular expression, CLI phrase)`` pairs, applied in order."""


def cli_wording(message: str) -> str:
    """``message`` with library phrases replaced by their command-line equivalents."""
    for pattern, replacement in RULES:
        message = re.sub(pattern, replacement, message)
    return message
