"""Agentic rollout throughput: asynchronous vs synchronous, on episodes with a long tail.

Both runs use the same machinery `roll train` uses with `tasks:` (roll.agentic.collector):
a private rock daemon's warm pool, the iflow agent loop in the compact profile, the task's
verifier in the sandbox, every generation request going through one batching queue. The
policy is a stand-in at the generation-backend seam: in its first turn an episode runs
`sleep S` in its sandbox, S drawn from a long-tailed distribution (most episodes short, one
in ten long), then it calls finish; so episode lengths have the long tail agent episodes
have, and the figure measures the rollout machinery, not a model. Each step takes its
groups, then a stand-in update holds the policy for `--update-sec` (as training would).

- synchronous (baseline, `max_staleness: 0`): a step's episodes start after the previous
  update, and the step waits for its slowest episode;
- asynchronous (`max_staleness: 2` by default, `--staleness`): the next steps' groups run
  during the update and behind the stragglers; groups more than that many policy versions
  old are dropped and counted.

Figure: trained-on episodes per minute, async / sync, same run. Goal: at least 2x.

Usage: .venv/bin/python benchmarks/rollout_async.py [--steps 6] [--groups 2] [--group-size 4]
    [--update-sec 3] [--long-sec 15] [--short-sec 0.3] [--long-share 0.1] [--pool 16]
    [--staleness 2]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "datasets" / "synth-mini" / "tasks"


class TailPolicy:
    """A generation backend stand-in: `sleep S` with a long-tailed S, then finish."""

    name = "tail"

    def __init__(self, tokenizer: Any, args: argparse.Namespace, seed: int) -> None:
        self.tokenizer = tokenizer
        self.args = args
        self.rng = random.Random(seed)
        self.policy_version = 0

    def _ids(self, text: str) -> list[int]:
        return [*self.tokenizer.encode(text, add_special_tokens=False), self.tokenizer.eos_token_id]

    def generate(self, prompts: list[list[int]], params: Any) -> list[Any]:
        from roll.generation.base import Generation

        out = []
        for prompt in prompts:
            seen = self.tokenizer.decode(prompt)
            if (
                "<tool_response>" in seen.split("<|im_start|>user", 1)[-1]
                or seen.count("<|im_start|>assistant") > 1
            ):
                text = '<tool_call>\n{"name": "finish", "arguments": {"summary": "done"}}\n</tool_call>'
            else:
                long = self.rng.random() < self.args.long_share
                seconds = self.args.long_sec if long else self.args.short_sec
                text = (
                    '<tool_call>\n{"name": "run_shell_command", "arguments": {"command": '
                    f'"sleep {seconds}"}}}}\n</tool_call>'
                )
            ids = self._ids(text)
            out.append(Generation(token_ids=ids, logprobs=[-1.0] * len(ids), finish_reason="stop"))
        return out

    def sync_weights(self, model: Any, version: int) -> None:
        self.policy_version = version

    def close(self) -> None:
        pass


def workload(tmp: Path) -> tuple[Any, Path]:
    """A tiny model's tokenizer and a dataset of 4 synth-mini tasks, under ``tmp``."""
    from transformers import AutoTokenizer

    from iflow.models.tiny import build_tiny_model

    tokenizer = AutoTokenizer.from_pretrained(
        build_tiny_model(tmp / "tok", hidden_size=16, layers=1, heads=2)
    )
    dataset = tmp / "data"
    (dataset / "tasks").mkdir(parents=True)
    for source in sorted(TASKS.iterdir())[:4]:
        (dataset / "tasks" / source.name).symlink_to(source)
    return tokenizer, dataset


def add_workload_args(parser: argparse.ArgumentParser) -> None:
    """The workload's options (shared with benchmarks/tail_batching.py)."""
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--update-sec", type=float, default=3.0)
    parser.add_argument("--long-sec", type=float, default=15.0)
    parser.add_argument("--short-sec", type=float, default=0.3)
    parser.add_argument("--long-share", type=float, default=0.1)
    parser.add_argument("--pool", type=int, default=16)
    parser.add_argument("--staleness", type=int, default=2, help="max_staleness of the async run")


def task_rollouts(
    args: argparse.Namespace, staleness: int, policy: TailPolicy, tokenizer: Any, dataset: Path
) -> Any:
    """The workload's rollout source (roll.agentic.collector.TaskRollouts, not entered)."""
    from roll.agentic.collector import TaskRollouts
    from roll.config import TasksConfig
    from roll.generation.base import SamplingParams

    config = TasksConfig(
        dataset=str(dataset), pool_size=args.pool, max_turns=3, max_staleness=staleness
    )
    return TaskRollouts(
        config,
        tokenizer,
        seed=0,
        backend=policy,
        params=SamplingParams(max_new_tokens=64),
        group_size=args.group_size,
        groups_per_step=args.groups,
        max_staleness=staleness,
    )


def run(
    args: argparse.Namespace, staleness: int, tokenizer: Any, dataset: Path
) -> dict[str, float]:
    policy = TailPolicy(tokenizer, args, seed=staleness + 1)
    with task_rollouts(args, staleness, policy, tokenizer, dataset) as rollouts:
        rollouts.take(0)  # warm: the pool refills, first episodes pay the start-up
        began = time.perf_counter()
        episodes = 0
        for version in range(1, args.steps + 1):
            episodes += len(rollouts.take(version - 1))
            time.sleep(args.update_sec)  # the update; rollouts go on during it only when async
            with rollouts.paused():  # the weight sync: no generation meanwhile
                policy.sync_weights(None, version)
        seconds = time.perf_counter() - began
        metrics = rollouts.metrics()
    return {
        "episodes": episodes,
        "seconds": seconds,
        "per_min": 60.0 * episodes / seconds,
        "stale_dropped": metrics["episodes/stale_dropped_groups"],
        "infra_retried": metrics["episodes/infra_retried"],
        "mean_batch": metrics.get("generation/mean_batch", 0.0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_workload_args(parser)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, dataset = workload(Path(tmp))
        print(
            f"{args.steps} steps x {args.groups} groups x {args.group_size} episodes; episode "
            f"sleeps {args.short_sec}s, or {args.long_sec}s with p={args.long_share}; "
            f"update {args.update_sec}s; pool {args.pool}",
            file=sys.stderr,
        )
        sync = run(args, 0, tokenizer, dataset)
        asyn = run(args, args.staleness, tokenizer, dataset)
    for name, result in (
        ("synchronous (max_staleness 0)", sync),
        (f"async (max_staleness {args.staleness})", asyn),
    ):
        print(
            f"{name:31s} {result['episodes']:4.0f} episodes in {result['seconds']:6.1f} s = "
            f"{result['per_min']:6.1f} episodes/min (stale groups dropped {result['stale_dropped']:.0f}, "
            f"infra retries {result['infra_retried']:.0f}, mean generation batch {result['mean_batch']:.1f})"
        )
    ratio = asyn["per_min"] / sync["per_min"]
    print(
        f"async rollout: {asyn['per_min']:.1f} episodes/min vs synchronous {sync['per_min']:.1f}: {ratio:.2f}x (goal >= 2x)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
