"""``rock bench``: run Terminal-Bench tasks with an agent, show a run, check a dataset."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from rock.cli._common import BadInput, echo_table, main


@main.group()
def bench() -> None:
    """Terminal-Bench evaluation: run, show, check, build, toolchain."""


def _image_options(func: Any) -> Any:
    func = click.option(
        "--map-image",
        "map_image",
        multiple=True,
        metavar="PATTERN=IMAGE",
        help="Map base images matching PATTERN to local IMAGE (repeatable; wins over tables).",
    )(func)
    func = click.option(
        "--image-map",
        "image_map",
        multiple=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="A TOML table of base-image mappings (see rock/bench/base_images.toml).",
    )(func)
    return func


def _harness(
    opts: Any, image_map: tuple[Path, ...], map_image: tuple[str, ...], progress: Any
) -> Any:
    from rock.backends.docker import DockerBackend
    from rock.bench.harness import Harness
    from rock.bench.images import ImageBuilder, ImageMap
    from rock.engine import connect

    try:
        table = ImageMap.load(files=image_map, pairs=map_image)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    client = connect()
    return Harness(DockerBackend(client), ImageBuilder(client, table), opts, progress=progress)


class _Live:
    """Progress of a run on stderr: a line per finished trial, and a bar on a terminal."""

    def __init__(self, label: str, quiet: bool = False) -> None:
        self.label = label
        self.quiet = quiet
        self.total = 0
        self.done = 0
        self.resolved = 0
        self.running = 0
        self.started = time.monotonic()
        self.tty = sys.stderr.isatty()

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if self.quiet:
            return
        if kind == "start":
            self.total = data["total"]
            self.done = data["skipped"]
            note = f" ({data['skipped']} already done)" if data["skipped"] else ""
            self._line(f"{self.label}: {self.total} trials{note} -> {data['run_dir']}")
        elif kind == "invalid":
            self._line(f"invalid task {data['path']}: {data['reason']}")
        elif kind == "built":
            self._line(f"built {data['tag']} in {data['sec']:.1f}s")
        elif kind == "left_behind":
            left = ", ".join(data["left"])
            self._line(f"{data['trial']}: the engine kept {left}; remove it by hand")
        elif kind == "trial_start":
            self.running += 1
            self._bar()
        elif kind == "trial":
            r = data["result"]
            self.running -= 1
            self.done += 1
            self.resolved += int(bool(r.is_resolved))
            mark = "PASS" if r.is_resolved else "FAIL"
            why = "" if r.failure_mode.value == "none" else f" [{r.failure_mode.value}]"
            self._line(
                f"[{self.done}/{self.total}] {mark} {r.trial_name} ({r.total_sec or 0:.1f}s){why}"
            )

    def _line(self, text: str) -> None:
        if self.tty:
            click.echo("\r\033[K", nl=False, err=True)
        click.echo(text, err=True)
        self._bar()

    def _bar(self) -> None:
        if not self.tty or not self.total:
            return
        width = 30
        filled = int(width * self.done / self.total)
        elapsed = time.monotonic() - self.started
        click.echo(
            f"\r\033[K[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
            f"resolved {self.resolved}  running {self.running}  {elapsed:.0f}s",
            nl=False,
            err=True,
        )


def _default_output() -> Path:
    return Path("runs") / datetime.now(UTC).strftime("%Y-%m-%d__%H-%M-%S")


@bench.command("run")
@click.option(
    "--dataset",
    required=True,
    type=click.Path(path_type=Path),
    help="Directory of tasks (or one task).",
)
@click.option(
    "--task", "tasks", multiple=True, metavar="ID", help="Run only these tasks (repeatable)."
)
@click.option("--agent", required=True, help="oracle, nop, or an ale.agents entry point (iflow).")
@click.option("--model", default=None, help="Passed to the agent as model=.")
@click.option(
    "--agent-kwarg",
    "agent_kwargs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Passed to the agent (values read as JSON when they parse).",
)
@click.option("--n-concurrent", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option("--n-attempts", default=1, show_default=True, type=click.IntRange(1, 100))
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run directory [default: runs/<UTC time>].",
)
@click.option(
    "--resume", is_flag=True, help="Continue the run in --output, skipping finished trials."
)
@click.option(
    "--timeout-multiplier", default=1.0, show_default=True, type=click.FloatRange(min=0.01)
)
@click.option(
    "--no-internet",
    is_flag=True,
    help="Close the network of every sandbox, whatever the task allows.",
)
@click.option(
    "--keep-sandboxes", is_flag=True, help="Leave each trial's sandbox running for inspection."
)
@click.option(
    "--max-retries",
    default=0,
    show_default=True,
    type=click.IntRange(0, 10),
    help="Run a trial again when the harness failed it (its sandbox failed or went away), "
    "never for the agent's own failures; counted in the results.",
)
@click.option(
    "--cap",
    "capabilities",
    multiple=True,
    metavar="NAME",
    help="A Linux capability every trial's root keeps (repeatable; replaces rock's default "
    "set, e.g. --cap NET_RAW with the defaults for a task that pings).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run's results.json at the end.")
@_image_options
def bench_run(
    dataset: Path,
    tasks: tuple[str, ...],
    agent: str,
    model: str | None,
    agent_kwargs: tuple[str, ...],
    n_concurrent: int,
    n_attempts: int,
    output: Path | None,
    resume: bool,
    timeout_multiplier: float,
    no_internet: bool,
    keep_sandboxes: bool,
    max_retries: int,
    capabilities: tuple[str, ...],
    as_json: bool,
    image_map: tuple[Path, ...],
    map_image: tuple[str, ...],
) -> None:
    """Run the tasks of DATASET with an agent; write per-trial logs and results.json.

    Exit status 0 when the run completed (whatever the agent scored), 1 on an error.
    """
    from pydantic import ValidationError

    from ale.agents import AgentConfigError, AgentNotFound, parse_agent_kwargs
    from ale.plugins import PluginLoadError
    from rock.bench.options import BenchError, BenchOptions
    from rock.interrupt import Interruptible
    from rock.models import SandboxSpec

    if resume and output is None:
        raise BadInput("--resume needs --output naming the run to continue.")
    try:
        kwargs = parse_agent_kwargs(list(agent_kwargs))
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    try:
        opts = BenchOptions(
            n_concurrent=n_concurrent,
            n_attempts=n_attempts,
            timeout_multiplier=timeout_multiplier,
            allow_internet=False if no_internet else None,
            keep_sandboxes=keep_sandboxes,
            max_retries=max_retries,
            capabilities=SandboxSpec(capabilities=list(capabilities)).capabilities
            if capabilities
            else None,
        )
    except ValidationError as exc:
        raise BadInput(f"--cap: {exc.errors()[0]['msg'].removeprefix('Value error, ')}.") from None
    harness = _harness(opts, image_map, map_image, _Live(f"rock bench: {agent}"))
    out = output or _default_output()
    interrupts = Interruptible()  # SIGTERM and SIGHUP clean up as Ctrl+C does
    try:
        with interrupts:
            results = asyncio.run(
                harness.run(
                    dataset,
                    out,
                    agent=agent,
                    model=model,
                    agent_kwargs=kwargs,
                    task_ids=tasks,
                    resume=resume,
                )
            )
    except (BenchError, AgentNotFound, AgentConfigError, PluginLoadError) as exc:
        raise BadInput(str(exc)) from None
    except KeyboardInterrupt:
        click.echo(
            f"\nrock: interrupted; finished trials are kept, continue with "
            f"'rock bench run ... --output {out} --resume'.",
            err=True,
        )
        sys.exit(interrupts.exit_status)
    if as_json:
        click.echo(results.model_dump_json(indent=2))
        return
    click.echo("", err=True)
    _print_summary(results)


@bench.command("show")
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def bench_show(run_dir: Path, as_json: bool) -> None:
    """Summarise a run: pass@1, pass@k, per category and difficulty, failure modes, durations."""
    from rock.bench.results import read_run, summary

    try:
        results = read_run(run_dir)
    except FileNotFoundError as exc:
        raise BadInput(str(exc)) from None
    if as_json:
        click.echo(json.dumps(summary(results), indent=2, default=str))
        return
    _print_summary(results)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _sec(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def _print_summary(results: Any) -> None:
    from rock.bench.results import summary

    s = summary(results)
    click.echo(
        f"run {s['id']}: agent {s['agent']}" + (f", model {s['model']}" if s["model"] else "")
    )
    click.echo(
        f"tasks {s['tasks']}, trials {s['trials']}, resolved {results.n_resolved}, "
        f"unresolved {results.n_unresolved}, invalid tasks {s['invalid_tasks']}"
    )
    low, high = s["accuracy_95"]
    click.echo(
        f"accuracy {_pct(s['accuracy'])} (95% interval over tasks {_pct(low)} to {_pct(high)})"
    )
    if results.n_retries:
        click.echo(f"trials run again after a harness fault: {results.n_retries}")
    click.echo("  ".join(f"pass@{k} {_pct(v)}" for k, v in s["pass_at_k"].items()))
    click.echo("")
    rows = [("category", k, v) for k, v in s["by_category"].items()] + [
        ("difficulty", k, v) for k, v in s["by_difficulty"].items()
    ]
    echo_table(
        ["by", "value", "trials", "resolved", "rate"],
        [(by, k, v["trials"], v["resolved"], _pct(v["rate"])) for by, k, v in rows],
    )
    click.echo("")
    echo_table(["failure mode", "trials"], list(s["failure_modes"].items()))
    click.echo("")
    m = s["mean_sec"]
    click.echo(
        "mean durations: "
        + ", ".join(
            f"{k} {_sec(m[k])}" for k in ("build", "setup", "agent", "test", "overhead", "total")
        )
    )
    if s["tokens"]["input"] or s["tokens"]["output"]:
        click.echo(f"tokens: input {s['tokens']['input']}, output {s['tokens']['output']}")
    for bad in results.invalid_tasks:
        click.echo(f"invalid task {bad.path}: {bad.reason}")


@bench.command("check")
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--task", "tasks", multiple=True, metavar="ID", help="Check only these tasks.")
@click.option("--n-concurrent", default=2, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep the oracle and nop runs here [default: a temporary directory].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the offenders as JSON.")
@click.option(
    "--no-internet",
    is_flag=True,
    help="Run the oracle without a network too [default: as each task's allow_internet says].",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Also run the oracle's verifier as the task ships it, without rock's stand-ins "
    "(network open, as Harbor runs tests), and flag tasks that pass only with them.",
)
@_image_options
def bench_check(
    dataset: Path,
    tasks: tuple[str, ...],
    n_concurrent: int,
    output: Path | None,
    as_json: bool,
    no_internet: bool,
    strict: bool,
    image_map: tuple[Path, ...],
    map_image: tuple[str, ...],
) -> None:
    """The dataset gate: every task must pass with oracle and fail with nop.

    The oracle runs under each task's own network policy (``allow_internet``; closed with
    --no-internet), nop always without a network. Prints the offenders (and invalid tasks),
    an oracle failure with the tests that failed and the verifier's last error line; exit 0
    when there are none, 1 otherwise.
    """
    from rock.bench.options import BenchError, BenchOptions
    from rock.bench.results import failure_reason

    base = output or Path(tempfile.mkdtemp(prefix="rock-bench-check-"))
    offenders: list[dict[str, str]] = []
    runs: dict[str, Any] = {}
    passes: dict[str, tuple[str, BenchOptions]] = {
        "oracle": ("oracle", BenchOptions(allow_internet=False if no_internet else None)),
        "nop": ("nop", BenchOptions(allow_internet=False)),
    }
    if strict:  # the tests as Harbor runs them: no stand-ins, the network open
        passes["strict"] = ("oracle", BenchOptions(strict=True, allow_internet=not no_internet))
    for name, (agent, opts) in passes.items():
        opts.n_concurrent = n_concurrent
        harness = _harness(opts, image_map, map_image, _Live(f"check: {name}", quiet=as_json))
        try:
            runs[name] = asyncio.run(
                harness.run(dataset, base / name, agent=agent, task_ids=tasks, resume=True)
            )
        except BenchError as exc:
            raise BadInput(str(exc)) from None
    for bad in runs["oracle"].invalid_tasks:
        offenders.append({"task": Path(bad.path).name, "problem": f"invalid: {bad.reason}"})
    for r in runs["oracle"].results:
        if not r.is_resolved:
            why = failure_reason(r, base / "oracle" / r.trial_name)
            offenders.append(
                {"task": r.task_id, "problem": f"fails with oracle ({r.failure_mode.value}: {why})"}
            )
    resolved = {r.task_id for r in runs["oracle"].results if r.is_resolved}
    for r in runs["strict"].results if strict else []:
        if r.task_id in resolved and not r.is_resolved:
            why = failure_reason(r, base / "strict" / r.trial_name)
            offenders.append(
                {
                    "task": r.task_id,
                    "problem": "passes only with rock's verifier stand-ins (without them: "
                    f"{why}); install what its tests need in its Dockerfile or test script",
                }
            )
    for r in runs["nop"].results:
        if r.is_resolved:
            offenders.append(
                {
                    "task": r.task_id,
                    "problem": "passes with nop (reward "
                    f"{r.reward}); the tests do not check the agent's work",
                }
            )
    n_tasks = len({r.task_id for r in runs["oracle"].results}) + len(runs["oracle"].invalid_tasks)
    if as_json:
        click.echo(
            json.dumps({"tasks": n_tasks, "offenders": offenders, "runs": str(base)}, indent=2)
        )
    else:
        click.echo("", err=True)
        if offenders:
            echo_table(["task", "problem"], [(o["task"], o["problem"]) for o in offenders])
        click.echo(f"{n_tasks} tasks checked, {len(offenders)} offender(s); runs in {base}")
    sys.exit(1 if offenders else 0)


@bench.command("build")
@click.argument("dataset", type=click.Path(path_type=Path))
@click.option("--task", "tasks", multiple=True, metavar="ID")
@click.option("--force", is_flag=True, help="Rebuild even when the digest matches.")
@_image_options
def bench_build(
    dataset: Path,
    tasks: tuple[str, ...],
    force: bool,
    image_map: tuple[Path, ...],
    map_image: tuple[str, ...],
) -> None:
    """Build (or find cached) the images of DATASET's tasks, and the verifier toolchain."""
    from rock.bench.dataset import scan_dataset
    from rock.bench.images import ImageBuilder, ImageMap, TaskImageError
    from rock.bench.options import BenchError
    from rock.engine import connect
    from rock.verifier import toolchain

    try:
        scan = scan_dataset(dataset, tasks)
        table = ImageMap.load(files=image_map, pairs=map_image)
    except (BenchError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    toolchain.build()
    builder = ImageBuilder(connect(), table)
    failed = 0
    for task in scan.tasks:
        try:
            result = builder.build(task, force=force)
        except TaskImageError as exc:
            failed += 1
            click.echo(f"FAILED  {task.id}: {exc}")
            continue
        what = f"built in {result.duration_sec:.1f}s" if result.built else "cached"
        click.echo(f"{result.tag}  {what}")
    for bad in scan.invalid:
        click.echo(f"INVALID {bad.path}: {bad.reason}")
    sys.exit(1 if failed or scan.invalid else 0)


@bench.command("toolchain")
@click.option(
    "--wheels",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Build from this folder of wheels instead of PyPI.",
)
@click.option(
    "--wheelhouse",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Add this folder's wheels (compiled ones too) for test scripts that pip-install "
    "what the toolchain does not hold.",
)
@click.option("--rebuild", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
def bench_toolchain(
    wheels: Path | None, wheelhouse: Path | None, rebuild: bool, as_json: bool
) -> None:
    """Build the offline verifier toolchain (once) and say what it holds."""
    from rock.verifier import toolchain

    try:
        toolchain.build(wheels=wheels, force=rebuild)
        if wheelhouse is not None:
            toolchain.add_wheels(wheelhouse)
    except toolchain.ToolchainError as exc:
        raise BadInput(str(exc)) from None
    info = toolchain.info()
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(
        f"toolchain {info['digest']} at {info['path']} (in containers: {info['container_path']})"
    )
    click.echo("packages: " + ", ".join(info["packages"]))
    click.echo("stand-ins: " + ", ".join(info["shims"]))
    if info["wheelhouse"]:
        click.echo("wheelhouse: " + ", ".join(info["wheelhouse"]))
