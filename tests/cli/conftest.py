"""Fixtures for command-line tests: a small realistic database, and a runner."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from contextstore import ContextStore
from contextstore.cli import cli
from contextstore.devtools import demo_data


@dataclass
class Result:
    """What one CLI run gave: exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        """stdout parsed as JSON."""
        return json.loads(self.out)


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    """Run the CLI in-process, as a user would from a shell (stdin is not a terminal)."""
    result = CliRunner().invoke(cli, list(args), obj={}, input=input, env=env)
    return Result(result.exit_code, result.stdout, result.stderr)


@dataclass
class Seeded:
    """A database with one conversation: a checkpoint, a broken edit after it, requests."""

    db: str
    cid: str
    label: str
    checkpoint_ts: int
    prepared_id: int
    recorded_id: int

    def store(self) -> ContextStore:
        """Open the database (close it after use)."""
        return ContextStore.open(self.db)


def seed(path: Path) -> Seeded:
    """Write the seeded conversation to ``path``."""
    with ContextStore.open(path) as store:
        conv = store.create_conversation(
            model_id="claude-sonnet-4-5", context_window=200_000, title="cli test"
        )
        store.append(conv.id, demo_data.opening_turns())
        recorded = store.record_request(conv.id, tokens_in=3_000, tokens_out=100, cost=0.01)
        cp = store.checkpoint(conv.id, "after-reading", note="both files read")
        store.append(conv.id, demo_data.risky_turns())
        store.append(conv.id, "user", "Try again, smaller.")
        prepared = store.prepare_request(conv.id, system="Be careful.")
        assert prepared.request_id is not None
        store.record_request(
            conv.id, request_id=prepared.request_id, tokens_in=4_000, tokens_out=200, cost=0.02
        )
    return Seeded(str(path), conv.id, "after-reading", cp.ts, prepared.request_id, recorded.id)


@pytest.fixture
def seeded(tmp_path: Path) -> Seeded:
    """A fresh seeded database for one test."""
    return seed(tmp_path / "cli.db")
