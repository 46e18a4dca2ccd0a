"""Every command: its output shape, its ``--json`` fields, its exit codes."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from contextstore import ContextStore
from contextstore.cli import terminal
from contextstore.cli.times import format_ts
from tests.cli.conftest import Seeded, run
from tests.conftest import POSTGRES_URL, new_postgres_schema
from tests.store.test_audit import dump

CONVERSATION_FIELDS = {
    "id",
    "title",
    "model_id",
    "context_window",
    "parent_id",
    "forked_at_ts",
    "created_ts",
    "last_ts",
    "metadata",
}
CHECKPOINT_FIELDS = {"id", "conversation_id", "ts", "label", "git_hash", "note"}
REQUEST_FIELDS = {
    "id",
    "conversation_id",
    "ts",
    "model_id",
    "format",
    "tokens_in",
    "tokens_out",
    "cache_writes",
    "cache_reads",
    "total_tokens",
    "cost",
    "failure",
    "payload_sha256",
}
ROLLBACK_FIELDS = {
    "conversation_id",
    "cutoff_ts",
    "dry_run",
    "rollback_id",
    "archived",
    "removed",
    "total_removed",
}
ISO = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}[+-]\d{2}:\d{2}"


def counts(s: Seeded) -> dict[str, int]:
    with s.store() as store:
        return store.row_counts(s.cid)


# -- conversations -----------------------------------------------------------------------


def test_conversations_table_and_json(seeded: Seeded) -> None:
    table = run("--db", seeded.db, "conversations")
    assert table.code == 0
    header = table.out.splitlines()[0].split()
    assert header == ["id", "title", "model", "window", "created", "last", "activity", "parent"]
    assert seeded.cid in table.out and re.search(ISO, table.out)
    listed = run("--db", seeded.db, "conversations", "--json").json()
    assert [set(c) for c in listed] == [CONVERSATION_FIELDS]
    assert listed[0]["id"] == seeded.cid and isinstance(listed[0]["last_ts"], int)


# -- show --------------------------------------------------------------------------------


def test_show_prints_the_view_with_a_title(seeded: Seeded) -> None:
    shown = run("--db", seeded.db, "show", seeded.cid)
    assert shown.code == 0
    assert shown.out.startswith(f"{seeded.cid}, as the model sees it, now: 8 messages")
    assert "tool_result error for toolu_03" in shown.out


def test_show_json_fields_and_formats(seeded: Seeded) -> None:
    doc = run("--db", seeded.db, "show", seeded.cid, "--json").json()
    assert set(doc) == {
        "conversation_id",
        "as_of",
        "format",
        "pristine",
        "deleted_range",
        "messages",
    }
    assert doc["format"] == "stored" and doc["as_of"] is None and len(doc["messages"]) == 8
    openai = run("--db", seeded.db, "show", seeded.cid, "--format", "openai")
    assert openai.code == 0 and '"tool_calls"' in openai.out
    gemini = run("--db", seeded.db, "show", seeded.cid, "--format", "gemini", "--json").json()
    assert gemini["format"] == "gemini" and gemini["messages"][0]["role"] == "user"


def test_show_as_of_accepts_a_label_an_iso_date_and_milliseconds(seeded: Seeded) -> None:
    views = [
        run("--db", seeded.db, "show", seeded.cid, "--as-of", moment, "--json").json()
        for moment in (seeded.label, format_ts(seeded.checkpoint_ts), str(seeded.checkpoint_ts))
    ]
    assert all(v["as_of"] == seeded.checkpoint_ts for v in views)
    assert all(v["messages"] == views[0]["messages"] for v in views)
    assert len(views[0]["messages"]) == 5


def test_show_as_of_is_inclusive_to_the_millisecond(seeded: Seeded) -> None:
    with seeded.store() as store:
        (next_ts,) = store.query(
            f"SELECT ts FROM messages WHERE conversation_id = '{seeded.cid}' AND idx = 5"
        ).rows[0]
    before = run("--db", seeded.db, "show", seeded.cid, "--as-of", str(next_ts - 1))
    at = run("--db", seeded.db, "show", seeded.cid, "--as-of", str(next_ts))
    assert ": 5 messages" in before.out.splitlines()[0]
    assert ": 6 messages" in at.out.splitlines()[0]


def test_show_pristine_shows_the_originals_and_refuses_a_format(tmp_path: Path) -> None:
    db = str(tmp_path / "p.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "original words")
        store.append(cid, "assistant", "ok")
        store.add_context_update(cid, 0, 0, "rewritten words")
    assert "rewritten words" in run("--db", db, "show", cid).out
    pristine = run("--db", db, "show", cid, "--pristine", "--json").json()
    assert pristine["pristine"] is True
    assert pristine["messages"][0]["content"] == "original words"
    refused = run("--db", db, "show", cid, "--pristine", "--format", "openai")
    assert refused.code == 2 and "--pristine" in refused.err and "Traceback" not in refused.err


def test_show_folds_the_hidden_range_and_labels_stored_indices(tmp_path: Path) -> None:
    db = str(tmp_path / "fold.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        for i in range(4):
            store.append(cid, "user", f"question {i}")
            store.append(cid, "assistant", f"answer {i}")
        store.set_deleted_range(cid, 5)
    lines = run("--db", db, "show", cid).out.splitlines()
    assert any("messages 2-5 (4) hidden by truncation" in line for line in lines)
    assert any(re.match(r"^6\s+user\s+text: question 3", line) for line in lines)
    assert run("--db", db, "show", cid, "--json").json()["deleted_range"] == [2, 5]


def test_show_answers_message_1_s_calls_when_the_cut_hides_everything_after(
    tmp_path: Path,
) -> None:
    """The results of message 1's calls are hidden, not pending: the model is sent a
    placeholder for each, shown after message 1 as the view sends it."""
    db = str(tmp_path / "cut.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "task")
        for i in range(3):
            store.append(
                cid,
                "assistant",
                [{"type": "tool_use", "id": f"a{i}", "name": "read_file", "input": {}}],
            )
            store.append(cid, "user", [{"type": "tool_result", "tool_use_id": f"a{i}"}])
        store.append(cid, "assistant", "done")
        store.truncate(cid, keep="none")
    messages = run("--db", db, "show", cid, "--json").json()["messages"]
    assert messages[-1] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "a0", "content": "result missing"}],
    }
    shown = run("--db", db, "show", cid)
    # Not stored message 2 (which the cut hides): a message the view added.
    lines = shown.out.splitlines()
    assert re.match(r"^\+\s+user\s+tool_result for a0: result missing", lines[-2])
    assert "messages 2-7 (6) hidden by truncation" in lines[-1]
    assert "+: a message the view sent that is not stored" in shown.err


def test_show_labels_rows_with_stored_indices_around_a_message_the_view_adds(
    tmp_path: Path,
) -> None:
    """A call no user message answers gets a user message of placeholders in the view;
    rows after it were numbered by their place in the view, one more than their stored
    index, so an auditor's ``sql ... WHERE message_idx = 3`` found another message."""
    db = str(tmp_path / "added.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "task")
        for turn in range(3):
            call = {"type": "tool_use", "id": f"t{turn}", "name": "read_file", "input": {}}
            store.append(cid, "assistant", [call])
            store.append(cid, "assistant", f"lost {turn}")
            store.append(cid, "user", f"ok {turn}")
        plain = run("--db", db, "show", cid)
        store.set_deleted_range(cid, 3)
        cut = run("--db", db, "show", cid)
    numbers = [line.split()[0] for line in plain.out.splitlines()[3:]]
    assert numbers == ["0", "1", "+", "2", "3", "4", "+", "5", "6", "7", "+", "8", "9"]
    numbers = [line.split()[0] for line in cut.out.splitlines()[3:]]
    assert numbers == ["0", "1", "+", "...", "4", "+", "5", "6", "7", "+", "8", "9"]
    assert re.search(r"^5\s+assistant\s+text: lost 1$", cut.out, re.M)


def test_a_blank_checkpoint_label_is_refused_and_writes_nothing(seeded: Seeded) -> None:
    """``--to '  '`` reads as no moment at all, so a label of blanks could never be named
    again; it was stored."""
    got = run("--db", seeded.db, "checkpoint", seeded.cid, "--label", "  ")
    assert got.code == 2 and "'  ' is blank" in got.err and "--label" in got.err
    with seeded.store() as store:
        assert [c.label for c in store.checkpoints(seeded.cid)] == [seeded.label]


@pytest.mark.parametrize(
    ("flag", "limit", "value"),
    [("--label", 200, "x" * 201), ("--git-hash", 64, "a" * 65), ("--git-hash", 64, "")],
)
def test_checkpoint_text_out_of_bounds_is_refused_in_the_flags_name(
    seeded: Seeded, flag: str, limit: int, value: str
) -> None:
    """The library's check named its parameter (``git_hash must be ...``) to a CLI user."""
    got = run("--db", seeded.db, "checkpoint", seeded.cid, flag, value)
    assert got.code == 2 and f"'{flag}'" in got.err and f"1 to {limit} characters" in got.err
    assert "_" not in got.err.split("Error:")[1]
    with seeded.store() as store:
        assert [c.label for c in store.checkpoints(seeded.cid)] == [seeded.label]


def test_checkpoint_text_at_its_limits_is_kept(seeded: Seeded) -> None:
    got = run(
        "--db", seeded.db, "checkpoint", seeded.cid, "--label", "x" * 200, "--git-hash", "a" * 64
    )
    assert got.code == 0, got.err
    with seeded.store() as store:
        newest = store.checkpoints(seeded.cid)[-1]
    assert (newest.label, newest.git_hash) == ("x" * 200, "a" * 64)


def test_show_counts_only_the_stored_messages_a_range_hides(tmp_path: Path) -> None:
    """A Cline task imported without its model history has ranges over messages it never
    held: ``show`` said "messages 2-17 (16) hidden" where the audit says 0 messages."""
    from contextstore.core.rows import RangeRow

    db = str(tmp_path / "ui-only.db")
    with ContextStore.open(db) as store:
        conv = store.create_conversation()
        store.import_timeline(conv.id, [RangeRow(ts=conv.created_ts + 1, end=17)])
    shown = run("--db", db, "show", conv.id)
    assert shown.code == 0
    assert "messages 2-17 hidden by truncation (0 of them stored)" in shown.out
    assert "(16)" not in shown.out
    audit = run("--db", db, "audit", conv.id, "--json").json()
    assert audit["truncations"][0]["messages_hidden"] == 0


@pytest.mark.parametrize(
    ("moment", "code", "message"),
    [
        (
            "no-such-label",
            3,
            "has no checkpoint labelled 'no-such-label' (labels: 'after-reading')",
        ),
        ("2026-13-45", 2, "Invalid value for '--as-of'"),
        ("-5", 2, "outside 0..2**53 milliseconds"),
        ("2026-12-01T10:15+99:00", 2, "its UTC offset is not within a day"),
        ("0001-01-01", 2, "is before 1970 or too far in the future"),
        ("", 2, "the moment is empty; pass a checkpoint label"),
        # Full-width digits are not milliseconds (int() read "\uff12\uff10" as 20): a label.
        ("\uff12\uff10\uff12\uff16", 3, "has no checkpoint labelled '\uff12\uff10\uff12\uff16'"),
        ("\uff12\uff10\uff12\uff16-01-01", 3, "has no checkpoint labelled"),
    ],
)
def test_show_as_of_mistakes(seeded: Seeded, moment: str, code: int, message: str) -> None:
    shown = run("--db", seeded.db, "show", seeded.cid, "--as-of", moment)
    assert shown.code == code and message in shown.err and "Traceback" not in shown.err
    assert "timedelta" not in shown.err and "year 0" not in shown.err
    assert shown.err.count("pass a checkpoint label") <= 1


def test_render_is_a_hidden_alias_of_show(seeded: Seeded) -> None:
    assert (
        run("--db", seeded.db, "render", seeded.cid).out
        == run("--db", seeded.db, "show", seeded.cid).out
    )
    assert " render " not in run("--help").out


def test_stored_text_is_printed_verbatim_never_as_markup(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "[bold]not bold[/bold] [REDACTED:github_token]")
    assert "[bold]not bold[/bold] [REDACTED:github_token]" in run("--db", db, "show", cid).out


# -- checkpoints, rollback, restore, fork, delete -------------------------------------------


def test_checkpoint_prints_it_and_checkpoints_lists_it(seeded: Seeded) -> None:
    made = run("--db", seeded.db, "checkpoint", seeded.cid, "--label", "v2", "--note", "n")
    assert made.code == 0
    assert re.fullmatch(rf"checkpoint \d+ 'v2' at {ISO} \(ts \d+\)\n", made.out)
    doc = run("--db", seeded.db, "checkpoint", seeded.cid, "--git-hash", "abc123", "--json").json()
    assert set(doc) == CHECKPOINT_FIELDS and doc["git_hash"] == "abc123" and doc["label"] is None
    listed = run("--db", seeded.db, "checkpoints", seeded.cid, "--json").json()
    assert [c["label"] for c in listed] == ["after-reading", "v2", None]
    assert all(set(c) == CHECKPOINT_FIELDS for c in listed)
    table = run("--db", seeded.db, "checkpoints", seeded.cid)
    assert table.out.split()[:6] == ["id", "time", "ts", "label", "git", "note"]


def test_rollback_dry_run_prints_per_table_and_changes_nothing(seeded: Seeded) -> None:
    before = counts(seeded)
    dry = run("--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label, "--dry-run")
    assert dry.code == 0 and "dry run: nothing was changed" in dry.out
    assert re.search(r"messages\s+3\n", dry.out) and re.search(r"api_requests\s+1\n", dry.out)
    assert counts(seeded) == before
    doc = run(
        "--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label, "--dry-run", "--json"
    )
    assert set(doc.json()) == ROLLBACK_FIELDS
    assert doc.json()["dry_run"] is True and doc.json()["removed"]["messages"] == 3


def test_rollback_off_a_terminal_without_yes_is_refused(seeded: Seeded) -> None:
    before = counts(seeded)
    refused = run("--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label)
    assert refused.code == 2
    assert "pass --yes" in refused.err and refused.err.count("\n") == 1
    assert counts(seeded) == before


def test_rollback_asks_on_a_terminal(seeded: Seeded, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(terminal, "interactive", lambda: True)
    before = counts(seeded)
    declined = run("--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label, input="n\n")
    assert declined.code == 1
    assert "Remove 9 rows (3 messages, 4 blocks, 1 api_requests, 1 processor_runs)" in declined.err
    assert counts(seeded) == before
    accepted = run("--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label, input="y\n")
    assert accepted.code == 0 and counts(seeded)["messages"] == 5


@pytest.mark.parametrize("purge", [False, True])
def test_rows_written_while_the_rollback_question_waits_are_not_removed_unasked(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch, purge: bool
) -> None:
    """The agent appends while the person reads "Remove 9 rows ...?": the yes was for those
    9, so nothing is rolled back (exit 7, run it again). Until 2026-12-05 the rollback removed
    the new rows too, unasked, and with --purge for good."""
    monkeypatch.setattr(terminal, "interactive", lambda: True)
    asked = terminal.confirm

    def agent_writes_meanwhile(question: str) -> bool:
        with seeded.store() as agent:
            agent.append(seeded.cid, "assistant", "written while the question waited")
        return asked(question)

    monkeypatch.setattr(terminal, "confirm", agent_writes_meanwhile)
    before = counts(seeded)
    flags = ["--purge"] if purge else []
    refused = run(
        "--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label, *flags, input="y\n"
    )
    assert refused.code == 7, refused.err
    assert "Remove 9 rows" in refused.err
    assert "would remove 11 rows, not the 9 you confirmed; nothing was rolled back" in refused.err
    written = {"messages": before["messages"] + 1, "blocks": before["blocks"] + 1}
    assert counts(seeded) == {**before, **written}
    monkeypatch.setattr(terminal, "confirm", asked)
    again = run(
        "--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label, *flags, input="y\n"
    )
    assert again.code == 0 and "Remove 11 rows" in again.err
    assert counts(seeded)["messages"] == 5


@pytest.mark.parametrize("command", ["rollback", "delete"])
def test_the_end_of_the_input_at_a_question_is_a_no(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """Ctrl-D at the confirmation (no line at all) ended in an internal error (EOFError,
    exit 70); it declines, as "n" does."""
    monkeypatch.setattr(terminal, "interactive", lambda: True)
    before = counts(seeded)
    target = ["--to", seeded.label] if command == "rollback" else []
    declined = run("--db", seeded.db, command, seeded.cid, *target, input="")
    assert declined.code == 1, declined.err
    assert declined.err.rstrip().endswith("cancelled; nothing was changed.")
    assert counts(seeded) == before


def test_rollback_with_yes_removes_reports_and_names_the_undo(seeded: Seeded) -> None:
    done = run("--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label, "--yes")
    assert done.code == 0 and re.search(r"rows removed", done.out)
    assert re.search(
        rf"undo with: contextstore --db {seeded.db} restore {seeded.cid} \d+", done.err
    )
    assert counts(seeded)["messages"] == 5
    again = run("--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label, "--yes")
    assert again.code == 0 and "no rollback ran" in again.err
    quiet = run("--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label, "--yes", "--json")
    assert json.loads(quiet.out) | {"cutoff_ts": 0} == {
        "conversation_id": seeded.cid,
        "cutoff_ts": 0,
        "dry_run": False,
        "rollback_id": None,
        "archived": False,
        "removed": dict.fromkeys(json.loads(quiet.out)["removed"], 0),
        "total_removed": 0,
    }


def test_rollback_to_a_moment_before_everything_previews_the_whole_conversation(
    seeded: Seeded,
) -> None:
    dry = run("--db", seeded.db, "rollback", seeded.cid, "--to", "0", "--dry-run", "--json")
    assert dry.json()["removed"]["messages"] == 8


@pytest.mark.parametrize(
    "command", [("rollback", "--to"), ("fork", "--at"), ("show", "--as-of"), ("render", "--as-of")]
)
def test_a_checkpoint_id_passed_as_the_moment_is_refused_naming_its_label(
    seeded: Seeded, command: tuple[str, str]
) -> None:
    with seeded.store() as store:
        (first, *_) = store.checkpoints(seeded.cid)
    before = counts(seeded)
    refused = run("--db", seeded.db, command[0], seeded.cid, command[1], str(first.id))
    assert refused.code == 2 and "Traceback" not in refused.err
    assert f"not as checkpoint {first.id}; pass {command[1]} {first.label}" in refused.err
    assert counts(seeded) == before
    with seeded.store() as store:
        assert len(store.list_conversations()) == 1
    other = run("--db", seeded.db, "rollback", seeded.cid, "--to", str(first.id + 1), "--dry-run")
    assert other.code == 0  # no checkpoint has that id: milliseconds, as documented


@pytest.mark.parametrize("label", ["2026-12-01", "12345", "12345 ms"])
def test_a_label_that_reads_as_a_moment_names_its_checkpoint(seeded: Seeded, label: str) -> None:
    with seeded.store() as store:
        labelled = store.checkpoint(seeded.cid, label)
        store.append(seeded.cid, "user", "after the label")
    dry = run("--db", seeded.db, "rollback", seeded.cid, "--to", label, "--dry-run", "--json")
    assert dry.json()["cutoff_ts"] == labelled.ts and dry.json()["removed"]["messages"] == 1
    shown = run("--db", seeded.db, "show", seeded.cid, "--as-of", label, "--json").json()
    assert shown["as_of"] == labelled.ts
    forked = run("--db", seeded.db, "fork", seeded.cid, "--at", label, "--json").json()
    assert forked["forked_at_ts"] == labelled.ts
    # In another conversation, without that label, the same text is a moment again.
    with seeded.store() as store:
        other = store.create_conversation().id
        store.append(other, "user", "x")
    again = run("--db", seeded.db, "rollback", other, "--to", label, "--dry-run", "--json")
    assert again.json()["cutoff_ts"] != labelled.ts


def test_restore_puts_the_rows_back_once(seeded: Seeded) -> None:
    before = counts(seeded)
    done = run("--db", seeded.db, "rollback", seeded.cid, "--to", seeded.label, "-y", "--json")
    rollback_id = done.json()["rollback_id"]
    restored = run("--db", seeded.db, "restore", seeded.cid, str(rollback_id), "--json").json()
    assert set(restored) == {"conversation_id", "rollback_id", "ts", "restored", "total_restored"}
    assert restored["total_restored"] == done.json()["total_removed"]
    after = counts(seeded)
    assert {k: after[k] for k in ("messages", "blocks", "api_requests")} == {
        k: before[k] for k in ("messages", "blocks", "api_requests")
    }
    twice = run("--db", seeded.db, "restore", seeded.cid, str(rollback_id))
    assert twice.code == 2 and "already restored" in twice.err
    missing = run("--db", seeded.db, "restore", seeded.cid, "999")
    assert missing.code == 3 and "no rollback 999" in missing.err
    assert f"'contextstore --db {seeded.db} audit {seeded.cid}'" in missing.err


def test_fork_prints_only_the_new_id(seeded: Seeded) -> None:
    forked = run("--db", seeded.db, "fork", seeded.cid, "--at", seeded.label)
    assert forked.code == 0 and re.fullmatch(r"[0-9a-f]{32}\n", forked.out)
    new_id = forked.out.strip()
    with ContextStore.open(seeded.db) as store:
        assert len(store.messages(new_id)) == 5
        assert store.get_conversation(new_id).parent_id == seeded.cid
    doc = run("--db", seeded.db, "fork", seeded.cid, "--title", "copy", "--json").json()
    assert set(doc) == CONVERSATION_FIELDS and doc["title"] == "copy"
    unknown = run("--db", seeded.db, "fork", seeded.cid, "--at", "nope")
    assert unknown.code == 3 and "pass --at an existing label" in unknown.err


def test_delete_refuses_off_a_terminal_then_deletes_with_yes(seeded: Seeded) -> None:
    refused = run("--db", seeded.db, "delete", seeded.cid)
    assert refused.code == 2 and "--yes" in refused.err
    done = run("--db", seeded.db, "delete", seeded.cid, "--yes", "--json")
    assert done.code == 0 and set(done.json()) == {"conversation_id", "removed"}
    assert done.json()["removed"]["messages"] == 8
    gone = run("--db", seeded.db, "delete", seeded.cid, "--yes")
    assert gone.code == 3
    assert f"list them with 'contextstore --db {seeded.db} conversations'" in gone.err


# -- requests ---------------------------------------------------------------------------


def test_requests_table_and_json(seeded: Seeded) -> None:
    table = run("--db", seeded.db, "requests", seeded.cid)
    assert table.code == 0 and table.out.split()[:4] == ["id", "time", "model", "in"]
    listed = run("--db", seeded.db, "requests", seeded.cid, "--json").json()
    assert [r["id"] for r in listed] == [seeded.recorded_id, seeded.prepared_id]
    assert all(set(r) == REQUEST_FIELDS for r in listed)
    assert listed[1]["total_tokens"] == 4_200 and listed[1]["payload_sha256"]


def test_request_fields_json_and_the_verified_payload(seeded: Seeded) -> None:
    one = run("--db", seeded.db, "request", seeded.cid, str(seeded.prepared_id))
    assert one.code == 0 and re.search(r"^total tokens\s+4200$", one.out, re.M)
    doc = run("--db", seeded.db, "request", seeded.cid, str(seeded.prepared_id), "--json").json()
    assert set(doc) == REQUEST_FIELDS
    payload = run("--db", seeded.db, "request", seeded.cid, str(seeded.prepared_id), "--payload")
    with ContextStore.open(seeded.db) as store:
        assert payload.json() == store.request_payload(seeded.cid, seeded.prepared_id)
    assert payload.json()["system"] == "Be careful."


@pytest.mark.parametrize(
    ("which", "flags", "code", "message"),
    [
        (
            "999",
            (),
            3,
            "has no request 999; list them with 'contextstore --db {db} requests {cid}'",
        ),
        (
            "999",
            ("--payload",),
            3,
            "has no request 999; list them with 'contextstore --db {db} requests {cid}'",
        ),
        ("recorded", ("--payload",), 3, "only requests prepared through contextstore"),
    ],
)
def test_request_mistakes(
    seeded: Seeded, which: str, flags: tuple[str, ...], code: int, message: str
) -> None:
    number = str(seeded.recorded_id) if which == "recorded" else which
    got = run("--db", seeded.db, "request", seeded.cid, number, *flags)
    assert got.code == code and message.format(cid=seeded.cid, db=seeded.db) in got.err
    assert "prepare_request" not in got.err


# -- audit, sql, search, report, datasette-metadata, check, migrate ------------------------


def test_audit_table_sections_and_json(seeded: Seeded) -> None:
    table = run("--db", seeded.db, "audit", seeded.cid)
    assert table.code == 0
    for section in (
        "requests (tokens against the window)",
        "truncations: none",
        "files read",
        "masked secrets",
        "failed tool calls",
        "checkpoints",
        "rollbacks: none",
    ):
        assert section in table.out
    assert re.search(r"src/report\.py\s+read_file\s+1", table.out)
    doc = run("--db", seeded.db, "audit", seeded.cid, "--json").json()
    assert set(doc) == {
        "conversation",
        "context_window",
        "max_allowed_size",
        "totals",
        "requests",
        "truncations",
        "file_reads",
        "dedup_savings",
        "masked_secrets",
        "failed_tool_calls",
        "checkpoints",
        "rollbacks",
    }
    assert doc["totals"]["requests"] == 2 and doc["totals"]["cost"] == pytest.approx(0.03)
    assert doc["requests"][1]["cumulative_tokens"] == 3_100 + 4_200
    assert doc["failed_tool_calls"][0]["tool_name"] == "write_to_file"
    assert doc["max_allowed_size"] == 160_000.0


def test_sql_prints_a_table_json_and_csv(seeded: Seeded) -> None:
    query = "SELECT role, COUNT(*) AS n FROM messages GROUP BY role ORDER BY role"
    table = run("--db", seeded.db, "sql", query)
    assert table.code == 0 and table.out.split()[:2] == ["role", "n"]
    assert "2 rows" in table.err
    assert run("--db", seeded.db, "sql", query, "--json").json() == [
        {"role": "assistant", "n": 3},
        {"role": "user", "n": 5},
    ]
    rows = list(csv.reader(io.StringIO(run("--db", seeded.db, "sql", query, "--csv").out)))
    assert rows == [["role", "n"], ["assistant", "3"], ["user", "5"]]


@pytest.mark.parametrize(
    ("query", "code", "message"),
    [
        ("DELETE FROM messages", 6, "read-only"),
        ("DROP VIEW audit_requests", 6, "read-only"),
        ("SELECT 1; DELETE FROM messages", 2, "one statement"),
        ("SELECT nope FROM messages", 2, "no such column"),
        ("", 2, "the query is empty"),
        ("  ; ;\n", 2, "the query is empty"),  # it ran nothing and exited 0
    ],
)
def test_sql_refusals(seeded: Seeded, query: str, code: int, message: str) -> None:
    before = dump(Path(seeded.db))
    got = run("--db", seeded.db, "sql", query)
    assert got.code == code and message in got.err and got.err.count("\n") == 1
    assert dump(Path(seeded.db)) == before


def test_sql_table_spells_values_as_csv_and_json_do(seeded: Seeded) -> None:
    """The table showed Python's spellings, ``b'\\x00\\xff'`` and ``inf``, which --csv and
    --json had already left."""
    query = "SELECT x'00ff' AS b, 1e999 AS big, -1e999 AS small"
    table = run("--db", seeded.db, "sql", query)
    assert table.code == 0, table.err
    cells = table.out.splitlines()[2].split("   ")
    assert cells == ['{"$base64": true, "encoded": "AP8="}', "Infinity", "-Infinity"]
    csv_row = run("--db", seeded.db, "sql", query, "--csv").out.splitlines()[1]
    assert csv_row == '"{""$base64"": true, ""encoded"": ""AP8=""}",Infinity,-Infinity'


def test_sql_json_output_is_strict_json_even_for_infinite_numbers(seeded: Seeded) -> None:
    got = run("--db", seeded.db, "sql", "SELECT 1e999 AS big, -1e999 AS small, 1.5 AS x", "--json")
    assert got.code == 0, got.err

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    assert json.loads(got.out, parse_constant=refuse) == [
        {"big": "Infinity", "small": "-Infinity", "x": 1.5}
    ]


def test_sql_json_holds_postgresqls_numerics_no_float_can(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's ``numeric`` comes back as Decimal: ``'NaN'::numeric`` or ``1e400``
    ended ``sql --json`` with an internal error (exit 70)."""
    from decimal import Decimal

    from contextstore.core.audit_records import QueryResult

    values = (Decimal("NaN"), Decimal("-Infinity"), Decimal("1e400"), Decimal("2.5"))
    monkeypatch.setattr(
        ContextStore, "query", lambda self, sql: QueryResult(["n", "i", "big", "d"], [values])
    )
    got = run("--db", seeded.db, "sql", "SELECT 'NaN'::numeric ...", "--json")
    assert got.code == 0, got.err
    assert got.json() == [{"n": "NaN", "i": "-Infinity", "big": "1E+400", "d": 2.5}]


def test_sql_csv_holds_what_json_holds_not_pythons_spellings(
    seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes were written as ``b'\\x00\\xff'`` and an infinite float as ``inf``."""
    query = "SELECT x'00ff' AS b, 1e999 AS i, -1e999 AS ni, 0.5 AS h, json_object('a', 1) AS j"
    got = run("--db", seeded.db, "sql", query, "--csv")
    assert got.code == 0, got.err
    header, row = list(csv.reader(io.StringIO(got.out)))
    assert header == ["b", "i", "ni", "h", "j"]
    assert json.loads(row[0]) == {"$base64": True, "encoded": "AP8="}
    assert row[1:] == ["Infinity", "-Infinity", "0.5", '{"a":1}']
    from decimal import Decimal

    from contextstore.core.audit_records import QueryResult

    digits = Decimal("12345678901234567890.123456789")
    values = (Decimal("NaN"), digits)
    monkeypatch.setattr(ContextStore, "query", lambda self, sql: QueryResult(["n", "d"], [values]))
    got = run("--db", seeded.db, "sql", "SELECT ... ::numeric", "--csv")
    assert list(csv.reader(io.StringIO(got.out)))[1] == ["NaN", str(digits)]


def test_sql_json_keeps_every_column_of_a_shared_name(seeded: Seeded) -> None:
    query = "SELECT 1 AS id, 2 AS id, 3 AS id_2, 4 AS id"
    got = run("--db", seeded.db, "sql", query, "--json")
    assert got.json() == [{"id": 1, "id_3": 2, "id_2": 3, "id_4": 4}]


def test_sql_json_and_csv_together_is_a_usage_error(seeded: Seeded) -> None:
    got = run("--db", seeded.db, "sql", "SELECT 1", "--json", "--csv")
    assert got.code == 2 and "--json" in got.err and "--csv" in got.err


def test_search_finds_text_with_a_snippet(seeded: Seeded) -> None:
    table = run("--db", seeded.db, "search", "header row")
    assert table.code == 0 and "drops the header row" in table.out
    hits = run("--db", seeded.db, "search", "HEADER ROW", "--json").json()
    assert set(hits[0]) == {
        "conversation_id",
        "title",
        "message_idx",
        "block_idx",
        "role",
        "ts",
        "type",
        "snippet",
    }
    assert hits[0]["message_idx"] == 0 and "header row" in hits[0]["snippet"]
    by_input = run("--db", seeded.db, "search", "tests/test_report.py", "--json").json()
    assert {h["type"] for h in by_input} >= {"tool_use"}
    limited = run("--db", seeded.db, "search", "report", "--limit", "1", "--json").json()
    assert len(limited) == 1
    empty = run("--db", seeded.db, "search", " ")
    assert empty.code == 2 and "search text is empty" in empty.err


def test_report_writes_one_self_contained_file(seeded: Seeded, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    made = run("--db", seeded.db, "report", seeded.cid, "-o", str(out))
    assert made.code == 0 and made.out.strip() == str(out)
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and "<svg" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert f"({out.stat().st_size:,} bytes)" in made.err
    assert "hidden from the model by truncation" not in page  # no range in this conversation
    assert "cli test" in page and "as the model saw it at request" in page


def test_report_shows_what_the_view_sent_after_a_cut(tmp_path: Path) -> None:
    """After a cut, the first visible message showed the result of a hidden call as sent,
    and the ``result missing`` placeholder the model got in its place appeared nowhere."""
    db = str(tmp_path / "cut.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append_many(
            cid,
            [
                {"role": "user", "content": "task"},
                {"role": "assistant", "content": [_call("toolu_0")]},
                {"role": "user", "content": [_result("toolu_0", "first read")]},
                {"role": "assistant", "content": [_call("toolu_7")]},
                {"role": "user", "content": [_result("toolu_7", "HIDDEN CALL'S RESULT")]},
                {"role": "assistant", "content": "done"},
            ],
        )
        store.set_deleted_range(cid, 3)
        store.record_request(cid, tokens_in=10, tokens_out=1)
    out = tmp_path / "r.html"
    assert run("--db", db, "report", cid, "-o", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    article = page[page.index('id="m4"') : page.index('id="m5"')]
    assert "1 block not sent, 1 added by the view" in article
    placeholder = article.index("result missing")
    dropped = article.index('<details class="dropped')
    assert placeholder < dropped < article.index("HIDDEN CALL&#x27;S RESULT")
    assert "tool result for <bdi>toolu_0</bdi>, added by the view" in article


def test_report_shows_every_item_of_a_tool_result_held_as_a_list(tmp_path: Path) -> None:
    """A tool result of several items (Cline's browser_action: its text, then a
    screenshot) showed its first text only; one holding only a screenshot showed "tool_result
    block", without whose result it was or the image the model saw."""
    from html.parser import HTMLParser

    png = "iVBORw0KGgo="
    screenshot = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": png},
    }
    db = str(tmp_path / "items.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append_many(
            cid,
            [
                {"role": "user", "content": "task"},
                {"role": "assistant", "content": [_call("b1")]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "b1",
                 "content": [{"type": "text", "text": "first text"},
                             {"type": "text", "text": "second <text>"}, screenshot]}]},
                {"role": "assistant", "content": [_call("b2")]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "b2", "content": [screenshot]}]},
                {"role": "assistant", "content": "done"},
            ],
        )  # fmt: skip
        store.add_context_update(cid, 2, 0, "first, rewritten")
        store.record_request(cid, tokens_in=10, tokens_out=1)
    out = tmp_path / "r.html"
    assert run("--db", db, "report", cid, "-o", str(out)).code == 0
    page = out.read_text(encoding="utf-8")

    class Article(HTMLParser):
        """The texts and image sources of one message's article."""

        def __init__(self) -> None:
            super().__init__()
            self.texts: list[str] = []
            self.images: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "img":
                self.images.append(dict(attrs)["src"] or "")

        def handle_data(self, data: str) -> None:
            self.texts.append(data)

    def article(index: int) -> Article:
        parsed = Article()
        parsed.feed(page[page.index(f'id="m{index}"') : page.index(f'id="m{index + 1}"')])
        return parsed

    several, only_image = article(2), article(4)
    assert [t for t in several.texts if t.startswith(("first", "second"))] == [
        "first text",
        "first, rewritten",
        "second <text>",
    ]
    assert several.images == only_image.images == [f"data:image/png;base64,{png}"]
    assert "tool result for b2" in "".join(only_image.texts)
    assert "tool_result block" not in page


def _call(tool_id: str) -> dict[str, object]:
    return {"type": "tool_use", "id": tool_id, "name": "read_file", "input": {"path": "a.py"}}


def _result(tool_id: str, content: str) -> dict[str, object]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content}


def test_report_to_a_dash_writes_the_page_to_stdout(
    seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It wrote a file named "-" in the working directory.
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    made = run("--db", seeded.db, "report", seeded.cid, "-o", "-")
    assert made.code == 0 and made.out.startswith("<!doctype html>") and "<svg" in made.out
    assert f"({len(made.out.encode('utf-8')):,} bytes)" in made.err
    assert list(here.iterdir()) == []


def test_report_without_pygal_names_the_extra(
    seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from contextstore.cli import report_chart

    monkeypatch.setattr(report_chart, "available", lambda: False)
    got = run("--db", seeded.db, "report", seeded.cid, "-o", str(tmp_path / "r.html"))
    assert got.code == 1 and 'pip install "contextstore[report]"' in got.err
    assert not (tmp_path / "r.html").exists()


def test_datasette_metadata_is_keyed_by_the_database_name(seeded: Seeded) -> None:
    default = run("--db", seeded.db, "datasette-metadata").json()
    assert list(default["databases"]) == ["cli"]
    named = run("--db", seeded.db, "datasette-metadata", "--name", "agent").json()
    assert list(named["databases"]) == ["agent"]
    assert "audit_requests" in named["databases"]["agent"]["tables"]


def test_check_and_migrate(seeded: Seeded) -> None:
    assert run("--db", seeded.db, "check", seeded.cid).out == f"{seeded.cid}: ok\n"
    answer = run("--db", seeded.db, "check", seeded.cid, "--json").json()
    assert answer["conversation_id"] == seeded.cid and answer["ok"] is True
    assert answer["problems"] == [] and answer["conversations_checked"] == 1
    assert run("--db", seeded.db, "migrate").out.endswith("schema is up to date\n")


def test_audit_marks_a_cut_tool_input_and_error_with_an_ellipsis(tmp_path: Path) -> None:
    """The failed-tool-calls table cut a call's input at 60 characters and its error at 80
    with nothing to say so: ``{"description":"Check if gemini-cli is installed`` looked
    whole."""
    db = str(tmp_path / "failed.db")
    command = "pacman -Q @google/gemini-cli || pacman -Qs gemini-cli && echo done"
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "check")
        store.append(
            cid,
            "assistant",
            [{"type": "tool_use", "id": "t1", "name": "run", "input": {"command": command}}],
        )
        error = "[Operation Cancelled] " + "the user cancelled the operation; " * 5
        store.append(
            cid,
            "user",
            [{"type": "tool_result", "tool_use_id": "t1", "content": error, "is_error": True}],
        )
    shown = run("--db", db, "audit", cid).out
    row = next(line for line in shown.splitlines() if line.strip().startswith("2 "))
    assert '{"command": "pacman -Q @google/gemini-cli || pacman -Qs gemi...' in row or (
        '{"command":"pacman -Q @google/gemini-cli || pacman -Qs gemin...' in row
    )
    assert row.rstrip().endswith("...")


def test_audit_json_costs_are_numbers_of_one_type_without_requests(tmp_path: Path) -> None:
    """``totals.cost`` was the integer 0 for a conversation without requests, a float
    (``0.0275``) otherwise."""
    db = str(tmp_path / "none.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
    totals = run("--db", db, "audit", cid, "--json").json()["totals"]
    assert isinstance(totals["cost"], float) and totals["cost"] == 0.0
    assert isinstance(totals["peak_percent_of_window"], float)


def test_report_of_a_conversation_without_requests(tmp_path: Path) -> None:
    db = str(tmp_path / "empty.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation(title="nothing yet").id
    out = tmp_path / "empty.html"
    assert run("--db", db, "report", cid, "-o", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    assert "no requests recorded yet" in page and "no messages" in page


def test_report_into_a_missing_directory_is_a_usage_error(seeded: Seeded, tmp_path: Path) -> None:
    got = run("--db", seeded.db, "report", seeded.cid, "-o", str(tmp_path / "no" / "r.html"))
    assert got.code == 2 and "cannot write" in got.err and "--output" in got.err
    assert "Traceback" not in got.err


def test_report_shows_control_characters_as_symbols(tmp_path: Path) -> None:
    """A browser drops a NUL and draws an ESC as nothing, so stored text looked as if it
    held neither; the page shows them as the terminal does (``␀``, ``␛``)."""
    db = str(tmp_path / "c.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation(title="t\x1b]0;owned\x07").id
        store.append(cid, "user", "nul\x00here \x1b[2J cleared\r\nnext\tcolumn \x9b")
    out = tmp_path / "c.html"
    assert run("--db", db, "report", cid, "-o", str(out)).code == 0
    page = out.read_bytes().decode("utf-8")
    assert "nul\u2400here \u241b[2J cleared\r\nnext\tcolumn \\x9b" in page
    assert "<h1>t\u241b]0;owned\u2407</h1>" in page
    assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", page)


def test_report_to_stdout_is_the_utf8_page_whatever_the_output_encoding(
    tmp_path: Path,
) -> None:
    """``report -o -`` under a legacy locale wrote ``\\U0001f600`` into the page's text
    for every character the stream had no room for, in a page that says it is UTF-8."""
    import os
    import subprocess
    import sys

    db = str(tmp_path / "e.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation(title="我要 😀 café").id
        store.append(cid, "user", "naïve 😀")
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONIOENCODING": "ascii"}
    child = subprocess.run(
        [sys.executable, "-m", "contextstore", "--db", db, "report", cid, "-o", "-"],
        capture_output=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    assert child.returncode == 0, child.stderr
    page = child.stdout.decode("utf-8")
    assert "<h1>我要 😀 café</h1>" in page and "naïve 😀" in page
    assert "\\u" not in page and "\\U" not in page
    assert f"({len(child.stdout):,} bytes)" in child.stderr.decode("ascii")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_report_that_does_not_fit_is_exit_8(seeded: Seeded) -> None:
    got = run("--db", seeded.db, "report", seeded.cid, "-o", "/dev/full")
    assert got.code == 8, got.err
    assert got.err.startswith("error: could not write the report: No space left on device")


def test_migrate_says_from_which_revision_it_upgraded(tmp_path: Path) -> None:
    from sqlalchemy import create_engine

    from contextstore.storage.migrate import HEAD_REVISION, downgrade

    db = tmp_path / "m.db"
    created = run("--db", str(db), "migrate")
    assert created.out == f"{db}: schema created at revision {HEAD_REVISION}\n"
    again = run("--db", str(db), "migrate", "--json")
    assert again.json() == {
        "location": str(db),
        "revision": HEAD_REVISION,
        "previous_revision": HEAD_REVISION,
        "upgraded": False,
    }
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "kept across the upgrade")
    engine = create_engine(f"sqlite:///{db}")
    try:
        downgrade(engine, is_sqlite=True, revision="0012")
    finally:
        engine.dispose()
    upgraded = run("--db", str(db), "migrate")
    assert upgraded.out == f"{db}: schema upgraded from revision 0012 to {HEAD_REVISION}\n"
    assert run("--db", str(db), "migrate", "--json").json()["previous_revision"] == HEAD_REVISION
    with ContextStore.open(db, auto_migrate=False) as store:
        assert store.revision_found == HEAD_REVISION
        assert store.messages(cid)[0]["content"] == "kept across the upgrade"


def test_migrate_on_postgresql_masks_the_password_it_prints() -> None:
    from sqlalchemy.engine import make_url

    with new_postgres_schema() as schema:
        base = make_url(POSTGRES_URL).set(password="hunter2")  # trust: not checked
        url = base.render_as_string(hide_password=False) + f"?options=-csearch_path%3D{schema}"
        created = run("--db", url, "migrate", "--json")
        assert created.code == 0, created.err
        assert "hunter2" not in created.out and ":***@" in created.out
        assert created.json()["previous_revision"] is None
        assert created.json()["upgraded"] is True
        again = run("--db", url, "migrate")
        assert "hunter2" not in again.out and again.out.endswith("schema is up to date\n")


@pytest.mark.parametrize("command", [["checkpoint", "cid", "--label", "a"], ["fork", "cid"]])
def test_commands_that_change_a_conversation_never_migrate_the_database(
    tmp_path: Path, command: list[str]
) -> None:
    import contextlib
    import sqlite3

    db = tmp_path / "stale.db"
    with contextlib.closing(sqlite3.connect(db)) as connection:
        connection.execute("PRAGMA user_version = 1")  # a database without the schema
    got = run("--db", str(db), *command)
    assert got.code == 4 and f"'contextstore --db {db} migrate'" in got.err
    with contextlib.closing(sqlite3.connect(db)) as connection:
        assert connection.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)


def test_hints_quote_an_id_for_the_shell(tmp_path: Path) -> None:
    import shlex

    db = str(tmp_path / "q.db")
    odd = "conv with space's"
    with ContextStore.open(db) as store:
        store.create_conversation(id=odd)
        store.append(odd, "user", "hello")
        store.checkpoint(odd, "cp")
        store.append(odd, "assistant", "hi")
    missing = run("--db", db, "show", odd, "--as-of", "nolabel")
    assert missing.code == 3
    assert f"'contextstore --db {db} checkpoints {shlex.quote(odd)}'" in missing.err
    done = run("--db", db, "rollback", odd, "--to", "cp", "--yes")
    hint = re.search(r"undo with: (.*)$", done.err, re.M)
    assert hint and shlex.split(hint.group(1)) == ["contextstore", "--db", db, "restore", odd, "1"]


def test_a_request_of_a_conversation_that_is_not_there_says_so(seeded: Seeded) -> None:
    got = run("--db", seeded.db, "request", "nope", "3", "--payload")
    assert got.code == 3 and got.err.startswith("error: no conversation has id 'nope'")


def test_a_request_whose_usage_never_came_shows_no_total(tmp_path: Path) -> None:
    db = str(tmp_path / "u.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "hello")
        prepared = store.prepare_request(cid, format="anthropic")
    shown = run("--db", db, "request", cid, str(prepared.request_id))
    assert re.search(r"total tokens\s+\(no usage recorded\)", shown.out)
    listed = run("--db", db, "requests", cid)
    row = next(line for line in listed.out.splitlines() if line.strip().startswith("1 "))
    assert row.split()[2:] == ["anthropic"]  # after the id and the time: no 0 anywhere


def test_the_reports_request_table_leaves_a_missing_usage_blank(tmp_path: Path) -> None:
    """As the text tables do: a request whose usage never came was listed with 0 tokens and
    0.0 % of the window in the report's audit tables."""
    db = str(tmp_path / "u.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "hello")
        prepared = store.prepare_request(cid, format="anthropic")
    out = tmp_path / "u.html"
    assert run("--db", db, "report", cid, "-o", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    table = page[page.index("<h3>Requests</h3>") : page.index("<h3>Files read</h3>")]
    row = re.search(rf'<tr><td class="num">{prepared.request_id}</td>.*?</tr>', table)
    assert row is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0))
    assert cells[2:4] == ["", ""], cells


def test_show_as_of_a_moment_a_later_rollback_removed_says_so(tmp_path: Path) -> None:
    db = str(tmp_path / "r.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation().id
        store.append(cid, "user", "kept")
        store.checkpoint(cid, "cp")
        store.append(cid, "assistant", "removed later")
        seen = store.get_conversation(cid).last_ts
        store.append(cid, "user", "also removed")
        rollback = store.rollback(cid, "cp").rollback_id
    at_the_moment = run("--db", db, "show", cid, "--as-of", str(seen), "--format", "stored")
    assert at_the_moment.code == 0 and "removed later" not in at_the_moment.out
    assert f"rollback {rollback} ran later" in at_the_moment.err
    assert f"'contextstore --db {db} restore {cid} {rollback}' puts them back" in at_the_moment.err
    before_the_cutoff = run("--db", db, "show", cid, "--as-of", "cp")
    assert before_the_cutoff.code == 0 and "ran later" not in before_the_cutoff.err


def test_audit_and_report_judge_each_request_against_its_own_window(tmp_path: Path) -> None:
    """After a switch to a smaller model, the peak share of the window is the largest share
    a request filled of the window it was sent with (75 %), not the peak total against
    the new window (150,000 of 128,000: 117 %); the chart's window line steps down."""
    from contextstore.cli.report_chart import steps

    db = str(tmp_path / "switch.db")
    with ContextStore.open(db) as store:
        cid = store.create_conversation(model_id="big", context_window=200_000).id
        store.append(
            cid, [{"role": "user", "content": "task"}, {"role": "assistant", "content": "a"}]
        )
        store.append(cid, "user", "go on")
        ctx = store.prepare_request(cid)
        store.record_request(cid, request_id=ctx.request_id, tokens_in=150_000, tokens_out=0)
        store.append(cid, [{"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}])
        store.set_conversation_model(cid, model_id="small", context_window=128_000)
        ctx = store.prepare_request(cid)
        store.record_request(cid, request_id=ctx.request_id, tokens_in=64_000, tokens_out=0)

    totals = run("--db", db, "audit", cid, "--json").json()["totals"]
    assert totals["peak_total_tokens"] == 150_000
    assert totals["peak_percent_of_window"] == pytest.approx(75.0)
    assert "peak 150,000 tokens, at most 75.0 % of the window" in run("--db", db, "audit", cid).out

    out = tmp_path / "switch.html"
    assert run("--db", db, "report", cid, "-o", str(out)).code == 0
    page = out.read_text(encoding="utf-8")
    assert "<b>75.0 %</b>of its window, at most" in page
    assert "each request against its own" in page
    assert steps([200_000, 200_000, 128_000]) == [
        (0.5, 200_000),
        (2.5, 200_000),
        (2.5, 128_000),
        (3.5, 128_000),
    ]
    assert steps([7.0]) == [(0.5, 7.0), (1.5, 7.0)]


def test_a_command_that_writes_is_refused_read_only_before_it_prints(tmp_path: Path) -> None:
    """``--read-only demo`` printed the store and its run number, then failed at its first
    write."""
    db = str(tmp_path / "d.db")
    assert run("--db", db, "migrate").code == 0
    got = run("--read-only", "--db", db, "demo", "--crash-kills", "0")
    assert (got.code, got.out) == (6, "")
    assert got.err == "error: this store was opened read-only; drop --read-only to write.\n"


def test_fork_title_is_checked_as_the_flag(seeded: Seeded) -> None:
    """An empty --title was refused in the library's words (``title must be a non-empty
    string ... got ''``)."""
    got = run("--db", seeded.db, "fork", seeded.cid, "--title", "")
    assert got.code == 2
    assert "Invalid value for '--title': give 1 to 1000 characters (0 given)" in got.err


@pytest.mark.parametrize("query", ["VACUUM", "VACUUM INTO 'copy.db'", "ANALYZE"])
def test_sql_refuses_vacuum_as_a_write(
    seeded: Seeded, query: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """VACUUM ended with exit 2 ("cannot VACUUM from within a transaction"), other writes 6."""
    monkeypatch.chdir(tmp_path)
    before = dump(Path(seeded.db))
    got = run("--db", seeded.db, "sql", query)
    assert got.code == 6 and "queries are read-only" in got.err and got.err.count("\n") == 1
    assert dump(Path(seeded.db)) == before and not (tmp_path / "copy.db").exists()


def test_sql_on_postgresql_runs_no_program_on_the_server(tmp_path: Path) -> None:
    probe = Path(f"/tmp/contextstore-probe-{tmp_path.name}")
    query = f"DO $$BEGIN EXECUTE 'COPY (SELECT 1) TO PROGRAM ''touch {probe}'''; END$$"
    with new_postgres_schema() as schema:
        url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
        assert run("--db", url, "migrate").code == 0
        try:
            got = run("--db", url, "sql", query)
        finally:
            probe_existed = probe.exists()
            probe.unlink(missing_ok=True)
        assert got.code == 6 and "privileges that only read" in got.err, got.err
        assert got.err.count("\n") == 1 and not probe_existed
        views = run("--db", url, "sql", "SELECT COUNT(*) AS n FROM audit_requests", "--json")
        assert views.code == 0 and views.json() == [{"n": 0}]
