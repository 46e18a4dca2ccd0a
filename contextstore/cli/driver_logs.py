"""What the database driver logs, kept off the command line's stderr.

psycopg reports on its ``psycopg`` logger what it ignores while it cleans up after an
error: ending a pipeline whose connection the server dropped logs ``error ignored
terminating <psycopg.Pipeline [BAD] at 0x...>: the connection is lost`` at WARNING. A
program that configured no logging gets such a record from Python's last-resort handler,
on stderr, as a second line beside the command's own error, which already says the
connection was lost (README: every error is one line on stderr).

The command line is a program, so it decides: a ``NullHandler`` on that logger stops the
last resort and nothing else. Records still propagate to any handler configured above
(``contextstore serve --log-level`` prints them as log lines). The library itself leaves
logging alone: an application using it sees psycopg's records as its logging
configuration says, as with any library.
"""

from __future__ import annotations

import logging

DRIVER_LOGGERS = ("psycopg",)
"""The loggers whose records never reach stderr by Python's last resort."""


def keep_driver_logs_off_stderr() -> None:
    """Give each of :data:`DRIVER_LOGGERS` a ``NullHandler`` (once)."""
    for name in DRIVER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
            logger.addHandler(logging.NullHandler())
