"""`roll sft`: trajectories rendered as the agent's prompts, per-turn masks, training, resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoTokenizer

from ale.jsonl import read_jsonl, write_jsonl
from ale.trajectory import AgentInfo, Role, Step, StepMark, ToolCall, ToolResult, Trajectory
from iflow.models.local import prompt_token_ids
from iflow.models.tiny import build_tiny_model
from roll.config import SFTConfig, load_config
from roll.demonstrations import iflow_tool_schemas
from roll.errors import ConfigError
from roll.metrics import read_metrics
from roll.sft import run_sft, tokenize_trajectory

REPO = Path(__file__).resolve().parents[3]
SYNTH = REPO / "datasets" / "synth-mini" / "trajectories.jsonl"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


def _call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(id=f"call_{name}", name=name, arguments=arguments)


def _trajectory(reward: float = 1.0) -> Trajectory:
    return Trajectory(
        agent=AgentInfo(name="iflow"),
        reward=reward,
        steps=[
            Step(role=Role.SYSTEM, content="You are iflow."),
            Step(role=Role.USER, content="Count the lines of data.txt."),
            Step(
                role=Role.ASSISTANT,
                content="Counting.",
                tool_calls=[_call("run_shell_command", command="wx -l data.txt")],
                mark=StepMark.MISTAKE,
            ),
            Step(
                role=Role.TOOL,
                tool_results=[
                    ToolResult(call_id="call_run_shell_command", content="wx: not found")
                ],
            ),
            Step(
                role=Role.ASSISTANT,
                content="That was a typo; wc is the tool.",
                tool_calls=[_call("run_shell_command", command="wc -l data.txt")],
                mark=StepMark.RECOVERY,
            ),
            Step(
                role=Role.TOOL,
                tool_results=[ToolResult(call_id="call_run_shell_command", content="3 data.txt")],
            ),
            Step(role=Role.ASSISTANT, content="", tool_calls=[_call("finish", summary="3 lines")]),
        ],
    )


def test_tokenised_like_the_agent_prompt_with_the_mistake_turn_masked(tiny: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    tools = iflow_tool_schemas()
    trajectory = _trajectory()
    result = tokenize_trajectory(trajectory, tokenizer, tools, max_seq_len=100_000)
    assert result is not None and result.truncated_turns == 0
    sample = result.sample
    whole = prompt_token_ids(tokenizer, trajectory.steps, tools, add_generation_prompt=False)
    assert sample.input_ids == whole  # exactly what the agent's local model would have seen
    # the targets are the three assistant turns, minus the one marked as a mistake
    runs: list[tuple[int, int]] = []
    start = None
    for i, flag in enumerate([*sample.expert_mask, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            runs.append((start, i))
            start = None
    texts = [tokenizer.decode(sample.input_ids[a:b]) for a, b in runs]
    assert len(runs) == 2
    assert "wc -l" in texts[0] and "typo" in texts[0] and "wx -l" not in texts[0]
    assert '"finish"' in texts[1]
    assert "wx -l" in tokenizer.decode(sample.input_ids)  # still there as context
    assert not any(sample.rl_mask)


def test_a_step_atif_marked_as_copied_context_is_context_not_a_target(tiny: Path) -> None:
    """``is_copied_context`` (ATIF 1.7) imports as the step's mark ``copied``: no loss on it."""
    from ale.atif import from_atif, to_atif

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    doc = to_atif(_trajectory())
    last_agent = [s for s in doc["steps"] if s["source"] == "agent"][-1]
    last_agent["is_copied_context"] = True  # the finish turn, a target until now
    imported = from_atif(doc)
    marked = [s for s in imported.steps if s.mark is StepMark.COPIED]
    assert len(marked) == 1
    full = tokenize_trajectory(_trajectory(), tokenizer, [], max_seq_len=100_000)
    copied = tokenize_trajectory(imported, tokenizer, [], max_seq_len=100_000)
    assert full is not None and copied is not None
    assert copied.sample.input_ids == full.sample.input_ids
    assert sum(copied.sample.expert_mask) < sum(full.sample.expert_mask)


def test_too_long_trajectories_are_cut_at_a_turn_boundary(tiny: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    whole = tokenize_trajectory(_trajectory(), tokenizer, [], max_seq_len=100_000)
    assert whole is not None
    cut = tokenize_trajectory(_trajectory(), tokenizer, [], max_seq_len=len(whole.sample) - 1)
    assert cut is not None and cut.truncated_turns == 1
    assert whole.sample.input_ids[: len(cut.sample)] == cut.sample.input_ids
    assert tokenize_trajectory(_trajectory(), tokenizer, [], max_seq_len=10) is None


def _sft_config(tmp_path: Path, tiny: Path, data: list[str], **extra: object) -> Path:
    config = {
        "run_dir": str(tmp_path / "run"),
        "model": {"path": str(tiny)},
        "data": data,
        "batch_size": 4,
        "max_seq_len": 8192,
        "tools": "none",
        "optim": {"lr": 3e-3},
        "run": {"steps": 6, "checkpoint_every": 2, "progress": False, "tensorboard": False},
    }
    config.update(extra)
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_sft_on_synthesised_trajectories_lowers_the_loss(tmp_path: Path, tiny: Path) -> None:
    trajectories = list(read_jsonl(SYNTH, Trajectory))[:4]
    write_jsonl(tmp_path / "four.jsonl", trajectories)
    path = _sft_config(tmp_path, tiny, [str(tmp_path / "four.jsonl")])
    result = subprocess.run(
        [sys.executable, "-m", "roll.cli", "sft", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    records = read_metrics(tmp_path / "run")
    losses = [r["train/loss"] for r in records]
    assert len(losses) == 6 and losses[-1] < losses[0] - 0.1  # the same 4 trajectories each step
    before = load_file(str(tiny / "model.safetensors"))
    after = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    assert any(not bool((before[k] == after[k]).all()) for k in before)


def test_sft_resume_continues_the_same_data_order(tmp_path: Path, tiny: Path) -> None:
    trajectories = list(read_jsonl(SYNTH, Trajectory))[:6]
    write_jsonl(tmp_path / "six.jsonl", trajectories)
    data = [str(tmp_path / "six.jsonl")]
    whole = load_config(SFTConfig, _sft_config(tmp_path, tiny, data), [f"run_dir={tmp_path / 'a'}"])
    run_sft(whole, log=lambda _m: None)
    half = load_config(
        SFTConfig, _sft_config(tmp_path, tiny, data), [f"run_dir={tmp_path / 'b'}", "run.steps=4"]
    )
    run_sft(half, log=lambda _m: None)
    rest = load_config(SFTConfig, _sft_config(tmp_path, tiny, data), [f"run_dir={tmp_path / 'b'}"])
    run_sft(rest, resume=True, log=lambda _m: None)
    a = load_file(str(tmp_path / "a" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "b" / "model" / "model.safetensors"))
    assert all(bool((a[k] == b[k]).all()) for k in a)


def test_sft_runs_the_shared_prompt_once_and_learns_the_same(tmp_path: Path, tiny: Path) -> None:
    """The trajectories' common start (system prompt and tools) runs once per micro-batch:
    fewer positions through the model, the same weights as running every row whole."""
    trajectories = list(read_jsonl(SYNTH, Trajectory))[:6]
    write_jsonl(tmp_path / "six.jsonl", trajectories)
    data = [str(tmp_path / "six.jsonl")]
    weights, tokens = [], []
    for share in (False, True):
        run = tmp_path / f"share-{share}"
        config = load_config(
            SFTConfig, _sft_config(tmp_path, tiny, data, tools="iflow-brief"),
            [f"run_dir={run}", f"run.share_prefix={str(share).lower()}"],
        )  # fmt: skip
        run_sft(config, log=lambda _m: None)
        weights.append(load_file(str(run / "model" / "model.safetensors")))
        tokens.append(sum(r["train/tokens"] for r in read_metrics(run)))
    for name, plain in weights[0].items():
        torch.testing.assert_close(weights[1][name], plain, rtol=1e-4, atol=1e-5)
    assert tokens[1] < 0.8 * tokens[0], tokens


def test_bad_data_is_one_sentence(tmp_path: Path, tiny: Path) -> None:
    with pytest.raises(ConfigError, match="no file or directory"):
        run_sft(
            load_config(SFTConfig, _sft_config(tmp_path, tiny, [str(tmp_path / "missing.jsonl")])),
            log=lambda _m: None,
        )
    write_jsonl(tmp_path / "failed.jsonl", [_trajectory(reward=0.0)])
    with pytest.raises(ConfigError, match="1 unsuccessful"):
        run_sft(
            load_config(SFTConfig, _sft_config(tmp_path, tiny, [str(tmp_path / "failed.jsonl")])),
            log=lambda _m: None,
        )
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"trajectories\.jsonl"):
        run_sft(
            load_config(SFTConfig, _sft_config(tmp_path, tiny, [str(tmp_path / "empty")])),
            log=lambda _m: None,
        )


async def test_compact_rendering_matches_the_compact_agent(tmp_path: Path, tiny: Path) -> None:
    from iflow.agent import Agent
    from iflow.config import AgentConfig
    from iflow.models.scripted import ScriptedModel
    from iflow.workspace.local import LocalWorkspace
    from roll.demonstrations import as_compact

    async with LocalWorkspace(tmp_path) as workspace:
        full = Agent(ScriptedModel([]), workspace, config=AgentConfig(approval_mode="yolo"))
        compact = Agent(
            ScriptedModel([]),
            workspace,
            config=AgentConfig(approval_mode="yolo", prompt_profile="compact"),
        )
        try:
            recorded = _trajectory()
            recorded.steps[0] = full.history[0]  # as the default agent recorded it
            rendered = as_compact(recorded)
            assert rendered.steps[0].content == compact.history[0].content
            assert iflow_tool_schemas(compact=True) == compact.schemas
            tokenizer = AutoTokenizer.from_pretrained(tiny)
            sample = tokenize_trajectory(rendered, tokenizer, compact.schemas, max_seq_len=100_000)
            assert sample is not None
            opening = prompt_token_ids(tokenizer, rendered.steps[:2], compact.schemas)
            assert sample.sample.input_ids[: len(opening)] == opening
        finally:
            await full.aclose()
            await compact.aclose()


def test_brief_rendering_is_what_the_brief_policy_sees(tmp_path: Path, tiny: Path) -> None:
    from roll.policy import PolicyModel
    from roll.sft import sft_samples

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    recorded = _trajectory()
    config = load_config(SFTConfig, _sft_config(tmp_path, tiny, []), ["tools=iflow-brief"])
    (sample,), counts = sft_samples([recorded], tokenizer, config)
    assert counts["too_long"] == 0
    schemas = iflow_tool_schemas(compact=True)
    policy = PolicyModel(None, tokenizer, max_new_tokens=8, tool_format="brief")  # type: ignore[arg-type]
    from roll.demonstrations import as_compact

    opening, rewritten = policy.prompt_ids(as_compact(recorded).steps[:2], schemas)
    assert not rewritten and sample.input_ids[: len(opening)] == opening
    text = tokenizer.decode(opening)
    assert "run_shell_command(command): " in text and '"properties"' not in text
    compact = load_config(SFTConfig, _sft_config(tmp_path, tiny, []), ["tools=iflow-compact"])
    (longer,), _ = sft_samples([recorded], tokenizer, compact)
    assert len(longer.input_ids) > len(sample.input_ids)


def test_tiny_model_tokenizer_learns_the_corpus(tmp_path: Path) -> None:
    from iflow.models.parsing import render_tools_prompt
    from roll.config import ModelConfig
    from roll.session import ensure_model

    write_jsonl(tmp_path / "data.jsonl", [_trajectory() for _ in range(3)])
    plain = ensure_model(ModelConfig(path=str(tmp_path / "plain"), tiny={"vocab_size": 600}))
    tuned = ensure_model(
        ModelConfig(
            path=str(tmp_path / "tuned"),
            tiny={"vocab_size": 600, "corpus": [str(tmp_path / "data.jsonl")]},
        )
    )
    brief = render_tools_prompt(iflow_tool_schemas(compact=True), brief=True)
    a = AutoTokenizer.from_pretrained(plain)
    b = AutoTokenizer.from_pretrained(tuned)
    assert len(b(brief).input_ids) < 0.8 * len(a(brief).input_ids)
    with pytest.raises(ConfigError, match="no file or directory"):
        ensure_model(
            ModelConfig(path=str(tmp_path / "bad"), tiny={"corpus": [str(tmp_path / "nope")]})
        )
