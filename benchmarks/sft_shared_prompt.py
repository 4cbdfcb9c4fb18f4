"""`roll sft`'s step with the trajectories' shared prompt run once per micro-batch.

The demo's SFT data are expert trajectories of the iflow agent rendered as the agent sees a
task (`tools: iflow-brief`): every one opens with the same system prompt and tool
descriptions. `roll sft` now puts all samples in one prefix group, so that opening goes
through the model once per micro-batch, its key/value cache (with gradient) shared by the
rows (`roll.prefix`); before, every row ran whole.

Measured on the real model (SmolLM2-135M-Instruct, imported as `make demo` does), bf16
autocast as in the demo's SFT, batches of 8 of the demo's training trajectories
(`demo-out/datasets/train`, after `make demo`; else `datasets/synth-mini`'s, or `--data`)
rendered that way: the same batches trained on by two updaters of two
copies of the model, one sharing the prompt (the change) and one running each row whole (the
baseline), steps interleaved and the order alternating; medians of the step time. Printed:
positions the model ran and seconds a step for each, and the baseline's time over the
change's. A check first: both updaters' first step from the same weights gives the same
loss.

Usage: .venv/bin/python benchmarks/sft_shared_prompt.py [--steps 8] [--model PATH] [--data JSONL]
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import time
from pathlib import Path

import torch
from _models import model_path
from _rockbench import machine

from roll.algo.batch import set_sft_weights
from roll.algo.losses import LossSpec
from roll.config import OptimConfig, SFTConfig
from roll.demonstrations import load_trajectories
from roll.models import load_policy
from roll.sft import sft_samples
from roll.update import Updater

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "demo-out" / "datasets" / "train" / "trajectories.jsonl"
"""The demo's training trajectories, when `make demo` has made them (the default)."""
MINI = REPO / "datasets" / "synth-mini" / "trajectories.jsonl"
"""Longer multi-turn trajectories, in the repository."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="timed steps of each updater")
    parser.add_argument("--model", type=Path, default=None, help="a model directory")
    parser.add_argument(
        "--data", type=Path, default=DEMO if DEMO.is_file() else MINI,
        help="trajectories (default: the demo's training set if made, else synth-mini's)",
    )  # fmt: skip
    args = parser.parse_args()
    print(f"machine: {machine()}")
    path = model_path(str(args.model) if args.model else None)
    config = SFTConfig.model_validate(
        {"model": {"path": str(path)}, "data": [str(args.data)], "tools": "iflow-brief",
         "max_seq_len": 1024}
    )  # fmt: skip
    lm, tokenizer = load_policy(path, device="cpu", dtype="float32")
    samples, _ = sft_samples(load_trajectories(config.data), tokenizer, config)
    print(
        f"{args.data}: {len(samples)} trajectories, "
        f"{statistics.mean(map(len, samples)):.0f} tokens each"
    )
    updaters = {}
    for share in (True, False):
        updaters[share] = Updater(
            copy.deepcopy(lm), OptimConfig(lr=1e-5), total_steps=args.steps + 1,
            spec=LossSpec(), pad_id=tokenizer.pad_token_id or 0, micro_batch_tokens=4096,
            max_bad_steps=3, amp_dtype=torch.bfloat16, share_prefix=share,
        )  # fmt: skip
    rng = random.Random(0)
    batches = [rng.sample(samples, 8) for _ in range(args.steps + 1)]
    losses = {}
    for share, updater in updaters.items():  # the check, untimed: the same first step
        set_sft_weights(batches[0])
        losses[share] = updater.step(batches[0]).metrics
    print(
        f"first step: loss {losses[True]['train/loss']:.5f} shared, "
        f"{losses[False]['train/loss']:.5f} whole"
    )
    times: dict[bool, list[float]] = {True: [], False: []}
    positions: dict[bool, list[float]] = {True: [], False: []}
    for index, batch in enumerate(batches[1:]):
        order = (True, False) if index % 2 == 0 else (False, True)
        for share in order:
            set_sft_weights(batch)
            began = time.perf_counter()
            result = updaters[share].step(batch)
            times[share].append(time.perf_counter() - began)
            positions[share].append(result.metrics["train/tokens"])
    for share, label in ((True, "shared prompt (roll sft now)"), (False, "every row whole")):
        print(
            f"{label:30s} {statistics.mean(positions[share]):6.0f} positions a step, "
            f"median {statistics.median(times[share]):5.2f} s a step"
        )
    ratio = statistics.median(times[False]) / statistics.median(times[True])
    print(f"an SFT step with the shared prompt run once: {ratio:.2f}x faster than every row whole")


if __name__ == "__main__":
    main()
