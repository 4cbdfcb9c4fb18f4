"""A broken package in ale's entry-point groups: one sentence naming it, the others still load.

The broken distributions are real ones, a ``*.dist-info`` folder and a module on
``sys.path``, found by importlib.metadata as an installed package would be.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ale.agents import AgentNotFound, load_agent
from ale.plugins import PluginLoadError
from ale.synth import family as fam


def install_broken(root: Path, *, group: str, name: str, module_text: str) -> None:
    """A distribution ``broken-plugin`` declaring ``name`` in ``group`` as ``broken_plugin_mod``."""
    info = root / "broken_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{name} = broken_plugin_mod\n")
    (root / "broken_plugin_mod.py").write_text(module_text)


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "broken_plugin_mod", raising=False)
    monkeypatch.setattr(fam, "_broken", {})
    monkeypatch.setattr(fam, "_loaded", set(fam._loaded))
    return tmp_path


def test_a_family_package_that_fails_to_import_is_named_and_the_others_still_load(
    on_path: Path,
) -> None:
    install_broken(
        on_path, group=fam.ENTRY_POINTS, name="broken", module_text="import not_a_module_here\n"
    )
    known = fam.families()
    assert "text-find" in known  # the built-in package still loads
    (error,) = fam.broken_packages()
    text = str(error)
    assert text.startswith("the task-family package 'broken-plugin' is installed but failed")
    assert "ModuleNotFoundError" in text and "pip uninstall broken-plugin" in text
    assert "\n" not in text
    with pytest.raises(fam.UnknownFamily, match="among those that loaded; the task-family package"):
        fam.get_family("its-family")
    assert fam.get_family("text-find").name == "text-find"


def test_a_family_that_breaks_a_registration_rule_is_a_load_error(on_path: Path) -> None:
    module = (
        "from ale.synth.family import Family, register\n"
        "@register\n"
        "class Odd(Family):\n"
        "    name = 'odd-family'\n"
        "    category = 'not-a-category'\n"
    )
    install_broken(on_path, group=fam.ENTRY_POINTS, name="odd", module_text=module)
    fam.families()
    (error,) = fam.broken_packages()
    assert "ValueError: family odd-family declares category 'not-a-category'" in str(error)


def test_an_agent_package_that_fails_to_import_is_one_sentence(on_path: Path) -> None:
    install_broken(on_path, group="ale.agents", name="brokenagent", module_text="def broken(:\n")
    with pytest.raises(PluginLoadError) as info:
        load_agent("brokenagent")
    assert str(info.value).startswith("the agent package 'broken-plugin' is installed but failed")
    assert "SyntaxError" in str(info.value)
    assert info.value.distribution == "broken-plugin"


def test_an_agent_named_by_module_and_class_is_built_or_one_sentence(on_path: Path) -> None:
    (on_path / "my_agent_mod.py").write_text(
        "class Mine:\n    name = 'mine'\n    def __init__(self, **kw):\n        self.kw = kw\n"
        "NOT_A_CLASS = 3\n"
    )
    agent = load_agent("my_agent_mod:Mine", base_url="http://x/v1")
    assert agent.name == "mine" and agent.kw == {"base_url": "http://x/v1"}  # type: ignore[attr-defined]
    with pytest.raises(AgentNotFound, match=r"'my_agent_mod:Gone' names no agent class"):
        load_agent("my_agent_mod:Gone")
    with pytest.raises(AgentNotFound, match=r"'nowhere_mod:X' names no agent class"):
        load_agent("nowhere_mod:X")
    with pytest.raises(AgentNotFound, match="cannot be built"):
        load_agent("my_agent_mod:NOT_A_CLASS")


def test_only_an_agent_whose_run_takes_context_is_given_one() -> None:
    from ale.agents import accepts_context

    class Plain:
        async def run(self, instruction, sandbox, *, logs_dir=None, timeout_sec=None): ...

    class Aware:
        async def run(self, instruction, sandbox, *, context=None, **options): ...

    assert not accepts_context(Plain()) and accepts_context(Aware())
    assert not accepts_context(object())
