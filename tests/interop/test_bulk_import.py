"""Importing a whole installation at once: many tasks or chats in one command."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from contextstore import ContextStore
from contextstore.interop import import_cline
from tests.interop.cline_factory import story, write_storage


def _peak_import_bytes(root: Path, tasks: int, store_path: Path) -> int:
    """The most memory Python held while one import took ``tasks`` alike tasks."""
    write_storage(root, {str(1_760_000_000_000 + n): story(120) for n in range(tasks)})
    with ContextStore.open(store_path) as store:
        store.list_conversations()  # the store's own caches, before measuring
        tracemalloc.start()
        try:
            report = import_cline(store, root)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert [item.status for item in report.items] == ["imported"] * tasks
    return peak


def test_an_import_holds_one_task_at_a_time_not_the_whole_installation(tmp_path: Path) -> None:
    """Every task was read and planned before the first was written, so an import's memory
    grew with the number of tasks (583 MB for 300 copies of the real tasks, 195 MB for 30);
    each task is now written before the next is read, in the same one transaction."""
    _peak_import_bytes(tmp_path / "first", 1, tmp_path / "first.db")  # loads the tokenizer
    few = _peak_import_bytes(tmp_path / "few", 2, tmp_path / "few.db")
    many = _peak_import_bytes(tmp_path / "many", 8, tmp_path / "many.db")
    assert many < few * 1.5, (few, many)
