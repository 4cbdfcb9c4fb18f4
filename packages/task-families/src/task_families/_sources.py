"""The programs the task families put into tasks (a buggy module's correct source, a
function family's reference implementation), kept as files of their own under
``task_families/sources/<family>/`` so that the linter and the tests read them as code,
not as strings. Their bytes are what the tasks hold: the formatter leaves them alone."""

from __future__ import annotations

from importlib.resources import files


def source(family: str, name: str) -> str:
    """The text of ``sources/<family>/<name>.py``."""
    return (files("task_families") / "sources" / family / f"{name}.py").read_text(encoding="utf-8")
