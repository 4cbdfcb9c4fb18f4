"""Supervised fine-tuning on agent trajectories, with per-turn loss masks.

A trajectory is rendered with the policy's chat template exactly as the agent's local model
builds its prompts (:func:`iflow.models.local.prompt_token_ids`, the iflow tool set in the
system message), so what is learned is what the agent will see. Every assistant turn's
tokens are a target unless :func:`ale.chunking.loss_of` says it takes no loss (the step's
``mark`` a mistake, as the synthesis pipeline marks an injected one, an irrelevant turn, or
copied context, as ATIF's ``is_copied_context`` imports): the one decision RL's samples
take too. The observation that follows such a turn stays as context. The loss is the NLL summed over unmasked tokens divided by their number in the
batch.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ale.chunking import Loss, loss_of
from ale.trajectory import Role, Step, Trajectory
from roll.algo.batch import Sample, set_sft_weights
from roll.algo.losses import LossSpec
from roll.config import SFTConfig
from roll.demonstrations import as_compact, iflow_tool_schemas, load_trajectories
from roll.errors import ConfigError
from roll.session import Session


@dataclass(frozen=True, slots=True)
class Tokenized:
    sample: Sample
    truncated_turns: int


def tokenize_trajectory(
    trajectory: Trajectory,
    tokenizer: Any,
    tools: list[dict[str, Any]],
    *,
    max_seq_len: int,
    tool_format: Any = "auto",
) -> Tokenized | None:
    """The trajectory as one token sequence with its assistant turns as targets.

    Turns that would pass ``max_seq_len`` are dropped with everything after them; ``None``
    when not even the first assistant turn fits or the template is not prefix-stable.
    """
    from iflow.models.local import prompt_token_ids

    steps: list[Step] = list(trajectory.steps)
    assistant = [i for i, s in enumerate(steps) if s.role is Role.ASSISTANT]
    ids: list[int] = []
    mask: list[bool] = []
    kept = 0
    for index in assistant:
        before = prompt_token_ids(tokenizer, steps[:index], tools, tool_format)
        after = prompt_token_ids(
            tokenizer, steps[: index + 1], tools, tool_format, add_generation_prompt=False
        )
        if before[: len(ids)] != ids or after[: len(before)] != before:
            return None  # the template rewrites earlier turns: no consistent token view
        if len(after) > max_seq_len:
            break
        context = before[len(ids) :]
        turn = after[len(before) :]
        ids.extend(context)
        mask.extend([False] * len(context))
        ids.extend(turn)
        mask.extend([loss_of(steps[index]) is not Loss.NONE] * len(turn))
        kept += 1
    if not kept:
        return None
    sample = Sample(
        input_ids=ids,
        rl_mask=[False] * len(ids),
        chunk_ids=[-1] * len(ids),
        expert_mask=mask,
        reward=float(trajectory.reward or 0.0),
        group=trajectory.trajectory_id,
        meta={"trajectory_id": trajectory.trajectory_id},
    )
    return Tokenized(sample=sample, truncated_turns=len(assistant) - kept)


SHARED_PROMPT = "sft"
"""The group of every SFT sample: trajectories rendered with one system prompt and one set of
tools start with the same tokens (192 of the demo's 348 on average), which the update then
runs once per micro-batch instead of once per row (:mod:`roll.prefix`; the gradient is the
same). Samples with no long enough common start are run one by one, as before."""


def sft_samples(
    trajectories: list[Trajectory],
    tokenizer: Any,
    config: SFTConfig,
    *,
    context_window: int | None = None,
) -> tuple[list[Sample], dict[str, int]]:
    """Tokenised samples and counts of what was left out and why; sequences are cut at
    ``max_seq_len`` or the model's ``context_window``, whichever is shorter."""
    limit = min(config.max_seq_len, context_window or config.max_seq_len)
    compact = config.tools in ("iflow-compact", "iflow-brief")
    tools = [] if config.tools == "none" else iflow_tool_schemas(compact=compact)
    # each as its consumer renders the tools: the iflow agent's local model by default (auto),
    # agentic RL with tasks.tool_format text or brief
    tool_format = {"iflow-compact": "text", "iflow-brief": "brief"}.get(config.tools, "auto")
    counts = {"trajectories": len(trajectories), "unsuccessful": 0, "too_long": 0, "cut": 0}
    samples: list[Sample] = []
    for trajectory in trajectories:
        if config.only_successful and trajectory.reward is not None and trajectory.reward <= 0:
            counts["unsuccessful"] += 1
            continue
        if compact:
            trajectory = as_compact(trajectory)
        tokenized = tokenize_trajectory(
            trajectory, tokenizer, tools, max_seq_len=limit, tool_format=tool_format
        )
        if tokenized is None or not any(tokenized.sample.expert_mask):
            counts["too_long"] += 1
            continue
        counts["cut"] += tokenized.truncated_turns > 0
        tokenized.sample.group = SHARED_PROMPT
        samples.append(tokenized.sample)
    return samples, counts


def epoch_order(count: int, seed: int, epoch: int) -> list[int]:
    """The sample order of an epoch: a permutation drawn from (seed, epoch) alone."""
    order = list(range(count))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    return order


def run_sft(config: SFTConfig, *, resume: bool = False, log: Any = None) -> Path:
    """Train; the final model's directory."""
    with Session(config, spec=LossSpec(), resume=resume, log=log) as session:
        trajectories = load_trajectories(config.data)
        window = session.context_window
        samples, counts = sft_samples(
            trajectories, session.tokenizer, config, context_window=window
        )
        if not samples:
            if window is not None and window < config.max_seq_len:
                longest = f"the model's context window ({window} tokens)"
                advice = "use a model with a longer context, or shorter trajectories"
            else:
                longest = f"max_seq_len={config.max_seq_len}"
                advice = "check data or raise max_seq_len"
            raise ConfigError(
                f"none of the {counts['trajectories']} trajectories can be trained on "
                f"({counts['unsuccessful']} unsuccessful, {counts['too_long']} too long for "
                f"{longest}); {advice}"
            )
        session.say(
            f"sft: {len(samples)} trajectories ({counts['unsuccessful']} unsuccessful and "
            f"{counts['too_long']} too long left out, {counts['cut']} cut short)"
        )
        per_epoch = max(1, len(samples) // config.batch_size)
        steps = config.run.steps
        if config.epochs is not None:
            steps = max(1, round(config.epochs * per_epoch))
        session.start(steps)
        for step in range(session.start_step, steps):
            epoch, offset = divmod(step, per_epoch)
            order = epoch_order(len(samples), config.seed, epoch)
            chosen = order[offset * config.batch_size : (offset + 1) * config.batch_size]
            batch = [samples[i] for i in chosen]
            set_sft_weights(batch)
            began = time.perf_counter()
            result = session.updater.step(session.world.shard(batch))
            elapsed = time.perf_counter() - began
            metrics = dict(result.metrics)
            metrics["train/epoch"] = step / per_epoch
            metrics["train/loss"] = metrics.get("train/imitation_loss", metrics["train/loss"])
            metrics["perf/tokens_per_s"] = metrics["train/tokens"] * session.world.size / elapsed
            session.log(step + 1, metrics)
            session.checkpoint(step + 1, {"step": step + 1, "kind": "sft"}, force=step + 1 == steps)
        return session.finish()
