"""`roll train` end to end: presets, configs, kill -9 and exact resume, torchrun DDP, plots."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from iflow.models.tiny import build_tiny_model
from roll.config import PRESETS, AlgorithmConfig, TrainConfig, load_config
from roll.errors import ConfigError
from roll.metrics import read_metrics
from roll.train import run_train


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


def _config(tmp_path: Path, tiny: Path, **sections: object) -> Path:
    data: dict[str, object] = {
        "seed": 5,
        "model": {"path": str(tiny)},
        "env": {"name": "letter", "kwargs": {"rounds": 2}},
        "rollout": {"groups_per_step": 2, "group_size": 4, "max_new_tokens": 8},
        "run": {"steps": 3, "checkpoint_every": 1, "progress": False, "tensorboard": False},
        "optim": {"lr": 1e-3},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}  # type: ignore[dict-item]
        else:
            data[key] = value
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _weights(model_dir: Path) -> dict[str, object]:
    return load_file(str(model_dir / "model.safetensors"))


def _same(a: dict[str, object], b: dict[str, object]) -> bool:
    return a.keys() == b.keys() and all(bool((a[k] == b[k]).all()) for k in a)  # type: ignore[union-attr]


def _cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "roll.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize(
    "name", ["grpo", "dr_grpo", "rloo", "reinforce_pp", "gspo", "lite_ppo", "ipa"]
)
def test_every_preset_trains_and_changes_the_policy(tmp_path: Path, tiny: Path, name: str) -> None:
    config = load_config(
        TrainConfig,
        _config(tmp_path, tiny),
        [f"run_dir={tmp_path / 'run'}", f"algorithm.name={name}", "run.steps=2"],
    )
    out = run_train(config, log=lambda _m: None)
    assert not _same(_weights(out), _weights(tiny))
    records = read_metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["train/grad_norm"] >= 0 for r in records)
    assert (tmp_path / "run" / "rollouts" / "step-000002.jsonl").is_file()


def test_presets_fill_the_one_abstraction() -> None:
    ipa = AlgorithmConfig(name="ipa")
    assert (ipa.advantage, ipa.loss, ipa.ratio_level, ipa.mismatch_threshold) == (
        "ipa", "ipa", "chunk", 2.0,
    )  # fmt: skip
    gspo = AlgorithmConfig(name="gspo", clip_high=1e-3)
    assert (gspo.ratio_level, gspo.clip_low, gspo.clip_high) == ("sequence", 3e-4, 1e-3)
    lite = AlgorithmConfig(name="lite_ppo")
    assert (lite.advantage, lite.loss, lite.ratio_level, lite.aggregation) == (
        "lite_ppo", "ppo", "token", "token_mean",
    )  # fmt: skip
    off = AlgorithmConfig(name="ipa", mismatch_threshold=None)
    assert off.mismatch_threshold is None  # set explicitly: the preset does not refill it


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_resolves_to_a_complete_algorithm(name: str) -> None:
    """What training reads has every field set: no fallback is applied after the config."""
    algo = AlgorithmConfig(name=name).resolved(max_new_tokens=96)
    assert algo.norm_length == 96 and algo.advantage == PRESETS[name]["advantage"]
    assert None not in [v for k, v in algo.model_dump().items() if k != "mismatch_threshold"]
    assert AlgorithmConfig(name=name, norm_length=7).resolved(96).norm_length == 7


def test_a_value_nulled_that_no_preset_fills_is_refused_in_one_sentence() -> None:
    with pytest.raises(ConfigError, match=r"^algorithm\.clip_low is null and preset 'grpo'"):
        AlgorithmConfig(name="grpo", clip_low=None).resolved(96)


def test_mistyped_keys_name_the_closest_valid_one(tmp_path: Path, tiny: Path) -> None:
    path = _config(tmp_path, tiny)
    with pytest.raises(
        ConfigError, match=r"unknown key algorithm\.clip_hgh; did you mean 'clip_high'"
    ):
        load_config(TrainConfig, path, ["algorithm.clip_hgh=0.3"])
    with pytest.raises(
        ConfigError, match=r"unknown key rollout\.group_sise; did you mean 'group_size'"
    ):
        load_config(TrainConfig, path, ["rollout.group_sise=3"])
    with pytest.raises(ConfigError, match=r"algorithm\.gamma"):
        load_config(TrainConfig, path, ["algorithm.gamma=1.5"])
    with pytest.raises(ConfigError, match=r"KEY=VALUE"):
        load_config(TrainConfig, path, ["algorithm.gamma"])
    result = _cli("train", str(path), "optim.lrr=1")
    assert result.returncode == 2
    assert result.stderr.strip() == (f"roll: {path}: unknown key optim.lrr; did you mean 'lr'?")
    missing = _cli("train", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "cannot read the config" in missing.stderr


def test_a_run_dir_with_checkpoints_needs_resume(tmp_path: Path, tiny: Path) -> None:
    path = _config(tmp_path, tiny, run_dir=str(tmp_path / "run"), run={"steps": 1})
    assert _cli("train", str(path)).returncode == 0
    again = _cli("train", str(path))
    assert again.returncode == 2 and "--resume" in again.stderr


def test_killed_and_resumed_run_equals_the_uninterrupted_one(tmp_path: Path, tiny: Path) -> None:
    path = _config(tmp_path, tiny, run={"steps": 5})
    whole = _cli("train", str(path), f"run_dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr
    victim = tmp_path / "victim"
    proc = subprocess.Popen(
        [sys.executable, "-m", "roll.cli", "train", str(path), f"run_dir={victim}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 240
    while not (victim / "checkpoints" / "step-00000002").is_dir():
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended too early"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = _cli("train", str(path), f"run_dir={victim}", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed" in resumed.stderr
    assert _same(_weights(victim / "model"), _weights(tmp_path / "whole" / "model"))
    steps = [r["step"] for r in read_metrics(victim)]
    assert steps == [1, 2, 3, 4, 5]
    rewards = [r["rollout/reward_mean"] for r in read_metrics(victim)]
    assert rewards == [r["rollout/reward_mean"] for r in read_metrics(tmp_path / "whole")]


@pytest.mark.slow
def test_two_gloo_processes_match_one(tmp_path: Path, tiny: Path) -> None:
    # greedy sampling: the episodes do not depend on how they are split between processes
    path = _config(
        tmp_path,
        tiny,
        run={"steps": 2, "micro_batch_tokens": 64},
        rollout={"temperature": 0.0},
        algorithm={"name": "ipa"},
        env={"name": "letter", "kwargs": {"letters": "\n"}},  # the greedy tiny model's reply
    )
    single = _cli("train", str(path), f"run_dir={tmp_path / 'one'}")
    assert single.returncode == 0, single.stderr
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
            "--standalone", "-m", "roll.cli", "train", str(path),
            f"run_dir={tmp_path / 'two'}",
        ],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    one, two = _weights(tmp_path / "one" / "model"), _weights(tmp_path / "two" / "model")
    import torch

    assert one.keys() == two.keys()
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=1e-4, atol=1e-6)
    a, b = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "two")
    assert [r["rollout/reward_mean"] for r in a] == [r["rollout/reward_mean"] for r in b]
    assert a[0]["train/grad_norm"] > 0
    assert b[0]["train/grad_norm"] == pytest.approx(a[0]["train/grad_norm"], rel=1e-4)
    assert not _same(one, _weights(tiny))


@pytest.mark.parametrize("world_size", ["1", "2"])
def test_a_torchrun_worker_ends_without_the_interpreter_s_teardown(
    tmp_path: Path, world_size: str
) -> None:
    """Under torchrun (``WORLD_SIZE`` > 1) a finished command ends the process at once, with
    its status, before any finalization (gloo's threads outlive the process group and could
    abort it there); a single process exits as usual."""
    marker = tmp_path / "finalized"
    code = (
        "import atexit, sys, torch.distributed\n"
        "atexit.register(lambda: open(sys.argv[1], 'w').write('yes'))\n"
        "from roll.cli import _end_torchrun_worker\n"
        "print('flushed', end='')\n"
        "_end_torchrun_worker(7)\n"
    )
    env = {**os.environ, "WORLD_SIZE": world_size}
    result = subprocess.run(
        [sys.executable, "-c", code, str(marker)], capture_output=True, text=True, env=env
    )
    assert result.stdout == "flushed"
    if world_size == "2":
        assert (result.returncode, marker.exists()) == (7, False)
    else:
        assert (result.returncode, marker.read_text()) == (0, "yes")


def _guess_experts(path: Path) -> None:
    """Binary-search experts of the guess env (n=4), seeds 11 and 12, as message-level steps."""
    from ale.jsonl import write_jsonl
    from ale.trajectory import AgentInfo, Role, Step, Trajectory
    from roll.envs.registry import make_env

    # an expert that binary-searches the guess env, recorded as message-level steps
    env = make_env("guess", n=4, max_turns=3)
    experts = []
    for seed in (11, 12):
        steps = [Step(role=Role(m["role"]), content=m["content"]) for m in env.reset(seed)]
        low, high = 1, 4
        for _ in range(3):
            guess = (low + high) // 2
            steps.append(Step(role=Role.ASSISTANT, content=str(guess)))
            result = env.step(str(guess))
            if result.observation is not None:
                steps.append(Step(role=Role.USER, content=result.observation))
            if result.done:
                break
            if "higher" in (result.observation or ""):
                low = guess + 1
            else:
                high = guess - 1
        experts.append(
            Trajectory(
                agent=AgentInfo(name="expert"),
                task_id=f"{env.task_id}/{seed}",
                steps=steps,
                reward=1.0,
            )
        )
    write_jsonl(path, experts)


def test_resampling_from_expert_prefixes_with_imitation(tmp_path: Path, tiny: Path) -> None:
    _guess_experts(tmp_path / "experts.jsonl")
    path = _config(
        tmp_path,
        tiny,
        run_dir=str(tmp_path / "run"),
        env={"name": "guess", "kwargs": {"n": 4, "max_turns": 3}},
        resample={"experts": str(tmp_path / "experts.jsonl"), "mode": "parallel", "anchors": 2,
                  "imitation_coef": 0.5},
        run={"steps": 2},
    )  # fmt: skip
    config = load_config(TrainConfig, path)
    run_train(config, log=lambda _m: None)
    records = read_metrics(tmp_path / "run")
    rollouts = [
        json.loads(line)
        for line in (tmp_path / "run" / "rollouts" / "step-000001.jsonl").read_text().splitlines()
    ]
    anchors = {r["extra"]["roll"]["anchor"] for r in rollouts}
    assert len(anchors) >= 2  # parallel initialisation at several anchors
    prefixed = [r for r in rollouts if r["extra"]["roll"]["anchor"] > 0]
    assert prefixed and all(any(s.get("prefix") for s in r["steps"]) for r in prefixed)
    assert any("train/imitation_loss" in r for r in records) or all(
        r["rollout/success_rate"] > 0 for r in records
    )


def test_the_imitated_groups_are_counted_as_the_rollouts_show(tmp_path: Path, tiny: Path) -> None:
    """`resample/imitated_groups` is the number of the step's groups whose share of positive
    episodes is at most `resample.imitation_share` (`imitated_groups` decides, tested in
    test_resample), and the step has an imitation loss exactly when there is one; a share of
    1 or more is refused in one sentence."""
    from pydantic import ValidationError

    _guess_experts(tmp_path / "experts.jsonl")
    for share in (0.0, 0.75):
        run = tmp_path / f"run-{share}"
        path = _config(
            tmp_path,
            tiny,
            run_dir=str(run),
            env={"name": "guess", "kwargs": {"n": 4, "max_turns": 3}},
            resample={"experts": str(tmp_path / "experts.jsonl"), "mode": "parallel",
                      "anchors": 2, "imitation_coef": 0.5, "imitation_share": share},
            run={"steps": 1},
        )  # fmt: skip
        run_train(load_config(TrainConfig, path), log=lambda _m: None)
        (record,) = [r for r in read_metrics(run) if "resample/imitated_groups" in r]
        groups: dict[str, list[float]] = {}
        for line in (run / "rollouts" / "step-000001.jsonl").read_text().splitlines():
            rollout = json.loads(line)
            groups.setdefault(rollout["group_id"], []).append(rollout["reward"])
        few = sum(1 for r in groups.values() if sum(x > 0 for x in r) <= share * len(r))
        assert record["resample/imitated_groups"] == few
        assert ("train/imitation_loss" in record) == (few > 0)
    with pytest.raises(ValidationError, match="imitation_share"):
        TrainConfig.model_validate(
            {"model": {"path": str(tiny)}, "env": {"name": "guess"},
             "resample": {"experts": str(tmp_path / "experts.jsonl"), "imitation_share": 1.0}}
        )  # fmt: skip


def test_plot_draws_the_curves(tmp_path: Path, tiny: Path) -> None:
    path = _config(tmp_path, tiny, run_dir=str(tmp_path / "run"), run={"steps": 2})
    assert _cli("train", str(path)).returncode == 0
    result = _cli("plot", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    png = tmp_path / "run" / "curves.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = _cli("plot", str(tmp_path))
    assert empty.returncode == 2 and "metrics.jsonl" in empty.stderr


def test_sequential_rollback_starts_at_the_last_chunk(tmp_path: Path, tiny: Path) -> None:
    _guess_experts(tmp_path / "experts.jsonl")
    path = _config(
        tmp_path,
        tiny,
        run_dir=str(tmp_path / "run"),
        env={"name": "guess", "kwargs": {"n": 4, "max_turns": 3}},
        resample={"experts": str(tmp_path / "experts.jsonl"), "mode": "sequential"},
        run={"steps": 2},
    )
    run_train(load_config(TrainConfig, path), log=lambda _m: None)
    first = [
        json.loads(line)
        for line in (tmp_path / "run" / "rollouts" / "step-000001.jsonl").read_text().splitlines()
    ]
    experts = {
        t["trajectory_id"]: t
        for t in map(json.loads, (tmp_path / "experts.jsonl").read_text().splitlines())
    }
    for rollout in first:
        expert = experts[rollout["extra"]["roll"]["prefix_trajectory_id"]]
        turns = sum(1 for step in expert["steps"] if step["role"] == "assistant")
        assert rollout["extra"]["roll"]["anchor"] == turns - 1  # only the last chunk is left
    records = read_metrics(tmp_path / "run")
    assert all("resample/anchor_mean" in r for r in records)


def test_an_episode_without_tokens_counts_in_its_group_and_trains_nothing(
    tmp_path: Path, tiny: Path
) -> None:
    """An agentic episode can end before the policy speaks (its time ran out in the generation
    queue): its reward belongs to its group, but it has no token for the update."""
    from roll.algo.batch import Sample
    from roll.session import Session
    from roll.train import _update, loss_spec

    config = load_config(TrainConfig, _config(tmp_path, tiny), [f"run_dir={tmp_path / 'r'}"])

    def sample(ids: list[int], reward: float) -> Sample:
        n = len(ids)
        return Sample(
            input_ids=ids, rl_mask=[i > 1 for i in range(n)], chunk_ids=[0 if i > 1 else -1 for i in range(n)],
            expert_mask=[False] * n, reward=reward, group="g",
        )  # fmt: skip

    with Session(config, spec=loss_spec(config), log=lambda _m: None) as session:
        session.start(1)
        samples = [sample([5, 6, 7, 8], 1.0), sample([5, 6, 9, 9], 0.0), sample([], 0.0)]
        metrics = _update(session, config, samples, None, set(), 8)
        assert metrics["train/tokenless_samples"] == 1.0 and metrics["train/tokens"] > 0
        only = _update(session, config, [sample([], 0.0)], None, set(), 8)
        assert only == {"train/skipped_empty": 1.0, "train/tokenless_samples": 1.0}


def test_a_bfloat16_rollout_copy_samples_while_the_policy_trains_in_float32(
    tmp_path: Path, tiny: Path
) -> None:
    """``rollout.dtype: bfloat16``: generation samples from a bf16 copy that every sync
    refreshes from the float32 policy; the policy itself stays float32."""
    import torch

    from roll.generation.hf import HFBackend
    from roll.session import Session
    from roll.train import loss_spec

    path = _config(tmp_path, tiny, rollout={"dtype": "bfloat16"})
    config = load_config(TrainConfig, path, [f"run_dir={tmp_path / 'r'}"])
    with Session(config, spec=loss_spec(config), log=lambda _m: None) as session:
        session.start(1, rollout_copy=True, rollout_dtype="bfloat16")
        assert session.rollout_lm is not session.lm
        assert {p.dtype for p in session.lm.parameters()} == {torch.float32}
        assert {p.dtype for p in session.rollout_lm.parameters()} == {torch.bfloat16}
        backend = HFBackend(session.rollout_lm, session.tokenizer)
        with torch.no_grad():
            for p in session.lm.parameters():
                p.add_(0.25)
        session.sync_rollout(backend)
        trained = dict(session.lm.named_parameters())
        for name, p in session.rollout_lm.named_parameters():
            assert torch.equal(p, trained[name].to(torch.bfloat16)), name
        assert backend.policy_version == session.updater.updates
    # the same dtype as the policy's needs no copy; and a whole run samples from the copy
    with Session(config, spec=loss_spec(config), log=lambda _m: None) as session:
        session.start(1, rollout_copy=True, rollout_dtype="float32")
        assert session.rollout_lm is session.lm
    out = run_train(load_config(TrainConfig, path, [f"run_dir={tmp_path / 'run'}"]), log=None)
    assert not _same(_weights(out), _weights(tiny))
    assert _weights(out)["model.embed_tokens.weight"].dtype == torch.float32  # type: ignore[attr-defined]
    steps = [json.loads(x) for x in (tmp_path / "run" / "rollouts" / "step-000003.jsonl").open()]
    assert steps and all(t["steps"] for t in steps)


def test_each_step_logs_the_train_inference_mismatch_of_the_engine_that_sampled(
    tmp_path: Path, tiny: Path
) -> None:
    """``train/mismatch/...``: the share of tokens IPA's mask drops and the spread of log
    pi_train - log mu. Sampled in float32 by the trainer's own weights the two agree (to
    float rounding); sampled from a bf16 copy they differ, and a mask at H = 1.0001 drops the
    chunks the bf16 engine under-rated."""
    keys = ("masked_share", "tokens", "log_ratio_mean", "log_ratio_abs_mean",
            "log_ratio_abs_p99", "log_ratio_abs_max")  # fmt: skip
    figures = {}
    for dtype in ("float32", "bfloat16"):
        run = tmp_path / dtype
        path = _config(tmp_path, tiny, rollout={"dtype": dtype})
        overrides = [f"run_dir={run}", "algorithm.name=ipa", "algorithm.baseline=group_mean",
                     "algorithm.mismatch_threshold=1.0001", "run.steps=2"]  # fmt: skip
        run_train(load_config(TrainConfig, path, overrides), log=lambda _m: None)
        records = read_metrics(run)
        assert len(records) == 2
        for record in records:
            assert {f"train/mismatch/{k}" for k in keys} <= record.keys()
            assert 0.0 <= record["train/mismatch/masked_share"] <= 1.0
            spread = [record[f"train/mismatch/log_ratio_abs_{k}"] for k in ("mean", "p99", "max")]
            assert spread == sorted(spread) and spread[0] >= 0.0
        figures[dtype] = records
    for record in figures["float32"]:  # about 1e-8 on average
        assert record["train/mismatch/log_ratio_abs_max"] < 1e-5
        assert record["train/mismatch/masked_share"] == 0.0
    # bf16: about 4e-4 on average for the tiny model (its distributions are near uniform)
    assert all(r["train/mismatch/log_ratio_abs_mean"] > 1e-4 for r in figures["bfloat16"])
    assert any(r["train/mismatch/masked_share"] > 0.0 for r in figures["bfloat16"])
