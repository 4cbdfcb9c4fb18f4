"""``rock synth``: run the data synthesis pipeline, inspect what it made, list families."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ale.synth.pipeline import STAGES as STAGE_ORDER
from rock.cli._common import BadInput, echo_table, main

if TYPE_CHECKING:
    from ale.synth.config import SynthConfig
    from rock.synth.wiring import SynthAgents


@main.group()
def synth() -> None:
    """Synthesize verified tasks and expert trajectories (see `rock synth run --help`)."""


class _StageProgress:
    """One header line per stage, then a bar on a terminal or a line every 10% otherwise;
    rejections are printed as they happen (first 5 per stage on a terminal)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.name = ""
        self.total = self.done = self.kept = self.rejected = 0
        self.next_mark = 0.0
        self.shown = 0

    def _out(self, text: str) -> None:
        click.echo(text, err=True)

    def stage(self, name: str, total: int, done: int) -> None:
        self.name, self.total, self.done = name, total, done
        self.kept = self.rejected = self.shown = 0
        self.next_mark = 0.1
        index = STAGE_ORDER.index(name) + 1 if name in STAGE_ORDER else 0
        before = f" ({done} already done)" if done else ""
        self._out(f"[{index}/{len(STAGE_ORDER)}] {name}: {total} candidates{before}")

    def advance(self, name: str, item: str, ok: bool, note: str) -> None:
        self.done += 1
        if ok:
            self.kept += 1
        else:
            self.rejected += 1
            if not self.tty or self.shown < 5:
                self._clear()
                self._out(f"    x {item}: {note}")
                self.shown += 1
        if self.tty:
            width = 30
            filled = int(width * self.done / max(self.total, 1))
            bar = "#" * filled + "." * (width - filled)
            click.echo(
                f"\r    [{bar}] {self.done}/{self.total} kept {self.kept} rejected {self.rejected}",
                err=True,
                nl=False,
            )
        elif self.total and self.done / self.total >= self.next_mark:
            self._out(f"    {self.done}/{self.total} kept {self.kept} rejected {self.rejected}")
            while self.next_mark <= self.done / self.total:
                self.next_mark += 0.1

    def _clear(self) -> None:
        if self.tty:
            click.echo("\r" + " " * 78 + "\r", err=True, nl=False)

    def end(self, name: str, kept: int, rejected: int, seconds: float) -> None:
        self._clear()
        self._out(f"    {name}: kept {kept}, rejected {rejected} in {seconds:.1f} s")


@contextlib.contextmanager
def _sandbox_source(
    mode: str, url: str | None, home: Path | None, size: int, name: str
) -> Iterator[Any]:
    from rock.episode_runner import DaemonPool, FreshSandboxes

    if mode == "fresh":
        from rock.backends.docker import DockerBackend

        yield FreshSandboxes(DockerBackend())
        return
    from rock.client import Client
    from rock.synth.wiring import private_daemon

    pool_name = f"synth-{name}"[:60]
    if url is not None or (home is not None and (home / "daemon.json").exists()):
        with Client(url, home=home) as client:
            source = DaemonPool(client, pool_name, size=size)
            try:
                yield source
            finally:
                source.close()
        return
    with private_daemon() as client:
        source = DaemonPool(client, pool_name, size=size)
        try:
            yield source
        finally:
            source.close()


@synth.command("run")
@click.argument("config_path", metavar="CONFIG", type=click.Path(path_type=Path))
@click.option(
    "--output",
    type=click.Path(path_type=Path),
    default=None,
    help="Dataset directory (default: the config's output, else datasets/NAME).",
)
@click.option(
    "--work",
    "work_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where the run keeps its journal and candidates "
    "(default: ~/.cache/rock/synth/NAME-DIGEST); a run started again resumes there.",
)
@click.option(
    "--held-out",
    "held_out",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Another held-out task set to decontaminate against (repeatable).",
)
@click.option(
    "--sandboxes",
    type=click.Choice(["pool", "fresh"]),
    default="pool",
    show_default=True,
    help="'pool': a warm pool of a rock daemon; 'fresh': a sandbox started per episode.",
)
@click.option(
    "--url",
    default=None,
    metavar="URL",
    help="Use this rock daemon's warm pool (default: $ROCK_URL; else a private "
    "daemon is started for the run).",
)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="rock home of a running daemon to use (its daemon.json and token).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1, max=64),
    default=None,
    help="Episodes at once (default: the config's).",
)
@click.option("--keep-work", is_flag=True, help="Keep the work directory after success.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON at the end.")
def synth_run(
    config_path: Path,
    output: Path | None,
    work_dir: Path | None,
    held_out: tuple[Path, ...],
    sandboxes: str,
    url: str | None,
    home: Path | None,
    concurrency: int | None,
    keep_work: bool,
    as_json: bool,
) -> None:
    """Run the synthesis pipeline of CONFIG (YAML); a killed run resumes when started again."""
    import os

    import docker

    from rock.pool_image import ensure_pool_image

    config, agents = _load_config(config_path, concurrency, held_out)
    out = output or config.output_dir()
    work = (
        work_dir or Path.home() / ".cache" / "rock" / "synth" / f"{config.name}-{config.digest()}"
    )
    url = url or os.environ.get("ROCK_URL")
    click.echo(
        f"rock synth: {config.name}: {config.target} tasks from {len(config.families)} families, "
        f"seed {config.seed}, {config.concurrency} at once, sandboxes: {sandboxes}; work {work}",
        err=True,
    )
    ensure_pool_image(docker.from_env())
    started = time.monotonic()
    manifest = _run_pipeline(config, agents, config_path, sandboxes, url, home, work, out, held_out)
    manifest["run"]["total_seconds"] = round(time.monotonic() - started, 1)
    if not keep_work:
        shutil.rmtree(work, ignore_errors=True)
    if as_json:
        click.echo(json.dumps(manifest, indent=2))
        return
    _report(manifest, out)


def _load_config(
    config_path: Path, concurrency: int | None, held_out: tuple[Path, ...]
) -> tuple[SynthConfig, SynthAgents]:
    """The run's config (``--concurrency`` over the file's) and its agents; a config, an
    agent or a held-out set that cannot be had is bad input."""
    from ale.agents import AgentNotFound
    from ale.plugins import PluginLoadError
    from ale.synth.config import SynthConfigError, load_config
    from rock.synth.wiring import SynthAgents

    try:
        config = load_config(config_path)
        if concurrency is not None:
            config = config.model_copy(update={"concurrency": concurrency})
        agents = SynthAgents(config)
        for path in held_out:
            if not path.is_dir():
                raise SynthConfigError(f"--held-out {path} is not a directory; pass a task set.")
    except (SynthConfigError, AgentNotFound, PluginLoadError) as exc:
        raise BadInput(str(exc)) from None
    return config, agents


def _run_pipeline(
    config: SynthConfig,
    agents: SynthAgents,
    config_path: Path,
    sandboxes: str,
    url: str | None,
    home: Path | None,
    work: Path,
    out: Path,
    held_out: tuple[Path, ...],
) -> dict[str, Any]:
    """The pipeline run on its sandboxes, its manifest; one interrupted (Ctrl+C, SIGTERM,
    SIGHUP) says how to resume and exits with the signal's status."""
    from ale.synth.pipeline import Pipeline, WorkDirError
    from rock.episode_runner import PoolRunner
    from rock.interrupt import Interruptible

    interrupts = Interruptible()  # SIGTERM and SIGHUP clean up as Ctrl+C does
    try:
        with (
            interrupts,
            _sandbox_source(sandboxes, url, home, config.concurrency, config.name) as source,
        ):
            if hasattr(source, "wait_ready"):
                source.wait_ready()
            pipeline = Pipeline(
                config,
                PoolRunner(source),
                agents,
                work_dir=work,
                output=out,
                held_out=list(held_out),
                progress=_StageProgress(),
                config_text=config_path.read_text(),
            )
            return asyncio.run(pipeline.run())
    except (WorkDirError, FileNotFoundError) as exc:
        raise BadInput(str(exc)) from None
    except KeyboardInterrupt:
        click.echo(
            f"\nrock: interrupted; what was decided is kept in {work}: run the same command "
            "again to resume.",
            err=True,
        )
        sys.exit(interrupts.exit_status)


def _report(manifest: dict[str, Any], out: Path) -> None:
    click.echo(f"\n{manifest['name']}: {len(manifest['tasks'])} tasks written to {out}")
    rows = [
        (
            stage,
            c["in"],
            c["kept"],
            c["rejected"],
            f"{manifest['run']['seconds'].get(stage, 0):.1f}",
        )
        for stage, c in manifest["counts"].items()
    ]
    echo_table(["stage", "in", "kept", "rejected", "seconds"], rows)
    if manifest["rejections"]:
        click.echo("\nrejections:")
        echo_table(["reason", "count"], sorted(manifest["rejections"].items()))
    for dim, values in manifest["proportions"].items():
        click.echo(f"\n{dim}: declared vs achieved")
        echo_table(
            [dim, "declared", "achieved", "count"],
            [
                (v, f"{r['declared']:.3f}", f"{r['achieved']:.3f}", r["count"])
                for v, r in values.items()
            ],
        )
    run = manifest["run"]
    click.echo(
        f"\n{run['episodes']} sandbox episodes, {run.get('total_seconds', 0):.0f} s in all; "
        f"dataset digest {manifest['digests']['dataset'][:16]}"
    )


@synth.command("stats")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def synth_stats(directory: Path, as_json: bool) -> None:
    """Statistics of a synthesized dataset: make-up, trajectories, rejections, digests."""
    from ale.synth.dataset import DatasetError, dataset_stats

    try:
        stats = dataset_stats(directory)
    except DatasetError as exc:
        raise BadInput(str(exc)) from None
    if as_json:
        click.echo(json.dumps(stats, indent=2))
        return
    click.echo(
        f"{stats['name']}: {stats['tasks']} tasks, {stats['trajectories']} trajectories, "
        f"{stats['bytes'] / 1e6:.2f} MB on disk"
    )
    for dim, counts in stats["by"].items():
        click.echo(f"\nby {dim}:")
        echo_table([dim, "tasks"], list(counts.items()))
    t = stats["turns"]
    click.echo(
        f"\ntrajectories: {t['mean']} assistant turns on average (min {t['min']}, max "
        f"{t['max']}); {stats['with_mistake']} with a recovered mistake; "
        f"{stats['multi_turn_tasks']} tasks need inspection before acting"
    )
    if stats["counts"]:
        click.echo("\nstages:")
        echo_table(
            ["stage", "in", "kept", "rejected"],
            [(s, c["in"], c["kept"], c["rejected"]) for s, c in stats["counts"].items()],
        )
    if stats["rejections"]:
        click.echo("\nrejections:")
        echo_table(["reason", "count"], list(stats["rejections"].items()))
    if stats["digests_ok"]:
        click.echo("\ndigests: every task matches the manifest")
    else:
        click.echo(
            f"\ndigests: {len(stats['changed_tasks'])} task(s) changed since written: "
            + ", ".join(stats["changed_tasks"][:10])
        )
        sys.exit(1)


@synth.command("families")
@click.option("--json", "as_json", is_flag=True, help="Print the families as JSON.")
def synth_families(as_json: bool) -> None:
    """The task families the pipeline can generate from."""
    from ale.synth.family import broken_packages, families

    for error in broken_packages():  # the families that did load are still listed
        click.echo(f"rock: {error}", err=True)
    rows = [
        {
            "name": f.name,
            "category": f.category,
            "multi_turn": f.multi_turn,
            "difficulties": list(f.difficulties),
            "description": f.description,
        }
        for f in families().values()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    echo_table(
        ["family", "category", "multi-turn", "description"],
        [
            (r["name"], r["category"], "yes" if r["multi_turn"] else "", r["description"])
            for r in rows
        ],
    )
