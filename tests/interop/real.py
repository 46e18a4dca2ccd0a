"""Where the real agents' files are (``../shared/real`` beside the repository), read in place.

Tests that use them skip when the folder is absent; nothing from it is ever copied into
the repository (tests copy into their own temporary folders when they must change a file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


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
