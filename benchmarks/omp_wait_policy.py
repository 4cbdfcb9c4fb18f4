"""PyTorch's OpenMP threads sleeping when they wait (``make demo``'s evaluation) against
spinning first (libgomp's own default, the baseline), beside sandboxes on the same cores.

roll's HF backend decodes with PyTorch's OpenMP threads, one per core. In ``make demo`` they
share 2 cores with what the sandboxes run (``docker exec``s, verifiers). By default libgomp
spins a thread at each barrier before it sleeps, so a spinning thread holds a core a sandbox
wants and a descheduled one holds up its siblings; ``OMP_WAIT_POLICY=PASSIVE``, which
``scripts/demo.py`` gives its ``rock bench`` runs, sleeps at once. Alone, on quiet cores,
sleeping costs a little (printed too).

Each arm runs in a process of its own (libgomp reads the setting when it loads): the demo's
model (SmolLM2-135M-Instruct, bf16, ``--model-path`` for another) decodes ``--turns`` turns of
``--rows`` sampled rows (prompts of 350-450 tokens after one 200-token system prompt, prefill
included), first alone, then while ``--load`` threads of this process run ``docker exec``
of a short Python program in one container (the sandboxes' kind of work), back to back. The
arms alternate over ``--rounds`` rounds. Printed per arm: completion tokens per second alone
and under load, and the execs the load finished per second; the figure is the ratio of the
work done under load (tokens/s, execs/s) PASSIVE against the baseline.

Usage: .venv/bin/python benchmarks/omp_wait_policy.py [--rows 38] [--turns 1] [--load 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ARMS = {"spin first (libgomp's default)": "300000", "PASSIVE": None}
"""Each arm's ``GOMP_SPINCOUNT`` (300,000: libgomp's default when no wait policy is set)
or, for None, ``OMP_WAIT_POLICY=PASSIVE``."""
IMAGE = "rock/base:bookworm"
WORK = "sum(i * i for i in range(200000))"
"""What one exec of the load runs (about 20 ms of Python after its start)."""


def child(model: str, rows: int, turns: int, new_tokens: int) -> None:
    """Decode the turns and print the completion tokens per second as JSON (the arm's
    process: its OpenMP setting came with its environment)."""
    import torch
    from transformers import AutoModelForCausalLM

    from roll.generation.base import SamplingParams
    from roll.generation.hf import HFBackend

    torch.manual_seed(0)
    loaded = AutoModelForCausalLM.from_pretrained(model, dtype=torch.bfloat16)
    backend = HFBackend(loaded, max_cached_tokens=0)
    rng = random.Random(0)
    vocab = int(loaded.config.vocab_size)
    system = [rng.randrange(100, vocab) for _ in range(200)]
    prompts = [
        system + [rng.randrange(100, vocab) for _ in range(rng.randrange(150, 250))]
        for _ in range(rows)
    ]
    params = SamplingParams(temperature=1.0, max_new_tokens=new_tokens, seed=1)
    backend.generate(prompts[:4], params)  # warm-up
    print("ready", flush=True)
    sys.stdin.readline()  # the parent starts the load, or not, then says go
    began = time.perf_counter()
    tokens = sum(len(g.token_ids) for _ in range(turns) for g in backend.generate(prompts, params))
    print(json.dumps({"tokens_per_s": tokens / (time.perf_counter() - began)}), flush=True)


def run_arm(spin: str | None, args: argparse.Namespace, container: str | None) -> dict[str, float]:
    """One arm in a fresh process; with ``container``, under the exec load."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if spin is None:
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    else:
        env["GOMP_SPINCOUNT"] = spin
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", "--model-path", args.model,
         "--rows", str(args.rows), "--turns", str(args.turns),
         "--max-new-tokens", str(args.max_new_tokens)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=env,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    while proc.stdout.readline().strip() != "ready":
        if proc.poll() is not None:
            raise SystemExit("the decoding process failed; run it alone to see why")
    stop = threading.Event()
    done = [0]

    def load() -> None:
        while not stop.is_set():
            subprocess.run(
                ["docker", "exec", str(container), "python3", "-c", WORK],
                check=True, capture_output=True,
            )  # fmt: skip
            done[0] += 1

    workers = [threading.Thread(target=load) for _ in range(args.load if container else 0)]
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    proc.stdin.write("go\n")
    proc.stdin.flush()
    result: dict[str, float] = json.loads(proc.stdout.readline())
    took = time.perf_counter() - began
    stop.set()
    for worker in workers:
        worker.join()
    proc.wait()
    result["execs_per_s"] = done[0] / took
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-path", dest="model")
    parser.add_argument("--rows", type=int, default=38)
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--load", type=int, default=2, help="threads running docker exec")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.rows, args.turns, args.max_new_tokens)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _models import model_path

    args.model = str(model_path(args.model))
    container = subprocess.run(
        ["docker", "run", "-d", "--rm", "--network", "none", IMAGE, "sleep", "infinity"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    try:
        alone: dict[str, list[float]] = {name: [] for name in ARMS}
        loaded: dict[str, list[dict[str, float]]] = {name: [] for name in ARMS}
        for _ in range(args.rounds):
            for name, spin in ARMS.items():
                alone[name].append(run_arm(spin, args, None)["tokens_per_s"])
                loaded[name].append(run_arm(spin, args, container))
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)
    figures = {}
    for name in ARMS:
        tokens = statistics.median(r["tokens_per_s"] for r in loaded[name])
        execs = statistics.median(r["execs_per_s"] for r in loaded[name])
        figures[name] = (tokens, execs)
        print(
            f"{name}: alone {statistics.median(alone[name]):.0f} tokens/s; under "
            f"{args.load} exec threads {tokens:.0f} tokens/s and {execs:.2f} execs/s "
            f"(median of {args.rounds} rounds)"
        )
    (base_tokens, base_execs), (tokens, execs) = figures.values()
    base_alone, passive_alone = (statistics.median(alone[name]) for name in ARMS)
    print(
        f"PASSIVE / spin first, under load: decoding {tokens / base_tokens:.2f}x, "
        f"the sandboxes' execs {execs / base_execs:.2f}x; alone: decoding "
        f"{passive_alone / base_alone:.2f}x; {args.rows} rows x {args.turns} turns"
    )


if __name__ == "__main__":
    main()
