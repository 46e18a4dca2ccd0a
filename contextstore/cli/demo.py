"""``contextstore demo``: a realistic session written, checkpointed, broken and rolled back;
a window overflow; masked secrets and an audit query; one request in three formats; a
writer killed mid-write; and the commands to look further."""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from contextstore.cli import terminal
from contextstore.cli.common import IntegerRange, command_line, open_store, shown_location
from contextstore.cli.output import conversation_rows, ordered_counts
from contextstore.core.errors import ContextStoreError
from contextstore.core.records import PreparedRequest
from contextstore.devtools import demo_data

if TYPE_CHECKING:
    from contextstore.store import ContextStore

TASK_TITLE = "fix the CSV header"
SYSTEM = "You are a careful coding agent."


def _run_number(store: ContextStore) -> int:
    """1 + the demo runs already in this database (recognised by their titles)."""
    return 1 + sum(
        1
        for c in store.list_conversations()
        if (c.title or "").startswith("demo") and (c.title or "").endswith(TASK_TITLE)
    )


DEMO_MAX_KILLS = 20
"""The most writers the demo's crash part kills: each is a process started and killed in
turn, a second or more on a busy machine; the crash-test command is the one for hundreds."""


@click.command()
@click.option(
    "--crash-kills",
    type=IntegerRange(min=0, max=DEMO_MAX_KILLS),
    default=2,
    show_default=True,
    help="Writer processes to kill mid-write in the crash part (0 skips it); "
    "'contextstore crash-test --kills N' runs more.",
)
@click.pass_context
def demo(ctx: click.Context, crash_kills: int) -> None:
    """Write a realistic agent session, checkpoint it, break it, roll it back, audit it."""
    store = open_store(ctx, writes=True)
    run = _run_number(store)
    terminal.out(f"database: {shown_location(store.location)}")
    terminal.out(f"demo run {run}: its conversations are titled 'demo {run}: ...'")
    made: list[str] = []
    try:
        conv_id = _demo_rollback(ctx, store, run, made)
        overflow_id, request_id = _demo_overflow(store, run, made)
        _demo_secrets_and_audit(store, conv_id)
        _demo_formats(store, conv_id)
    except BaseException:
        _remove_unfinished(ctx, store, made)
        raise
    if crash_kills:
        _demo_crash(crash_kills)
    _look_further(ctx, store, conv_id, overflow_id, request_id)


def _heading(text: str) -> None:
    terminal.out()
    terminal.out(f"== {text} ==")


def _remove_unfinished(ctx: click.Context, store: ContextStore, made: list[str]) -> None:
    """Delete the conversations a demo that stopped before its end had written, so that no
    half demo stays in the user's database; say so, or which ones stayed and how to delete
    them when the database refuses that too (the role may not delete, the server is gone)."""
    if not made:
        return
    left = []
    for conversation_id in made:
        try:
            store.delete_conversation(conversation_id)
        except ContextStoreError:
            left.append(conversation_id)
    if not left:
        written = (
            f"the conversation it had written ({made[0]}) was"
            if len(made) == 1
            else f"the {len(made)} conversations it had written ({', '.join(made)}) were"
        )
        terminal.note(f"the demo stopped before its end; {written} deleted: none of it is left.")
        return
    which = (
        f"conversation {left[0]} is" if len(left) == 1 else f"conversations {', '.join(left)} are"
    )
    deletes = "; ".join(command_line(ctx, "delete", cid, "--yes") for cid in left)
    terminal.note(
        f"the demo stopped before its end and could not delete what it had written: {which} "
        f"left unfinished; delete with: {deletes}"
    )


def _demo_rollback(ctx: click.Context, store: ContextStore, run: int, made: list[str]) -> str:
    conv = store.create_conversation(
        model_id="claude-sonnet-4-5", context_window=200_000, title=f"demo {run}: {TASK_TITLE}"
    )
    made.append(conv.id)
    _heading(f"a coding session, checkpointed, broken, rolled back ({conv.id})")
    written = store.append(conv.id, demo_data.opening_turns())
    store.record_request(conv.id, tokens_in=3_120, tokens_out=180, cache_reads=1_900, cost=0.0142)
    cp = store.checkpoint(conv.id, "after-reading", note="both files read")
    terminal.out(
        f"wrote {len(written)} messages ({sum(m.token_count for m in written):,} tokens counted "
        f"once, at append); checkpoint 'after-reading' at ts {cp.ts}"
    )
    store.append(conv.id, demo_data.risky_turns())
    store.record_request(conv.id, tokens_in=3_900, tokens_out=240, cost=0.0161)
    before = store.row_counts(conv.id)
    now_view = store.render(conv.id)
    report = store.rollback(conv.id, "after-reading")
    after = store.row_counts(conv.id)
    terminal.out()
    names = [n for n, _ in ordered_counts(before) if n != "conversations"]
    terminal.table(
        ("table", "before rollback", "removed", "after rollback"),
        [(n, before[n], report.removed.get(n, 0), after[n]) for n in names],
        title="rows of this conversation per table:",
    )
    terminal.out()
    terminal.table(
        ("#", "role", "content"),
        conversation_rows(now_view),
        title=f"the view before the rollback ({len(now_view)} messages):",
        wrap=("content",),
    )
    at_checkpoint = store.render(conv.id, as_of=cp.ts)
    terminal.out()
    terminal.table(
        ("#", "role", "content"),
        conversation_rows(at_checkpoint),
        title=f"the view as of the checkpoint (render(as_of={cp.ts})):",
        wrap=("content",),
    )
    same = "identical to" if store.render(conv.id) == at_checkpoint else "DIFFERENT from"
    terminal.out(
        f"after rollback('after-reading') the view now is {same} the view at the checkpoint;"
    )
    terminal.out(
        f"{report.total_removed} rows were removed in one transaction and kept in "
        f"the archive tables (rollback {report.rollback_id}: "
        f"'{command_line(ctx, 'restore', conv.id, str(report.rollback_id))}' would put them "
        "back)."
    )
    return conv.id


def _decision_line(label: str, ctx: PreparedRequest) -> str:
    d = ctx.decision
    saved = (
        f", de-duplicated messages {list(d.deduplicated)} ({d.fraction_saved:.0%} saved)"
        if d.deduplicated
        else ""
    )
    return (
        f"{label}: {d.action}"
        + (f" keep={d.keep}" if d.keep else "")
        + f", range={ctx.deleted_range}, {len(ctx.messages)} messages sent{saved}"
    )


def _demo_overflow(store: ContextStore, run: int, made: list[str]) -> tuple[str, int]:
    conv = store.create_conversation(
        model_id="claude-sonnet-4-5", context_window=64_000, title=f"demo {run}: overflow"
    )
    made.append(conv.id)
    _heading(f"a session that overflows a 64,000-token window ({conv.id})")
    store.append(conv.id, [*demo_data.opening_turns(), *demo_data.long_session(8)])
    first = store.prepare_request(conv.id, system=SYSTEM)
    terminal.out(_decision_line("request 1 (no usage yet)", first))
    store.record_request(conv.id, request_id=first.request_id, tokens_in=38_500, tokens_out=900)
    second = store.prepare_request(conv.id, system=SYSTEM)
    terminal.out(_decision_line("request 2 (previous used 39,400 >= 37,000)", second))
    store.record_request(conv.id, request_id=second.request_id, tokens_in=36_000, tokens_out=700)
    store.append(conv.id, demo_data.long_session(6, first=8, new_files=True))
    store.record_request(conv.id, tokens_in=45_000, tokens_out=800)
    third = store.prepare_request(conv.id, system=SYSTEM)
    terminal.out(_decision_line("request 3 (previous used 45,800)", third))
    notice = third.messages[1]["content"][0]
    terminal.out(f"  message 1 now shows the notice: {str(notice.get('text', ''))[:90]}...")
    terminal.out(f"  reason recorded with the range: {third.decision.reason}")
    cp = store.checkpoint(conv.id, "after-first-truncation")
    store.append(conv.id, demo_data.long_session(6, first=14, new_files=True))
    store.record_request(conv.id, tokens_in=52_000, tokens_out=800)
    fourth = store.prepare_request(conv.id, system=SYSTEM)
    terminal.out(_decision_line("request 4 (previous used 52,800)", fourth))
    report = store.rollback(conv.id, "after-first-truncation")
    terminal.out(
        f"rollback('after-first-truncation'): removed {report.total_removed} rows in one "
        f"transaction; the deleted range is {store.deleted_range(conv.id)} again, as at the "
        f"checkpoint (ts {cp.ts}), and the notice stays"
    )
    assert second.request_id is not None
    rebuilt = store.request_payload(conv.id, second.request_id)
    terminal.out(
        f"request 2 rebuilt from rows and verified against its hash: {rebuilt == second.payload}"
    )
    return conv.id, second.request_id


def _demo_secrets_and_audit(store: ContextStore, conv_id: str) -> None:
    _heading("secrets in a file the agent read, masked before the model sees them")
    store.append(conv_id, demo_data.secret_turns())
    prepared = store.prepare_request(conv_id, system=SYSTEM)
    store.record_request(
        conv_id, request_id=prepared.request_id, tokens_in=4_300, tokens_out=120, cost=0.0133
    )
    shown = next(
        str(block.get("content"))
        for message in prepared.messages
        for block in message.get("content", [])
        if isinstance(block, dict) and ".env" in str(block.get("content", ""))
    )
    line = next(x for x in shown.replace("\\n", "\n").splitlines() if "GITHUB_TOKEN" in x)
    terminal.out(f"the model was sent: {line.strip()[:70]}")
    # The id is our own hex uuid; spelled out so the query can be copied into sqlite3.
    query = (
        "SELECT kind, masked_by, COUNT(*) AS masked FROM masked_secrets "  # noqa: S608
        f"WHERE conversation_id = '{conv_id}' GROUP BY kind, masked_by ORDER BY kind"
    )
    result = store.query(query)
    terminal.out()
    terminal.out("an audit query (read-only SQL on the audit views):")
    terminal.out(f"  {query}")
    terminal.table(result.columns, result.rows)


def _compact(value: Any, limit: int = 240) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _calls_tools(message: dict[str, Any]) -> bool:
    """True when a provider-format message calls a tool (any of the three shapes)."""
    if message.get("tool_calls"):
        return True
    parts = message.get("content") or message.get("parts") or []
    return isinstance(parts, list) and any(
        isinstance(p, dict) and (p.get("type") == "tool_use" or "functionCall" in p) for p in parts
    )


def _demo_formats(store: ContextStore, conv_id: str) -> None:
    _heading("one request's last tool exchange, in the three provider formats")
    for fmt in ("anthropic", "openai", "gemini"):
        view = store.render(conv_id, format=fmt)
        calls = [position for position, message in enumerate(view) if _calls_tools(message)]
        start = calls[-1] if calls else max(0, len(view) - 2)
        terminal.out(f"{fmt}:")
        for message in view[start : start + 2]:
            terminal.out(f"  {_compact(message)}")


def _demo_crash(kills: int) -> None:
    from contextstore.devtools.crash import run_campaign

    _heading(f"a writer killed mid-write ({kills} times), the store reopened and checked")
    with tempfile.TemporaryDirectory(prefix="contextstore-demo-crash-") as scratch:
        path = Path(scratch) / "crash.db"
        with terminal.status(f"killing {kills} writer processes with SIGKILL..."):
            tally = run_campaign(path, kills=kills, seed=7, max_delay=0.25)
    terminal.out(
        f"{tally.kills} writers killed with SIGKILL mid-operation; {tally.committed} committed "
        f"operations, all found again ({tally.lost} lost); calls in flight at the kill: "
        f"{tally.in_flight_applied} fully applied, {tally.in_flight_discarded} left no trace; "
        f"after each kill the file passed PRAGMA integrity_check, rendered, passed check and "
        f"took a new append ({len(tally.violations)} invariant violations)."
    )


def _look_further(
    ctx: click.Context, store: ContextStore, conv_id: str, other: str, request_id: int
) -> None:
    _heading("look further")
    for command in (
        command_line(ctx, "show", conv_id),
        command_line(ctx, "audit", conv_id),
        command_line(ctx, "report", other, "-o", "report.html"),
        command_line(ctx, "request", other, str(request_id), "--payload"),
    ):
        terminal.out(f"  {command}")
    if store.path is not None:
        terminal.out(
            f'  sqlite3 {shlex.quote(str(store.path))} "SELECT request_id, total_tokens, '  # noqa: S608
            f"percent_of_window, cost FROM audit_requests WHERE conversation_id = '{other}'\""
        )
