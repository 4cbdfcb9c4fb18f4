"""LoRA through peft: only adapters train, checkpoints hold only them, resume is exact, and the
final model is the base with the adapters merged in."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from ale.jsonl import read_jsonl, write_jsonl
from ale.trajectory import Trajectory
from iflow.models.tiny import build_tiny_model
from roll.checkpoint import latest_checkpoint
from roll.config import SFTConfig, load_config
from roll.errors import ConfigError
from roll.lora import export_merged
from roll.sft import run_sft

REPO = Path(__file__).resolve().parents[3]
SYNTH = REPO / "datasets" / "synth-mini" / "trajectories.jsonl"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


def _config(tmp_path: Path, tiny: Path, run_dir: str, **overrides: object) -> SFTConfig:
    trajectories = list(read_jsonl(SYNTH, Trajectory))[:6]
    write_jsonl(tmp_path / "six.jsonl", trajectories)
    config = {
        "run_dir": str(tmp_path / run_dir),
        "model": {"path": str(tiny), "lora": {"r": 4, "alpha": 8}},
        "data": [str(tmp_path / "six.jsonl")],
        "batch_size": 3,
        "max_seq_len": 8192,
        "tools": "none",
        "optim": {"lr": 1e-2},
        "run": {"steps": 6, "checkpoint_every": 2, "progress": False, "tensorboard": False},
    }
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return load_config(SFTConfig, path, [f"{k}={v}" for k, v in overrides.items()])


def test_lora_trains_only_adapters_and_exports_a_merged_model(tmp_path: Path, tiny: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        final = run_sft(_config(tmp_path, tiny, "a"), log=lambda _m: None)
    deprecations = [w for w in caught if issubclass(w.category, FutureWarning)]
    assert not deprecations, [str(w.message) for w in deprecations]  # nothing in the run's log
    checkpoint = latest_checkpoint(tmp_path / "a")
    assert checkpoint is not None
    saved = sorted(p.name for p in (checkpoint / "model").iterdir())
    assert "adapter_model.safetensors" in saved and "model.safetensors" not in saved
    adapters = load_file(str(checkpoint / "model" / "adapter_model.safetensors"))
    assert adapters and all("lora_" in key for key in adapters)
    base = load_file(str(tiny / "model.safetensors"))
    merged = load_file(str(final / "model.safetensors"))
    assert set(merged) == set(base)  # a plain model: no adapter keys left
    changed = [k for k in base if not bool((base[k] == merged[k]).all())]
    assert changed and all("proj" in k for k in changed)  # only adapted layers moved
    again = export_merged(tmp_path / "a", tmp_path / "exported")
    exported = load_file(str(again / "model.safetensors"))
    assert all(bool((exported[k] - merged[k]).abs().max() < 1e-5) for k in merged)


def test_lora_resume_is_exact(tmp_path: Path, tiny: Path) -> None:
    run_sft(_config(tmp_path, tiny, "whole"), log=lambda _m: None)
    run_sft(_config(tmp_path, tiny, "half", **{"run.steps": 4}), log=lambda _m: None)
    run_sft(_config(tmp_path, tiny, "half"), resume=True, log=lambda _m: None)
    a = load_file(str(tmp_path / "whole" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "half" / "model" / "model.safetensors"))
    assert all(bool((a[k] == b[k]).all()) for k in a)


def test_lora_on_modules_the_model_lacks_is_one_sentence(tmp_path: Path, tiny: Path) -> None:
    config = _config(tmp_path, tiny, "bad", **{"model.lora.target_modules": "[c_attn]"})
    with pytest.raises(ConfigError, match=r"c_attn, which this model has no linear layer"):
        run_sft(config, log=lambda _m: None)
    assert not (tmp_path / "bad" / "checkpoints").exists()


def test_export_of_a_run_without_adapters_is_one_sentence(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "roll.cli", "model", "export", str(tmp_path), str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "holds no LoRA checkpoint" in result.stderr and "Traceback" not in result.stderr


def test_a_model_whose_window_no_trajectory_fits_is_one_sentence(tmp_path: Path) -> None:
    short = build_tiny_model(
        tmp_path / "short", hidden_size=32, layers=1, heads=2, max_position_embeddings=32
    )
    config = _config(tmp_path, short, "short", **{"model.lora": "null"})
    with pytest.raises(ConfigError, match=r"too long for the model's context window \(32 tokens\)"):
        run_sft(config, log=lambda _m: None)


def test_a_model_directory_without_template_is_one_sentence(tmp_path: Path, tiny: Path) -> None:
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(tiny, bare)
    for name in ("chat_template.jinja", "tokenizer_config.json"):
        (bare / name).unlink(missing_ok=True)
    (bare / "tokenizer_config.json").write_text("{}")
    result = subprocess.run(
        [sys.executable, "-m", "roll.cli", "sft", str(_config_file(tmp_path, bare))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "has no chat template" in result.stderr
    (bare / "tokenizer.json").unlink()
    (bare / "tokenizer_config.json").unlink()
    result = subprocess.run(
        [sys.executable, "-m", "roll.cli", "sft", str(_config_file(tmp_path, bare))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and "has no tokenizer" in result.stderr


def _config_file(tmp_path: Path, model: Path) -> Path:
    _config(tmp_path, model, "cli")
    return tmp_path / "sft.yaml"
