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

# Each layer (a package, or a module at the package root) may import only from itself and the
# layers before it: core -> processors, renderers -> storage, interop -> facade, store ->
# cli, server. devtools sits beside the library: it may use it, the library never uses it.
_CORE = {"contextstore.core"}
_PURE = _CORE | {"contextstore.processors", "contextstore.renderers"}
_LOW = _PURE | {"contextstore.storage", "contextstore.interop"}
_STORE = _LOW | {"contextstore.facade", "contextstore.store"}
LAYERS: dict[str, set[str]] = {
    "core": _CORE,
    "processors": _CORE | {"contextstore.processors"},
    "renderers": _CORE | {"contextstore.renderers"},
    "storage": _CORE | {"contextstore.storage"},
    "interop": _PURE | {"contextstore.interop"},
    "facade": _PURE | {"contextstore.storage", "contextstore.facade"},
    "store.py": _PURE | {"contextstore.storage", "contextstore.facade"},
    "__init__.py": _CORE | {"contextstore.store"},
    "__main__.py": {"contextstore.cli"},
    "cli": _STORE | {"contextstore.cli", "contextstore.server", "contextstore.devtools"},
    "server": _STORE | {"contextstore.server"},
    "devtools": _STORE | {"contextstore.devtools"},
}
PUBLIC_API_USERS = {"cli", "server", "devtools"}
"""Layers that may import the package's public names (``from contextstore import ...``)."""
DEVTOOLS_USERS = {"contextstore/cli/devtools.py", "contextstore/cli/demo.py"}
"""The commands that run the tooling: the only library code importing devtools."""


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


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def _layer_files(layer: str) -> list[Path]:
    target = PACKAGE / layer
    return sorted(target.rglob("*.py")) if target.is_dir() else [target]


def test_every_package_and_root_module_has_a_layer() -> None:
    present = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    present |= {p.name for p in PACKAGE.glob("*.py")}
    assert present - set(LAYERS) == set(), "place new packages and modules in LAYERS"


@pytest.mark.parametrize(("layer", "allowed"), LAYERS.items(), ids=list(LAYERS))
def test_imports_point_down(layer: str, allowed: set[str]) -> None:
    if not (PACKAGE / layer).exists():
        pytest.skip(f"{layer} is not in this checkout")
    for path in _layer_files(layer):
        for module in _contextstore_imports(path):
            if module == "contextstore" and layer in PUBLIC_API_USERS:
                continue
            assert any(module == a or module.startswith(a + ".") for a in allowed), (
                f"{path.relative_to(ROOT)} imports {module}"
            )


def test_only_the_commands_that_run_it_import_devtools() -> None:
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("contextstore/devtools/") or relative in DEVTOOLS_USERS:
            continue
        used = {m for m in _contextstore_imports(path) if m.startswith("contextstore.devtools")}
        assert not used, f"{relative} imports {sorted(used)}"


def test_the_facade_holds_no_sql() -> None:
    """The facade validates and calls storage; every statement lives in storage's modules."""
    for path in (PACKAGE / "facade").rglob("*.py"):
        for module in _imports(path):
            assert not (module == "sqlalchemy" or module.startswith("sqlalchemy.")), (
                f"{path.relative_to(ROOT)} imports {module}"
            )
            assert not module.startswith("contextstore.storage.tables"), (
                f"{path.relative_to(ROOT)} imports {module}"
            )
        assert ".execute(" not in path.read_text(encoding="utf-8"), path


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
