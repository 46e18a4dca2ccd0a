"""Golden request bodies: every shared conversation, rendered for every provider.

Each file under ``golden/`` is ``<case>.<format>.json`` and must match the rendered
request exactly. The files were reviewed by hand against each provider's request rules
(and every one validates against the official SDK types, see ``test_sdk_oracles.py``); a
normal run only reads them. After a deliberate change to a renderer, regenerate them with::

    CONTEXTSTORE_REGEN_GOLDEN=1 python -m pytest -p no:randomly tests/renderers/test_golden.py

which rewrites the files and skips the comparison (a file is never compared with what was
just written into it); then review the diff of ``golden/`` before committing it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conversations import MAX_TOKENS, MODELS, SYSTEM, TOOLS, Case, cases, gemini_orphan_contents
from oracles import sdk_problems

from contextstore.core.hardening import harden_history
from contextstore.renderers.registry import FORMATS, build_request, validate_provider_payload

GOLDEN_DIR = Path(__file__).parent / "golden"
REGEN_VARIABLE = "CONTEXTSTORE_REGEN_GOLDEN"


def _regenerating() -> bool:
    return os.environ.get(REGEN_VARIABLE) == "1"


def _encode(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def check_golden(name: str, actual: Any, directory: Path = GOLDEN_DIR) -> None:
    """Compare ``actual`` with ``<directory>/<name>.json``; rewrite it only when regenerating."""
    path = directory / f"{name}.json"
    if _regenerating():
        previous = path.read_text(encoding="utf-8") if path.exists() else None
        directory.mkdir(exist_ok=True)
        path.write_text(_encode(actual), encoding="utf-8")
        state = "unchanged" if previous == _encode(actual) else "rewritten"
        pytest.skip(f"{path.name} {state} ({REGEN_VARIABLE}=1): review the diff of golden/")
    assert path.exists(), f"{path} is missing; run with {REGEN_VARIABLE}=1 and review it"
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
    assert validate_provider_payload(fmt, body) == []
    assert sdk_problems(fmt, body) == []
    check_golden(f"{case.name}.{fmt}", body)


def test_gemini_orphan_result_matches_golden() -> None:
    contents = harden_history(gemini_orphan_contents())
    assert validate_provider_payload("gemini", contents) == []
    assert sdk_problems("gemini", contents) == []
    check_golden("orphan_result.gemini", contents)


def test_every_golden_file_belongs_to_a_case() -> None:
    expected = {f"{case.name}.{fmt}.json" for case in cases() for fmt in FORMATS}
    expected.add("orphan_result.gemini.json")
    assert {path.name for path in GOLDEN_DIR.glob("*.json")} == expected


def _snapshot() -> dict[str, tuple[str, int]]:
    return {
        path.name: (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
        for path in sorted(GOLDEN_DIR.glob("*.json"))
    }


def test_a_normal_run_never_writes_the_golden_files() -> None:
    """Run this module's golden tests in a child pytest, without the variable (and with it
    set to anything but 1): no golden file's bytes or modification time change."""
    before = _snapshot()
    root = Path(__file__).resolve().parents[2]
    for value in (None, "0"):
        env = {k: v for k, v in os.environ.items() if k != REGEN_VARIABLE}
        if value is not None:
            env[REGEN_VARIABLE] = value
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:randomly",
                "-n",
                "0",
                str(Path(__file__).resolve()),
                "-k",
                "matches_golden",
            ],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout[-2000:]
        expected = len(cases()) * len(FORMATS) + 1  # and the orphan result's
        summary = done.stdout.strip().splitlines()[-1]
        counts = {name: int(n) for n, name in re.findall(r"(\d+) (passed|skipped)", summary)}
        # Python 3.10 has no google-genai, whose oracle checks then skip, saying so.
        assert counts.get("passed", 0) + counts.get("skipped", 0) == expected, summary
        assert counts.get("passed", 0) >= expected - len(cases()) - 1, summary
        assert _snapshot() == before, f"a run with {REGEN_VARIABLE}={value} wrote a golden file"


def test_regeneration_rewrites_and_never_compares_a_file_with_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "case.json").write_text(_encode({"old": True}), encoding="utf-8")
    with pytest.raises(AssertionError):
        check_golden("case", {"new": True}, tmp_path)
    monkeypatch.setenv(REGEN_VARIABLE, "1")
    with pytest.raises(pytest.skip.Exception, match=r"case\.json rewritten"):
        check_golden("case", {"new": True}, tmp_path)
    assert json.loads((tmp_path / "case.json").read_text(encoding="utf-8")) == {"new": True}
    with pytest.raises(pytest.skip.Exception, match="unchanged"):
        check_golden("case", {"new": True}, tmp_path)
    monkeypatch.delenv(REGEN_VARIABLE)
    check_golden("case", {"new": True}, tmp_path)
