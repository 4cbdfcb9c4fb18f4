"""The programs the families put into tasks live as files (task_families/sources), read as
code: each compiles, each is one family entry's or filled in by its family, and the family
hands it on byte for byte."""

from __future__ import annotations

import tomllib
from importlib.resources import files

import pytest
from task_families import _buggy_modules, _function_specs
from task_families._sources import fill, source


def test_every_source_file_compiles_and_is_one_entry_s() -> None:
    root = files("task_families") / "sources"
    used = {
        "fix_failing_test": {m.source for m in _buggy_modules._MODULES},
        "implement_function": {s.source for s in _function_specs.SPECS},
    }
    for family, sources in used.items():
        names = sorted(p.name for p in (root / family).iterdir() if p.name.endswith(".py"))
        assert len(names) == len(sources)
        for name in names:
            text = source(family, name.removesuffix(".py"))
            compile(text, name, "exec")
            assert text in sources, f"{family}/{name} is no entry's source"


def test_every_program_file_compiles() -> None:
    root = files("task_families") / "sources"
    names = [(d.name, p.name) for d in root.iterdir() if d.is_dir() for p in d.iterdir()]
    programs = [(family, name) for family, name in names if name.endswith(".py")]
    assert len(programs) > 20
    for family, name in programs:
        compile(source(family, name.removesuffix(".py")), name, "exec")


def test_fill_puts_reprs_in_the_slots_and_wants_every_one() -> None:
    text = fill("checksum_audit", "test_outputs", rel="a b", out="/o", as_json=True, expected="{}")
    assert "REL = 'a b'\n" in text and "AS_JSON = True\n" in text and '"$' not in text
    with pytest.raises(KeyError, match="slots"):
        fill("checksum_audit", "test_outputs", rel="a")


def test_every_wording_file_is_used_by_its_family() -> None:
    root = files("task_families") / "sources"
    families = [d.name for d in root.iterdir() if d.is_dir() and (d / "wording.toml").is_file()]
    assert len(families) == 13
    for family in families:
        module = (files("task_families") / f"{family}.py").read_text(encoding="utf-8")
        data = tomllib.loads((root / family / "wording.toml").read_text(encoding="utf-8"))
        for key, value in data.items():
            assert f'"{key}")' in module, f"{family}/wording.toml: {key} is used nowhere"
            lists = value.values() if isinstance(value, dict) else [value]
            assert all(v and all(isinstance(s, str) for s in v) for v in lists), key
