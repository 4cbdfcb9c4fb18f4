"""The programs and the wording the task families put into tasks (a buggy module's correct
source, a function family's reference implementation, the tests a task is checked with, the
sentences its instruction is drawn from), kept as files of their own under
``task_families/sources/<family>/`` so that the linter and the tests read them as code and
text, not as strings inside code. Their bytes are what the tasks hold: the formatter leaves
them alone."""

from __future__ import annotations

import functools
import re
import tomllib
from importlib.resources import files

_SLOT = re.compile(r'"\$(\w+)"')
"""A slot in a program: a string literal such as ``"$out"``, so the file stays valid Python."""


class Code(str):
    """A value that fills a slot as the code it is, not as its ``repr``."""


def _read(family: str, name: str) -> str:
    return (files("task_families") / "sources" / family / name).read_text(encoding="utf-8")


def source(family: str, name: str) -> str:
    """The text of ``sources/<family>/<name>.py``."""
    return _read(family, f"{name}.py")


def fill(family: str, name: str, **values: object) -> str:
    """The text of ``sources/<family>/<name>.py`` with each slot ``"$key"`` replaced by the
    ``repr`` of ``values[key]`` (by the code itself when it is :class:`Code`); a slot without
    a value, or a value without a slot, is an error."""
    text = source(family, name)
    used = set(_SLOT.findall(text))
    if used != set(values):
        raise KeyError(f"{family}/{name}: slots {sorted(used)}, values {sorted(values)}")
    return _SLOT.sub(lambda m: _text(values[m.group(1)]), text)


def _text(value: object) -> str:
    return str(value) if isinstance(value, Code) else repr(value)


@functools.cache
def _wording(family: str) -> dict[str, object]:
    return tomllib.loads(_read(family, "wording.toml"))


def phrases(family: str, key: str) -> list[str]:
    """The list of sentences ``key`` of ``sources/<family>/wording.toml`` (a fresh copy)."""
    return _strings(family, key, _wording(family)[key])


def phrase_table(family: str, key: str) -> dict[str, list[str]]:
    """The table ``[key]`` of ``sources/<family>/wording.toml``: name -> list of sentences."""
    value = _wording(family)[key]
    if not isinstance(value, dict):
        raise TypeError(f"{family}/wording.toml: [{key}] is not a table")
    return {name: _strings(family, f"{key}.{name}", v) for name, v in value.items()}


def _strings(family: str, where: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise TypeError(f"{family}/wording.toml: {where} is not a list of strings")
    return list(value)
