"""The ``contextstore`` command line: the only package that prints or exits.

Every library error becomes a one-line message on stderr and the error's exit code; no
traceback is shown for a user mistake.
"""

from __future__ import annotations

from typing import Any

__all__ = ["cli", "main"]


def main() -> None:
    """Entry point of the ``contextstore`` console script: the command line is loaded here
    rather than when this package is, so that Ctrl-C while it loads (about half a second)
    ends the command as Ctrl-C does once it runs ("Aborted!", exit 1), not in a traceback.
    """
    try:
        from contextstore.cli.main import main as run
    except KeyboardInterrupt:
        raise SystemExit("Aborted!") from None  # printed on stderr, exit 1: click's words
    run()


def __getattr__(name: str) -> Any:
    """``cli``, the root command group, loaded on first use (see :func:`main`)."""
    if name == "cli":
        from contextstore.cli.main import cli

        return cli
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
