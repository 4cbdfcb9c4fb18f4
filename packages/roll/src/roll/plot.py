"""Training curves as a PNG: reward, loss, grad norm and KL of one run or several overlaid.

The panels find their metric by name (:func:`roll.metrics.metric_key`), so ``train/reward``
and ``rollout/reward_mean`` both fill the reward panel; a metric a run never logged gives a
panel that says so. Curves are smoothed like TensorBoard's (an exponential moving average,
debiased at the start) with the raw values faint behind them. Figures are drawn with
matplotlib's Agg canvas, never a display, and the PNG is written atomically.

matplotlib is imported inside the functions: importing this module is cheap.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roll.errors import ConfigError, RollError
from roll.metrics import METRICS_FILE, metric_key, read_metrics

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

PANELS: tuple[tuple[str, str], ...] = (
    ("reward", "reward"),
    ("loss", "loss"),
    ("grad_norm", "grad norm"),
    ("kl", "KL"),
)
"""(metric kind, panel title), in drawing order."""

_MIN_POINTS_TO_SMOOTH = 10

Series = tuple[str, list[float], list[float]]
"""(key, steps, values) of one metric of one run."""


def plot_run(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    smoothing: float = 0.6,
) -> Path:
    """Draw the curves of ``run_dir`` into ``out`` (default ``run_dir/curves.png``); return it.

    ``smoothing`` is the moving-average weight in [0, 1) (0 draws the raw values only).
    """
    run_dir = Path(run_dir)
    target = Path(out) if out is not None else run_dir / "curves.png"
    return plot_runs([run_dir], out=target, smoothing=smoothing)


def plot_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    labels: Sequence[str] | None = None,
    out: str | os.PathLike[str] | None = None,
    *,
    smoothing: float = 0.6,
) -> Path:
    """Overlay the curves of several runs, one colour each, in one PNG; return its path.

    ``labels`` name the runs in the legend (default: the directory names). ``out`` defaults
    to ``comparison.png`` beside the first run directory.
    """
    if isinstance(run_dirs, str | os.PathLike):
        run_dirs = [run_dirs]
    if not run_dirs:
        raise ConfigError("plot_runs needs at least one run directory.")
    dirs = [Path(d) for d in run_dirs]
    names = list(labels) if labels is not None else [d.name for d in dirs]
    if len(names) != len(dirs):
        raise ConfigError(
            f"got {len(names)} labels for {len(dirs)} run directories; "
            "give one label per run, or none."
        )
    if not 0 <= smoothing < 1:
        raise ConfigError(f"smoothing must be in [0, 1), got {smoothing}.")
    runs = [_load_run(d) for d in dirs]
    target = Path(out) if out is not None else dirs[0].parent / "comparison.png"
    title = dirs[0].name if len(dirs) == 1 else f"{len(dirs)} runs"
    figure = _figure(runs, names, title=title, smoothing=smoothing)
    return _save_png(figure, target)


def _load_run(run_dir: Path) -> list[dict[str, Any]]:
    records = read_metrics(run_dir / METRICS_FILE)
    if not records:
        raise RollError(
            f"{run_dir / METRICS_FILE} holds no metrics yet; is this a run directory of "
            "`roll train` that has finished a step?"
        )
    return records


def series(records: Sequence[dict[str, Any]], kind: str) -> Series | None:
    """The ``kind`` metric of a run as (key, steps, values), by step, last value per step."""
    keys = {key for record in records for key in record}
    key = metric_key(keys, kind)
    if key is None:
        return None
    by_step: dict[float, float] = {}
    for record in records:
        if key in record and "step" in record:
            value = record[key]
            by_step[record["step"]] = float(value) if value is not None else math.nan
    steps = sorted(by_step)
    return key, [float(s) for s in steps], [by_step[s] for s in steps]


def _smooth(values: list[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: an EMA debiased for its start; non-finite values stay gaps."""
    out, last, count = [], 0.0, 0
    for value in values:
        if not math.isfinite(value):
            out.append(math.nan)
            continue
        count += 1
        last = last * weight + (1 - weight) * value
        out.append(last / (1 - weight**count))
    return out


def _figure(
    runs: list[list[dict[str, Any]]], labels: list[str], *, title: str, smoothing: float
) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 7.5), layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(title)
    axes = figure.subplots(2, 2).flatten()
    for ax, (kind, panel_title) in zip(axes, PANELS, strict=True):
        _draw_panel(ax, kind, panel_title, runs, labels, smoothing)
    return figure


def _draw_panel(
    ax: Axes,
    kind: str,
    panel_title: str,
    runs: list[list[dict[str, Any]]],
    labels: list[str],
    smoothing: float,
) -> None:
    found = [(i, series(records, kind)) for i, records in enumerate(runs)]
    drawn = [(i, s) for i, s in found if s is not None]
    if not drawn:
        ax.set_title(panel_title)
        ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    keys = sorted({s[0] for _, s in drawn})
    ax.set_title(f"{panel_title} ({', '.join(keys)})" if len(keys) <= 2 else panel_title)
    for index, (key, steps, values) in drawn:
        color = f"C{index % 10}"
        smooth = smoothing > 0 and len(values) >= _MIN_POINTS_TO_SMOOTH
        marker = "." if len(values) < 30 else None
        label = labels[index] if len(runs) > 1 else key
        ax.plot(
            steps,
            values,
            color=color,
            alpha=0.3 if smooth else 1.0,
            marker=marker,
            label=None if smooth else label,
        )
        if smooth:
            ax.plot(steps, _smooth(values, smoothing), color=color, label=label)
    finite = [v for _, s in drawn for v in s[2] if math.isfinite(v)]
    if kind == "grad_norm" and finite and min(finite) > 0 and max(finite) / min(finite) > 100:
        ax.set_yscale("log")
    absent = [labels[i] for i, s in found if s is None]
    if absent:
        ax.text(
            0.01,
            0.01,
            "not logged: " + ", ".join(absent),
            fontsize=8,
            transform=ax.transAxes,
            va="bottom",
        )
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if len(runs) > 1:
        ax.legend(fontsize=8)


def _save_png(figure: Figure, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        figure.savefig(tmp, format="png", dpi=110)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
