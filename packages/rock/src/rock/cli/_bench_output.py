"""What ``rock bench`` prints: a run's progress on stderr while it runs (a line per finished
trial, a bar on a terminal), and a run's summary table."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from rock.cli._common import echo_table


class Live:
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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _sec(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def print_summary(results: Any) -> None:
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
