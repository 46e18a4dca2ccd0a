"""Changing a conversation's settings: the model it talks to and that model's context window."""

from __future__ import annotations

import click

from contextstore.cli import terminal
from contextstore.cli.common import (
    IntegerRange,
    command_line,
    json_option,
    model_id_option,
    open_store,
)
from contextstore.cli.history import conversation_json
from contextstore.core.records import Conversation
from contextstore.core.validate import MAX_INT32
from contextstore.core.window import context_window_info


@click.command("set-model")
@click.argument("conversation_id", metavar="CID")
@click.option(
    "--model-id",
    default=None,
    callback=model_id_option,
    help="The model the conversation talks to from now on (new requests name it).",
)
@click.option(
    "--context-window",
    type=IntegerRange(1, MAX_INT32),
    default=None,
    metavar="TOKENS",
    help="That model's context window: the next prepare decides against it, and the audit "
    "judges the requests recorded without a prepare (imported ones) by it.",
)
@json_option
@click.pass_context
def set_model(
    ctx: click.Context,
    conversation_id: str,
    model_id: str | None,
    context_window: int | None,
    as_json: bool,
) -> None:
    """Change the model a conversation talks to, its context window, or both.

    A setting, not a row of the timeline: a rollback does not undo it. Requests prepared
    earlier keep the window they were decided with.
    """
    if model_id is None and context_window is None:
        raise click.UsageError("give --model-id, --context-window or both.")
    store = open_store(ctx, auto_migrate=False, writes=True)
    conv = store.set_conversation_model(
        conversation_id, model_id=model_id, context_window=context_window
    )
    if as_json:
        terminal.print_json(conversation_json(conv))
        return
    terminal.fields(
        [
            ("conversation", conv.id),
            ("model", conv.model_id),
            ("context window", window_text(conv, ctx)),
        ]
    )


def window_text(conv: Conversation, ctx: click.Context) -> str:
    """The conversation's window and its maximum allowed size; when nobody set the window,
    says that it is the default and the command that sets it."""
    info = context_window_info(conv.context_window)
    text = f"{info.context_window:,} tokens, maximum allowed size {info.max_allowed_size:,.0f}"
    if conv.context_window:
        return text
    command = command_line(ctx, "set-model", conv.id, "--context-window", "TOKENS")
    return f"{text} (none set, so the default; set the model's with: {command})"
