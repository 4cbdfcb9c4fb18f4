"""Agentic episodes in real sandboxes: scored results, and infrastructure faults resampled."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest
from transformers import AutoTokenizer

from ale.chunking import token_view
from ale.task import load_task
from iflow.models.tiny import build_tiny_model
from rock.backends.base import LABEL_DAEMON
from rock.episode_runner import DaemonPool, PoolRunner
from rock.pool_image import ensure_pool_image
from rock.synth.wiring import private_daemon
from roll.agentic.episodes import AgenticEpisodes, AgentSettings
from roll.gateway import Gateway, GatewayEpisodes
from roll.generation.base import Generation, SamplingParams
from roll.generation.queue import GenerationQueue

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "datasets" / "synth-mini" / "tasks"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


class ReplyBackend:
    """A generation backend at its seam: every answer is one scripted text; ``on_call`` runs
    before each batch (fault injection)."""

    name = "reply"

    def __init__(self, tokenizer: Any, text: str, on_call: Any = None) -> None:
        self.ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
        self.policy_version = 1
        self.on_call = on_call
        self.calls = 0

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        self.calls += 1
        if self.on_call is not None:
            self.on_call(self.calls)
        return [
            Generation(
                token_ids=list(self.ids), logprobs=[-1.0] * len(self.ids), finish_reason="stop"
            )
            for _ in prompts
        ]

    def sync_weights(self, model: Any, version: int) -> None:
        self.policy_version = version

    def close(self) -> None:
        pass


FINISH = '<tool_call>\n{"name": "finish", "arguments": {"summary": "nothing done"}}\n</tool_call>'


@pytest.fixture(scope="module")
def daemon() -> Any:
    ensure_pool_image(docker.from_env())
    daemon_id = f"roll-test-{uuid.uuid4().hex[:6]}"
    with private_daemon(daemon_id=daemon_id) as client:
        yield client, daemon_id


async def _run(
    client: Any,
    tiny: Path,
    backend: Any,
    size: int = 2,
    *,
    gateway: bool = False,
    agent: str = "iflow",
    kwargs: dict[str, Any] | None = None,
) -> tuple[AgenticEpisodes, list]:
    """A group of ``size`` episodes of the first task: iflow in-process, or over HTTP through
    the policy gateway (which ``backend.gateway`` then names, for fault injection)."""
    task = load_task(sorted(TASKS.iterdir())[0])
    source = DaemonPool(client, f"roll-{uuid.uuid4().hex[:4]}", size=size)
    source.wait_ready()
    try:
        tokenizer = AutoTokenizer.from_pretrained(tiny)
        async with GenerationQueue(backend, SamplingParams(max_new_tokens=64)) as queue:
            settings = AgentSettings(max_turns=3, name=agent, extra=dict(kwargs or {}))
            if gateway:
                settings.gateway = backend.gateway = Gateway(GatewayEpisodes(queue, tokenizer))
                backend.loop = asyncio.get_running_loop()
                await settings.gateway.start()
            try:
                episodes = AgenticEpisodes(PoolRunner(source), queue, tokenizer, agent=settings)
                trajectories = await episodes.group(task, size, "g0")
            finally:
                if settings.gateway is not None:
                    await settings.gateway.stop()
    finally:
        source.close()
    return episodes, trajectories


async def test_the_policy_s_own_failure_is_scored(daemon: Any, tiny: Path) -> None:
    client, _ = daemon
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    episodes, trajectories = await _run(client, tiny, ReplyBackend(tokenizer, FINISH))
    assert len(trajectories) == 2
    for trajectory in trajectories:
        assert trajectory.reward == 0.0 and trajectory.group_id == "g0"
        view = token_view(trajectory)
        assert sum(view.policy_mask) > 0 and all(
            view.logprobs[i] == -1.0 for i, m in enumerate(view.policy_mask) if m
        )
    assert episodes.counts.started == 2 and episodes.counts.scored == 2
    assert episodes.counts.retried == 0


async def test_over_the_gateway_the_policy_s_failure_is_scored_with_its_tokens(
    daemon: Any, tiny: Path
) -> None:
    client, _ = daemon
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    episodes, trajectories = await _run(client, tiny, ReplyBackend(tokenizer, FINISH), gateway=True)
    assert len(trajectories) == 2 and episodes.counts.scored == 2
    assert episodes.counts.gateway_calls == 2 and episodes.counts.without_calls == 0
    for trajectory in trajectories:
        assert trajectory.reward == 0.0 and trajectory.agent.name == "iflow"
        view = token_view(trajectory)  # recorded by the gateway, token-exact
        assert sum(view.policy_mask) == len(ReplyBackend(tokenizer, FINISH).ids)


async def test_a_gateway_restarted_mid_episode_resamples_the_episode(
    daemon: Any, tiny: Path
) -> None:
    client, _ = daemon
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    shell = (
        '<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "ls"}}\n</tool_call>'
    )

    def restart_on_first(call: int) -> None:
        if call == 1:  # the agent waits for its first answer: the gateway restarts under it
            backend.restarted = asyncio.run_coroutine_threadsafe(
                backend.gateway.restart(), backend.loop
            )

    backend = ReplyBackend(tokenizer, shell, on_call=restart_on_first)
    episodes, trajectories = await _run(client, tiny, backend, size=1, gateway=True)
    counts = episodes.counts
    assert backend.gateway.restarts == 1
    assert counts.reasons["model_error"] >= 1 and counts.retried >= 1  # run again, not a zero
    assert counts.started == counts.scored + counts.retried + counts.abandoned
    assert len(trajectories) == 1 and token_view(trajectories[0]).policy_mask


class TurnsBackend(ReplyBackend):
    """Answers with one scripted text per call, in order."""

    def __init__(self, tokenizer: Any, texts: list[str]) -> None:
        super().__init__(tokenizer, texts[0])
        self.turns = [
            [*tokenizer.encode(t, add_special_tokens=False), tokenizer.eos_token_id] for t in texts
        ]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        self.ids = self.turns[min(self.calls, len(self.turns) - 1)]
        return super().generate(prompts, params)


def _bash(command: str) -> str:
    return f'<tool_call>\n{{"name": "bash", "arguments": {{"command": "{command}"}}}}\n</tool_call>'


async def test_mini_swe_agent_unmodified_runs_in_the_sandbox_through_the_gateway(
    daemon: Any, tiny: Path
) -> None:
    """The PyPI mini-swe-agent, pointed at the gateway: its bash tool calls run in the
    episode's sandbox, its submit ends the episode, and the gateway records every call of the
    episode as one token sequence."""
    client, _ = daemon
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    backend = TurnsBackend(
        tokenizer,
        ["I look first.\n" + _bash("ls /app"), _bash("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")],
    )
    episodes, trajectories = await _run(
        client, tiny, backend, size=1, gateway=True, agent="mini-swe-agent"
    )
    assert episodes.counts.scored == 1 and episodes.counts.gateway_calls == 2
    (trajectory,) = trajectories
    assert trajectory.agent.name == "mini-swe-agent" and trajectory.failure_mode is None
    assert trajectory.reward == 0.0  # it only looked: the verifier scored that
    view = token_view(trajectory)
    assert sum(view.policy_mask) == sum(len(t) for t in backend.turns)
    text = tokenizer.decode(view.token_ids)
    assert "Please solve this issue" in text and "cask-4.11.3" in text  # ls ran in the sandbox


AGENT_PROGRAM = """
import os, subprocess, sys
import openai

instruction = sys.stdin.read()
client = openai.OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY: the gateway, this episode
messages = [{"role": "user", "content": instruction}]
first = client.chat.completions.create(model=os.environ["OPENAI_MODEL"], messages=messages)
messages.append({"role": "assistant", "content": first.choices[0].message.content})
sandbox = os.environ["ROCK_SANDBOX_ID"]
listing = subprocess.run(
    [sys.argv[1], "sandbox", "exec", sandbox, "--", "ls", "/app"], capture_output=True, text=True
)
messages.append({"role": "user", "content": listing.stdout})
client.chat.completions.create(model=os.environ["OPENAI_MODEL"], messages=messages)
print("done", listing.returncode)
"""


async def test_an_agent_program_gets_the_gateway_and_its_sandbox_in_its_environment(
    daemon: Any, tiny: Path, tmp_path: Path
) -> None:
    import sys

    client, _ = daemon
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    program = tmp_path / "agent.py"
    program.write_text(AGENT_PROGRAM)
    rock = Path(sys.executable).parent / "rock"
    backend = TurnsBackend(tokenizer, ["I look first.", "Nothing to do."])
    episodes, trajectories = await _run(
        client,
        tiny,
        backend,
        size=1,
        gateway=True,
        agent="command",
        kwargs={"command": [sys.executable, str(program), str(rock)]},
    )
    assert episodes.counts.scored == 1 and episodes.counts.gateway_calls == 2
    (trajectory,) = trajectories
    assert trajectory.agent.name == "command" and trajectory.failure_mode is None
    assert trajectory.extra["command"]["exit_code"] == 0
    text = tokenizer.decode(token_view(trajectory).token_ids)
    assert "cask-4.11.3" in text  # what `rock sandbox exec` saw in the episode's sandbox


async def test_agents_that_never_call_or_crash_end_by_today_s_rules_and_are_counted(
    daemon: Any, tiny: Path
) -> None:
    client, _ = daemon
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    silent, kept = await _run(
        client,
        tiny,
        ReplyBackend(tokenizer, FINISH),
        size=1,
        gateway=True,
        agent="policy_fakes:SilentAgent",
    )
    # it did nothing and the verifier said so: scored, no tokens to train on, counted
    assert silent.counts.scored == 1 and silent.counts.without_calls == 1
    assert kept[0].reward == 0.0 and not token_view(kept[0]).token_ids
    crashing, lost = await _run(
        client,
        tiny,
        ReplyBackend(tokenizer, FINISH),
        size=1,
        gateway=True,
        agent="policy_fakes:CrashingAgent",
    )
    counts = crashing.counts  # an agent's crash is not a score: run again, then abandoned
    assert counts.gateway_calls == counts.started == 3 and counts.abandoned == 1
    assert counts.reasons["unknown_agent_error"] == 3 and lost == []


async def test_garbage_tool_calls_are_the_policy_s_failure(daemon: Any, tiny: Path) -> None:
    client, _ = daemon
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    garbage = "<tool_call>\n{not json at all\n</tool_call>"
    episodes, trajectories = await _run(client, tiny, ReplyBackend(tokenizer, garbage), size=1)
    assert len(trajectories) == 1
    assert trajectories[0].reward == 0.0
    assert trajectories[0].failure_mode is not None  # format_error or limits: the policy's own
    assert episodes.counts.scored == 1 and episodes.counts.retried == 0


async def test_a_sandbox_killed_mid_episode_is_resampled(daemon: Any, tiny: Path) -> None:
    client, daemon_id = daemon
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    engine = docker.from_env()

    def kill_on_first(call: int) -> None:
        if call == 1:  # the agent is waiting for its first answer: its sandbox dies
            for container in engine.containers.list(
                filters={"label": f"{LABEL_DAEMON}={daemon_id}"}
            ):
                container.kill()

    shell = (
        '<tool_call>\n{"name": "run_shell_command", "arguments": {"command": "ls"}}\n</tool_call>'
    )
    backend = ReplyBackend(tokenizer, shell, on_call=kill_on_first)
    episodes, trajectories = await _run(client, tiny, backend, size=1)
    counts = episodes.counts
    assert counts.started == counts.scored + counts.retried + counts.abandoned
    assert counts.retried >= 1  # the lost sandbox's episode ran again
    assert len(trajectories) == 1 and trajectories[0].reward == 0.0


@pytest.mark.parametrize(
    ("staleness", "agent", "steps"),
    [
        (0, "tasks.agent=iflow", 1),
        (1, "tasks.agent=iflow", 2),
        (0, "tasks.agent={name: iflow, transport: gateway}", 2),
        (0, "tasks.agent={name: mini-swe-agent, kwargs: {step_limit: 2}}", 2),
    ],
    ids=["sync", "async", "iflow-over-http", "mini-swe-agent"],
)
def test_roll_train_on_tasks_in_sandboxes(
    tmp_path: Path, tiny: Path, staleness: int, agent: str, steps: int
) -> None:
    import shutil

    from roll.config import TrainConfig, load_config
    from roll.metrics import read_metrics
    from roll.train import run_train

    dataset = tmp_path / "data" / "tasks"
    for source in sorted(TASKS.iterdir())[:2]:
        shutil.copytree(source, dataset / source.name)
    config = load_config(
        TrainConfig,
        None,
        [
            f"run_dir={tmp_path / 'run'}",
            f"model.path={tiny}",
            f"tasks.dataset={tmp_path / 'data'}",
            "tasks.pool_size=2",
            "tasks.max_turns=2",
            "rollout.groups_per_step=1",
            "rollout.group_size=2",
            "rollout.max_new_tokens=16",
            f"tasks.max_staleness={staleness}",
            agent,
            "algorithm.name=ipa",
            f"run.steps={steps}",
            "run.progress=false",
            "run.tensorboard=false",
        ],
    )
    out = run_train(config, log=lambda _m: None)
    assert (out / "model.safetensors").is_file()
    records = read_metrics(tmp_path / "run")
    assert len(records) == steps
    record = records[-1]
    assert record["rollout/episodes"] == 2
    # every episode started is accounted for: scored, retried after an infrastructure
    # failure, abandoned, or still running in a group of the next step
    assert record["episodes/scored"] >= 2 * len(records)
    if staleness:
        assert record["episodes/groups_in_flight"] + record["episodes/stale_dropped_groups"] >= 1
    rollouts = (tmp_path / "run" / "rollouts" / "step-000001.jsonl").read_text().splitlines()
    assert len(rollouts) == 2
    # the episodes' sampled tokens reached the update: trained on, or left out as carrying
    # no gradient (a failed episode under IPA)
    assert record["train/tokens"] > 0 or record["train/zero_gradient_samples"] > 0
    if "iflow," in agent or "mini" in agent:
        assert record["episodes/gateway_calls"] >= 2


def _copy_task(tmp_path: Path, name: str = "task") -> Path:
    import shutil

    target = tmp_path / "data" / "tasks" / name
    shutil.copytree(sorted(TASKS.iterdir())[0], target)
    return target


async def test_a_verifier_that_hangs_is_infrastructure_not_a_zero(
    daemon: Any, tiny: Path, tmp_path: Path
) -> None:
    client, _ = daemon
    task_dir = _copy_task(tmp_path)
    (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\nsleep 600\n")
    toml = (
        (task_dir / "task.toml")
        .read_text()
        .replace("[verifier]\ntimeout_sec = 120.0", "[verifier]\ntimeout_sec = 2.0")
    )
    (task_dir / "task.toml").write_text(toml)
    task = load_task(task_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    source = DaemonPool(client, f"roll-{uuid.uuid4().hex[:4]}", size=1)
    source.wait_ready()
    try:
        async with GenerationQueue(
            ReplyBackend(tokenizer, FINISH), SamplingParams(max_new_tokens=64)
        ) as queue:
            episodes = AgenticEpisodes(
                PoolRunner(source), queue, tokenizer, agent=AgentSettings(max_turns=2),
                max_attempts=2,
            )  # fmt: skip
            result = await episodes.episode(task, "g")
    finally:
        source.close()
    assert result is None  # never scored as zero
    counts = episodes.counts
    assert (counts.started, counts.scored, counts.retried, counts.abandoned) == (2, 0, 1, 1)
    assert sum(counts.reasons.values()) == 2


def test_uniform_groups_are_refilled_up_to_the_limit(
    daemon: Any, tiny: Path, tmp_path: Path
) -> None:
    from roll.agentic.collector import REFILL_LIMIT, TaskRollouts
    from roll.config import TasksConfig

    _copy_task(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    config = TasksConfig(dataset=str(tmp_path / "data"), pool_size=2, max_turns=2, url=None)
    rollouts = TaskRollouts(
        config,
        tokenizer,
        seed=0,
        backend=ReplyBackend(tokenizer, FINISH),  # never solves: every group is all zeros
        params=SamplingParams(max_new_tokens=64),
        group_size=2,
        groups_per_step=1,
        refill_uniform=True,
    )
    with rollouts:
        trajectories = rollouts.take(0)
        metrics = rollouts.metrics()
    assert len(trajectories) == 2  # after the limit the uniform group is taken
    assert metrics["episodes/uniform_refilled_groups"] == REFILL_LIMIT
    assert metrics["episodes/started"] == 2 * (REFILL_LIMIT + 1)
    assert metrics["episodes/scored"] == metrics["episodes/started"]


async def test_a_group_starts_from_forks_of_a_sandbox_the_expert_s_turns_ran_in(
    daemon: Any, tiny: Path
) -> None:
    """Chunk-level initialised resampling on real sandboxes: the expert's first 4 turns
    (which write the report) are replayed once, by iflow's tools, in a sandbox of the task;
    each of the group's episodes runs in a fork of it and continues from those turns. The
    policy only says `finish`, so the report the verifier passes was the fork's from its
    parent. The expert's turns are in each trajectory, marked for imitation; the parent
    and the forks are gone afterwards."""
    from ale.jsonl import read_jsonl
    from ale.trajectory import Role, Trajectory
    from roll.agentic.episodes import Start
    from roll.algo.batch import sample_from_trajectory

    client, _ = daemon
    task = load_task(sorted(TASKS.iterdir())[0])
    experts = read_jsonl(TASKS.parent / "trajectories.jsonl", Trajectory)
    expert = next(t for t in experts if t.task_id == task.id)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    source = DaemonPool(client, f"roll-{uuid.uuid4().hex[:4]}", size=1)
    source.wait_ready()
    try:
        backend = ReplyBackend(tokenizer, FINISH)
        async with GenerationQueue(backend, SamplingParams(max_new_tokens=64)) as queue:
            episodes = AgenticEpisodes(
                PoolRunner(source),
                queue,
                tokenizer,
                agent=AgentSettings(max_turns=6, context_limit=100_000),
            )
            forked = await episodes.group(task, 2, "g-a4", start=Start(expert, 4, 0))
            scratch = await episodes.group(task, 1, "g-a0", start=Start(expert, 0, 0))
    finally:
        source.close()
    assert [t.reward for t in forked] == [1.0, 1.0] and [t.reward for t in scratch] == [0.0]
    for trajectory in forked:
        assert trajectory.extra["roll"]["anchor"] == 4
        turns = [s for s in trajectory.steps if s.role is Role.ASSISTANT]
        assert len(turns) == 5, (trajectory.failure_mode, trajectory.notes, trajectory.steps[-2:])
        assert all(s.prefix for s in turns[:4])
        assert turns[3].tool_calls[0].name == "write_file"
        assert not turns[4].prefix  # the policy's own finish
        sample = sample_from_trajectory(trajectory)  # one growing token sequence
        assert sum(sample.expert_mask) == sum(len(s.token_ids or []) for s in turns[:4])
        assert sum(sample.rl_mask) == len(turns[4].token_ids or [])
    assert episodes.counts.scored == 3 and episodes.counts.abandoned == 0
    assert backend.calls >= 1
    left = [b for b in client.list() if b.labels.get("dev.ale.rock.forked-from")]
    assert left == [] or all(b.state == "deleted" for b in left)


def _train_on_one_task_with_its_expert(tmp_path: Path, tiny: Path, *overrides: str) -> None:
    """`roll train` (IPA, the tiny policy, one group of 2 a step) on the first synth-mini task
    with its expert trajectory as `resample.experts`, in `tmp_path / "run"`."""
    import shutil

    from roll.config import TrainConfig, load_config
    from roll.train import run_train

    task = sorted(TASKS.iterdir())[0]
    shutil.copytree(task, tmp_path / "data" / "tasks" / task.name)
    experts = tmp_path / "experts.jsonl"
    lines = (TASKS.parent / "trajectories.jsonl").read_text().splitlines()
    experts.write_text("".join(f"{x}\n" for x in lines if f'"{task.name}"' in x))
    config = load_config(
        TrainConfig,
        None,
        [
            f"run_dir={tmp_path / 'run'}", f"model.path={tiny}",
            f"tasks.dataset={tmp_path / 'data'}", "tasks.pool_size=1",
            "tasks.context_limit=100000", "rollout.groups_per_step=1", "rollout.group_size=2",
            f"resample.experts={experts}", "algorithm.name=ipa", "run.progress=false",
            "run.tensorboard=false", *overrides,
        ],
    )  # fmt: skip
    run_train(config, log=lambda _m: None)


def test_roll_train_on_tasks_resamples_from_expert_turns_in_forked_sandboxes(
    tmp_path: Path, tiny: Path
) -> None:
    """`roll train` with `tasks:` and `resample:` (parallel anchors): each step's group of
    the task starts at the expert's anchors in turn (0, then the last chunk), its episodes
    in forks of the sandbox the expert's turns were replayed in; the anchor reaches the
    rollouts, and the expert's turns carry their token ids (the imitation term's, not RL's)."""
    import json

    from roll.metrics import read_metrics

    _train_on_one_task_with_its_expert(
        tmp_path, tiny, "tasks.max_turns=6", "rollout.max_new_tokens=16",
        "resample.mode=parallel", "resample.anchors=2", "run.steps=2",
    )  # fmt: skip
    records = read_metrics(tmp_path / "run")
    assert [r["rollout/episodes"] for r in records] == [2, 2]
    anchors = []
    for step in (1, 2):
        rows = (tmp_path / "run" / "rollouts" / f"step-{step:06d}.jsonl").read_text()
        trajectories = [json.loads(line) for line in rows.splitlines()]
        anchors.append({t["extra"]["roll"]["anchor"] for t in trajectories if "roll" in t["extra"]})
        assert all(t["group_id"].endswith(f"-e0-a{5 if step == 2 else 0}") for t in trajectories)
    assert anchors == [set(), {5}]  # anchor 0 runs the task from its start, unmarked
    marked = json.loads(rows.splitlines()[0])
    prefix = [s for s in marked["steps"] if s.get("prefix")]
    assert len(prefix) == 5 and all(s["token_ids"] for s in prefix)


def test_roll_train_on_tasks_imitates_the_whole_expert_of_a_group_without_a_success(
    tmp_path: Path, tiny: Path
) -> None:
    """`resample.mode: start`: the group runs the task from its beginning in real sandboxes;
    the tiny policy solves nothing, so the step adds the expert's whole trajectory (rendered
    as the agent's episode, its prompt matching the episodes') with an imitation term."""
    from roll.metrics import read_metrics

    _train_on_one_task_with_its_expert(
        tmp_path, tiny, "tasks.max_turns=2", "rollout.max_new_tokens=8", "resample.mode=start",
        "run.steps=1",
    )  # fmt: skip
    (record,) = read_metrics(tmp_path / "run")
    assert record["rollout/reward_mean"] == 0.0
    assert (record["resample/whole_experts"], record["resample/whole_experts_unmatched"]) == (1, 0)
    assert record["train/imitation_loss"] > 0
