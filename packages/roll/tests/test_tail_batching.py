"""Tail batching (``rollout.schedule: tail_batching``): short rounds keep the first groups to
finish, long rounds run the deferred prompts; every sample on-policy; its faults."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from safetensors.torch import load_file

from ale.trajectory import Trajectory
from iflow.models.tiny import build_tiny_model
from roll.config import TrainConfig, load_config
from roll.envs import make_env
from roll.errors import ConfigError
from roll.generation import HFBackend, SamplingParams
from roll.metrics import read_metrics
from roll.rollout import EpisodeRequest, RolloutEngine
from roll.train import run_train

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "datasets" / "synth-mini" / "tasks"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


def _settings(tiny: Path, run_dir: Path, **run: Any) -> dict[str, Any]:
    # guess: episodes of 1 to 4 turns, so groups finish at different turns
    return {
        "seed": 5,
        "run_dir": str(run_dir),
        "model": {"path": str(tiny)},
        "env": {"name": "guess", "kwargs": {"n": 6, "max_turns": 4}},
        "rollout": {
            "groups_per_step": 2,
            "group_size": 3,
            "max_new_tokens": 4,
            "schedule": "tail_batching",
            "tail_batching": {"eta": 1.5, "long_round_every": 3},
        },
        "run": {"steps": 4, "checkpoint_every": 1, "progress": False, "tensorboard": False,
                **run},
        "optim": {"lr": 1e-3},
    }  # fmt: skip


def _versions(run_dir: Path, step: int) -> list[int | None]:
    lines = (run_dir / "rollouts" / f"step-{step:06d}.jsonl").read_text().splitlines()
    return [
        s.policy_version
        for line in lines
        for s in Trajectory.model_validate_json(line).steps
        if s.role.value == "assistant"
    ]


def test_short_rounds_keep_the_first_groups_to_finish(tiny: Path) -> None:
    backend = HFBackend.from_path(tiny, device="cpu")
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=3)
    requests = [
        EpisodeRequest(env=make_env("guess", n=6, max_turns=4), seed=seed, group_id=f"g{seed}")
        for seed in range(6)
        for _ in range(2)
    ]
    engine = RolloutEngine(backend, backend.tokenizer, params, max_seq_len=256)
    whole = engine.run(requests)
    turns: dict[str, int] = {}
    for t in whole:  # the turn each group ended at
        group = str(t.group_id)
        turns[group] = max(turns.get(group, 0), int(t.extra["roll"]["turns"]))
    first = sorted(turns, key=lambda g: (turns[g], int(g[1:])))[:2]
    backend.prefix_cache.clear(backend.policy_version)  # type: ignore[union-attr]
    again = [EpisodeRequest(env=make_env("guess", n=6, max_turns=4), seed=r.seed,
                            group_id=r.group_id) for r in requests]  # fmt: skip
    kept = RolloutEngine(backend, backend.tokenizer, params, max_seq_len=256).run(
        again, keep_groups=2
    )
    assert sorted({str(t.group_id) for t in kept}) == sorted(first)
    assert len(kept) == 4  # whole groups

    def tokens(trajectories: list[Trajectory]) -> list[Any]:
        return [(t.group_id, [s.token_ids for s in t.steps]) for t in trajectories]

    # the same episodes as when nothing is cut
    assert tokens(kept) == tokens([t for t in whole if t.group_id in first])


def test_every_sample_is_on_policy_and_deferred_prompts_run_in_long_rounds(
    tmp_path: Path, tiny: Path
) -> None:
    config = TrainConfig.model_validate(_settings(tiny, tmp_path / "run", steps=6))
    run_train(config, log=lambda _m: None)
    records = read_metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5, 6]
    for record in records:
        step = int(record["step"])
        # on-policy: sampled by the policy the trainer had at the step (step - 1 updates)
        assert set(_versions(tmp_path / "run", step)) == {step - 1}
        assert record["rollout/stale_episodes"] == 0
        assert record["rollout/episodes"] == 2 * 3  # every step trains groups_per_step groups
    kinds = [r["tail/long_round"] for r in records]
    assert kinds == [0, 0, 1, 0, 0, 1]  # every third step, while prompts are deferred
    assert records[-1]["tail/deferred_total"] == 4
    assert records[-1]["tail/launched_groups"] == 2
    long_step = (tmp_path / "run" / "rollouts" / "step-000003.jsonl").read_text()
    groups = {Trajectory.model_validate_json(line).group_id for line in long_step.splitlines()}
    assert len(groups) == 2  # the prompts deferred at steps 0 and 1, run again at step 2
    assert {g.rpartition("-g")[0] for g in groups if g} == {"s2-s0", "s2-s1"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rollout.tail_batching.eta=0.8",
         r"eta is 0\.8 but a short round must launch at least the groups it trains on; set "
         r"rollout\.tail_batching\.eta to 1 or more"),
        ("rollout.tail_batching.long_round_every=0",
         r"long_round_every is 0 but deferred prompts need long rounds to run in; set "
         r"rollout\.tail_batching\.long_round_every to 1 or more"),
        ("tasks.max_staleness=2",
         r"tail_batching is synchronous, it does not mix with asynchronous rollouts; set "
         r"tasks\.max_staleness: 0"),
    ],
    ids=["eta-below-1", "period-0", "with-async"],
)  # fmt: skip
def test_a_bad_schedule_setting_is_one_sentence(override: str, message: str) -> None:
    overrides = ["model.path=m", "rollout.schedule=tail_batching", override]
    if override.startswith("tasks."):
        overrides.append("tasks.dataset=d")
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(TrainConfig, None, overrides)
    assert "\n" not in str(caught.value)


def test_a_run_killed_in_a_long_round_resumes_with_its_deferred_prompts(
    tmp_path: Path, tiny: Path
) -> None:
    # steps 1 and 2 are short rounds (a prompt deferred each), step 3 the long round; the
    # victim checkpoints after step 2 only, so it is killed in step 3 or during its save
    settings = _settings(tiny, tmp_path / "whole", steps=3)
    settings["rollout"]["tail_batching"]["long_round_every"] = 3
    settings["rollout"]["group_size"] = 8  # a longer long round
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    cli = [sys.executable, "-m", "roll.cli", "train", str(path)]
    whole = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert whole.returncode == 0, whole.stderr
    victim = tmp_path / "victim"
    checkpoint = victim / "checkpoints" / "step-00000002"
    proc = subprocess.Popen(
        [*cli, f"run_dir={victim}", "run.checkpoint_every=2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while not checkpoint.is_dir():
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended too early"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    state = json.loads((checkpoint / "state.json").read_text())
    deferred = state["source"]["deferred"]
    assert [p["key"].partition("-")[0] for p in deferred] == ["s0", "s1"]
    resumed = subprocess.run(
        [*cli, f"run_dir={victim}", "run.checkpoint_every=2", "--resume"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "from step 2" in resumed.stderr  # the long round ran again from the checkpoint
    weights = load_file(str(victim / "model" / "model.safetensors"))
    same = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    assert all(bool((weights[k] == same[k]).all()) for k in weights)
    records = read_metrics(victim)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert records[-1]["tail/long_round"] == 1
    assert [r["rollout/reward_mean"] for r in records] == [
        r["rollout/reward_mean"] for r in read_metrics(tmp_path / "whole")
    ]
    long_groups = {
        Trajectory.model_validate_json(line).group_id
        for line in (victim / "rollouts" / "step-000003.jsonl").read_text().splitlines()
    }
    assert long_groups == {f"s2-{p['key']}" for p in deferred}


# -- agentic tasks in real sandboxes ------------------------------------------------------------


class TaskBackend:
    """A generation backend at its seam: finishes at once, except that the first group of
    the task whose instruction says SLOWTASK first runs ``sleep 30`` (it is cut in its short
    round)."""

    name = "tasks"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.policy_version = 0
        self.sleeps = 2  # the slow task's first group

    def _ids(self, text: str) -> list[int]:
        return [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Any]:
        from roll.generation.base import Generation

        out = []
        for prompt in prompts:
            seen = self.tokenizer.decode(prompt)
            first_turn = seen.count("<|im_start|>assistant") <= 1
            if "SLOWTASK" in seen and first_turn and self.sleeps:
                self.sleeps -= 1
                call = {"name": "run_shell_command", "arguments": {"command": "sleep 30"}}
            else:
                call = {"name": "finish", "arguments": {"summary": "done"}}
            ids = self._ids(f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
            out.append(Generation(token_ids=ids, logprobs=[-1.0] * len(ids), finish_reason="stop"))
        return out

    def sync_weights(self, model: Any, version: int) -> None:
        self.policy_version = version

    def close(self) -> None:
        pass


def _dataset(tmp_path: Path) -> Path:
    """Two tasks: ``fast``, and ``slow``, whose verifier hangs (an infrastructure failure)."""
    source = sorted(TASKS.iterdir())[0]
    for name in ("fast", "slow"):
        shutil.copytree(source, tmp_path / "data" / "tasks" / name)
    slow = tmp_path / "data" / "tasks" / "slow"
    (slow / "instruction.md").write_text(
        "SLOWTASK " + (slow / "instruction.md").read_text(), encoding="utf-8"
    )
    (slow / "tests" / "test.sh").write_text("#!/bin/bash\nsleep 600\n")
    toml = (slow / "task.toml").read_text()
    (slow / "task.toml").write_text(
        toml.replace("[verifier]\ntimeout_sec = 120.0", "[verifier]\ntimeout_sec = 2.0")
    )
    return tmp_path / "data"


def _agentic_tail(config: Any, backend: TaskBackend, *, eta: float) -> tuple[Any, Any]:
    """Task rollouts of groups of 2 (one a step) with ``backend``, and tail batching over
    them (``eta``, a long round every 2 steps)."""
    from roll.agentic.collector import TaskRollouts
    from roll.config import TailBatchingConfig
    from roll.schedule import TailBatching

    rollouts = TaskRollouts(
        config,
        backend.tokenizer,
        seed=0,
        backend=backend,
        params=SamplingParams(max_new_tokens=64),
        group_size=2,
        groups_per_step=1,
    )
    schedule = TailBatchingConfig(eta=eta, long_round_every=2)
    return rollouts, TailBatching(rollouts, schedule, groups_per_step=1, start_step=0)


@pytest.mark.docker
def test_agentic_long_round_whose_deferred_prompts_fail_is_resampled(
    tmp_path: Path, tiny: Path
) -> None:
    from transformers import AutoTokenizer

    from roll.config import TasksConfig

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    backend = TaskBackend(tokenizer)
    # balanced draw, each task its own kind: a short round's 2 prompts are both tasks
    config = TasksConfig(
        dataset=str(_dataset(tmp_path)), pool_size=4, max_turns=3, max_attempts=1,
        draw="balanced",
    )  # fmt: skip
    rollouts, tail = _agentic_tail(config, backend, eta=2)
    with tail:
        source = rollouts.runner.source
        short = tail.take(0)  # fast finishes; slow (sleeping) is cut and deferred
        deadline = time.monotonic() + 60  # the cut ones stop in the background, as updates run
        while time.monotonic() < deadline and (
            tail.metrics().get("episodes/cut", 0) < 2 or source.client.pool(source.pool).in_use
        ):
            time.sleep(0.1)
        after_short = tail.metrics()
        in_use_short = source.client.pool(source.pool).in_use
        with tail.paused():
            backend.sync_weights(None, 1)
        long = tail.take(1)  # slow runs again: its verifier hangs; a fresh prompt replaces it
        after_long = tail.metrics()
        in_use_long = source.client.pool(source.pool).in_use
    assert [t.task_id for t in short] == ["fast", "fast"]
    assert after_short["tail/deferred"] == 1 and after_short["episodes/cut"] == 2
    assert in_use_short == 0  # the cut episodes' sandboxes were given back
    assert after_long["tail/long_round"] == 1
    assert after_long["tail/long_resampled"] >= 1  # the failed deferred group was replaced
    assert after_long["episodes/infra/test_timeout"] >= 2  # counted, by its enum value
    assert after_long["episodes/infra_abandoned"] >= 2
    assert [t.task_id for t in long] == ["fast", "fast"]
    assert in_use_long == 0
    # on-policy: each step's samples come from the policy of that step
    for trajectories, version in ((short, 0), (long, 1)):
        versions = {s.policy_version for t in trajectories for s in t.steps if s.logprobs}
        assert versions == {version}
    started = after_long["episodes/started"]
    ended = sum(after_long[f"episodes/{k}"] for k in ("scored", "infra_retried", "infra_abandoned", "cut"))  # fmt: skip
    assert started == ended


@pytest.mark.docker
def test_agentic_short_round_runs_the_verifiers_of_the_groups_it_keeps_only(
    tmp_path: Path, tiny: Path
) -> None:
    from transformers import AutoTokenizer

    from roll.config import TasksConfig

    # one task whose agent finishes at once and whose verifier takes 5 s: the three groups of
    # a short round are done acting long before the first admitted one is scored
    source = sorted(TASKS.iterdir())[0]
    task = tmp_path / "data" / "tasks" / "fast"
    shutil.copytree(source, task)
    test_sh = task / "tests" / "test.sh"
    lines = test_sh.read_text().splitlines()
    test_sh.write_text("\n".join([lines[0], "sleep 5", *lines[1:]]) + "\n")
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    config = TasksConfig(dataset=str(tmp_path / "data"), pool_size=6, max_turns=3)
    _, tail = _agentic_tail(config, TaskBackend(tokenizer), eta=3)
    with tail:
        kept = tail.take(0)
        deadline = time.monotonic() + 60  # the cut ones stop in the background
        while time.monotonic() < deadline and tail.metrics().get("episodes/cut", 0) < 4:
            time.sleep(0.1)
        metrics = tail.metrics()
    assert len(kept) == 2 and {t.task_id for t in kept} == {"fast"}
    assert metrics["episodes/cut"] == 4 and metrics["tail/deferred"] == 2
    # held before their verifiers, never run: at least the second group ready was (the third
    # may still have been acting)
    assert metrics["episodes/cut_unverified"] >= 2
    assert metrics["episodes/scored"] == 2
