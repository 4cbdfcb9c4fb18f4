"""Metrics JSONL and TensorBoard logging, the progress bar, and the curve plots."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from roll.errors import ConfigError, RollError
from roll.metrics import MetricsLogger, TrainProgress, metric_key, read_metrics, summarize
from roll.plot import _figure, plot_run, plot_runs

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _strict(line: str) -> dict:
    def reject(constant: str) -> None:
        raise AssertionError(f"non-standard JSON constant {constant}")

    return json.loads(line, parse_constant=reject)


def test_one_flushed_line_per_log(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, tensorboard=False) as metrics:
        metrics.log(1, {"train/loss": 0.5, "rollout/reward_mean": 0.25, "train/tokens": 10})
        lines = (tmp_path / "metrics.jsonl").read_text().splitlines()  # readable while open
        assert len(lines) == 1
        metrics.log(2, {"train/loss": 0.4})
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2]
    assert records[0]["train/tokens"] == 10 and isinstance(records[0]["time"], float)
    assert not (tmp_path / "tensorboard").exists()


def test_non_finite_values_are_strict_json_and_read_back(tmp_path: Path) -> None:
    import torch

    with MetricsLogger(tmp_path, tensorboard=False) as metrics:
        metrics.log(
            1,
            {"a": math.nan, "b": math.inf, "c": -math.inf, "d": torch.tensor(2.5), "e": True},
        )
    line = (tmp_path / "metrics.jsonl").read_text().strip()
    assert {k: v for k, v in _strict(line).items() if k != "time"} == {
        "step": 1,
        "a": "nan",
        "b": "inf",
        "c": "-inf",
        "d": 2.5,
        "e": 1,
    }
    record = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert math.isnan(record["a"]) and record["b"] == math.inf and record["c"] == -math.inf


def test_bad_values_and_keys_are_refused(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, tensorboard=False) as metrics:
        with pytest.raises(TypeError, match="metric 'x' is a list, not a number"):
            metrics.log(1, {"x": [1, 2]})
        with pytest.raises(ValueError, match="reserved"):
            metrics.log(1, {"step": 3})
    with pytest.raises(RollError, match="not open"):
        MetricsLogger(tmp_path, tensorboard=False).log(1, {"x": 1})


def test_resume_truncates_later_steps(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, tensorboard=False) as metrics:
        for step in range(1, 6):
            metrics.log(step, {"train/loss": float(step)})
    with MetricsLogger(tmp_path, tensorboard=False, resume_from_step=3) as metrics:
        assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
        for step in (4, 5):
            metrics.log(step, {"train/loss": step * 10.0})
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert [r["train/loss"] for r in records] == [1.0, 2.0, 3.0, 40.0, 50.0]


def test_a_torn_last_line_is_skipped_and_cut_before_appending(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, tensorboard=False) as metrics:
        metrics.log(1, {"x": 1})
    path = tmp_path / "metrics.jsonl"
    with path.open("a") as fh:
        fh.write('{"step": 2, "x": 1.2')
    assert [r["step"] for r in read_metrics(path)] == [1]
    with MetricsLogger(tmp_path, tensorboard=False) as metrics:
        metrics.log(2, {"x": 2})
    assert [r["step"] for r in read_metrics(path)] == [1, 2]
    assert all(_strict(line) for line in path.read_text().splitlines())

    path.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(RollError, match=r"metrics\.jsonl:2 is not a JSON object"):
        read_metrics(path)


def test_tensorboard_events_written_and_purged_on_resume(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with MetricsLogger(tmp_path, tensorboard=True) as metrics:
        for step in range(1, 6):
            metrics.log(step, {"train/loss": float(step), "train/kl": math.nan})
    with MetricsLogger(tmp_path, tensorboard=True, resume_from_step=3) as metrics:
        metrics.log(4, {"train/loss": 40.0})
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert {"train/loss", "train/kl"} <= set(events.Tags()["scalars"])
    losses = [(e.step, e.value) for e in events.Scalars("train/loss")]
    assert losses == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]


def test_metric_key_matches_by_name() -> None:
    assert metric_key(["rollout/reward_std", "rollout/reward_mean"], "reward") == (
        "rollout/reward_mean"
    )
    assert metric_key(["eval/reward", "train/reward"], "reward") == "train/reward"
    assert metric_key(["train/loss", "train/loss_scale"], "loss") == "train/loss"
    assert metric_key(["train/approx_kl"], "kl") == "train/approx_kl"
    assert metric_key(["train/grad_norm"], "grad_norm") == "train/grad_norm"
    assert metric_key(["train/lr"], "kl") is None
    assert summarize({"train/loss": 0.71234, "rollout/reward_mean": 0.25, "x": 1}) == (
        "reward 0.25  loss 0.7123"
    )


def test_progress_draws_on_a_terminal_only() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with TrainProgress(10, console=console) as progress:
        assert progress.active
        progress.update(3, {"train/loss": 0.5, "rollout/reward_mean": 0.125})
    assert "3/10" in out.getvalue() and "reward 0.125" in out.getvalue()

    resumed = io.StringIO()
    console = Console(file=resumed, force_terminal=True, width=120)
    with TrainProgress(100, console=console) as progress:
        progress.update(50)  # the resume point: a baseline, not speed
        progress.update(51, {"train/grad_norm": 2.0})
        task = progress._progress.tasks[0]
        assert task.completed == 51
        assert task.speed is None  # one step seen, no jump of 50 counted as speed
    assert "51/100" in resumed.getvalue() and "grad_norm 2" in resumed.getvalue()

    quiet = io.StringIO()
    with TrainProgress(10, enabled=False, console=Console(file=quiet, force_terminal=True)) as p:
        assert not p.active
        p.update(1, {"train/loss": 1.0})
    assert quiet.getvalue() == ""


def test_progress_prints_a_line_a_step_when_redirected() -> None:
    log = io.StringIO()
    with TrainProgress(10, console=Console(file=log, force_terminal=False)) as progress:
        assert not progress.active  # no bar, no escape codes
        progress.update(0, {})  # the start: nothing done yet
        progress.update(1, {"train/loss": 1.0})
        progress.update(2, {"train/loss": 0.5, "rollout/reward_mean": 0.25})
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and "\x1b" not in log.getvalue()
    assert lines[0].startswith("step 1/10") and lines[0].endswith("loss 1")
    assert lines[1].startswith("step 2/10") and "reward 0.25  loss 0.5" in lines[1]


def _write_run(run: Path, steps: int, keys: tuple[str, ...]) -> Path:
    with MetricsLogger(run, tensorboard=False) as metrics:
        for step in range(1, steps + 1):
            metrics.log(step, {key: 1.0 / step + (step % 3) * 0.01 for key in keys})
    return run


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000


def test_plot_run_writes_a_png_with_not_logged_panels(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "run", 25, ("rollout/reward_mean", "train/loss"))
    out = plot_run(run)
    assert out == run / "curves.png"
    _assert_png(out)
    assert not list(run.glob(".curves.png.tmp-*"))

    figure = _figure([read_metrics(run)], ["run"], title="run", smoothing=0.6)
    titles = [ax.get_title() for ax in figure.axes]
    assert titles[:2] == ["reward (rollout/reward_mean)", "loss (train/loss)"]
    for ax in figure.axes[2:]:
        assert [t.get_text() for t in ax.texts] == ["not logged"]


def test_plot_runs_overlays_runs(tmp_path: Path) -> None:
    a = _write_run(tmp_path / "a", 12, ("train/reward", "train/loss", "train/grad_norm"))
    b = _write_run(tmp_path / "b", 3, ("rollout/reward_mean", "train/kl"))
    out = plot_runs([a, b], ["baseline", "ipa"], tmp_path / "cmp" / "comparison.png")
    _assert_png(out)
    assert plot_runs([a, b]) == tmp_path / "comparison.png"
    figure = _figure([read_metrics(a), read_metrics(b)], ["A", "B"], title="", smoothing=0.6)
    reward = figure.axes[0]
    assert [t.get_text() for t in reward.get_legend().get_texts()] == ["A", "B"]
    assert [t.get_text() for t in figure.axes[3].texts] == ["not logged: A"]
    with pytest.raises(ConfigError, match="got 1 labels for 2 run directories"):
        plot_runs([a, b], ["only"])


def test_plot_errors_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(RollError) as info:
        plot_run(tmp_path / "nowhere")
    assert str(info.value) == (
        f"no metrics.jsonl in {tmp_path / 'nowhere'}; is this a run directory of `roll train`?"
    )
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text("")
    with pytest.raises(RollError, match="holds no metrics yet"):
        plot_run(tmp_path / "empty")
