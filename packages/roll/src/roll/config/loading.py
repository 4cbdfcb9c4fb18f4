"""Reading a config: a YAML file, ``key=value`` overrides on top, validated as a model."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from ale.configs import explain
from roll.errors import ConfigError

C = TypeVar("C", bound=BaseModel)


def apply_overrides(data: dict[str, Any], overrides: list[str], source: str) -> dict[str, Any]:
    """``a.b.c=value`` pairs set into ``data`` (values parsed as YAML: numbers, true, null...)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(
                f"override {item!r} is not KEY=VALUE; write it like algorithm.gamma=0.9"
            )
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part} is a value, not a section")
            node = child
        node[parts[-1]] = value
    return data


def load_config(model: type[C], path: str | Path | None, overrides: list[str] | None = None) -> C:
    """Read the YAML at ``path`` (or start empty), apply overrides, validate as ``model``."""
    source = str(path) if path is not None else "the command line"
    data: Any = {}
    if path is not None:
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot read the config {file} ({exc.strerror or exc}); check the path"
            ) from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{file} is not valid YAML ({exc}); fix the file") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{file} must be a YAML mapping of settings (model:, run:, ...)")
    data = apply_overrides(data, list(overrides or []), source)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(explain(exc, model, source)) from None
