"""The dependency direction of DESIGN.md: roll -> iflow -> ale, roll -> rock -> ale,
task_families -> ale (rock finds the families by entry point, never by import),
iflow -> rock only through the optional sandbox extra. Nothing imports upward, and
every third-party import is declared in the importing package's pyproject.toml."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {  # distribution dir -> import name
    "ale-core": "ale",
    "task-families": "task_families",
    "rock": "rock",
    "iflow-cli": "iflow",
    "roll": "roll",
}
ALLOWED_FIRST_PARTY = {
    "ale": {"ale"},
    "task_families": {"task_families", "ale"},
    "rock": {"rock", "ale"},
    "iflow": {"iflow", "ale"},
    "roll": {"roll", "iflow", "rock", "ale"},
}
# iflow may use rock only in the sandbox workspace, installed with the `sandbox` extra.
OPTIONAL_FIRST_PARTY = {"iflow": ({"rock"}, re.compile(r"(^|/)(sandbox|workspace/rock)[^/]*\.py$"))}
IMPORT_NAME = {
    "pyyaml": "yaml",
    "tomli-w": "tomli_w",
    "ale-core": "ale",
    "iflow-cli": "iflow",
    "mini-swe-agent": "minisweagent",
}


def _dist_name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip().lower()


def _import_names(requirements: list[str]) -> set[str]:
    return {IMPORT_NAME.get(_dist_name(r), _dist_name(r).replace("-", "_")) for r in requirements}


def _declared(dist: str) -> tuple[set[str], set[str]]:
    project = tomllib.loads((ROOT / "packages" / dist / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {}).values()
    optional = set().union(*(_import_names(v) for v in extras))
    return _import_names(project.get("dependencies", [])), optional


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("dist", list(PACKAGES))
def test_no_upward_or_undeclared_imports(dist: str) -> None:
    name = PACKAGES[dist]
    declared, optional = _declared(dist)
    first_party = set(PACKAGES.values())
    src = ROOT / "packages" / dist / "src" / name
    files = sorted(src.rglob("*.py"))
    assert files, f"no sources under {src}"
    problems = []
    for path in files:
        rel = path.relative_to(src).as_posix()
        for module in _imports(path):
            if module in sys.stdlib_module_names or module == "__future__":
                continue
            if module in first_party:
                allowed = ALLOWED_FIRST_PARTY[name]
                extra, pattern = OPTIONAL_FIRST_PARTY.get(name, (set(), re.compile("$^")))
                if module in allowed or (
                    module in extra and pattern.search(rel) and module in optional
                ):
                    if module != name and module not in declared | optional:
                        problems.append(f"{rel} imports {module}, which {dist} does not declare")
                    continue
                problems.append(
                    f"{rel} imports {module}: {name} may not depend on it (see DESIGN.md)"
                )
            elif module not in declared and module not in optional:
                problems.append(
                    f"{rel} imports {module}, which is not a declared dependency of {dist}"
                )
    assert not problems, "\n".join(problems)


def test_the_checker_catches_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import rock.engine\nfrom iflow import cli\nfrom . import sibling\n")
    assert _imports(bad) == {"rock", "iflow"}


def _module_name(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(path: Path, known: set[str]) -> set[str]:
    """The package's own modules ``path`` imports at its top level (not inside functions),
    those under ``if TYPE_CHECKING:`` too (a type needed both ways is a piece to move down,
    as much as a module is): ``from a.b import c`` counts ``a.b.c`` when it is a module."""
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in known)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for alias in node.names:
                    child = f"{node.module}.{alias.name}"
                    if child in known:
                        found.add(child)
                    elif node.module in known:
                        found.add(node.module)

    visit(ast.parse(path.read_text(), filename=str(path)).body)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk of ``graph`` meets (each as its path, closed)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def walk(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in state:
                walk(dep, [*path, dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    return cycles


def _module_graph(dist: str) -> tuple[dict[str, Path], dict[str, set[str]]]:
    src = ROOT / "packages" / dist / "src" / PACKAGES[dist]
    paths = {_module_name(src, p): p for p in src.rglob("*.py")}
    return paths, {m: _top_level_imports(p, set(paths)) - {m} for m, p in paths.items()}


@pytest.mark.parametrize("dist", list(PACKAGES))
def test_no_import_cycles_inside_a_package(dist: str) -> None:
    """A cycle is broken by moving the shared piece down, never by an import inside a
    function or one kept for the type checker: so the modules' top-level imports of their
    own package form no cycle."""
    paths, graph = _module_graph(dist)
    # a package's __init__ re-exporting its modules, which import siblings through it, is
    # Python's usual package shape: only cycles between modules count
    real = [c for c in _cycles(graph) if not any(paths[m].name == "__init__.py" for m in c)]
    assert not real, "import cycles: " + "; ".join(" -> ".join(c) for c in real)


@pytest.mark.parametrize("dist", list(PACKAGES))
def test_no_import_cycles_between_folders(dist: str) -> None:
    """Nor do the package's folders: one folder's modules importing another's while that
    one's import the first (roll.gateway and roll.agentic did, through the policy both
    use) is a cycle too, whatever modules carry it."""
    paths, graph = _module_graph(dist)

    def folder(module: str) -> str:
        return module if paths[module].name == "__init__.py" else module.rpartition(".")[0]

    folders: dict[str, set[str]] = {}
    for module, deps in graph.items():
        if paths[module].name == "__init__.py":
            continue
        for dep in deps:
            a, b = folder(module), folder(dep)
            nested = b.startswith(a + ".") or a.startswith(b + ".")  # a folder and its own
            if paths[dep].name != "__init__.py" and a != b and not nested:
                folders.setdefault(a, set()).add(b)
    cycles = _cycles(folders)
    assert not cycles, "folder cycles: " + "; ".join(" -> ".join(c) for c in cycles)
