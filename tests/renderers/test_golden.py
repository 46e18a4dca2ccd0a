"""Golden request bodies: every shared conversation, rendered for every provider.

Each file under ``golden/`` is ``<case>.<format>.json`` and must match the rendered
request exactly. After a deliberate change to a renderer, regenerate them with::

    CONTEXTSTORE_REGEN_GOLDEN=1 python -m pytest tests/renderers/test_golden.py

then review the diff of ``golden/`` before committing it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conversations import MAX_TOKENS, MODELS, SYSTEM, TOOLS, Case, cases, gemini_orphan_contents

from contextstore.core.hardening import harden_history
from contextstore.renderers.registry import FORMATS, build_request, validate_provider_payload

GOLDEN_DIR = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("CONTEXTSTORE_REGEN_GOLDEN") == "1"


def check_golden(name: str, actual: Any) -> None:
    """Compare ``actual`` with ``golden/<name>.json``, or rewrite the file when regenerating."""
    path = GOLDEN_DIR / f"{name}.json"
    if REGENERATE:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(json.dumps(actual, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    assert path.exists(), f"{path} is missing; run with CONTEXTSTORE_REGEN_GOLDEN=1"
    assert actual == json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", cases(), ids=lambda case: case.name)
@pytest.mark.parametrize("fmt", FORMATS)
def test_request_matches_golden(case: Case, fmt: str) -> None:
    body = build_request(
        fmt,
        case.messages,
        system=SYSTEM,
        tools=TOOLS if case.uses_tools else None,
        model=MODELS[fmt],
        max_tokens=MAX_TOKENS,
    )
    check_golden(f"{case.name}.{fmt}", body)
    assert validate_provider_payload(fmt, body) == []


def test_gemini_orphan_result_matches_golden() -> None:
    contents = harden_history(gemini_orphan_contents())
    check_golden("orphan_result.gemini", contents)
    assert validate_provider_payload("gemini", contents) == []
