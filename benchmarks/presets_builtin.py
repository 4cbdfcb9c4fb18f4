"""Lite PPO against GRPO and IPA on the built-in environments, three seeds, the same budget.

``roll train packages/roll/examples/train-letter-ipa.yaml`` (a tiny model built from
nothing learns to put the asked-for letter in its replies; 300 steps of 8 groups of 4) once
per algorithm and seed, nothing else changed; with ``--env guess`` the same config on the
multi-turn ``guess`` environment (find a number from 1 to 8 in 4 turns, told higher or lower
after each guess). Printed per algorithm: the training reward of the last 10 steps (mean over
seeds, and per seed), the mean over all steps (the area under the curve, as a share), and
the step where the mean reward of the last 10 steps first reaches the environment's mark (0.7
on letter, 0.2 on guess); GRPO is the baseline of the ratios. The curves go to
``bench-out/presets/ENV.png``.

With ``--schedules`` it compares rollout schedules instead (IPA, as the config says): plain
synchronous (the baseline) vs ``rollout.schedule: tail_batching`` (eta 1.5, a long round every
4 steps). A tail-batching step trains a varying number of groups, so the comparison is per
trained sample: the training reward over the last 10% of the samples and over all of them.

Usage: python benchmarks/presets_builtin.py [--env letter|guess] [--seeds 3] [--steps 300]
    [--out DIR] [--schedules]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from _rockbench import machine

from roll.metrics import read_metrics

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "packages" / "roll" / "examples" / "train-letter-ipa.yaml"
ALGORITHMS = ("grpo", "lite_ppo", "ipa")


ENVS = {
    "letter": ([], 0.7),
    "guess": (["env.name=guess", "env.kwargs={n: 8, max_turns: 4}", "rollout.max_new_tokens=6"],
              0.2),
}  # fmt: skip
"""Each environment's overrides of the config, and the reward mark it is timed to."""

SCHEDULES = {
    "plain": [],
    "tail_batching": ["rollout.schedule=tail_batching", "rollout.tail_batching.eta=1.5",
                      "rollout.tail_batching.long_round_every=4"],
}  # fmt: skip


def train(
    out: Path, algorithm: str, seed: int, steps: int, model: Path, *extra: str, name: str = ""
) -> list[float]:
    return [float(r["rollout/reward_mean"]) for r in _run(out, algorithm, seed, steps, model,
                                                          *extra, name=name)]  # fmt: skip


def _run(
    out: Path, algorithm: str, seed: int, steps: int, model: Path, *extra: str, name: str = ""
) -> list[dict[str, float]]:
    run_dir = out / f"{name or algorithm}-seed{seed}"
    if not (run_dir / "model").exists():
        subprocess.run(
            [
                sys.executable, "-m", "roll.cli", "train", str(CONFIG),
                f"run_dir={run_dir}", f"algorithm.name={algorithm}", f"seed={seed}",
                f"run.steps={steps}", f"model.path={model}", *extra,
            ],
            cwd=REPO, check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    return read_metrics(run_dir)


def smoothed(runs: list[list[float]]) -> list[float]:
    """The mean over seeds of each step's reward, averaged over the last 10 steps."""
    mean = [statistics.mean(v) for v in zip(*runs, strict=True)]
    return [statistics.mean(mean[max(i - 9, 0) : i + 1]) for i in range(len(mean))]


def per_sample(records: list[dict[str, float]]) -> list[float]:
    """The training reward of each trained sample, in order (a step's mean for its samples)."""
    return [float(r["rollout/reward_mean"]) for r in records
            for _ in range(int(r["rollout/episodes"]))]  # fmt: skip


def compare_schedules(args: argparse.Namespace, model: Path) -> None:
    rewards: dict[str, list[list[float]]] = {name: [] for name in SCHEDULES}
    for seed in range(args.seeds):
        for name, extra in SCHEDULES.items():
            records = _run(args.out, "ipa", seed, args.steps, model, *extra, name=name)
            rewards[name].append(per_sample(records))
    budget = min(len(r) for runs in rewards.values() for r in runs)  # the same samples each
    last = max(budget // 10, 1)
    base_last = statistics.mean(
        statistics.mean(r[budget - last : budget]) for r in rewards["plain"]
    )
    base_all = statistics.mean(statistics.mean(r[:budget]) for r in rewards["plain"])
    for name, runs in rewards.items():
        finals = [statistics.mean(r[budget - last : budget]) for r in runs]
        areas = [statistics.mean(r[:budget]) for r in runs]
        f, a = statistics.mean(finals), statistics.mean(areas)
        print(
            f"{name:<14} first {budget} samples: last {last} {f:.3f} (seeds "
            f"{', '.join(f'{x:.3f}' for x in finals)}; {f / base_last:.2f}x plain), all "
            f"{a:.3f} (seeds {', '.join(f'{x:.3f}' for x in areas)}; {a / base_all:.2f}x plain)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=REPO / "bench-out" / "presets")
    parser.add_argument("--schedules", action="store_true", help="plain vs tail batching")
    parser.add_argument("--env", choices=sorted(ENVS), default="letter")
    args = parser.parse_args()
    print(machine())
    args.out.mkdir(parents=True, exist_ok=True)
    model = args.out / "tiny-model"  # one tiny model, built once, every run starts from it
    if args.schedules:
        compare_schedules(args, model)
        return
    overrides, mark = ENVS[args.env]
    prefix = "" if args.env == "letter" else f"{args.env}-"
    curves: dict[str, list[list[float]]] = {a: [] for a in ALGORITHMS}
    for seed in range(args.seeds):
        for algorithm in ALGORITHMS:
            curves[algorithm].append(
                train(args.out, algorithm, seed, args.steps, model, *overrides,
                      name=f"{prefix}{algorithm}")
            )  # fmt: skip
    final = {a: [statistics.mean(c[-10:]) for c in curves[a]] for a in ALGORITHMS}
    area = {a: [statistics.mean(c) for c in curves[a]] for a in ALGORITHMS}
    base_final = statistics.mean(final["grpo"])
    base_area = statistics.mean(area["grpo"])
    smooth = {a: smoothed(curves[a]) for a in ALGORITHMS}
    for algorithm in ALGORITHMS:
        reach = next((i + 1 for i, v in enumerate(smooth[algorithm]) if v >= mark), None)
        f, a = statistics.mean(final[algorithm]), statistics.mean(area[algorithm])
        print(
            f"{algorithm:<9} last 10 steps {f:.3f} (seeds {', '.join(f'{x:.3f}' for x in final[algorithm])}; "
            f"{f / base_final:.2f}x GRPO), all steps {a:.3f} ({a / base_area:.2f}x GRPO), "
            f"mean reward {mark:g} at step {reach or 'never'}"
        )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        for algorithm in ALGORITHMS:
            plt.plot(range(1, len(smooth[algorithm]) + 1), smooth[algorithm], label=algorithm)
        plt.xlabel("step")
        plt.ylabel(f"training reward (mean of {args.seeds} seeds, last 10 steps)")
        plt.legend()
        plt.title(f"{args.env}: Lite PPO, GRPO and IPA")
        plt.savefig(args.out / f"{args.env}.png", dpi=100)
        print(f"curves: {args.out / f'{args.env}.png'}")
    except ImportError:
        pass


if __name__ == "__main__":
    main()
