"""Reading conversations: the list, and one conversation as the model sees it."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import click

from contextstore.cli import terminal
from contextstore.cli.common import command_line, json_option, open_store
from contextstore.cli.output import clipped, conversation_rows
from contextstore.cli.times import MOMENT, Moment, format_ts, resolve
from contextstore.core.records import Conversation

if TYPE_CHECKING:
    from contextstore.core.nodes import Node
    from contextstore.store import ContextStore

FORMATS = ("stored", "anthropic", "openai", "gemini")


def conversation_json(conv: Conversation) -> dict[str, Any]:
    """A conversation's JSON fields (documented in the README)."""
    return {
        "id": conv.id,
        "title": conv.title,
        "model_id": conv.model_id,
        "context_window": conv.context_window,
        "parent_id": conv.parent_id,
        "forked_at_ts": conv.forked_at_ts,
        "created_ts": conv.created_ts,
        "last_ts": conv.last_ts,
        "metadata": conv.metadata,
    }


@click.command("conversations")
@json_option
@click.pass_context
def list_conversations(ctx: click.Context, as_json: bool) -> None:
    """List the conversations in the database, oldest first."""
    store = open_store(ctx, auto_migrate=False)
    found = store.list_conversations()
    if as_json:
        terminal.print_json([conversation_json(c) for c in found])
        return
    terminal.table(
        ("id", "title", "model", "window", "created", "last activity", "parent"),
        [
            (
                c.id,
                c.title or "",
                c.model_id or "",
                c.context_window,
                format_ts(c.created_ts),
                format_ts(c.last_ts),
                c.parent_id or "",
            )
            for c in found
        ],
        wrap=("title",),
    )


def node_json(node: Node) -> dict[str, Any]:
    """A node's JSON fields (documented in the README)."""
    return {field.name: getattr(node, field.name) for field in dataclasses.fields(node)}


def _file(node: Node) -> str:
    if node.path is None:
        return ""
    if node.line_start is None:
        return node.path
    end = "" if node.line_end is None else node.line_end
    return f"{node.path}:{node.line_start}-{end}"


def _show_nodes(
    store: Any, conversation_id: str, ts: int | None, pristine: bool, as_json: bool
) -> None:
    view = "pristine" if pristine else "active"
    found = store.nodes(conversation_id, view=view, as_of=ts)
    if as_json:
        terminal.print_json(
            {
                "conversation_id": conversation_id,
                "as_of": ts,
                "view": view,
                "nodes": [node_json(n) for n in found],
            }
        )
        return
    moment = f"as of {format_ts(ts)}" if ts is not None else "now"
    total = sum(n.token_count for n in found)
    terminal.table(
        ("node", "role", "type", "file", "tokens", "rewritten by", "text"),
        [
            (
                n.id,
                n.role,
                n.node_type,
                _file(n),
                n.token_count,
                n.rewritten_by or "",
                clipped(n.text or n.tool_name or "", _PREVIEW),
            )
            for n in found
        ],
        title=f"{conversation_id}, {view} nodes, {moment}: {len(found)} nodes, {total:,} tokens",
        wrap=("text",),
    )


_PREVIEW = 120


def _note_later_rollbacks(ctx: click.Context, store: Any, conversation_id: str, ts: int) -> None:
    """Say when a rollback that ran after ``ts`` removed rows written before it: the view
    of ``ts`` is then the history as it stands, without them, not what was seen then."""
    for event in store.audit(conversation_id).rollbacks:
        if not (event.cutoff_ts < ts < event.ran_at) or event.restored_ts is not None:
            continue
        if not event.total_removed:
            continue
        restore = command_line(ctx, "restore", conversation_id, str(event.rollback_id))
        if event.target is None:  # an import replaced rows the agent had rewritten
            back_to = command_line(ctx, "rollback", conversation_id, "--to", str(event.cutoff_ts))
            terminal.note(
                f"an import (rollback {event.rollback_id}, {format_ts(event.ran_at)}) "
                f"replaced what was written after {format_ts(event.cutoff_ts)} by the "
                "agent's rewrite of it: this is the rewritten history. The replaced rows are "
                f"archived: '{back_to}', then '{restore}' puts them back."
            )
            continue
        back = "they were purged" if event.purged else f"'{restore}' puts them back"
        terminal.note(
            f"rollback {event.rollback_id} ran later ({format_ts(event.ran_at)}) and removed "
            f"what was written after {format_ts(event.cutoff_ts)}: this is the history "
            f"without those rows, not all that was there at that moment ({back})."
        )


def _show(
    ctx: click.Context,
    conversation_id: str,
    as_of: Moment | None,
    format_: str,
    pristine: bool,
    as_json: bool,
    nodes: bool = False,
) -> None:
    if (pristine or nodes) and format_ != "stored":
        flag = "--pristine" if pristine else "--nodes"
        raise click.UsageError(
            f"{flag} shows stored rows; drop --format (or use --format stored).",
            ctx,
        )
    store = open_store(ctx, auto_migrate=False)
    store.get_conversation(conversation_id)
    ts = None if as_of is None else resolve(store, conversation_id, as_of, "--as-of")
    if ts is not None:
        _note_later_rollbacks(ctx, store, conversation_id, ts)
    if nodes:
        _show_nodes(store, conversation_id, ts, pristine, as_json)
        return
    if pristine:
        view = store.messages(conversation_id, as_of=ts)
    else:
        view = store.render(
            conversation_id, as_of=ts, format=None if format_ == "stored" else format_
        )
    hidden = store.deleted_range(conversation_id, as_of=ts)
    if as_json:
        terminal.print_json(
            {
                "conversation_id": conversation_id,
                "as_of": ts,
                "format": format_,
                "pristine": pristine,
                "deleted_range": list(hidden) if hidden else None,
                "messages": view,
            }
        )
        return
    if format_ in ("openai", "gemini"):
        terminal.print_json(view)
        return
    moment = f"as of {format_ts(ts)}" if ts is not None else "now"
    what = "stored originals" if pristine else "as the model sees it"
    rows: list[tuple[Any, ...]] = list(conversation_rows(view))
    added = False
    if not pristine:
        stored = store.message_count(conversation_id, as_of=ts)
        count = 0
        if hidden:
            # The range can reach past the stored messages: an import of an agent's UI log
            # without its model history records ranges over messages it never held.
            count = max(0, min(hidden[1], stored - 1) - hidden[0] + 1)
        if len(view) == stored - count:
            # One view message per visible stored message: label rows with stored indices.
            rows = [(i if i < 2 else i + count, *rest) for i, *rest in rows]
        else:
            labels = _stored_indices(store, conversation_id, ts, len(view))
            if labels is not None:
                rows = [(label, *rest) for label, (_, *rest) in zip(labels, rows, strict=True)]
                added = ADDED_BY_THE_VIEW in labels
    if hidden and not pristine:
        span = f"messages {hidden[0]}-{hidden[1]}"
        if count == hidden[1] - hidden[0] + 1:
            line = f"... {span} ({count}) hidden by truncation ..."
        else:
            line = f"... {span} hidden by truncation ({count} of them stored) ..."
        fold = min(2, len(rows))
        if fold < len(rows) and rows[fold][0] == ADDED_BY_THE_VIEW:
            fold += 1  # message 1's placeholders come before the fold, as the view sends them
        rows.insert(fold, ("", "", line))
    terminal.table(
        ("#", "role", "content"),
        rows,
        title=f"{conversation_id}, {what}, {moment}: {len(view)} messages",
        wrap=("content",),
    )
    if added:
        terminal.note(
            f"{ADDED_BY_THE_VIEW}: a message the view sent that is not stored (result missing "
            "placeholders for calls no stored message answers); # is the stored index."
        )


ADDED_BY_THE_VIEW = "+"
"""The ``#`` of a message ``show`` lists that the view added (no stored index)."""


def _stored_indices(
    store: ContextStore, conversation_id: str, ts: int | None, sent: int
) -> list[int | str] | None:
    """Each message of the view, labelled with the stored index it shows or
    :data:`ADDED_BY_THE_VIEW` for one the view inserted; None when the two do not line up
    (then rows keep their positions)."""
    labels: list[int | str] = []
    for viewed in store.viewed_messages(conversation_id, as_of=ts):
        if viewed.hidden:
            continue
        labels.append(viewed.index)
        if viewed.followed_by:
            labels.append(ADDED_BY_THE_VIEW)
    return labels if len(labels) == sent else None


_AS_OF_HELP = "Show the conversation as it was then: a checkpoint label, an ISO date or ms."
_FORMAT_HELP = "stored: every stored field; anthropic, openai, gemini: the provider's message list."
_PRISTINE_HELP = "The stored originals, without the cut or any rewrite."
_NODES_HELP = (
    "The typed nodes (type, file and lines, tokens): the active view, or with --pristine "
    "every stored node."
)


def _show_command(name: str, hidden: bool) -> click.Command:
    @click.command(name, hidden=hidden)
    @click.argument("conversation_id", metavar="CID")
    @click.option("--as-of", type=MOMENT, default=None, help=_AS_OF_HELP)
    @click.option(
        "--format",
        "format_",
        type=click.Choice(FORMATS),
        default="stored",
        show_default=True,
        help=_FORMAT_HELP,
    )
    @click.option("--pristine", is_flag=True, help=_PRISTINE_HELP)
    @click.option("--nodes", is_flag=True, help=_NODES_HELP)
    @json_option
    @click.pass_context
    def command(
        ctx: click.Context,
        conversation_id: str,
        as_of: Moment | None,
        format_: str,
        pristine: bool,
        nodes: bool,
        as_json: bool,
    ) -> None:
        """Show a conversation as the model sees it (now, or as of a past moment)."""
        _show(ctx, conversation_id, as_of, format_, pristine, as_json, nodes)

    return command


show = _show_command("show", hidden=False)
render = _show_command("render", hidden=True)
"""The old name of ``show``, kept as a hidden alias."""
