"""The compact prompt profile: a short system prompt and four briefly described tools."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from iflow.agent import Agent
from iflow.config import AgentConfig
from iflow.models.local import prompt_token_ids
from iflow.models.scripted import ScriptedModel
from iflow.models.tiny import build_tiny_model
from iflow.prompts import COMPACT_TOOLS
from iflow.runner import agent_config
from iflow.settings import load_settings
from iflow.workspace.local import LocalWorkspace


def call(name: str, **arguments: object) -> dict:
    return {"content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


@pytest.fixture
async def ws(tmp_path: Path):
    async with LocalWorkspace(tmp_path) as workspace:
        yield workspace


async def test_compact_profile_prompt_and_tools(ws, tmp_path: Path) -> None:
    script = [call("write_file", path="a.txt", content="x\n"), call("finish", summary="ok")]
    compact = Agent(
        ScriptedModel(script),
        ws,
        config=AgentConfig(approval_mode="yolo", prompt_profile="compact"),
    )
    full = Agent(ScriptedModel([]), ws, config=AgentConfig(approval_mode="yolo"))
    try:
        assert [s["function"]["name"] for s in compact.schemas] == list(COMPACT_TOOLS)
        shell = compact.schemas[0]["function"]
        assert shell["parameters"] == {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        }
        assert "\n" not in shell["description"] and shell["description"].endswith(".")
        system = compact.history[0].content
        assert "finish" in system and str(tmp_path) in system and len(system) < 200
        end = await compact.run("write a.txt")
        assert end.failure_mode is None and (tmp_path / "a.txt").read_text() == "x\n"
        tokenizer = AutoTokenizer.from_pretrained(
            build_tiny_model(tmp_path / "tiny", hidden_size=16, layers=1, heads=2)
        )
        short = len(prompt_token_ids(tokenizer, compact.history[:2], compact.schemas))
        long = len(prompt_token_ids(tokenizer, full.history[:1], full.schemas))
        assert short * 4 < long  # a prompt a small policy can afford
    finally:
        await compact.aclose()
        await full.aclose()


def test_the_profile_is_a_setting(tmp_path: Path) -> None:
    settings = load_settings(cwd=tmp_path, env={}, flags={"prompt_profile": "compact"})
    assert agent_config(settings, headless=True).prompt_profile == "compact"
    with pytest.raises(Exception, match="prompt-profile has an invalid value"):
        load_settings(cwd=tmp_path, env={}, flags={"prompt_profile": "tiny"})
