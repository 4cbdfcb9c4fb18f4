"""The programs the families put into tasks live as files (task_families/sources), read as
code: each compiles, each is one family entry's, and the family hands it on byte for byte."""

from __future__ import annotations

from importlib.resources import files

from task_families import _buggy_modules, implement_function
from task_families._sources import source


def test_every_source_file_compiles_and_is_one_entry_s() -> None:
    root = files("task_families") / "sources"
    used = {
        "fix_failing_test": {m.source for m in _buggy_modules._MODULES},
        "implement_function": {s.source for s in implement_function._SPECS},
    }
    for family, sources in used.items():
        names = sorted(p.name for p in (root / family).iterdir() if p.name.endswith(".py"))
        assert len(names) == len(sources)
        for name in names:
            text = source(family, name.removesuffix(".py"))
            compile(text, name, "exec")
            assert text in sources, f"{family}/{name} is no entry's source"
