"""``rock bench``: run Terminal-Bench tasks with an agent, show a run, check a dataset."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rock.cli._bench_output import Live, print_summary
from rock.cli._common import BadInput, echo_table, main

if TYPE_CHECKING:
    from rock.bench.harness import Harness
    from rock.bench.options import BenchOptions
    from rock.bench.results import BenchmarkResults


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
    from ale.agents import parse_agent_kwargs

    if resume and output is None:
        raise BadInput("--resume needs --output naming the run to continue.")
    try:
        kwargs = parse_agent_kwargs(list(agent_kwargs))
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    opts = _run_options(
        n_concurrent=n_concurrent,
        n_attempts=n_attempts,
        timeout_multiplier=timeout_multiplier,
        no_internet=no_internet,
        keep_sandboxes=keep_sandboxes,
        max_retries=max_retries,
        capabilities=capabilities,
    )
    harness = _harness(opts, image_map, map_image, Live(f"rock bench: {agent}"))
    out = output or _default_output()
    results = _run_interruptible(
        harness, dataset, out, agent=agent, model=model, kwargs=kwargs, tasks=tasks, resume=resume
    )
    if as_json:
        click.echo(results.model_dump_json(indent=2))
        return
    click.echo("", err=True)
    print_summary(results)


def _run_options(
    *,
    n_concurrent: int,
    n_attempts: int,
    timeout_multiplier: float,
    no_internet: bool,
    keep_sandboxes: bool,
    max_retries: int,
    capabilities: tuple[str, ...],
) -> BenchOptions:
    """The harness's options from ``rock bench run``'s; a --cap the sandboxes cannot take is
    bad input."""
    from pydantic import ValidationError

    from rock.bench.options import BenchOptions
    from rock.models import SandboxSpec

    try:
        return BenchOptions(
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


def _run_interruptible(
    harness: Harness,
    dataset: Path,
    out: Path,
    *,
    agent: str,
    model: str | None,
    kwargs: dict[str, Any],
    tasks: tuple[str, ...],
    resume: bool,
) -> BenchmarkResults:
    """The run's results; a run that cannot start is bad input, and one interrupted (Ctrl+C,
    SIGTERM, SIGHUP) says how to continue it and exits with the signal's status."""
    from ale.agents import AgentConfigError, AgentNotFound
    from ale.plugins import PluginLoadError
    from rock.bench.options import BenchError
    from rock.interrupt import Interruptible

    interrupts = Interruptible()  # SIGTERM and SIGHUP clean up as Ctrl+C does
    try:
        with interrupts:
            return asyncio.run(
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
    print_summary(results)


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
    base = output or Path(tempfile.mkdtemp(prefix="rock-bench-check-"))
    runs = _check_runs(
        dataset, tasks, base, n_concurrent, no_internet, strict, image_map, map_image, as_json
    )
    offenders = _offenders(runs, base, strict)
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


def _check_runs(
    dataset: Path,
    tasks: tuple[str, ...],
    base: Path,
    n_concurrent: int,
    no_internet: bool,
    strict: bool,
    image_map: tuple[Path, ...],
    map_image: tuple[str, ...],
    quiet: bool,
) -> dict[str, BenchmarkResults]:
    """The check's runs under ``base``, by name: the oracle, nop, and with ``strict`` the
    oracle again without rock's stand-ins."""
    from rock.bench.options import BenchError, BenchOptions

    runs: dict[str, BenchmarkResults] = {}
    passes: dict[str, tuple[str, BenchOptions]] = {
        "oracle": ("oracle", BenchOptions(allow_internet=False if no_internet else None)),
        "nop": ("nop", BenchOptions(allow_internet=False)),
    }
    if strict:  # the tests as Harbor runs them: no stand-ins, the network open
        passes["strict"] = ("oracle", BenchOptions(strict=True, allow_internet=not no_internet))
    for name, (agent, opts) in passes.items():
        opts.n_concurrent = n_concurrent
        harness = _harness(opts, image_map, map_image, Live(f"check: {name}", quiet=quiet))
        try:
            runs[name] = asyncio.run(
                harness.run(dataset, base / name, agent=agent, task_ids=tasks, resume=True)
            )
        except BenchError as exc:
            raise BadInput(str(exc)) from None
    return runs


def _offenders(runs: dict[str, BenchmarkResults], base: Path, strict: bool) -> list[dict[str, str]]:
    """The tasks that fail the gate, each with its problem: invalid, failing with the oracle,
    passing only with the stand-ins, or passing with nop."""
    from rock.bench.results import failure_reason

    offenders: list[dict[str, str]] = []
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
    return offenders


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
