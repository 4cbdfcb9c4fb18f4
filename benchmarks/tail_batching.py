"""Tail batching vs plain synchronous vs asynchronous rollouts, on episodes with a long tail.

The workload of ``benchmarks/rollout_async.py`` (reused from it): real sandboxes of a private
rock daemon's warm pool, the iflow agent loop, the tasks' verifiers, and a stand-in policy at
the generation-backend seam whose episodes run ``sleep S`` with a long-tailed S (most short,
one in ten long), then finish; each step ends with a stand-in update of ``--update-sec``.
Three arms, one after the other in the same run:

- plain synchronous (the baseline, ``max_staleness: 0``): a step runs its groups after the
  previous update and waits for the slowest episode;
- tail batching (``rollout.schedule: tail_batching``, :mod:`roll.schedule`): short rounds
  launch ``ceil(eta * groups)`` groups and keep the first ``groups`` to finish acting (only
  they run their verifiers, :mod:`roll.agentic.admission`; the others are cut, their
  sandboxes given back, their prompts deferred); every ``--long-round-every`` steps a long
  round runs the deferred prompts together and waits for them all;
- asynchronous (``max_staleness: --staleness``): the next steps' groups run during the
  update; their samples may come from an older policy.

Figure: wall-clock seconds per trained sample (episode) of each arm, and the samples trained
on that an older policy than the trainer's sampled (stale). A fourth arm, plain synchronous
with no long episode at all, shows what removing every straggler gives a step of this size on
this machine: its sandbox work and its update, which a synchronous step cannot overlap, stay. Goal: tail batching at least 1.8x
plain synchronous, with zero stale samples. ``--steps`` should be a multiple of
``--long-round-every`` (no deferred prompt left over at the end).

Usage: python benchmarks/tail_batching.py [--steps 8] [--eta 2] [--long-round-every 8]
    [rollout_async.py's workload options: --groups 2 --group-size 4 --update-sec 3 ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _rockbench import machine
from rollout_async import TailPolicy, add_workload_args, task_rollouts, workload


def run(arm: str, args: argparse.Namespace, tokenizer: Any, dataset: Path) -> dict[str, float]:
    from roll.config import TailBatchingConfig
    from roll.schedule import TailBatching
    from roll.train import stale

    staleness = args.staleness if arm == "async" else 0
    if arm == "floor":  # no long episode at all: what removing every straggler would give
        args = argparse.Namespace(**{**vars(args), "long_share": 0.0})
    policy = TailPolicy(tokenizer, args, seed=1)
    rollouts = task_rollouts(args, staleness, policy, tokenizer, dataset)
    source: Any = rollouts
    if arm == "tail":
        schedule = TailBatchingConfig(eta=args.eta, long_round_every=args.long_round_every)
        source = TailBatching(rollouts, schedule, groups_per_step=args.groups, start_step=0)
    with source:
        rollouts.take(0)  # warm: the pool refills, first episodes pay the start-up
        began = time.perf_counter()
        samples = stale_samples = 0
        for version in range(args.steps):
            trajectories = source.take(version)
            samples += len(trajectories)
            stale_samples += sum(stale(t, version) for t in trajectories)
            time.sleep(args.update_sec)  # the update; rollouts go on during it only when async
            with source.paused():  # the weight sync: no generation meanwhile
                policy.sync_weights(None, version + 1)
        seconds = time.perf_counter() - began
        metrics = source.metrics()
    return {
        "samples": samples,
        "seconds": seconds,
        "per_sample": seconds / max(samples, 1),
        "stale": stale_samples,
        "stale_dropped": metrics["episodes/stale_dropped_groups"],
        "long_rounds": metrics.get("tail/long_rounds", 0.0),
        "deferred": metrics.get("tail/deferred_total", 0.0),
        "cut": metrics.get("episodes/cut", 0.0),
        "cut_unverified": metrics.get("episodes/cut_unverified", 0.0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_workload_args(parser)
    parser.add_argument("--eta", type=float, default=2.0)
    parser.add_argument("--long-round-every", type=int, default=8)
    parser.set_defaults(steps=8)
    args = parser.parse_args()
    print(machine())
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, dataset = workload(Path(tmp))
        print(
            f"{args.steps} steps x {args.groups} groups x {args.group_size} episodes; episode "
            f"sleeps {args.short_sec}s, or {args.long_sec}s with p={args.long_share}; update "
            f"{args.update_sec}s; pool {args.pool}; tail batching eta {args.eta:g}, long round "
            f"every {args.long_round_every} steps; async max_staleness {args.staleness}",
            file=sys.stderr,
        )
        arms = ("plain", "tail", "async", "floor")
        results = {arm: run(arm, args, tokenizer, dataset) for arm in arms}
    names = {
        "plain": "plain synchronous",
        "tail": f"tail batching (eta {args.eta:g}, long every {args.long_round_every})",
        "async": f"async (max_staleness {args.staleness})",
        "floor": "plain synchronous, the tail removed",
    }
    for arm, r in results.items():
        extra = ""
        if arm == "tail":
            extra = (
                f", long rounds {r['long_rounds']:.0f}, prompts deferred {r['deferred']:.0f}, "
                f"episodes cut {r['cut']:.0f} ({r['cut_unverified']:.0f} held before their "
                "verifiers)"
            )
        if arm == "async":
            extra = f", stale groups dropped {r['stale_dropped']:.0f}"
        print(
            f"{names[arm]:42s} {r['samples']:4.0f} samples in {r['seconds']:6.1f} s = "
            f"{r['per_sample']:5.2f} s/sample (stale samples {r['stale']:.0f}{extra})"
        )
    plain, tail, asyn = results["plain"], results["tail"], results["async"]
    floor = results["floor"]
    print(
        f"tail batching: {tail['per_sample']:.2f} s/sample vs plain synchronous "
        f"{plain['per_sample']:.2f}: {plain['per_sample'] / tail['per_sample']:.2f}x (goal >= "
        f"1.8x), stale samples {tail['stale']:.0f} (goal 0); async: "
        f"{plain['per_sample'] / asyn['per_sample']:.2f}x with {asyn['stale']:.0f} stale samples"
    )
    print(
        f"plain synchronous with no long episode at all (nothing to wait for): "
        f"{floor['per_sample']:.2f} s/sample = {plain['per_sample'] / floor['per_sample']:.2f}x "
        "plain: what removing every straggler gives a step of this size here"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
