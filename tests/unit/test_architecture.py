"""The house rules, read from the code's own imports: no cycles among the package's modules, a
core that imports nothing outside itself but `errors` and `durations`, settings that load no I/O
code, and rooms of a size a reader can hold."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "autotuner"
CORE_MAY_IMPORT = ("autotuner.core", "autotuner.errors", "autotuner.durations")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(path: Path, known: set[str]) -> set[str]:
    """Every module of ours that `path` imports, at any depth of the file (lazy imports in a
    function are arrows too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{a.name}" for a in node.names} & known
            found.update(submodules or ({node.module} & known))
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(path, known) - {name} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_core_imports_nothing_outside_itself_but_errors_and_durations() -> None:
    outside = {
        (name, imported)
        for name, imports in _graph().items()
        if name.startswith("autotuner.core")
        for imported in imports
        if not imported.startswith(CORE_MAY_IMPORT)
    }
    assert outside == set()


def _loaded_by(modules: tuple[str, ...]) -> list[str]:
    """Our modules and the HTTP and Kubernetes clients' that importing `modules` loads in a
    fresh interpreter."""
    code = (
        f"import sys, {', '.join(modules)}; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('autotuner', 'httpx', "
        "'kubernetes')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    names: list[str] = ast.literal_eval(loaded)
    return names


CLIENTS = ("httpx", "kubernetes")
ENGINE = tuple(
    f"autotuner.engines.vllm.{m}"
    for m in ("args", "setup", "metrics", "capabilities", "builds", "companions", "flags")
)


# Settings compose the core's groups, and settings, the core and the adapters all read the
# engine's modules: importing either loads no HTTP or Kubernetes client and none of the
# adapters.
@pytest.mark.parametrize(
    ("modules", "forbidden"),
    [
        pytest.param(
            ("autotuner.settings",),
            (
                *CLIENTS,
                "autotuner.sources",
                "autotuner.actuators",
                "autotuner.canary",
                "autotuner.telling",
            ),
            id="settings",
        ),
        pytest.param(
            ENGINE,
            (*CLIENTS, "autotuner.sources", "autotuner.actuators", "autotuner.cli"),
            id="engine",
        ),
    ],
)
def test_what_the_adapters_read_loads_no_io_code(
    modules: tuple[str, ...], forbidden: tuple[str, ...]
) -> None:
    loaded = _loaded_by(modules)
    assert set(modules) <= set(loaded)
    assert [m for m in loaded if m.startswith(forbidden)] == []
