"""A store a command creates when it is missing, removed again when the command is refused
or stopped (Ctrl-C, SIGTERM) before it is whole: a half-made database file stayed behind,
and the next run's read commands said it was "at revision none (empty)"."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

import click

from contextstore.cli import terminal
from contextstore.cli.common import open_store, sqlite_file
from contextstore.core.store_files import store_files

if TYPE_CHECKING:
    from contextstore.store import ContextStore


class Terminated(BaseException):
    """SIGTERM, raised where the command was (see :func:`terminated_as_exception`): a
    ``BaseException``, so that no ``except Exception`` on the way takes it for an error."""


@contextmanager
def terminated_as_exception() -> Iterator[None]:
    """Inside the block, SIGTERM raises :class:`Terminated` where the command is, so that
    its cleanup runs (a transaction rolled back, a store it created removed), as Ctrl-C's
    ``KeyboardInterrupt`` does; once the block has unwound, the process ends by SIGTERM,
    as it would have at once (exit status 143 in a shell). Python's default for SIGTERM
    ends the process on the spot: a new store's half-made file stayed behind.

    Only in the main thread (where Python runs signal handlers), and only where SIGTERM has
    its default action (a caller that ignores or handles it keeps its way)."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def raise_terminated(_signum: int, _frame: Any) -> None:
        raise Terminated

    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    except Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with suppress(Exception):
            terminal.flush_output()
        os.kill(os.getpid(), signal.SIGTERM)
        raise SystemExit(128 + signal.SIGTERM) from None  # where the signal is not fatal
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def store_removed_if_refused(ctx: click.Context) -> Iterator[ContextStore]:
    """:func:`open_store` (``writes=True``), for a command that creates its store when it is
    missing and writes in one transaction: when the command fails or is stopped (Ctrl-C,
    SIGTERM), from the store's first migration to the end of the block, a store file it
    created is removed again, with the folders made for it, so that a refused or
    interrupted command leaves nothing behind (a half-made file stayed: the next run's
    read commands said it was "at revision none (empty)")."""
    path = sqlite_file(ctx)
    try:
        new = path if path is not None and not os.path.lexists(path) else None
        made = [] if new is None else [folder for folder in new.parents if not folder.exists()]
        # Beside a missing database, a file of its name that is there already (a
        # write-ahead log whose database was moved away) is not this command's to remove.
        found = set() if new is None else {f for f, _ in store_files(new) if os.path.lexists(f)}
    except OSError:  # a name too long: the store's open names it
        new, made, found = None, [], set()
    with terminated_as_exception():
        store: ContextStore | None = None
        try:
            store = open_store(ctx, writes=True)
            yield store
        except BaseException:
            if new is not None:
                if store is not None:
                    store.close()
                for file, _ in store_files(new):
                    if file in found:
                        continue
                    with suppress(OSError):  # gone, or a read-only place: the error stands
                        file.unlink()
                for folder in made:  # the nearest first
                    with suppress(OSError):
                        folder.rmdir()
            raise
