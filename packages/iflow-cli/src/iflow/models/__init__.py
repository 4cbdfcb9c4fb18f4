"""Model backends behind one protocol (:class:`Model`), and :func:`make_model` to pick one.

Importing this package does not import torch or transformers: :mod:`iflow.models.local` and
:mod:`iflow.models.tiny` import them inside their functions.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from iflow.errors import ConfigError
from iflow.models.base import (
    INVALID_JSON_KEY,
    DeltaCallback,
    Model,
    ModelResponse,
    estimate_messages,
    estimate_tokens,
    to_openai_messages,
)
from iflow.models.directory import check_model_directory
from iflow.models.local import LocalModel
from iflow.models.parsing import parse_tool_calls, render_tools_prompt
from iflow.models.scripted import ScriptedModel
from iflow.models.tiny import build_tiny_model

PROVIDERS = ("openai", "local", "scripted")
_NAMED = {"base_url", "api_key", "context_limit", "temperature", "max_tokens", "tool_format"}
"""Options make_model takes by name, so not through ``**kw``."""


def make_model(
    provider: str,
    *,
    model: str | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    model_path: str | Path | None = None,
    script: str | Path | list[Any] | None = None,
    context_limit: int | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    tool_format: str | None = None,
    **kw: Any,
) -> Model:
    """The model for ``provider``:

    - ``"openai"``: :class:`OpenAIModel` for ``model`` at ``base_url`` (``kw``:
      ``max_retries``, ``backoff_base``, ``backoff_max``, ``timeout``, ``extra_body``, ``name``);
    - ``"local"``: :class:`LocalModel` loaded from ``model_path`` (``max_tokens`` is its
      ``max_new_tokens``; ``kw``: ``device``, ``max_new_tokens``, ``top_p``, ``seed``,
      ``dtype``, ``name``);
    - ``"scripted"``: :class:`ScriptedModel` replaying ``script`` (a JSON/JSONL file or a list
      of responses; ``kw``: ``name``). ``temperature``, ``max_tokens`` and ``tool_format`` do
      not apply to it and are ignored, so general settings do not stop a scripted run.

    ``None`` means the backend's default. A missing required setting or an option the
    backend does not take is a :class:`ConfigError`.
    """
    check_model(provider, model=model, model_path=model_path, script=script)
    if provider == "openai":
        assert model is not None
        from iflow.models.openai_http import OpenAIModel  # openai takes ~1 s to import

        options = _options(OpenAIModel, provider, kw)
        options |= _given(context_limit=context_limit, max_tokens=max_tokens)
        options |= _given(tool_format=tool_format)
        return OpenAIModel(
            model, base_url=base_url, api_key=api_key, temperature=temperature, **options
        )
    if provider == "local":
        assert model_path is not None
        options = _given(max_new_tokens=max_tokens, tool_format=tool_format)
        options |= _options(LocalModel, provider, kw)
        options |= _given(temperature=temperature)
        return LocalModel(model_path, context_limit=context_limit, **options)
    if provider == "scripted":
        assert script is not None
        options = _options(ScriptedModel, provider, kw)
        options |= _given(context_limit=context_limit)
        if isinstance(script, list):
            return ScriptedModel(script, **options)
        return ScriptedModel.from_file(script, **options)
    raise ConfigError(f"unknown model provider {provider!r}; use one of {', '.join(PROVIDERS)}.")


def check_model(
    provider: str,
    *,
    model: str | None = None,
    model_path: str | Path | None = None,
    script: str | Path | list[Any] | None = None,
) -> None:
    """Whether :func:`make_model` has what ``provider`` needs, without building the model
    (harnesses ask before their first trial); a :class:`ConfigError` naming what is missing."""
    if provider == "openai" and not model:
        raise ConfigError(
            'no model name is set for the openai provider: set "model" in '
            "~/.iflow/settings.json or .iflow/settings.json, IFLOW_MODEL, or pass --model."
        )
    if provider == "local":
        if model_path is None or not str(model_path).strip():
            raise ConfigError(
                'no model directory is set for the local provider: set "modelPath" in '
                "~/.iflow/settings.json or .iflow/settings.json, IFLOW_MODEL_PATH, or pass "
                "--model-path."
            )
        check_model_directory(model_path)
    if provider == "scripted" and script is None:
        raise ConfigError(
            'no script is set for the scripted provider: set "script" in '
            "~/.iflow/settings.json or .iflow/settings.json, IFLOW_SCRIPT, or pass --script "
            "(a JSON list of responses)."
        )
    if provider not in PROVIDERS:
        raise ConfigError(
            f"unknown model provider {provider!r}; use one of {', '.join(PROVIDERS)}."
        )


def __getattr__(name: str) -> Any:
    if name == "OpenAIModel":  # imported on first use: the openai library is slow to import
        from iflow.models.openai_http import OpenAIModel

        return OpenAIModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _given(**values: Any) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _options(cls: type, provider: str, kw: dict[str, Any]) -> dict[str, Any]:
    """``kw`` without ``None`` values, after checking that ``cls`` takes every key."""
    accepted = {
        name
        for name, p in inspect.signature(cls).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and name not in _NAMED
    }
    unknown = sorted(set(kw) - accepted)
    if unknown:
        raise ConfigError(
            f"the {provider} provider does not take {', '.join(unknown)}; "
            f"it takes {', '.join(sorted(accepted))}."
        )
    return _given(**kw)


__all__ = [
    "INVALID_JSON_KEY",
    "PROVIDERS",
    "DeltaCallback",
    "LocalModel",
    "Model",
    "ModelResponse",
    "OpenAIModel",
    "ScriptedModel",
    "build_tiny_model",
    "estimate_messages",
    "estimate_tokens",
    "make_model",
    "parse_tool_calls",
    "render_tools_prompt",
    "to_openai_messages",
]
