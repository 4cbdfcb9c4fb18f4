"""``roll train``: RL on environment episodes, one rollout batch per step.

A step: draw ``groups_per_step`` environment seeds from (config seed, step); run each as a
group of ``group_size`` episodes with the current policy (one batched generation per turn,
see :mod:`roll.rollout`); turn the trajectories into samples (chunks and masks from
:mod:`ale.chunking`); fill the per-chunk advantages and the aggregation weights over the
whole batch; update (in ``updates_per_batch`` mini-batches); hand the new weights to the
generation backend. Everything a step draws is seeded by (seed, step), so a run resumed from
a checkpoint continues exactly as the uninterrupted run would have. Under torchrun each
process generates its share of the episodes (with ``run.parallel: fsdp`` from a full copy of
the policy, since the sharded one would need every process at every token).

With ``resample`` set, groups start from expert trajectories at chunk anchors (chunk-level
initialised resampling, :mod:`roll.resample`), and groups with no positive episode add an
imitation term on the expert prefix.

With ``ray`` set, the run connects to that Ray cluster: environments live in env worker
actors (:mod:`roll.ray_engine`), agentic episodes run in rollout worker actors
(:mod:`roll.agentic.ray_workers`) with one generation actor (:mod:`roll.agentic.ray_policy`);
the results are the same.
"""

from __future__ import annotations

import copy
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ale.chunking import split_segments
from ale.jsonl import write_jsonl
from ale.trajectory import Role, Trajectory
from roll.algo.batch import Sample, assign_advantages, sample_from_trajectory, set_weights
from roll.algo.losses import LossSpec
from roll.config import TrainConfig
from roll.ray_engine import ray_session
from roll.resample import Experts, imitated_groups, whole_expert_samples
from roll.session import Session
from roll.sources import make_backend, open_source
from roll.update import scored_logprobs_of


def loss_spec(config: TrainConfig) -> LossSpec:
    """The policy loss of ``config``'s algorithm, its preset resolved."""
    algo = config.algorithm.resolved(config.rollout.max_new_tokens)
    return LossSpec(
        loss=algo.loss,
        ratio_level=algo.ratio_level,
        clip_low=algo.clip_low,
        clip_high=algo.clip_high,
        mismatch_threshold=algo.mismatch_threshold,
        kl_coef=algo.kl_coef,
        entropy_coef=algo.entropy_coef,
    )


def expert_renderer(
    config: TrainConfig, tokenizer: Any
) -> Callable[[Trajectory], Sample | None] | None:
    """With ``tasks:``, how an expert trajectory reads as the iflow agent's episode of its
    task (the prompt profile and tool format of ``tasks``, cut at its context limit): the
    tokens SFT trains on (:func:`roll.sft.tokenize_trajectory`); None for environments."""
    if config.tasks is None:
        return None
    from roll.demonstrations import as_compact, iflow_tool_schemas
    from roll.sft import tokenize_trajectory

    compact = config.tasks.prompt_profile == "compact"
    tools = iflow_tool_schemas(compact=compact)
    limit = config.tasks.context_limit
    fmt = config.tasks.tool_format
    cache: dict[str, Sample | None] = {}

    def render(trajectory: Trajectory) -> Sample | None:
        key = trajectory.trajectory_id
        if key not in cache:
            shown = as_compact(trajectory) if compact else trajectory
            done = tokenize_trajectory(shown, tokenizer, tools, max_seq_len=limit, tool_format=fmt)
            cache[key] = done.sample if done is not None else None
        kept = cache[key]
        return copy.deepcopy(kept) if kept is not None else None

    return render


def _group_rewards(samples: list[Sample]) -> dict[Any, list[float]]:
    groups: dict[Any, list[float]] = defaultdict(list)
    for s in samples:
        groups[s.group].append(s.reward)
    return groups


def _turns(trajectory: Trajectory) -> int:
    """The policy's turns: as the in-process engine recorded them, else its assistant steps
    (an agentic episode's trajectory is the agent's own)."""
    recorded = (trajectory.extra.get("roll") or {}).get("turns")
    if recorded is not None:
        return int(recorded)
    return sum(1 for step in trajectory.steps if step.role is Role.ASSISTANT)


def stale(trajectory: Trajectory, version: int) -> bool:
    """Whether a policy older than ``version`` sampled any of the trajectory's steps."""
    return any(s.policy_version is not None and s.policy_version < version
               for s in trajectory.steps)  # fmt: skip


def rollout_metrics(trajectories: list[Trajectory], version: int | None = None) -> dict[str, float]:
    """The step's rollout figures; ``version``: the trainer's policy version at the step."""
    rewards = [float(t.reward or 0.0) for t in trajectories]
    n = max(len(trajectories), 1)
    turns = [_turns(t) for t in trajectories]
    out = {
        "rollout/episodes": float(len(trajectories)),
        "rollout/reward_mean": sum(rewards) / n,
        "rollout/success_rate": sum(r > 0 for r in rewards) / n,
        "rollout/turns_mean": sum(turns) / n,
    }
    if version is not None:  # off-policy samples (asynchronous rollouts make them)
        out["rollout/stale_episodes"] = float(sum(stale(t, version) for t in trajectories))
    for mode, count in Counter(
        t.failure_mode.value for t in trajectories if t.failure_mode is not None
    ).items():
        out[f"rollout/failure/{mode}"] = float(count)
    return out


def run_train(config: TrainConfig, *, resume: bool = False, log: Any = None) -> Path:
    """Train; the final model's directory."""
    spec = loss_spec(config)
    algo = config.algorithm.resolved(config.rollout.max_new_tokens)
    # with ray: the run is connected to the Ray cluster throughout (see roll.ray_engine)
    with ray_session(config.ray), Session(config, spec=spec, resume=resume, log=log) as session:
        use_ref = config.reference if config.reference is not None else algo.kl_coef > 0
        # the initial policy, copied before start() resumes (or shards) it
        reference = copy.deepcopy(session.lm).eval().requires_grad_(False) if use_ref else None
        # asynchronous rollouts sample from their own copy of the policy while it trains
        # (with Ray the generation actor holds its own copy)
        separate = (
            config.tasks is not None and config.tasks.max_staleness > 0 and config.ray is None
        )
        session.start(
            config.run.steps,
            rollout_copy=True,
            separate_rollout=separate,
            rollout_dtype=config.rollout.dtype if config.rollout.backend == "hf" else None,
        )
        world = session.world
        experts = Experts(config) if config.resample is not None else None
        render = expert_renderer(config, session.tokenizer) if experts is not None else None
        if experts is not None and "experts" in session.state:
            experts.load_state(session.state["experts"])
        backend = make_backend(config, session)
        session.sync_rollout(backend)
        norm_length = algo.norm_length
        rollouts_dir = session.run_dir / "rollouts"
        source = session.enter(open_source(config, session, backend, experts))
        source.load_state(session.state.get("source", {}))  # tail batching's deferred prompts
        for step in range(session.start_step, config.run.steps):
            began = time.perf_counter()
            mine = source.take(session.updater.updates)
            trajectories = world.gather(mine)
            rollout_s = time.perf_counter() - began
            metrics = rollout_metrics(trajectories, session.updater.updates) | source.metrics()
            if world.is_main:
                rollouts_dir.mkdir(parents=True, exist_ok=True)
                write_jsonl(rollouts_dir / f"step-{step + 1:06d}.jsonl", trajectories)
            samples, imitate = _samples(trajectories, config, experts, metrics, render)
            update_began = time.perf_counter()
            result_metrics = _update(session, config, samples, reference, imitate, norm_length)
            update_s = time.perf_counter() - update_began
            with source.paused():
                session.sync_rollout(backend)
            metrics |= result_metrics
            metrics["policy_version"] = float(session.updater.updates)
            metrics["time/rollout_s"] = rollout_s
            metrics["time/update_s"] = update_s
            metrics["perf/update_tokens_per_s"] = (
                metrics.get("train/tokens", 0.0) * world.size / max(update_s, 1e-9)
            )
            session.log(step + 1, metrics)
            state: dict[str, Any] = {"step": step + 1, "kind": "train", "source": source.state()}
            if experts is not None:
                state["experts"] = experts.state()
            session.checkpoint(step + 1, state, force=step + 1 == config.run.steps)
        backend.close()
        return session.finish()


def _samples(
    trajectories: list[Trajectory],
    config: TrainConfig,
    experts: Experts | None,
    metrics: dict[str, float],
    render: Callable[[Trajectory], Sample | None] | None = None,
) -> tuple[list[Sample], set[Any]]:
    """The step's samples (without the groups of equal rewards when they are dropped) and the
    groups that get the imitation term, with ``render`` (tasks) the whole expert of each such
    group that started from the beginning; moves the resampling anchors by the groups'
    rewards and adds the figures about them to ``metrics``."""
    # a rewritten history (compression, a sub-agent, a forked gateway call) is a
    # separate sample from where its prompt stops extending the tokens before it
    samples = [sample_from_trajectory(p) for t in trajectories for p in split_segments(t)]
    metrics["rollout/extra_segments"] = float(len(samples) - len(trajectories))
    groups = _group_rewards(samples)
    uniform = {g for g, r in groups.items() if len(set(r)) <= 1}
    metrics["rollout/uniform_groups"] = float(len(uniform))
    imitate = imitated_groups(groups, experts.config) if experts is not None else set()
    whole: list[Sample] = []
    if experts is not None:
        metrics["resample/imitated_groups"] = float(len(imitate))
        if render is not None:
            whole, unmatched = whole_expert_samples(samples, imitate, experts, render)
            metrics["resample/whole_experts"] = float(len(whole))
            metrics["resample/whole_experts_unmatched"] = float(unmatched)
        _advance_anchors(experts, config, groups)
        if experts.state():
            metrics["resample/anchor_mean"] = sum(experts.state()) / len(experts.state())
    if config.rollout.drop_uniform_groups:
        samples = [s for s in samples if s.group not in uniform or s.group in imitate]
    return samples + whole, imitate


def _advance_anchors(experts: Experts, config: TrainConfig, groups: dict[Any, list[float]]) -> None:
    if experts.config.mode == "sequential":
        for group, rewards in groups.items():
            index = experts.group_expert.get(group)  # (a task without an expert: none)
            if index is not None:
                experts.rollback[index].update(rewards)
    for group in groups:  # this step's groups (others may be in flight, rollouts async)
        experts.group_expert.pop(group, None)


def _update(
    session: Session,
    config: TrainConfig,
    samples: list[Sample],
    reference: Any,
    imitate: set[Any],
    norm_length: int,
) -> dict[str, float]:
    algo = config.algorithm.resolved(config.rollout.max_new_tokens)
    world = session.world
    if not samples:
        return {"train/skipped_empty": 1.0}
    assign_advantages(
        samples,
        algo.advantage,
        scale_by_std=algo.scale_by_std,
        gamma=algo.gamma,
        baseline=algo.baseline,
    )
    # An episode that ended before the policy spoke (its time ran out while queued for
    # generation) counts in its group's rewards above, but has no token to train on.
    tokenless = sum(1 for s in samples if not len(s))
    samples = [s for s in samples if len(s)]
    if not samples:
        return {"train/skipped_empty": 1.0, "train/tokenless_samples": float(tokenless)}
    coef = config.resample.imitation_coef if config.resample is not None else 0.0
    updater = session.updater
    count = config.updates_per_batch
    parts = [samples[part::count] for part in range(count)]
    for part in parts:  # before any update: old log-probs are the policy's as sampled
        _score(session, world.shard(part), reference, old=count > 1)
    metrics: dict[str, float] = {}
    for part in parts:
        set_weights(
            part,
            algo.aggregation,
            norm_length=norm_length,
            imitation_coef=coef,
            imitation_groups=imitate,
        )
        result = updater.step(world.shard(part))
        for key, value in result.metrics.items():
            if key.endswith("_max"):  # the largest over the mini-batches, the rest their mean
                metrics[key] = max(metrics.get(key, value), value)
            else:
                metrics[key] = metrics.get(key, 0.0) + value / count
    metrics["train/tokenless_samples"] = float(tokenless)
    return metrics


def _score(session: Session, mine: list[Sample], reference: Any, *, old: bool) -> None:
    """Set the reference's log-probs of this process's samples (with a reference) and, with
    ``old``, the current policy's as their old log-probs."""
    updater = session.updater
    if reference is not None:
        refs = scored_logprobs_of(
            reference,
            mine,
            updater.pad_id,
            updater.micro_batch_tokens,
            session.device,
            updater.autocast,
            temperature=updater.temperature,
        )
        for sample, ref in zip(mine, refs, strict=True):
            sample.ref = ref
    if old:
        for sample, logprobs in zip(mine, updater.logprobs(mine), strict=True):
            sample.old = logprobs
