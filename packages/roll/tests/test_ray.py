"""Ray as the engine for scale: env workers and rollout workers as actors of a real local Ray
cluster started here (``ray start --head``), equal to the single-process run where they
should be."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'roll[ray]')")

from ray_cluster import free_ports, local_ray_cluster
from safetensors.torch import load_file

from ale.trajectory import Trajectory
from iflow.models.tiny import build_tiny_model
from roll.agentic.ray_policy import RayPolicyBackend
from roll.config import EnvConfig, RayConfig, TrainConfig, load_config
from roll.envs import make_env
from roll.errors import ConfigError, RollError
from roll.generation import HFBackend, SamplingParams
from roll.metrics import read_metrics
from roll.ray_engine import EnvWorkers, RemoteEnv, RemoteEnvEngine, ray_session
from roll.resample import expert_actions, record_experts
from roll.rollout import EpisodeRequest, RolloutEngine
from roll.train import run_train

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "datasets" / "synth-mini" / "tasks"


# one worker runs every Ray test in turn: each starts Ray clusters of its own
pytestmark = pytest.mark.xdist_group("ray")


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    with local_ray_cluster() as address:
        yield address


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


def _essence(trajectory: Trajectory) -> tuple[Any, ...]:
    """What a rollout is, without its ids and clocks."""
    steps = [
        (s.role, s.content, s.token_ids, s.prompt_token_ids, s.logprobs, s.reward, s.extra)
        for s in trajectory.steps
    ]
    return (
        trajectory.task_id,
        trajectory.group_id,
        trajectory.reward,
        trajectory.failure_mode,
        trajectory.agent.extra,
        trajectory.extra,
        steps,
    )


@pytest.mark.parametrize("temperature", [0.0, 1.0], ids=["greedy", "sampled"])
def test_env_rollouts_in_ray_actors_equal_the_in_process_ones(
    ray_address: str, tiny: Path, temperature: float
) -> None:
    backend = HFBackend.from_path(tiny, device="cpu")
    params = SamplingParams(max_new_tokens=6, temperature=temperature, seed=11)
    env = EnvConfig(name="guess", kwargs={"n": 8, "max_turns": 3})
    seeds = [(seed, f"g{seed}") for seed in (1, 2, 3) for _ in range(2)]
    # and an episode started from an expert's first action (replayed through the proxy)
    expert = next(
        t for t in record_experts(env.name, range(20), **env.kwargs) if len(expert_actions(t)) > 1
    )

    def requests_of(make: Callable[[], Any]) -> list[EpisodeRequest]:
        seed = int(expert.extra["roll"]["env_seed"])
        return [EpisodeRequest(env=make(), seed=s, group_id=g) for s, g in seeds] + [
            EpisodeRequest(env=make(), seed=seed, group_id="x", prefix=expert, anchor=1)
        ]

    local = RolloutEngine(backend, backend.tokenizer, params, max_seq_len=256).run(
        requests_of(lambda: make_env(env.name, **env.kwargs))
    )
    assert backend.prefix_cache is not None
    backend.prefix_cache.clear(backend.policy_version)  # the same start: nothing kept
    config = RayConfig(address=ray_address, env_workers=2, worker_cpus=0.5)
    with ray_session(config), EnvWorkers(config, env) as workers:
        requests = requests_of(workers.make)
        hosts = {id(r.env.host) for r in requests if isinstance(r.env, RemoteEnv)}
        engine = RemoteEnvEngine(workers, backend, backend.tokenizer, params, max_seq_len=256)
        remote = engine.run(requests)

    assert len(hosts) == 2  # the episodes were spread over both actors
    assert sum(len(t.steps) for t in local) > 3 * len(local)  # several turns each
    assert any(s.prefix for s in remote[-1].steps)
    assert [_essence(t) for t in remote] == [_essence(t) for t in local]


def test_an_environment_s_error_in_an_env_worker_is_its_own(ray_address: str) -> None:
    config = RayConfig(address=ray_address, env_workers=1, worker_cpus=0.5)
    with ray_session(config):
        with pytest.raises(ConfigError, match="unknown environment 'gues'; did you mean 'guess'"):
            EnvWorkers(config, EnvConfig(name="gues")).__enter__()
        with EnvWorkers(config, EnvConfig(name="guess")) as workers:
            env = workers.make()
            with pytest.raises(RollError, match="no episode running; reset it first"):
                env.step("5")
            env.reset(3)
            assert env.step("5").info["guess"] == 5


def _train_config(tmp_path: Path, tiny: Path, name: str, *overrides: str) -> TrainConfig:
    return load_config(
        TrainConfig,
        None,
        [
            "seed=3",
            f"run_dir={tmp_path / name}",
            f"model.path={tiny}",
            "env.name=letter",
            "env.kwargs.rounds=2",
            "rollout.groups_per_step=2",
            "rollout.group_size=3",
            "rollout.max_new_tokens=6",
            "optim.lr=1e-3",
            "run.steps=2",
            "run.progress=false",
            "run.tensorboard=false",
            *overrides,
        ],
    )


def test_roll_train_on_env_with_ray_equals_the_single_process_run(
    ray_address: str, tiny: Path, tmp_path: Path
) -> None:
    ray_keys = [f"ray.address={ray_address}", "ray.env_workers=2", "ray.worker_cpus=0.5"]
    with_ray = run_train(_train_config(tmp_path, tiny, "ray", *ray_keys), log=lambda _m: None)
    alone = run_train(_train_config(tmp_path, tiny, "alone"), log=lambda _m: None)

    weights = load_file(str(with_ray / "model.safetensors"))
    start = load_file(str(tiny / "model.safetensors"))
    assert any(not (weights[k] == start[k]).all() for k in weights)  # it trained
    same = load_file(str(alone / "model.safetensors"))
    assert all(bool((weights[k] == same[k]).all()) for k in weights)
    records = [_learning(r) for r in read_metrics(tmp_path / "ray")]
    assert [r["step"] for r in records] == [1, 2]
    assert records == [_learning(r) for r in read_metrics(tmp_path / "alone")]


def test_tail_batching_with_ray_equals_the_single_process_run(
    ray_address: str, tiny: Path, tmp_path: Path
) -> None:
    schedule = [
        "env.name=guess", "env.kwargs={n: 6, max_turns: 4}", "run.steps=3",
        "rollout.schedule=tail_batching", "rollout.tail_batching.eta=1.5",
        "rollout.tail_batching.long_round_every=3",
    ]  # fmt: skip
    ray_keys = [f"ray.address={ray_address}", "ray.env_workers=2", "ray.worker_cpus=0.5"]
    run_train(_train_config(tmp_path, tiny, "ray", *schedule, *ray_keys), log=lambda _m: None)
    run_train(_train_config(tmp_path, tiny, "alone", *schedule), log=lambda _m: None)
    records = [_learning(r) for r in read_metrics(tmp_path / "ray")]
    assert [r["tail/long_round"] for r in records] == [0, 0, 1]
    assert all(r["rollout/stale_episodes"] == 0 for r in records)
    assert records == [_learning(r) for r in read_metrics(tmp_path / "alone")]


def _learning(record: dict[str, Any]) -> dict[str, Any]:
    """A metrics record without the clocks."""
    return {k: v for k, v in record.items() if k != "time" and not k.startswith(("time/", "perf/"))}


def test_the_generation_actor_batches_requests_with_the_trainer_s_weights(
    ray_address: str, tiny: Path
) -> None:
    import ray

    local = HFBackend.from_path(tiny, device="cpu")
    tokenizer = local.tokenizer
    params = SamplingParams(max_new_tokens=5, temperature=0.0)
    prompts = [tokenizer.encode(f"count to {n}", add_special_tokens=False) for n in range(6)]
    config = RayConfig(address=ray_address, generation_cpus=0.5)
    with ray_session(config):
        policy = RayPolicyBackend.start(local.model, tokenizer, config)
        try:
            policy.sync_weights(local.model, 7)  # the actor's own weights were random
            policy.open(params, seed=0)
            together = ray.get([policy.actor.generate.remote(p, None) for p in prompts])
            stats = policy.stats()
        finally:
            policy.close()
    expected = local.generate(prompts, params)
    assert [g.token_ids for g in together] == [g.token_ids for g in expected]
    for got, want in zip(together, expected, strict=True):
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)
    assert policy.policy_version == 7
    assert stats["generation/mean_batch"] > 1  # concurrent requests shared batches


@pytest.mark.docker
@pytest.mark.parametrize("staleness", [0, 1, "tail"], ids=["sync", "async", "tail"])
def test_roll_train_on_tasks_with_ray_runs_episodes_in_rollout_workers(
    ray_address: str, tiny: Path, tmp_path: Path, staleness: int | str
) -> None:
    tail = staleness == "tail"
    schedule = ["rollout.schedule=tail_batching", "rollout.tail_batching.eta=1.5",
                "rollout.tail_batching.long_round_every=2"] if tail else []  # fmt: skip
    staleness = 0 if tail else staleness
    dataset = tmp_path / "data" / "tasks"
    for source in sorted(TASKS.iterdir())[:2]:
        shutil.copytree(source, dataset / source.name)
        if tail:  # verifiers of 8 s: the short round's third group is done acting long before
            test_sh = dataset / source.name / "tests" / "test.sh"  # the first two are scored
            first, *rest = test_sh.read_text().splitlines()
            test_sh.write_text("\n".join([first, "sleep 8", *rest]) + "\n")
    config = load_config(
        TrainConfig,
        None,
        [
            f"run_dir={tmp_path / 'run'}",
            f"model.path={tiny}",
            f"tasks.dataset={tmp_path / 'data'}",
            "tasks.pool_size=4",
            "tasks.max_turns=2",
            "rollout.groups_per_step=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=16",
            "run.steps=2",
            f"tasks.max_staleness={staleness}",
            "run.progress=false",
            "run.tensorboard=false",
            f"ray.address={ray_address}",
            "ray.rollout_workers=2",
            "ray.worker_cpus=0.5",
            "ray.generation_cpus=0.5",
            *schedule,
        ],
    )
    out = run_train(config, log=lambda _m: None)
    assert (out / "model.safetensors").is_file()
    records = read_metrics(tmp_path / "run")
    if tail:  # a short round (a group cut in its worker), then the long round
        assert [r["tail/long_round"] for r in records] == [0, 1]
        assert records[0]["episodes/cut"] == 2
        # it waited before its verifiers in its worker, admitted never: they did not run
        assert records[0]["episodes/cut_unverified"] >= 1
        assert all(r["rollout/stale_episodes"] == 0 for r in records)
    assert [r["step"] for r in records] == [1, 2]
    last = records[-1]
    assert last["ray/rollout_workers"] == 2
    assert last["generation/batches"] > 0
    # every episode the workers started is accounted for, summed over the workers; on a
    # loaded machine an episode may be abandoned for the infrastructure, never lost
    assert last["episodes/scored"] + last["episodes/infra_abandoned"] >= 2 * 2 * len(records)
    assert last["episodes/scored"] >= 2 * len(records)
    finished = (
        last["episodes/scored"] + last["episodes/infra_retried"] + last["episodes/infra_abandoned"]
    )
    if staleness == 0:  # nothing in flight between steps
        assert last["episodes/started"] == finished + last.get("episodes/cut", 0)
    else:  # counted when their group comes back: what runs during the update is not yet
        assert last["episodes/started"] == finished >= 2 * 2 * len(records)
    lines = (tmp_path / "run" / "rollouts" / "step-000002.jsonl").read_text().splitlines()
    assert 1 <= len(lines) <= 4
    versions = {
        s.policy_version
        for line in lines
        for s in Trajectory.model_validate_json(line).steps
        if s.policy_version is not None
    }
    # synchronous: step 2's episodes were sampled after the first update; asynchronous: by
    # a policy at most max_staleness versions older
    assert versions == {1} if staleness == 0 else versions <= {0, 1}


@pytest.mark.docker
def test_ray_rollout_workers_sample_from_a_vllm_server_roll_launched(
    ray_address: str, tmp_path: Path
) -> None:
    """``rollout.backend: server`` on Ray: the workers' requests go through the generation
    actor to the vLLM server roll started, which reloads each update in place."""
    from vllm_helpers import group_processes

    model = build_tiny_model(tmp_path / "m", hidden_size=128, layers=2, heads=2)  # head dim 64
    dataset = tmp_path / "data" / "tasks"
    for source in sorted(TASKS.iterdir())[:2]:
        shutil.copytree(source, dataset / source.name)
    config = load_config(
        TrainConfig,
        None,
        [
            f"run_dir={tmp_path / 'run'}",
            f"model.path={model}",
            f"tasks.dataset={tmp_path / 'data'}",
            "tasks.pool_size=2",
            "tasks.max_turns=2",
            "tasks.tool_format=brief",
            "tasks.context_limit=2048",
            "rollout.backend=server",
            "rollout.server={launch: {dtype: float32, kv_cache_gib: 0.25, max_model_len: 2048}}",
            "rollout.groups_per_step=1",
            "rollout.group_size=2",
            "rollout.max_new_tokens=16",
            "run.steps=2",
            "run.progress=false",
            "run.tensorboard=false",
            f"ray.address={ray_address}",
            "ray.rollout_workers=1",
            "ray.worker_cpus=0.5",
            "ray.generation_cpus=0.5",
        ],
    )
    run_train(config, log=lambda _m: None)
    records = read_metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2]
    assert records[-1]["ray/rollout_workers"] == 1
    assert records[-1]["generation/batches"] > 0
    lines = (tmp_path / "run" / "rollouts" / "step-000002.jsonl").read_text().splitlines()
    sampled = [
        s for line in lines for s in Trajectory.model_validate_json(line).steps if s.token_ids
    ]
    assert sampled and {s.policy_version for s in sampled} == {1}
    log = tmp_path / "run" / "vllm-server.log"
    assert "Reloading weights inplace" in log.read_text()  # reloaded, not restarted
    assert group_processes(log) == []  # stopped with the run


def test_a_bad_ray_setting_is_one_clear_sentence(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nobody = f"127.0.0.1:{free_ports(1)[0]}"
    began = time.monotonic()
    with pytest.raises(ConfigError, match=r"no Ray cluster answers at .*ray start --head"):
        run_train(_train_config(tmp_path, tiny, "bad", f"ray.address={nobody}"))
    assert time.monotonic() - began < 15
    with pytest.raises(ConfigError, match=r"not auto, HOST:PORT or ray://HOST:PORT"):
        run_train(_train_config(tmp_path, tiny, "bad", "ray.address=nowhere"))
    with pytest.raises(ConfigError, match=r"rollout\.backend: hf"):
        _train_config(
            tmp_path, tiny, "bad", "ray.address=auto", "tasks.dataset=x", "rollout.backend=vllm"
        )
    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    with pytest.raises(ConfigError, match=r"install it with pip install 'roll\[ray\]'"):
        run_train(_train_config(tmp_path, tiny, "bad", "ray.address=auto"))
