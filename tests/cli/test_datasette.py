"""The shipped Datasette metadata names only real views and columns, and every canned query
answers on a real database."""

from __future__ import annotations

import importlib.resources
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore
from tests.cli.conftest import run

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def _metadata() -> dict[str, Any]:
    resource = importlib.resources.files("contextstore.cli.datasette") / "metadata.json"
    loaded: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    path = tmp_path_factory.mktemp("datasette") / "contextstore.db"
    assert run("--db", str(path), "demo", "--crash-kills", "0").code == 0
    with ContextStore.open(path) as store:
        overflow = next(c.id for c in store.list_conversations() if "overflow" in (c.title or ""))
    return path, overflow


def _columns(connection: sqlite3.Connection, view: str) -> list[str]:
    return [row[1] for row in connection.execute("SELECT * FROM pragma_table_info(?)", (view,))]


def test_the_metadata_documents_every_column_of_every_audit_view(demo: tuple[Path, str]) -> None:
    tables = _metadata()["databases"]["contextstore"]["tables"]
    connection = sqlite3.connect(demo[0])
    try:
        views = {
            r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='view'")
        }
        assert set(tables) == views
        for name, doc in tables.items():
            assert doc["title"] and doc["description"]
            assert list(doc["columns"]) == _columns(connection, name), name
            assert all(doc["columns"].values()), name
    finally:
        connection.close()


def test_every_canned_query_answers_on_the_demo(demo: tuple[Path, str]) -> None:
    path, overflow = demo
    queries = _metadata()["databases"]["contextstore"]["queries"]
    assert len(queries) >= 9
    connection = sqlite3.connect(path)
    try:
        for name, query in queries.items():
            assert query["title"].endswith("?"), name
            rows = connection.execute(query["sql"], {"conversation_id": overflow}).fetchall()
            if name not in ("masked_secrets",):
                assert rows, name
    finally:
        connection.close()


def test_the_readme_documents_the_same_columns() -> None:
    section = README.split("### Audit views", 1)[1].split("\n## ", 1)[0]
    tables = _metadata()["databases"]["contextstore"]["tables"]
    for name, doc in tables.items():
        block = re.search(rf"^`{name}`: .*?(?=^`\w+`: |\Z)", section, flags=re.S | re.M)
        assert block, f"the README's audit views do not describe {name}"
        documented = re.findall(r"^\| `(\w+)` \|", block.group(0), flags=re.M)
        assert documented == list(doc["columns"]), name
