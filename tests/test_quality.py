"""Project rules that tools can check: lint, types, and layers with imports pointing down."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "contextstore"

# Each layer may import only from itself and the layers before it.
LAYERS = [
    ("core", {"contextstore.core"}),
    ("processors", {"contextstore.core", "contextstore.processors"}),
    ("renderers", {"contextstore.core", "contextstore.renderers"}),
    ("storage", {"contextstore.core", "contextstore.storage"}),
]


def _contextstore_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("contextstore")
        ):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("contextstore"))
    return found


@pytest.mark.parametrize(("layer", "allowed"), LAYERS, ids=[name for name, _ in LAYERS])
def test_imports_point_down(layer: str, allowed: set[str]) -> None:
    for path in (PACKAGE / layer).rglob("*.py"):
        for module in _contextstore_imports(path):
            assert any(module == a or module.startswith(a + ".") for a in allowed), (
                f"{path.relative_to(ROOT)} imports {module}"
            )


def test_only_the_cli_prints_or_exits() -> None:
    for path in PACKAGE.rglob("*.py"):
        if path.name == "__main__.py" or {"cli", "devtools"} & set(path.parts):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("print", "exit"), f"{path.name} calls {node.func.id}"


def test_core_imports_neither_sqlalchemy_nor_click() -> None:
    code = (
        "import sys, contextstore.core.view, contextstore.core.file_reads, "
        "contextstore.core.hardening, contextstore.renderers.registry, "
        "contextstore.processors.pipeline; "
        "print(sorted(m for m in ('sqlalchemy', 'click', 'alembic') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return found


def test_ruff_is_clean() -> None:
    ruff = _tool("ruff")
    for args in (["check"], ["format", "--check"]):
        done = subprocess.run(
            [ruff, *args, "contextstore", "tests", "migrations"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_is_clean_on_the_package() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "contextstore"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:]


def test_the_server_is_a_thin_adapter_over_the_store() -> None:
    """No SQL and no storage internals in the server; it never reaches up into the CLI."""
    forbidden = ("contextstore.cli", "contextstore.devtools", "contextstore.facade")
    for path in (PACKAGE / "server").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        for module in modules:
            assert not module.startswith(("sqlalchemy", "alembic", *forbidden)), (path, module)
            if module.startswith("contextstore.storage"):
                assert module == "contextstore.storage.paths", (path, module)
