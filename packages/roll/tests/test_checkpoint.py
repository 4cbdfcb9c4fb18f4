"""Checkpoints: exact resume, atomic writes (raised and SIGKILLed writers), verification."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from roll.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from roll.checkpoint import saving as ckpt
from roll.errors import CheckpointError, ConfigError

Parts = tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 4)
    )


def _optimizer_and_scheduler(
    model: torch.nn.Module,
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
    return optimizer, scheduler


def _make_mlp() -> Parts:
    model = _mlp()
    return (model, *_optimizer_and_scheduler(model))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from iflow.models.tiny import build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "m", hidden_size=32, layers=1, heads=2
    )


def _loss(model: torch.nn.Module) -> torch.Tensor:
    """One batch drawn from all three global generators."""
    scale = 1.0 + random.random() + float(np.random.rand())
    if hasattr(model, "config"):
        ids = torch.randint(0, model.config.vocab_size, (2, 8))
        return model(input_ids=ids, labels=ids).loss * scale
    return model(torch.randn(4, 8)).square().mean() * scale


def _train(parts: Parts, steps: int) -> None:
    model, optimizer, scheduler = parts
    model.train()
    for _ in range(steps):
        _loss(model).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def _draws() -> tuple[torch.Tensor, float, float]:
    return torch.rand(3), random.random(), float(np.random.rand())


def _params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


@pytest.mark.parametrize("kind", ["mlp", "tiny_lm"])
def test_resume_is_bitwise_exact(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if kind == "mlp":
        make: Callable[[], Parts] = _make_mlp
    else:
        from transformers import AutoModelForCausalLM

        tiny = request.getfixturevalue("tiny_dir")

        def make() -> Parts:
            model = AutoModelForCausalLM.from_pretrained(tiny)
            return (model, *_optimizer_and_scheduler(model))

    _seed(0)
    first = make()
    _train(first, 3)
    saved = save_checkpoint(
        tmp_path,
        3,
        model=first[0],
        optimizer=first[1],
        scheduler=first[2],
        extra_state={"cursor": 12, "config": {"lr": 0.01}},
    )
    _train(first, 3)
    expected_params, expected_draws = _params(first[0]), _draws()
    expected_lr = first[2].get_last_lr()

    _seed(1234)  # different generators and a different initialisation
    second = make()
    with torch.no_grad():
        for p in second[0].parameters():
            p.add_(1.0)
    assert latest_checkpoint(tmp_path) == saved
    state = load_checkpoint(saved, model=second[0], optimizer=second[1], scheduler=second[2])
    assert state == {"step": 3, "cursor": 12, "config": {"lr": 0.01}}
    _train(second, 3)

    got = _params(second[0])
    assert got.keys() == expected_params.keys()
    assert all(torch.equal(got[k], expected_params[k]) for k in got)
    draws = _draws()
    assert torch.equal(draws[0], expected_draws[0]) and draws[1:] == expected_draws[1:]
    assert second[2].get_last_lr() == expected_lr
    if kind == "tiny_lm":  # an ordinary model directory, tied embedding saved once
        assert (saved / "model" / "config.json").is_file()
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_pretrained(saved / "model")


def test_tied_weights_of_a_plain_module_round_trip(tmp_path: Path) -> None:
    def make() -> torch.nn.Module:
        model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
        model[1].weight = model[0].weight
        return model

    model = make()
    path = save_checkpoint(tmp_path, 0, model=model, optimizer=None)
    fresh = make()
    load_checkpoint(path, model=fresh)
    assert torch.equal(fresh[0].weight, model[0].weight)
    assert fresh[1].weight is fresh[0].weight


def test_ddp_wrapped_model_saves_its_module(tmp_path: Path) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        _seed(0)
        wrapped = DistributedDataParallel(_mlp())
        optimizer, scheduler = _optimizer_and_scheduler(wrapped)
        _train((wrapped, optimizer, scheduler), 2)
        run = tmp_path / "run"
        assert save_checkpoint(run, 2, model=wrapped, optimizer=optimizer, is_main=False) == (
            run / "checkpoints" / "step-00000002"
        )
        assert not run.exists()  # other ranks write nothing
        path = save_checkpoint(run, 2, model=wrapped, optimizer=optimizer, scheduler=scheduler)
        with safe_open(path / "model.safetensors", "pt") as fh:
            assert not any(k.startswith("module.") for k in fh.keys())  # noqa: SIM118

        plain = _mlp()
        load_checkpoint(path, model=plain)
        fresh = DistributedDataParallel(_mlp())
        fresh_opt, fresh_sched = _optimizer_and_scheduler(fresh)
        load_checkpoint(path, model=fresh, optimizer=fresh_opt, scheduler=fresh_sched)
        for a, b, c in zip(
            wrapped.module.parameters(), plain.parameters(), fresh.module.parameters(), strict=True
        ):
            assert torch.equal(a, b) and torch.equal(a, c)
    finally:
        dist.destroy_process_group()


def _save_mlp(run: Path, step: int, **kwargs: object) -> Path:
    model, optimizer, scheduler = _make_mlp()
    return save_checkpoint(
        run, step, model=model, optimizer=optimizer, scheduler=scheduler, **kwargs
    )  # type: ignore[arg-type]


def test_a_writer_that_fails_midway_leaves_the_previous_latest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _save_mlp(tmp_path, 1)

    def boom(optimizer: object, path: Path) -> None:
        path.write_bytes(b"half an optimizer")
        raise RuntimeError("simulated crash while saving the optimizer")

    monkeypatch.setattr(ckpt, "_save_optimizer", boom)
    with pytest.raises(RuntimeError, match="simulated crash"):
        _save_mlp(tmp_path, 2)
    root = tmp_path / "checkpoints"
    assert latest_checkpoint(tmp_path) == first
    assert not (root / "step-00000002").exists()
    assert not list(root.glob(".tmp-*"))

    def disk_full(optimizer: object, path: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt, "_save_optimizer", disk_full)
    with pytest.raises(CheckpointError, match=r"could not write checkpoint .*No space left"):
        _save_mlp(tmp_path, 2)
    assert latest_checkpoint(tmp_path) == first


def test_stray_temp_dirs_are_ignored_and_removed_by_the_next_save(tmp_path: Path) -> None:
    first = _save_mlp(tmp_path, 1)
    root = tmp_path / "checkpoints"
    stray = root / ".tmp-step-00000002-99999"
    stray.mkdir()
    (stray / "optimizer.pt").write_bytes(b"torn")
    (root / ".tmp-latest-99999").write_text("step-00000002\n")
    assert latest_checkpoint(tmp_path) == first
    load_checkpoint(first, model=_mlp())
    _save_mlp(tmp_path, 2)
    assert not list(root.glob(".tmp-*"))
    assert latest_checkpoint(tmp_path) == root / "step-00000002"


_KILLED_WRITER = """
import sys, torch
from roll.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
run = sys.argv[1]
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
start = 0
if (latest := latest_checkpoint(run)) is not None:
    start = load_checkpoint(latest, model=model, optimizer=optimizer)["step"]
for step in range(start + 1, start + 100_000):
    model(torch.randn(8, 256)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    save_checkpoint(run, step, model=model, optimizer=optimizer, keep_last=2)
    print(step, flush=True)
"""


def test_a_sigkilled_writer_always_leaves_a_loadable_latest(tmp_path: Path) -> None:
    delays = random.Random(7)
    run = tmp_path / "run"
    last_seen = 0
    for _ in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", _KILLED_WRITER, str(run)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            line = proc.stdout.readline()  # type: ignore[union-attr]
            assert line, "the writer died before its first save"
            time.sleep(delays.uniform(0.0, 0.2))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stdout.close()  # type: ignore[union-attr]
        latest = latest_checkpoint(run)
        assert latest is not None
        model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(4)])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        step = load_checkpoint(latest, model=model, optimizer=optimizer)["step"]
        assert step > last_seen  # every process resumed and got further
        last_seen = step
    root = run / "checkpoints"
    save_checkpoint(run, last_seen + 1, model=model, optimizer=optimizer, keep_last=2)
    assert not list(root.glob(".tmp-*")) and not list(root.glob(".old-*"))
    assert sorted(p.name for p in root.iterdir()) == [
        "latest",
        f"step-{last_seen:08d}",
        f"step-{last_seen + 1:08d}",
    ]


def test_a_corrupt_file_is_named_with_what_to_do(tmp_path: Path) -> None:
    first = _save_mlp(tmp_path, 1)
    second = _save_mlp(tmp_path, 2)
    data = bytearray((second / "optimizer.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (second / "optimizer.pt").write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(second, model=_mlp())
    message = str(info.value)
    assert "optimizer.pt is corrupt" in message
    assert f"resume from the previous checkpoint {first} or start fresh" in message
    # The pointer's cheap check (sizes) passes, but the full scan would skip it.
    (tmp_path / "checkpoints" / "latest").unlink()
    assert latest_checkpoint(tmp_path) == first

    (first / "rng.pt").unlink()
    with pytest.raises(CheckpointError, match=r"rng\.pt is missing; no earlier checkpoint"):
        load_checkpoint(first, model=_mlp())
    assert latest_checkpoint(tmp_path) is None


def test_latest_falls_back_when_the_pointer_is_broken(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    assert latest_checkpoint(tmp_path) is None
    _save_mlp(tmp_path, 1)
    second = _save_mlp(tmp_path, 2)
    (root / "latest").write_text("../../etc\n")
    assert latest_checkpoint(tmp_path) == second
    (root / "latest").write_text("step-00000009\n")
    assert latest_checkpoint(tmp_path) == second
    (second / "manifest.json").unlink()  # a directory without a manifest was never finished
    assert latest_checkpoint(tmp_path) == root / "step-00000001"


def test_keep_last_prunes_older_checkpoints(tmp_path: Path) -> None:
    for step in range(1, 6):
        _save_mlp(tmp_path, step, keep_last=2)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.glob("step-*")) == ["step-00000004", "step-00000005"]
    _save_mlp(tmp_path, 6, keep_last=None)
    _save_mlp(tmp_path, 3, keep_last=1)  # resumed from an older step: later ones are left
    assert sorted(p.name for p in root.glob("step-*")) == [
        "step-00000003",
        "step-00000004",
        "step-00000005",
        "step-00000006",
    ]
    assert latest_checkpoint(tmp_path) == root / "step-00000003"
    with pytest.raises(ConfigError, match="keep_last must be at least 1"):
        _save_mlp(tmp_path, 7, keep_last=0)


def test_saving_a_step_again_replaces_it(tmp_path: Path) -> None:
    _save_mlp(tmp_path, 1, extra_state={"v": 1})
    path = _save_mlp(tmp_path, 1, extra_state={"v": 2})
    assert json.loads((path / "state.json").read_text())["v"] == 2
    assert not list((tmp_path / "checkpoints").glob(".old-*"))


def test_extra_state_must_be_json(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="extra_state cannot be stored as JSON"):
        _save_mlp(tmp_path, 1, extra_state={"path": Path("x")})
    assert not (tmp_path / "checkpoints").exists() or not any((tmp_path / "checkpoints").iterdir())


def test_loading_into_the_wrong_model_or_without_state(tmp_path: Path) -> None:
    model = _mlp()
    path = save_checkpoint(tmp_path, 1, model=model, optimizer=None)
    with pytest.raises(CheckpointError, match="do not fit this model"):
        load_checkpoint(path, model=torch.nn.Linear(8, 4))
    with pytest.raises(CheckpointError, match="has no optimizer state"):
        load_checkpoint(path, model=_mlp(), optimizer=torch.optim.SGD(_mlp().parameters()))
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope", model=model)
