"""Write a :class:`~ale.synth.family.TaskDraft` as a Terminal-Bench 2.0 task directory.

::

    instruction.md
    task.toml               [metadata] family, difficulty, category, tags, seed, params
    environment/Dockerfile  FROM the local base image; COPY rootfs/ / (when there are files);
                            RUN chmod (modes git does not keep); RUN setup; WORKDIR /app
    environment/rootfs/     the draft's files at their container paths
    tests/test.sh           runs tests/test_outputs.py from /app, writes the reward: with
                            tests/run_checks.py (python3 alone) when the checks need nothing
                            of pytest, else with pytest (installed first; served offline by
                            rock's verifier toolchain)
    tests/test_outputs.py
    tests/run_checks.py     (:mod:`ale.synth.run_checks`, beside plain checks only)
    solution/solve.sh

The directory is written beside its destination and renamed into place, so a reader
never sees half a task. Writing the same draft twice gives byte-identical files.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
from pathlib import Path, PurePosixPath

import tomli_w

from ale.synth.family import BASE_IMAGE, WORKDIR, TaskDraft

_REWARD = (
    "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; "
    "else echo 0 > /logs/verifier/reward.txt; fi\nexit 0\n"
)
TEST_SH = (
    """\
#!/bin/bash
# Verifier of a generated task: install pytest, run the checks from /app, write the reward.
mkdir -p /logs/verifier
pip install -q pytest==8.4.1
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
cd /app && python3 -m pytest -q -rA -p no:cacheprovider /tests/test_outputs.py
"""
    + _REWARD
)
"""tests/test.sh of a task whose checks use pytest (its fixtures, marks, ``pytest.raises``)."""
TEST_SH_PLAIN = (
    """\
#!/bin/bash
# Verifier of a generated task: run the checks from /app with python3 alone (plain asserts;
# pytest runs test_outputs.py the same), write the reward.
mkdir -p /logs/verifier
cd /app && python3 /tests/run_checks.py /tests/test_outputs.py
"""
    + _REWARD
)
"""tests/test.sh of a task whose checks are plain ``test_*`` functions (:func:`plain_checks`)."""
RUN_CHECKS = Path(__file__).with_name("run_checks.py")


_PYTEST_HOOKS = {"setup_module", "teardown_module", "setup_function", "teardown_function"}
"""Module-level functions pytest calls around a module's checks (no import of it needed)."""


def _names(node: ast.stmt) -> set[str]:
    """The module-level names ``node`` defines (a function, or an assignment's targets)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    targets = node.targets if isinstance(node, ast.Assign) else []
    if isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    return {t.id for t in targets if isinstance(t, ast.Name)}


def plain_checks(source: str) -> bool:
    """Whether ``source`` (a test file) needs nothing of pytest, so that
    :mod:`ale.synth.run_checks` runs it as pytest would: it parses, imports no pytest, and
    its checks are module-level ``test*`` functions without parameters (fixtures) or
    decorators (marks), in a module with no ``Test*`` class and nothing else pytest acts on
    (``setup_module`` and the other xunit functions, ``pytestmark``, ``pytest_plugins``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False  # (pytest reports it)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(
            a.name.split(".")[0] in ("pytest", "_pytest") for a in node.names
        ):
            return False
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
            "pytest",
            "_pytest",
        ):
            return False
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            return False
        if _names(node) & _PYTEST_HOOKS or any(n.startswith("pytest") for n in _names(node)):
            return False  # (xunit set-up and tear-down, pytestmark, pytest_plugins, hooks)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            a = node.args
            if isinstance(node, ast.AsyncFunctionDef) or node.decorator_list:
                return False
            if a.args or a.posonlyargs or a.kwonlyargs or a.vararg or a.kwarg:
                return False
    return True


def stored_mode(mode: int) -> int:
    """The mode a file keeps in git (and so in a clone): 0755 when executable, else 0644."""
    return 0o755 if mode & 0o111 else 0o644


def dockerfile(draft: TaskDraft) -> str:
    """The environment's Dockerfile: only FROM, COPY, RUN and WORKDIR (which rock's warm-pool
    runner can apply to a started sandbox of the base image without building). Files are
    stored with the modes git keeps; any other mode a draft asks for is set by a RUN chmod
    right after the COPY, so a task checked out from git builds the same environment."""
    lines = [f"FROM {BASE_IMAGE}"]
    if draft.files:  # git keeps no empty directory, and COPY of a missing one fails
        lines.append("COPY rootfs/ /")
    chmods = [
        f"chmod {mode:o} {shlex.quote(path)}"
        for path, mode in sorted(draft.modes.items())
        if path in draft.files and mode != stored_mode(mode)
    ]
    if chmods:
        lines.append("RUN " + " \\\n && ".join(chmods))
    lines += [f"RUN {command}" for command in draft.setup]
    lines.append(f"WORKDIR {WORKDIR}")
    return "\n".join(lines) + "\n"


def task_toml(draft: TaskDraft, *, family: str, category: str, difficulty: str, seed: int) -> str:
    data = {
        "version": "1.0",
        "metadata": {
            "author_name": "ale synth",
            "difficulty": difficulty,
            "category": category,
            "tags": [family, *draft.tags],
            "family": family,
            "seed": seed,
            "params": json.dumps(draft.params, sort_keys=True),
        },
        "agent": {"timeout_sec": float(draft.agent_timeout_sec)},
        "verifier": {"timeout_sec": float(draft.test_timeout_sec)},
        "environment": {
            "build_timeout_sec": 600.0,
            "cpus": 1,
            "memory_mb": 1024,
            "allow_internet": False,
        },
    }
    return tomli_w.dumps(data)


def render_task(
    draft: TaskDraft,
    dest: str | Path,
    *,
    family: str,
    category: str,
    difficulty: str,
    seed: int,
) -> Path:
    """Write ``draft`` as a 2.0 task at ``dest`` (replacing what is there); return the path."""
    dest = Path(dest)
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    _put(tmp / "instruction.md", draft.instruction.rstrip("\n") + "\n")
    _put(
        tmp / "task.toml",
        task_toml(draft, family=family, category=category, difficulty=difficulty, seed=seed),
    )
    env = tmp / "environment"
    _put(env / "Dockerfile", dockerfile(draft))
    rootfs = env / "rootfs"
    for path, content in sorted(draft.files.items()):
        rel = PurePosixPath(path)
        if not rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"draft file {path!r} must be an absolute path without '..'")
        _put(rootfs.joinpath(*rel.parts[1:]), content, stored_mode(draft.modes.get(path, 0o644)))
    if plain_checks(draft.tests):
        _put(tmp / "tests" / "test.sh", TEST_SH_PLAIN, 0o755)
        _put(tmp / "tests" / "run_checks.py", RUN_CHECKS.read_bytes())
    else:
        _put(tmp / "tests" / "test.sh", TEST_SH, 0o755)
    _put(tmp / "tests" / "test_outputs.py", draft.tests)
    _put(tmp / "solution" / "solve.sh", "#!/bin/bash\nset -e\ncd /app\n" + draft.solution, 0o755)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)
    return dest.resolve()


def _put(path: Path, content: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    os.chmod(path, mode)
