"""The ``contextstore`` command line: the only package that prints or exits.

Every library error becomes a one-line message on stderr and the error's exit code; no
traceback is shown for a user mistake.
"""

from contextstore.cli.main import cli, main

__all__ = ["cli", "main"]
