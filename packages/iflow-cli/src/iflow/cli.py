"""The ``iflow`` command: the TUI by default, one headless run with ``-p``."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import click

from iflow import __version__
from iflow.custom_commands import expand_line
from iflow.errors import ConfigError, IflowError
from iflow.mentions import expand_mentions
from iflow.sessions import SessionData, SessionStore, sessions_root
from iflow.settings import Settings, load_settings


def _settings(cwd: Path, home: Path, flags: dict[str, Any]) -> Settings:
    return load_settings(cwd=cwd, home=home, env=os.environ, flags=flags)


def _resume(store: SessionStore, resume: str | None, cwd: Path) -> SessionData | None:
    """The session to go on with: the latest of this directory, or the one whose id is
    given (from any directory: the id says which)."""
    if resume is None:
        return None
    if resume in ("", "latest"):
        data, warnings = store.latest(cwd)
        for warning in warnings:
            click.echo(f"iflow: {warning}", err=True)
        return data
    return store.load(resume)


def _list_sessions(store: SessionStore, cwd: Path, everywhere: bool) -> None:
    summaries, warnings = store.list(None if everywhere else cwd)
    for warning in warnings:
        click.echo(f"iflow: {warning}", err=True)
    if not summaries:
        more = "" if everywhere else f" of {cwd} (--all lists every directory's)"
        click.echo(f"No saved sessions in {store.root}{more}.")
        return
    for s in summaries:
        where = f"  {s.cwd}" if everywhere else ""
        click.echo(f"{s.id}  {s.updated_at:%Y-%m-%d %H:%M}  {s.turns:>4} turns  {s.title}{where}")


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="iflow")
@click.option("-p", "--prompt", default=None, help="Run this task headless and exit.")
@click.option(
    "-o",
    "--output-format",
    type=click.Choice(["text", "json", "stream-json"]),
    default="text",
    show_default=True,
    help="Headless output: the answer, one JSON object, or every event as a JSON line.",
)
@click.option("-y", "--yolo", is_flag=True, help="Run every tool call without asking.")
@click.option(
    "--approval-mode",
    type=click.Choice(["default", "auto-edit", "plan", "yolo"]),
    default=None,
    help="When to ask before tool calls (default: settings, else 'default').",
)
@click.option("--max-turns", type=int, default=None, help="Model calls per run.")
@click.option(
    "-w",
    "--workspace",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory the agent works in (default: the current one).",
)
@click.option("-m", "--model", default=None, help="Model name (openai provider).")
@click.option(
    "--provider",
    type=click.Choice(["openai", "local", "scripted"]),
    default=None,
    help="Where the model runs.",
)
@click.option("--base-url", default=None, help="OpenAI-compatible server URL.")
@click.option("--api-key", default=None, help="API key (prefer IFLOW_API_KEY).")
@click.option("--model-path", default=None, help="Local transformers model directory.")
@click.option("--script", default=None, help="JSON file of responses for the scripted model.")
@click.option("--context-limit", type=int, default=None, help="The model's context window.")
@click.option(
    "-r",
    "--resume",
    default=None,
    is_flag=False,
    flag_value="latest",
    help="Resume a saved session (the latest when no ID is given).",
)
@click.option(
    "--rewind",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="With --resume: put the files and the conversation back to before turn N first.",
)
@click.option(
    "--list-sessions", is_flag=True, help="List this directory's saved sessions and exit."
)
@click.option(
    "--all", "all_dirs", is_flag=True, help="With --list-sessions: every directory's sessions."
)
@click.option(
    "--trajectory",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the run's trajectory (ALE JSONL) here.",
)
@click.option(
    "--atif",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the run's trajectory as ATIF JSON here.",
)
def main(
    prompt: str | None,
    output_format: str,
    yolo: bool,
    approval_mode: str | None,
    max_turns: int | None,
    workspace: Path | None,
    model: str | None,
    provider: str | None,
    base_url: str | None,
    api_key: str | None,
    model_path: str | None,
    script: str | None,
    context_limit: int | None,
    resume: str | None,
    rewind: int | None,
    list_sessions: bool,
    all_dirs: bool,
    trajectory: Path | None,
    atif: Path | None,
) -> None:
    """iflow: a terminal coding agent. Without -p it opens the TUI."""
    cwd = (workspace or Path.cwd()).resolve()
    if not cwd.is_dir():
        raise click.ClickException(
            f"the workspace {cwd} is not a directory; create it or pass another -w."
        )
    home = Path.home()
    flags = {
        "model": model,
        "provider": provider,
        "base_url": base_url,
        "api_key": api_key,
        "model_path": model_path,
        "script": script,
        "context_limit": context_limit,
        "max_turns": max_turns,
        "approval_mode": "yolo" if yolo else approval_mode,
    }
    try:
        settings = _settings(cwd, home, flags)
        store = SessionStore(sessions_root(settings, home))
        if list_sessions:
            _list_sessions(store, cwd, all_dirs)
            return
        resumed = _resume(store, resume, cwd)
        if rewind is not None and resumed is None:
            raise ConfigError("--rewind N goes back within a session; give --resume [ID] too.")
        prompt = _headless_prompt(prompt)
        if prompt is not None:
            code = _run_prompt(
                settings, cwd, home, store, resumed, prompt, output_format, trajectory, atif, rewind
            )
            sys.exit(code)
        code = _tui(settings, cwd, home, store, resumed)
        sys.exit(code)
    except IflowError as exc:
        raise click.ClickException(str(exc)) from exc


def _headless_prompt(prompt: str | None) -> str | None:
    """The task of a headless run: -p's, with what is piped on stdin joined to it, or what
    is piped on stdin; None opens the TUI, which needs a terminal (without one, exit 2)."""
    if prompt is None and not sys.stdin.isatty():
        prompt = sys.stdin.read().strip() or None
    elif prompt is not None and not sys.stdin.isatty():
        piped = _piped_input()  # `cat log | iflow -p "summarize"`: the log joins the prompt
        if piped:
            prompt = f"{prompt}\n\n{piped}"
    if prompt is None and not (sys.stdin.isatty() and sys.stdout.isatty()):
        click.echo(
            "iflow: the TUI needs a terminal, and this one has none; run headless with "
            '-p "PROMPT" (or pipe the prompt on stdin), with --resume to go on with a session.',
            err=True,
        )
        sys.exit(2)
    return prompt


def _run_prompt(
    settings: Settings,
    cwd: Path,
    home: Path,
    store: SessionStore,
    resumed: SessionData | None,
    prompt: str,
    fmt: str,
    trajectory: Path | None,
    atif: Path | None,
    rewind: int | None,
) -> int:
    """One headless run of ``prompt``, a custom /command and @mentions expanded first."""
    prompt = expand_line(prompt, cwd, home) or prompt  # a custom /command's prompt
    prompt, notes = expand_mentions(prompt, cwd)  # @app.py, @src/
    for note in notes:
        click.echo(f"iflow: {note}", err=True)
    for path, flag in ((trajectory, "--trajectory"), (atif, "--atif")):
        if path is not None:
            check_output_path(path, flag)
    return asyncio.run(
        _headless(settings, cwd, home, store, resumed, prompt, fmt, trajectory, atif, rewind)
    )


PIPED_MAX_CHARS = 200_000
"""The most of a piped stdin that joins a -p prompt (the rest is left out, with a note)."""


def _piped_input() -> str:
    """What was piped to iflow's stdin beside a -p prompt: a file or a pipe (not a terminal,
    not /dev/null); a pipe only when data or its end comes within a moment (an inherited pipe
    nobody writes to is not input); at most :data:`PIPED_MAX_CHARS`, with a one-line note
    on stderr when cut."""
    import select
    import stat

    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return ""
    if stat.S_ISFIFO(mode):
        ready, _, _ = select.select([sys.stdin], [], [], 0.5)
        if not ready:
            return ""
    elif not stat.S_ISREG(mode):
        return ""
    text = sys.stdin.read(PIPED_MAX_CHARS + 1)
    if len(text) > PIPED_MAX_CHARS:
        text = text[:PIPED_MAX_CHARS]
        click.echo(
            f"iflow: the piped input was cut to its first {PIPED_MAX_CHARS} characters.",
            err=True,
        )
    return text.strip()


async def _headless(
    settings: Settings,
    cwd: Path,
    home: Path,
    store: SessionStore,
    resumed: SessionData | None,
    prompt: str,
    fmt: str,
    trajectory: Path | None,
    atif: Path | None,
    rewind: int | None = None,
) -> int:
    from iflow.headless import run_headless
    from iflow.runner import build_agent_owning, start_mcp
    from iflow.workspace.local import LocalWorkspace

    async with LocalWorkspace(cwd) as workspace:
        mcp = await start_mcp(settings, cwd=cwd, home=home)
        for failure in mcp.failures() if mcp is not None else []:
            click.echo(f"iflow: {failure} Going on without its tools.", err=True)
        agent, recorder = await build_agent_owning(
            settings,
            workspace,
            mcp=mcp,
            cwd=cwd,
            home=home,
            headless=True,
            store=store,
            resume=resumed,
        )
        try:
            if rewind is not None:
                report = await agent.rewind(rewind)  # a RewindError is one sentence
                if recorder is not None:
                    recorder.save(agent)
                click.echo(
                    f"iflow: rewound to before turn {rewind}: {len(report.written)} file(s) "
                    f"restored, {len(report.removed)} removed.",
                    err=True,
                )
            return await run_headless(
                agent,
                prompt,
                fmt=fmt,  # type: ignore[arg-type]
                recorder=recorder,
                trajectory_path=trajectory,
                atif_path=atif,
            )
        finally:
            await agent.aclose()


def _tui(
    settings: Settings, cwd: Path, home: Path, store: SessionStore, resumed: SessionData | None
) -> int:
    from iflow.tui.run import run_tui

    return run_tui(settings, cwd=cwd, home=home, store=store, resume=resumed)


def check_output_path(path: Path, flag: str) -> None:
    """Before a run: ``path``'s directory must exist and be writable (nothing is made
    outside the workspace); an :class:`IflowError` of one sentence otherwise."""
    parent = path.expanduser().absolute().parent
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; give a file path.")
    if not parent.is_dir():
        raise ConfigError(
            f"{flag} {path}: the directory {parent} does not exist; create it or choose "
            "another path."
        )
    if not os.access(parent, os.W_OK):
        raise ConfigError(
            f"{flag} {path}: the directory {parent} is not writable; choose another path."
        )


if __name__ == "__main__":
    main()
