"""The importers and exporters refuse arguments of the wrong kind with ``InvalidInputError``
before reading or writing anything: a path that is no path ended in a ``TypeError``
(``import_gemini(store, 5)``), and a flag such as ``replace="no"`` or ``checkpoint="yes"``
was taken as true."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore, InvalidInputError, interop

# Called with arguments of the wrong types on purpose.
import_cline: Any = interop.import_cline
import_gemini: Any = interop.import_gemini
export_cline: Any = interop.export_cline
export_gemini: Any = interop.export_gemini

Call = Callable[[ContextStore, str, Path], Any]

CASES: dict[str, tuple[Call, str]] = {
    "import_cline path int": (lambda s, c, d: import_cline(s, 5), r"^path must be a file or"),
    "import_cline path None": (lambda s, c, d: import_cline(s, None), r"^path must be"),
    "import_cline path empty": (lambda s, c, d: import_cline(s, ""), r"^path must be"),
    "import_cline history": (
        lambda s, c, d: import_cline(s, d, history_path=5),
        r"^history_path must be",
    ),
    "import_cline replace": (
        lambda s, c, d: import_cline(s, d, replace="no"),
        r"^replace must be True or False, got 'no'\.$",
    ),
    "import_cline max_file_bytes": (
        lambda s, c, d: import_cline(s, d, max_file_bytes="1"),
        r"^max_file_bytes must be a positive integer, got '1'\.$",
    ),
    "import_cline progress": (
        lambda s, c, d: import_cline(s, d, progress=5),
        r"^progress must be None or a function",
    ),
    "import_gemini path list": (lambda s, c, d: import_gemini(s, [d]), r"^path must be"),
    "import_gemini path bytes": (lambda s, c, d: import_gemini(s, b"x.json"), r"^path must be"),
    "import_gemini replace": (
        lambda s, c, d: import_gemini(s, d, replace=1),
        r"^replace must be True or False",
    ),
    "import_gemini max_file_bytes": (
        lambda s, c, d: import_gemini(s, d, max_file_bytes=0),
        r"^max_file_bytes must be a positive integer",
    ),
    "export_cline out_dir": (lambda s, c, d: export_cline(s, c, 5), r"^out_dir must be"),
    "export_cline history": (
        lambda s, c, d: export_cline(s, c, d / "task", history_path=5),
        r"^history_path must be",
    ),
    "export_cline overwrite": (
        lambda s, c, d: export_cline(s, c, d / "task", overwrite="yes"),
        r"^overwrite must be True or False",
    ),
    "export_gemini path": (lambda s, c, d: export_gemini(s, c, None), r"^path must be"),
    "export_gemini checkpoint": (
        lambda s, c, d: export_gemini(s, c, d / "chat.json", checkpoint="yes"),
        r"^checkpoint must be True or False, got 'yes'\.$",
    ),
    "export_gemini overwrite": (
        lambda s, c, d: export_gemini(s, c, d / "chat.json", overwrite=None),
        r"^overwrite must be True or False",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_wrong_argument_is_refused_and_nothing_is_read_or_written(
    memory_store: ContextStore, tmp_path: Path, case: str
) -> None:
    call, said = CASES[case]
    conversation = memory_store.create_conversation(title="kept").id
    memory_store.append(conversation, "user", "hello")
    before = memory_store.row_counts()
    with pytest.raises(InvalidInputError, match=said):
        call(memory_store, conversation, tmp_path)
    assert memory_store.row_counts() == before
    assert list(tmp_path.iterdir()) == []
