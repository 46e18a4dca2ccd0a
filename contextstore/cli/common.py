"""What every command shares: opening the store named by ``--db``, and turning library errors
into one line on stderr and the error's exit code."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from contextstore.core.errors import ContextStoreError
from contextstore.store import ContextStore

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ContextStoreError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


def open_store(ctx: click.Context, **kwargs: Any) -> ContextStore:
    store = ContextStore.open(ctx.obj.get("db"), **kwargs)
    ctx.call_on_close(store.close)
    return store
