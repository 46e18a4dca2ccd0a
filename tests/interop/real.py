"""Where the real agents' files are (``../shared/real`` beside the repository), read in place.

Tests that use them skip when the folder is absent; nothing from it is ever copied into
the repository (tests copy into their own temporary folders when they must change a file).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore


def _real_folder() -> Path:
    """``../shared/real`` from the repository root; from a git worktree nested deeper, the
    nearest ``shared/real`` of an enclosing folder."""
    root = Path(__file__).resolve().parents[2]
    beside = root / ".." / "shared" / "real"
    if beside.is_dir():
        return beside
    for folder in root.parents:
        if (folder / "shared" / "real").is_dir():
            return folder / "shared" / "real"
    return beside


REAL = _real_folder()
CLINE = REAL / "cline"
GEMINI = REAL / "gemini"


def cline_tasks() -> list[Path]:
    """Every real Cline task folder (empty when the folder is absent)."""
    return sorted(p for p in CLINE.iterdir() if p.is_dir()) if CLINE.is_dir() else []


def cline_tasks_with_history() -> list[Path]:
    """The real tasks that have their API history (the others hold UI messages only)."""
    return [p for p in cline_tasks() if (p / "api_conversation_history.json").is_file()]


def gemini_files() -> list[Path]:
    """Every real Gemini CLI file."""
    return sorted(GEMINI.rglob("*.json")) if GEMINI.is_dir() else []


def need(path: Path) -> Path:
    """``path``, or skip the test when the real files are not there."""
    if not path.exists():
        pytest.skip(f"the real agents' files are not at {REAL}")
    return path


def load(path: Path) -> Any:
    """A JSON file's value."""
    return json.loads(path.read_text(encoding="utf-8"))


def ids(paths: list[Path]) -> list[str]:
    """Test ids: the folder or file names."""
    return [p.name for p in paths]


PLACEHOLDER = pytest.param(
    None, marks=pytest.mark.skip(reason=f"the real agents' files are not at {REAL}")
)
"""A parameter standing in for the real files when they are absent (the test skips)."""


def params(paths: list[Path]) -> list[Any]:
    """``paths`` as test parameters, or one skipped placeholder when there are none."""
    return [pytest.param(p, id=p.name) for p in paths] or [PLACEHOLDER]


def earlier_task(task: Path, into: Path, ui_count: int) -> Path:
    """The task as Cline's files were earlier: its first ``ui_count`` UI messages, and the
    API messages those had seen (Cline rewrites each file whole, so an older copy of the
    folder is a prefix of each)."""
    ui = load(task / "ui_messages.json")[:ui_count]
    into.mkdir(parents=True)
    (into / "ui_messages.json").write_text(json.dumps(ui))
    api_file = task / "api_conversation_history.json"
    if api_file.exists():
        indices = [m["conversationHistoryIndex"] for m in ui]
        (into / "api_conversation_history.json").write_text(
            json.dumps(load(api_file)[: max(indices) + 1])
        )
    if (task / "task_metadata.json").exists():
        shutil.copyfile(task / "task_metadata.json", into / "task_metadata.json")
    return into


def continued_session(session: Path, chats: Path) -> Path:
    """The real single-JSON ``session`` as Gemini CLI (0.39 and later) continues it when
    resumed: copied whole into ``chats/<its name>.jsonl``, the metadata record on the first
    line, then one record a line."""
    value = load(session)
    metadata = {k: v for k, v in value.items() if k != "messages"}
    chats.mkdir(parents=True, exist_ok=True)
    path = chats / f"{session.stem}.jsonl"
    lines = [json.dumps(record) for record in [metadata, *value["messages"]]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def older_session(session: Path, into: Path, records: list[Any]) -> Path:
    """A single-JSON copy of the real ``session`` in the folder ``into`` (a backup, an older
    save) holding ``records`` as its messages, written as Gemini CLI writes the form."""
    value = load(session)
    into.mkdir(parents=True, exist_ok=True)
    path = into / session.name
    path.write_text(json.dumps({**value, "messages": records}, indent=2), encoding="utf-8")
    return path


def history_counts(store: ContextStore, cid: str) -> dict[str, int]:
    """The conversation's rows per table, without rollbacks and their archive (an import
    that replaced rows the agent rewrote archives them under a rollback)."""
    return {
        table: count
        for table, count in store.row_counts(cid).items()
        if table != "rollbacks" and not table.startswith("archived_")
    }


def archived_rows(store: ContextStore, cid: str) -> int:
    """Rows the conversation's rollbacks archived (blocks not counted)."""
    counts = store.row_counts(cid)
    return sum(n for table, n in counts.items() if table.startswith("archived_")) - counts.get(
        "archived_blocks", 0
    )


def stored_rows(store: ContextStore, cid: str) -> tuple[Any, ...]:
    """What an import may change of a conversation, to compare before and after: its row
    counts (rollbacks and their archive left out), messages, source records' data,
    requests and checkpoints."""
    return (
        history_counts(store, cid),
        store.messages(cid),
        [r.data for r in store.source_records(cid)],
        store.requests(cid),
        store.checkpoints(cid),
    )
