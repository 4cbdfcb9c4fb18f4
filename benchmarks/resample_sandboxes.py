"""Chunk-level initialised resampling on real sandboxes: IPA with it vs IPA without (baseline).

On task families whose expert needs several turns (log-summary, json-reshape, maze-path of
datasets/synth-mini: 4-6 turns; the 135M model rarely solves them from the start), split per
family into training (two thirds) and held-out tasks (the rest), for each seed:

1. `roll sft` (packages/roll/examples/sft-demo.yaml, that seed, a longer context for these
   tasks' outputs, 24 steps): the demo's real model (SmolLM2-135M-Instruct) imitates the training
   tasks' expert trajectories (`--tiny`: a tiny model built from nothing);
2. from that SFT model, two RL runs with the same config, seed and budget
   (packages/roll/examples/train-demo-ipa.yaml, 6 turns): `ipa` (every group starts at the
   task's beginning: the baseline) and `ipa+resample` (`resample:` parallel, 3 anchors: each
   task's groups start in turn at anchor 0, the middle and the last chunk of its expert
   trajectory, in forks of a sandbox the expert's turns were replayed in; groups without a
   success imitate the expert's turns);
3. `rock bench run --agent roll-policy` (greedy, from the start of each task) on the held-out
   tasks for the SFT model and both RL models.

Printed per arm: held-out success (mean and per seed), the training success of the groups
that started at the beginning (what both arms share) and of all groups, and resampling's gain
over the baseline in points.

Usage: .venv/bin/python benchmarks/resample_sandboxes.py [--seeds 3] [--rl-steps 10] [--one-sft] [--tiny] [--out DIR]
(`--seeds 1 --rl-steps 4` for a quick look; every finished stage is reused when run again.)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from learning_ipa import BIN, EXAMPLES, REPO, accuracy, evaluate, run, train_sft

FAMILIES = ("log-summary", "json-reshape", "maze-path")
SOURCE = REPO / "datasets" / "synth-mini"
TURNS = 6
NEW_TOKENS = 448
"""Room for the longest expert turn of these families (a file of about 1,600 characters)."""
CONTEXT = 2048
SFT_STEPS = 24
"""SFT steps of 8 (about 6.6 passes over the 29 training trajectories). The demo's own 48 suit
its 135 short trajectories; here a step of these long ones takes about 50 s on 2 cores."""
SETTINGS: dict[str, Any] = {
    "turns": TURNS,
    "context": CONTEXT,
    "new_tokens": NEW_TOKENS,
    "concurrent": 16,
}
"""How the held-out tasks are run (the agent's turns, context and tokens a turn)."""
ONE_SFT = "; every seed's RL from seed 0's SFT model"
ARMS = {
    "ipa": [],
    "ipa+resample": ["resample.mode=parallel", "resample.anchors=3"],
}


def split(out: Path) -> tuple[Path, Path]:
    """Training and held-out datasets of the families' tasks (two thirds / one third each),
    with the training tasks' expert trajectories."""
    train, heldout = out / "datasets" / "train", out / "datasets" / "heldout"
    if (heldout / "tasks").is_dir():
        return train, heldout
    experts = [json.loads(x) for x in (SOURCE / "trajectories.jsonl").read_text().splitlines()]
    kept: list[str] = []
    for family in FAMILIES:
        names = sorted(p.name for p in (SOURCE / "tasks").iterdir() if p.name.startswith(family))
        cut = len(names) * 2 // 3
        for name in names[:cut]:
            shutil.copytree(SOURCE / "tasks" / name, train / "tasks" / name)
            kept.append(name)
        for name in names[cut:]:
            shutil.copytree(SOURCE / "tasks" / name, heldout / "tasks" / name)
    rows = [json.dumps(t) for t in experts if t.get("task_id") in kept and t.get("reward")]
    (train / "trajectories.jsonl").write_text("".join(f"{r}\n" for r in rows))
    return train, heldout


def training_success(run_dir: Path) -> tuple[float, float]:
    """The mean reward of the training episodes that started at a task's beginning, and of
    all of them (from the run's rollouts)."""
    fresh: list[float] = []
    every: list[float] = []
    for path in sorted((run_dir / "rollouts").glob("step-*.jsonl")):
        for line in path.read_text().splitlines():
            trajectory = json.loads(line)
            reward = float(trajectory.get("reward") or 0.0)
            every.append(reward)
            if not (trajectory.get("extra") or {}).get("roll", {}).get("anchor"):
                fresh.append(reward)
    mean = statistics.mean
    return (mean(fresh) if fresh else 0.0), (mean(every) if every else 0.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rl-steps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=REPO / "bench-out" / "resample")
    parser.add_argument("--tiny", action="store_true", help="the tiny model, not the real one")
    parser.add_argument(
        "--one-sft",
        action="store_true",
        help="every seed's RL starts from seed 0's SFT model (the arms stay paired; about 24 "
        "minutes less a seed on 2 cores)",
    )
    args = parser.parse_args()
    suffix = "-tiny" if args.tiny else ""
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    train, heldout = split(out)
    held: dict[str, list[float]] = {arm: [] for arm in ("sft", *ARMS)}
    trained: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
    for seed in range(args.seeds):
        base = out / f"seed{seed}"
        sft_base = out / "seed0" if args.one_sft else base
        sft = train_sft(
            sft_base,
            0 if args.one_sft else seed,
            train,
            tiny=args.tiny,
            extra=(
                f"max_seq_len={CONTEXT}",
                f"run.steps={SFT_STEPS}",
                f"run.checkpoint_every={SFT_STEPS}",
            ),
        )
        held["sft"].append(
            accuracy(evaluate(sft / "model", heldout, sft_base / "bench-sft", **SETTINGS))
        )
        for arm, overrides in ARMS.items():
            run_dir = base / arm
            if not (run_dir / "model" / "config.json").is_file():
                shutil.rmtree(run_dir, ignore_errors=True)
                experts = [f"resample.experts={train / 'trajectories.jsonl'}"] if overrides else []
                run(BIN / "roll", "train", EXAMPLES / f"train-demo-ipa{suffix}.yaml",
                    f"run_dir={run_dir}", f"seed={seed}", f"model.path={sft / 'model'}",
                    f"tasks.dataset={train}", f"tasks.max_turns={TURNS}",
                    f"tasks.context_limit={CONTEXT}", f"rollout.max_new_tokens={NEW_TOKENS}",
                    "rollout.groups_per_step=2", f"run.steps={args.rl_steps}",
                    "run.progress=false", *experts, *overrides)  # fmt: skip
            held[arm].append(
                accuracy(evaluate(run_dir / "model", heldout, base / f"bench-{arm}", **SETTINGS))
            )
            trained[arm].append(training_success(run_dir))

    tasks = len(list((heldout / "tasks").iterdir()))
    print(f"\n{', '.join(FAMILIES)}: {len(list((train / 'tasks').iterdir()))} training tasks, "
          f"{tasks} held out; {args.seeds} seed(s), {args.rl_steps} RL steps"
          f"{ONE_SFT if args.one_sft else ''}")  # fmt: skip
    print("| arm | held-out success (greedy) | per seed | training success from the start | "
          "training success, all groups |")  # fmt: skip
    print("|---|---|---|---|---|")
    for arm, rows in held.items():
        seeds = ", ".join(f"{s:.0%}" for s in rows)
        if arm == "sft":
            print(f"| SFT | {statistics.mean(rows):.0%} | {seeds} | — | — |")
            continue
        fresh = statistics.mean(t[0] for t in trained[arm])
        every = statistics.mean(t[1] for t in trained[arm])
        print(
            f"| {arm.upper()} | {statistics.mean(rows):.0%} | {seeds} | {fresh:.1%} | {every:.1%} |"
        )
    gain = statistics.mean(held["ipa+resample"]) - statistics.mean(held["ipa"])
    print(f"\nResampling's gain over IPA from the start (baseline), held out: {100 * gain:+.1f} "
          f"points; ({(time.monotonic() - started) / 60:.1f} min)")  # fmt: skip
    (out / "resample.json").write_text(
        json.dumps({"held_out": held, "training": trained}, indent=2) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
