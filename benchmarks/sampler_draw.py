"""roll's HF backend: a sampled token drawn from one uniform a row, not one per vocabulary entry.

Profiled on 2 CPU cores, a sampled decode step of the demo's model spent 12 % of its time in
``torch.multinomial``, which draws an exponential random number for each of the 49,152
vocabulary entries of every row. The backend now inverts each row's cumulative distribution
at one uniform draw (the same distribution).

Measured: one sampled turn (temperature 1, up to 48 tokens) for --rows prompts of the demo's
length (about 390 tokens: a system prompt, then the task) decoded together by one HF backend
(bf16), --rounds times each way, interleaved: with the backend's draw, and as the baseline in
the same run with ``torch.multinomial`` put back. The figure is completion tokens per second,
new over baseline. Model: the demo's (SmolLM2-135M-Instruct), or --model DIR.

Usage: python benchmarks/sampler_draw.py [--rows 38] [--rounds 3] [--model DIR]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from _models import model_path
from _rockbench import machine

from roll.generation import hf_session
from roll.generation.base import SamplingParams
from roll.generation.hf import HFBackend

SYSTEM = (
    "You are a terminal agent. You work in a Linux sandbox through the tools below; run one "
    "command at a time, read its output, and finish when the task is done. Tools: "
    "run_shell_command(command), read_file(path), write_file(path, content), finish(summary). "
) * 6


def multinomial(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The baseline: what the backend drew with before."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def turn(backend: HFBackend, prompts: list[list[int]], draw: Any) -> tuple[float, int]:
    """(seconds, completion tokens) of one sampled turn of every prompt, decoded together."""
    hf_session._draw = draw  # type: ignore[attr-defined]
    backend.sync_weights(backend.model, backend.policy_version + 1)  # an empty prefix cache
    began = time.perf_counter()
    made = backend.generate(prompts, SamplingParams(max_new_tokens=48, temperature=1.0, seed=0))
    return time.perf_counter() - began, sum(len(g.token_ids) for g in made)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=38, help="prompts decoded together")
    parser.add_argument("--rounds", type=int, default=3, help="turns each way")
    parser.add_argument("--model", default=None, help="a model directory")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    backend = HFBackend.from_path(model_path(args.model), device="cpu", dtype="bfloat16")
    tokenizer = backend.tokenizer
    prompts = [
        list(tokenizer.encode(f"{SYSTEM}\nTask {i}: count the lines of notes-{i}.txt"))
        for i in range(args.rows)
    ]
    draws = {"one uniform a row": hf_session._draw, "baseline: torch.multinomial": multinomial}
    turn(backend, prompts[:4], multinomial)  # warm up
    totals = {name: [0.0, 0] for name in draws}
    for _ in range(args.rounds):
        for name, draw in draws.items():
            seconds, tokens = turn(backend, prompts, draw)
            totals[name][0] += seconds
            totals[name][1] += tokens
    hf_session._draw = draws["one uniform a row"]  # type: ignore[attr-defined]
    rates = {name: tokens / seconds for name, (seconds, tokens) in totals.items()}
    print(f"{args.rows} prompts of {len(prompts[0])} tokens, one sampled turn of up to 48 tokens")
    for name, rate in rates.items():
        print(f"{name:28s} {rate:6.1f} completion tokens/s")
    new, base = rates["one uniform a row"], rates["baseline: torch.multinomial"]
    print(f"sampling with one uniform a row: {new / base:.2f}x the tokens/s of torch.multinomial")


if __name__ == "__main__":
    main()
