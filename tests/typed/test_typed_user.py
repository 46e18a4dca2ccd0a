"""The public API as a typed codebase sees it: ``mypy --strict`` on a user's program.

The types are the contract here: a README example that a strict checker refuses, or a
correct hook of the user's that does not satisfy the store's protocol, makes every typed
adopter write a cast. One mypy run checks :mod:`tests.typed.user_program` (module-scoped);
each test reads the errors inside its own functions, then runs them, so what the checker
accepts is also what the store does.
"""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contextstore import ContextStore

pytest.importorskip("anthropic", reason="the typed program holds the Anthropic SDK's types")
pytest.importorskip("google.genai", reason="the typed program holds google-genai's types")

from tests.typed import user_program  # after the skips

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = Path(user_program.__file__)
README = (ROOT / "README.md").read_text(encoding="utf-8")
ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*)$")

README_STANDINS = """\
from typing import Any

from contextstore import ContextStore


class Usage:
    input_tokens = 1_200
    output_tokens = 80


class Response:
    usage = Usage()


TOOLS: list[dict[str, Any]] = []


def call_the_model(payload: dict[str, Any]) -> Response:
    return Response()


"""
"""What the README's examples leave to the reader (the model call, the tools), typed."""


def readme_examples() -> dict[str, str]:
    """The README's Python examples, by the section that holds them."""
    examples = {}
    for section in ("## Library", "## Processors"):
        code = re.search(r"```python\n(.*?)```", README.split(section, 1)[1], flags=re.S)
        assert code is not None, section
        examples[section] = code.group(1)
    return examples


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[Path, list[tuple[int, str]]]:
    """``(line, message)`` of each error ``mypy --strict`` finds, per file checked: the
    typed program and the README's examples (this checkout's contextstore first on the
    path, the project's mypy settings), in one run."""
    folder = tmp_path_factory.mktemp("readme")
    files = [PROGRAM]
    for number, code in enumerate(readme_examples().values()):
        files.append(folder / f"readme_example_{number}.py")
        files[-1].write_text(README_STANDINS + code, encoding="utf-8")
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--show-absolute-path", *map(str, files)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    errors: dict[Path, list[tuple[int, str]]] = {path: [] for path in files}
    for line in done.stdout.splitlines():
        found = ERROR.match(line)
        if found is None:
            continue
        # An error inside contextstore itself would be reported against its own file.
        assert Path(found["path"]) in errors, line
        errors[Path(found["path"])].append((int(found["line"]), found["message"]))
    assert done.returncode == (1 if any(errors.values()) else 0), done.stdout + done.stderr
    return errors


@pytest.fixture
def mypy_errors(checked: dict[Path, list[tuple[int, str]]]) -> list[tuple[int, str]]:
    """The errors mypy found in the typed program."""
    return checked[PROGRAM]


def errors_in(errors: list[tuple[int, str]], *objects: Callable[..., Any] | type) -> list[str]:
    """The errors reported on the source lines of ``objects``."""
    found = []
    for obj in objects:
        lines, first = inspect.getsourcelines(obj)
        found += [
            f"{line}: {message}" for line, message in errors if first <= line < first + len(lines)
        ]
    return found


def test_the_typed_program_passes_mypy_strict(mypy_errors: list[tuple[int, str]]) -> None:
    assert mypy_errors == []


def test_the_readme_examples_pass_mypy_strict(
    checked: dict[Path, list[tuple[int, str]]],
) -> None:
    # The Library example passed a prepared request's id, typed ``int | None``, where
    # request_payload takes an int.
    readme = {path.name: errors for path, errors in checked.items() if path != PROGRAM}
    assert readme == {"readme_example_0.py": [], "readme_example_1.py": []}


def test_a_prepared_request_id_is_an_int_that_request_payload_takes(
    mypy_errors: list[tuple[int, str]], store: ContextStore
) -> None:
    # PreparedRequest.request_id was typed ``int | None``, so the README's own
    # ``store.request_payload(conv.id, ctx.request_id)`` failed mypy --strict; every
    # prepare writes a request row, so it is always an id.
    assert errors_in(mypy_errors, user_program.readme_library) == []
    user_program.readme_library(store)


def test_append_takes_the_sdk_typed_blocks_and_messages_it_is_typed_for(
    mypy_errors: list[tuple[int, str]], store: ContextStore
) -> None:
    # append's content was typed as any Sequence of Mappings, but a tuple of blocks (or a
    # read-only mapping as a message) was refused at run time; it now takes what it is
    # typed for, content as any iterable of block mappings (the SDK's MessageParam types
    # content as an Iterable).
    assert errors_in(mypy_errors, user_program.sdk_typed_messages) == []
    assert user_program.sdk_typed_messages(store) == 6


def test_a_processor_may_hold_its_name_read_only(
    mypy_errors: list[tuple[int, str]], store: ContextStore
) -> None:
    # The Processor protocol declared ``name: str``, a settable attribute: a frozen
    # dataclass or a property (read-only) did not satisfy it under mypy, though the
    # pipeline only reads the name. A Summarizer had no ``trigger`` or ``depends_on`` to set,
    # as the README sets them on an instance (the others had).
    assert errors_in(mypy_errors, user_program.custom_processors) == []
    assert user_program.custom_processors(store) == "ON IT"


def test_a_token_counter_needs_only_count(mypy_errors: list[tuple[int, str]]) -> None:
    # The TokenCounter protocol required a settable ``name``; the store only calls
    # ``count`` (and reads a name when there is one), and TokenCounter was not importable
    # from contextstore.
    assert errors_in(mypy_errors, user_program.token_counters) == []
    assert user_program.token_counters() == [3 + 4, 7 + 4]  # each message adds 4 tokens


def test_the_pure_functions_take_sdk_typed_messages(mypy_errors: list[tuple[int, str]]) -> None:
    # They were typed to take dicts only (``Sequence[dict[str, Any]]``), which a list of
    # the SDK's MessageParam TypedDicts is not; harden_history already took mappings.
    assert errors_in(mypy_errors, user_program.pure_functions) == []
    deleted, visible, paired, changed, hardened = user_program.pure_functions()
    assert deleted == (2, 3)
    assert (visible, paired, changed, hardened) == (4, 6, False, 3)
