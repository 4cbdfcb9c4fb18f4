"""Training metrics: a JSONL file a run appends to, TensorBoard scalars, a progress line.

:class:`MetricsLogger` writes one JSON object a line to ``RUN_DIR/metrics.jsonl``::

    {"step": 12, "time": 1718000000.123, "train/loss": 0.71, "rollout/reward_mean": 0.25}

``time`` is the wall clock (Unix seconds). Keys are namespaced (``train/…``, ``rollout/…``,
``eval/…``). The file stays strict JSON: a NaN or infinite value is written as the string
``"nan"``, ``"inf"`` or ``"-inf"``, and :func:`read_metrics` turns those back into floats.
Each line is flushed as it is written, so a killed run loses at most the line it was writing;
readers skip such a torn last line and the next logger cuts it off before appending. When a
run resumes from a checkpoint, ``resume_from_step=N`` drops the lines of steps after ``N``
(and TensorBoard's events after ``N``), so each step appears once.

:class:`TrainProgress` is the console's progress bar: step/total, ETA and the key metrics.

torch, tensorboard and rich are imported inside the functions: importing this module is cheap.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import numbers
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from roll.errors import RollError

if TYPE_CHECKING:
    from rich.console import Console

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
"""The metrics file of a run directory."""
TENSORBOARD_DIR = "tensorboard"
"""The TensorBoard log directory of a run directory."""

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_RESERVED = ("step", "time")

METRIC_NAMES: dict[str, tuple[str, ...]] = {
    "reward": ("reward_mean", "reward", "mean_reward", "rewards", "return_mean", "return"),
    "loss": ("loss", "total_loss", "policy_loss", "pg_loss"),
    "grad_norm": ("grad_norm", "gradient_norm", "grad_norm_before_clip"),
    "kl": ("kl", "kl_mean", "approx_kl", "kl_div", "kl_divergence"),
}
"""The last key segments that count as each well-known metric, most preferred first."""
_NAMESPACES = ("rollout", "train", "")  # preferred namespaces when several keys match


def metric_key(keys: Iterable[str], kind: str) -> str | None:
    """The key among ``keys`` that holds the ``kind`` metric (see :data:`METRIC_NAMES`).

    A key matches by its last ``/`` segment, so ``rollout/reward_mean`` and ``train/reward``
    are both rewards; ``reward_mean`` beats ``reward``, and ``rollout/``, then ``train/``,
    then no namespace beat other namespaces (``eval/``). None when nothing matches.
    """
    names = METRIC_NAMES[kind]
    best: tuple[int, int, str] | None = None
    for key in keys:
        namespace, _, last = key.rpartition("/")
        if last not in names:
            continue
        rank_ns = _NAMESPACES.index(namespace) if namespace in _NAMESPACES else len(_NAMESPACES)
        candidate = (names.index(last), rank_ns, key)
        if best is None or candidate < best:
            best = candidate
    return best[2] if best else None


def _encode(key: str, value: Any) -> int | float | str:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"metric {key!r} is a {type(value).__name__}, not a number; log plain numbers "
            "(call .item() on a tensor)."
        ) from None
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    return number


def _decode(record: dict[str, Any]) -> dict[str, Any]:
    return {
        key: _NON_FINITE[value] if isinstance(value, str) and value in _NON_FINITE else value
        for key, value in record.items()
    }


class MetricsLogger:
    """Append metrics to ``run_dir/metrics.jsonl`` (and TensorBoard); use as a context manager.

    ``tensorboard``: True writes TensorBoard scalars to ``run_dir/tensorboard`` too, False
    does not, None does when the tensorboard package is installed. ``resume_from_step``:
    the step the run resumed from; lines and events of later steps are dropped on opening.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        tensorboard: bool | None = None,
        resume_from_step: int | None = None,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILE
        self.resume_from_step = resume_from_step
        self.tensorboard = _tensorboard_available() if tensorboard is None else tensorboard
        if self.tensorboard and not _tensorboard_available():
            raise RollError(
                "tensorboard=True but the tensorboard package is not installed; install it "
                "(pip install tensorboard) or pass tensorboard=False."
            )
        self._fh: Any = None
        self._writer: Any = None

    def __enter__(self) -> Self:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        _repair(self.path, self.resume_from_step)
        self._fh = open(self.path, "a", encoding="utf-8", newline="\n")
        if self.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if self.resume_from_step is None else self.resume_from_step + 1
            self._writer = SummaryWriter(
                log_dir=str(self.run_dir / TENSORBOARD_DIR), purge_step=purge, flush_secs=10
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Flush and close the file and the TensorBoard writer (idempotent)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def log(self, step: int, metrics: Mapping[str, float | int]) -> dict[str, Any]:
        """Write the metrics of ``step`` as one line and return the record written."""
        if self._fh is None:
            raise RollError(
                "this MetricsLogger is not open; use it as a context manager "
                "(with MetricsLogger(run_dir) as metrics: ...)."
            )
        record: dict[str, Any] = {"step": int(step), "time": round(time.time(), 3)}
        for key, value in metrics.items():
            if key in _RESERVED:
                raise ValueError(
                    f"metric key {key!r} is reserved for the line itself; "
                    f"use a namespaced key such as 'train/{key}'."
                )
            record[key] = _encode(key, value)
        self._fh.write(json.dumps(record, allow_nan=False) + "\n")
        self._fh.flush()
        if self._writer is not None:
            for key, value in record.items():
                if key not in _RESERVED:
                    self._writer.add_scalar(key, _NON_FINITE.get(value, value), int(step))
        return record


def _tensorboard_available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("tensorboard", "torch"))


def _repair(path: Path, resume_from_step: int | None) -> None:
    """Cut a torn last line off ``path`` and, when resuming, the lines after that step."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    if resume_from_step is None:
        if data and not data.endswith(b"\n"):
            with open(path, "r+b") as fh:
                fh.truncate(data.rfind(b"\n") + 1)
        return
    kept, dropped = [], 0
    for line in data.splitlines(keepends=True):
        try:
            step = json.loads(line)["step"]
        except (ValueError, KeyError, TypeError):
            step = None
        if not line.endswith(b"\n") or not isinstance(step, int):
            dropped += 1
        elif step <= resume_from_step:
            kept.append(line)
    if dropped:
        log.warning("dropped %d unreadable line(s) from %s while resuming", dropped, path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as fh:
        fh.writelines(kept)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a metrics file (or of ``RUN_DIR/metrics.jsonl``), in file order.

    ``"nan"``/``"inf"``/``"-inf"`` strings come back as floats. A torn last line (a writer
    killed mid-line) is skipped; any other line that is not a JSON object raises RollError.
    """
    path = Path(path)
    file, where = (path, path.parent) if path.suffix == ".jsonl" else (path / METRICS_FILE, path)
    try:
        text = file.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        raise RollError(
            f"no {METRICS_FILE} in {where}; is this a run directory of `roll train`?"
        ) from None
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError:
            if number == len(lines):  # no newline after it: the torn last line
                log.warning("skipped a torn last line in %s", file)
                continue
            raise RollError(
                f"{file}:{number} is not a JSON object; fix or delete that line."
            ) from None
        records.append(_decode(record))
    return records


class TrainProgress:
    """A progress bar on the console: step/total, elapsed, ETA, reward, loss and grad norm.

    Drawn when ``enabled`` and the console is a terminal; when the output is redirected (a
    log file, a pipe), one plain line a step instead (``step 3/10  41 s  reward 0.25 ...``);
    with ``enabled`` false, nothing. ``initial_step`` is where a resumed run starts, so the
    ETA counts only the steps this process runs (a first :meth:`update` that jumps ahead is
    taken as that start too). ``console`` defaults to one on stderr.
    """

    def __init__(
        self,
        total_steps: int,
        *,
        enabled: bool = True,
        initial_step: int = 0,
        console: Console | None = None,
    ) -> None:
        self.total_steps = total_steps
        self.enabled = enabled
        self.initial_step = initial_step
        self._console = console
        self._progress: Any = None
        self._task: Any = None
        self._updated = False
        self._lines: Any = None
        """The console plain lines go to when it is not a terminal."""
        self._began = 0.0

    @property
    def active(self) -> bool:
        """Whether the bar is being drawn."""
        return self._progress is not None

    def __enter__(self) -> Self:
        if not self.enabled:
            return self
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = self._console or Console(stderr=True)
        if not console.is_terminal:
            self._lines = console
            self._began = time.monotonic()
            return self
        self._progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[summary]}"),
            console=console,
        )
        self._progress.start()
        self._task = self._progress.add_task(
            "train", total=self.total_steps, completed=self.initial_step, summary=""
        )
        return self

    def update(self, step: int, metrics: Mapping[str, Any] | None = None) -> None:
        """Show that ``step`` is done, with the key values of ``metrics``."""
        if self._lines is not None and metrics:
            elapsed = time.monotonic() - self._began
            line = f"step {step}/{self.total_steps}  {elapsed:.0f} s  {summarize(metrics)}"
            self._lines.print(line.rstrip(), highlight=False, markup=False, soft_wrap=True)
        if self._progress is None:
            return
        summary = summarize(metrics or {})
        if not self._updated and step - self.initial_step > 1:
            # A resumed run's first update jumps to its start step: a baseline, not progress
            # made in this process, so it must not count toward the speed the ETA uses.
            self._progress.reset(self._task, completed=step, summary=summary)
        else:
            self._progress.update(self._task, completed=step, summary=summary)
        self._updated = True

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def summarize(metrics: Mapping[str, Any]) -> str:
    """``reward 0.25  loss 0.7134  grad_norm 1.2`` from whichever of those ``metrics`` holds."""
    parts = []
    for kind in ("reward", "loss", "grad_norm"):
        key = metric_key(metrics, kind)
        if key is None:
            continue
        value = metrics[key]
        shown = f"{value:.4g}" if isinstance(value, numbers.Real) else str(value)
        parts.append(f"{kind} {shown}")
    return "  ".join(parts)
