"""``contextstore demo``: a realistic session written, checkpointed, broken and rolled back."""

from __future__ import annotations

import click

from contextstore.cli.common import handle_errors, open_store
from contextstore.cli.output import conversation_table, table
from contextstore.core.records import PreparedRequest
from contextstore.devtools import demo_data
from contextstore.store import ContextStore


@click.command()
@click.pass_context
@handle_errors
def demo(ctx: click.Context) -> None:
    """Write a realistic agent session, checkpoint it, break it, roll it back, show the rows."""
    store = open_store(ctx)
    click.echo(f"database: {store.location}")
    conv = store.create_conversation(
        model_id="claude-sonnet-4-5", context_window=200_000, title="demo: fix the CSV header"
    )
    click.echo(f"conversation: {conv.id}\n")
    written = store.append(conv.id, demo_data.opening_turns())
    store.record_request(conv.id, tokens_in=3_120, tokens_out=180, cache_reads=1_900, cost=0.0142)
    cp = store.checkpoint(conv.id, "after-reading", note="both files read")
    click.echo(
        f"wrote {len(written)} messages ({sum(m.token_count for m in written):,} tokens counted "
        f"once, at append); checkpoint 'after-reading' at ts {cp.ts}"
    )
    store.append(conv.id, demo_data.risky_turns())
    store.record_request(conv.id, tokens_in=3_900, tokens_out=240, cost=0.0161)
    before = store.row_counts(conv.id)
    now_view = store.render(conv.id)
    report = store.rollback(conv.id, "after-reading")
    after = store.row_counts(conv.id)
    click.echo("\nrows of this conversation per table:")
    names = [n for n in before if n != "conversations"]
    click.echo(
        table(
            ("table", "before rollback", "removed", "after rollback"),
            [(n, before[n], report.removed.get(n, 0), after[n]) for n in names],
        )
    )
    click.echo(f"\nthe view before the rollback ({len(now_view)} messages):")
    click.echo(conversation_table(now_view))
    click.echo(f"\nthe view as of the checkpoint (render(as_of={cp.ts})):")
    at_checkpoint = store.render(conv.id, as_of=cp.ts)
    click.echo(conversation_table(at_checkpoint))
    current = store.render(conv.id)
    same = "identical to" if current == at_checkpoint else "DIFFERENT from"
    click.echo(
        f"\nafter rollback('after-reading') the view now is {same} the view at the checkpoint;"
    )
    click.echo(
        f"{report.total_removed} rows were removed in one transaction and kept in "
        "archived_rows, with the cutoff and time of the rollback."
    )
    _demo_overflow(store)


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


def _demo_overflow(store: ContextStore) -> None:
    click.echo("\n== a session that overflows a 64,000-token window ==")
    conv = store.create_conversation(
        model_id="claude-sonnet-4-5", context_window=64_000, title="demo: overflow"
    )
    store.append(conv.id, [*demo_data.opening_turns(), *demo_data.long_session(8)])
    first = store.prepare_request(conv.id, system="You are a careful coding agent.")
    click.echo(_decision_line("request 1 (no usage yet)", first))
    store.record_request(conv.id, request_id=first.request_id, tokens_in=38_500, tokens_out=900)
    second = store.prepare_request(conv.id, system="You are a careful coding agent.")
    click.echo(_decision_line("request 2 (previous used 39,400 >= 37,000)", second))
    store.record_request(conv.id, request_id=second.request_id, tokens_in=36_000, tokens_out=700)
    store.append(conv.id, demo_data.long_session(6, first=8, new_files=True))
    store.record_request(conv.id, tokens_in=45_000, tokens_out=800)
    third = store.prepare_request(conv.id, system="You are a careful coding agent.")
    click.echo(_decision_line("request 3 (previous used 45,800)", third))
    notice = third.messages[1]["content"][0]
    click.echo(f"  message 1 now shows the notice: {str(notice.get('text', ''))[:90]}...")
    click.echo(f"  reason recorded with the range: {third.decision.reason}")
    cp = store.checkpoint(conv.id, "after-first-truncation")
    store.append(conv.id, demo_data.long_session(6, first=14, new_files=True))
    store.record_request(conv.id, tokens_in=52_000, tokens_out=800)
    fourth = store.prepare_request(conv.id, system="You are a careful coding agent.")
    click.echo(_decision_line("request 4 (previous used 52,800)", fourth))
    report = store.rollback(conv.id, "after-first-truncation")
    click.echo(
        f"rollback('after-first-truncation'): removed {report.total_removed} rows in one "
        f"transaction; the deleted range is {store.deleted_range(conv.id)} again, as at the "
        f"checkpoint (ts {cp.ts}), and the notice stays"
    )
    assert second.request_id is not None
    rebuilt = store.request_payload(conv.id, second.request_id)
    click.echo(
        f"request 2 rebuilt from rows and verified against its hash: {rebuilt == second.payload}"
    )
