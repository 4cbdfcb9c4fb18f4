"""rock bench with a local model: one batched model for all trials (``--agent roll-policy``)
against a model per trial (``--agent iflow --agent-kwarg provider=local``, the baseline).

The same model, tasks, agent settings (compact profile, brief tools, 3 turns, 64 tokens a
turn) and sampling (temperature 1, one attempt a task) in both runs, measured in the same
process one after the other; the baseline at ``--n-concurrent 4`` (what `make demo` used
before: more concurrent trials, each decoding alone, only share 2 cores more thinly), the
batched agent at 32 (as the demo runs it). Printed: each run's wall time and success, and the speed-up.

Defaults: the demo's SFT model and held-out tasks (demo-out/, from `make demo`); any
save_pretrained directory with --model and any task directory with --dataset.

Usage: .venv/bin/python benchmarks/bench_policy_agent.py [--model DIR] [--dataset DIR] [--tasks N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _rockbench import machine

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SETTINGS = [
    "prompt_profile=compact",
    "tool_format=brief",
    "max_turns=3",
    "context_limit=1024",
    "max_output_tokens=64",
    "temperature=1.0",
]


def bench(agent: str, kwargs: list[str], concurrent: int, args: argparse.Namespace, out: Path):
    ids = sorted(p.name for p in args.dataset.iterdir() if (p / "task.toml").is_file())
    ids = ids[: args.tasks] if args.tasks else ids
    command = [
        BIN / "rock", "bench", "run", "--dataset", args.dataset, "--agent", agent,
        "--n-concurrent", str(concurrent), "--output", out,
        *[a for i in ids for a in ("--task", i)],
        *[a for k in [*SETTINGS, *kwargs] for a in ("--agent-kwarg", k)],
    ]  # fmt: skip
    t = time.monotonic()
    subprocess.run([str(c) for c in command], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - t
    data = json.loads((out / "results.json").read_text())
    return wall, data["n_resolved"], data["n_resolved"] + data["n_unresolved"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, default=REPO / "demo-out" / "sft" / "model")
    parser.add_argument(
        "--dataset", type=Path, default=REPO / "demo-out" / "datasets" / "heldout" / "tasks"
    )
    parser.add_argument("--tasks", type=int, default=0, help="the first N tasks (0: all)")
    args = parser.parse_args()
    for path, what in ((args.model, "config.json"), (args.dataset, None)):
        if not (path / what if what else path).exists():
            raise SystemExit(
                f"{path} is missing: run `make demo` first, or pass --model/--dataset."
            )
    print(f"machine: {machine()}")
    print(f"model: {args.model}; tasks: the first {args.tasks or 'all'} of {args.dataset}")
    with tempfile.TemporaryDirectory(prefix="bench-policy-agent-") as tmp:
        root = Path(tmp)
        model = f"model_path={args.model}"
        base = bench("iflow", ["provider=local", model], 4, args, root / "iflow")
        ours = bench("roll-policy", [model, "dtype=float32"], 32, args, root / "policy")
    for name, (wall, resolved, trials) in (
        ("baseline: --agent iflow, provider=local (a model per trial), 4 concurrent", base),
        ("--agent roll-policy (one batched model), 32 concurrent", ours),
    ):
        print(f"{name}: {wall:.1f} s, {resolved}/{trials} resolved")
    print(f"speed-up of roll-policy over the per-trial model: {base[0] / ours[0]:.2f}x")


if __name__ == "__main__":
    main()
