"""Settings: one validated model, filled from layers where the later wins.

The layers, lowest first:

1. ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``: a fallback for ``api_key`` and
   ``base_url``, used only when nothing below sets them (so a key meant for another
   tool never overrides one written for iflow);
2. ``<home>/.iflow/settings.json`` (global);
3. the project's ``.iflow/settings.json``: the nearest one walking up from the
   working directory, stopping at the repository root (a directory holding
   ``.git``), at the home directory, or at the filesystem root;
4. ``IFLOW_<NAME>`` environment variables, one per setting (``IFLOW_MODEL``,
   ``IFLOW_MAX_TURNS``...); an empty variable counts as unset;
5. command-line flags (``None`` values are ignored).

Settings files are plain JSON objects (no comments). Keys are the snake_case names
below or their camelCase forms as iFlow CLI users write them (``baseUrl``,
``apiKey``, ``approvalMode``...); ``modelName`` is also read as ``model`` and
``maxSessionTurns`` as ``max_turns``. An unknown key is an error naming the file;
only ``theme`` and ``selectedAuthType``, which the iFlow CLI writes into the same
file, are accepted and ignored.

Relative paths in ``script`` and ``sessions_dir`` (and in ``model_path`` when that
path exists) are taken relative to the directory holding the file's ``.iflow``
folder, or to the working directory for variables and flags; ``~`` is expanded.

Where each value came from is kept: :attr:`Settings.sources`.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from iflow.approval import Mode
from iflow.errors import ConfigError
from iflow.hooks import HooksConfig
from iflow.mcp.config import McpServerConfig

Provider = Literal["openai", "local", "scripted"]
ToolFormat = Literal["native", "text", "brief"]

_EXTRA_ALIASES = MappingProxyType(
    {"model": ("modelName",), "max_turns": ("maxSessionTurns",), "max_tokens": ("maxRunTokens",)}
)
_AMBIGUOUS = MappingProxyType(
    {
        "maxTokens": "write 'maxOutputTokens' for the most tokens one answer may have, or "
        "'maxRunTokens' for the most a whole run may spend"
    }
)
"""Keys a settings file may not use, each with what to write instead."""
_IGNORED_KEYS = frozenset({"theme", "selectedAuthType"})
_PATH_FIELDS = ("model_path", "script", "sessions_dir")
_MERGED = frozenset({"mcp_servers", "hooks"})
"""Settings whose layers merge by key instead of the later one replacing the whole value."""
_FALLBACK_ENV = MappingProxyType({"api_key": "OPENAI_API_KEY", "base_url": "OPENAI_BASE_URL"})
_WHAT = MappingProxyType(
    {
        "model": "model name",
        "base_url": "base URL",
        "api_key": "API key",
        "model_path": "local model path",
        "script": "script file",
        "sessions_dir": "sessions directory",
    }
)


def _validation_alias(name: str) -> AliasChoices:
    return AliasChoices(name, to_camel(name), *_EXTRA_ALIASES.get(name, ()))


class Settings(BaseModel):
    """Everything a run of iflow can be configured with."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        use_attribute_docstrings=True,
        alias_generator=AliasGenerator(validation_alias=_validation_alias),
    )

    provider: Provider = "openai"
    """Which model layer answers: an OpenAI-compatible server, a local transformers
    model, or a scripted list of responses."""
    model: str | None = None
    """The model name sent to the server (openai); also read from ``modelName``."""
    base_url: str | None = None
    """The server's base URL, e.g. ``http://localhost:8000/v1`` (openai)."""
    api_key: SecretStr | None = None
    """The server's API key (openai); never printed."""
    model_path: str | None = None
    """A directory holding a transformers model (local)."""
    script: str | None = None
    """A JSON file of responses to replay (scripted)."""
    context_limit: int | None = Field(default=None, gt=0)
    """Tokens the model accepts in one prompt; None: what the model layer knows or assumes."""
    temperature: float | None = Field(default=None, ge=0)
    """Sampling temperature; None: the server's default."""
    max_output_tokens: int | None = Field(default=None, gt=0)
    """Most tokens one answer may have; unset: 8192 for an OpenAI-compatible server (sent: a
    model that repeats itself must stop), the model's own for a local one; ``null`` in a
    settings file: none is sent (the server's own limit)."""
    model_timeout_sec: float | None = Field(default=None, gt=0)
    """Most seconds one model call may take, its stream included (past it the request is
    cancelled); None: 600 for an OpenAI-compatible server."""
    tool_format: ToolFormat | None = None
    """How tool calls travel: native function calls, or ``<tool_call>`` text (``brief``: text,
    with each tool described in one line, for small models); None: the provider's default."""
    approval_mode: Mode = "default"
    """Which tool calls run without asking: default, auto-edit, plan or yolo."""
    max_turns: int = Field(default=100, gt=0)
    """Most model calls in one run; also read from ``maxSessionTurns``."""
    max_tokens: int | None = Field(default=None, gt=0)
    """Most tokens (prompt and completion) spent over one run (``maxRunTokens`` in a settings
    file; ``maxTokens`` is refused as ambiguous); None: no limit."""
    max_wall_sec: float | None = Field(default=None, gt=0)
    """Most seconds one run may take; None: no limit."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Most US dollars one run may cost, where the server reports cost; None: no limit."""
    compress_threshold: float = Field(default=0.8, gt=0, le=1)
    """Fraction of the context limit at which older turns are compressed, in (0, 1]."""
    keep_recent_turns: int = Field(default=4, ge=0)
    """Turns kept verbatim when older ones are compressed."""
    shell_timeout: float = Field(default=120.0, gt=0)
    """Seconds a shell command may run before it is killed."""
    tool_output_limit: int = Field(default=30000, gt=0)
    """Characters of one tool output the model sees; longer output keeps its head and tail."""
    prompt_profile: Literal["default", "compact"] = "default"
    """``compact``: a short system prompt and four tools described briefly (small models)."""
    loop_threshold: int = Field(default=3, ge=2)
    """Identical tool calls in a row before the agent is warned that it is looping."""
    sessions_dir: str | None = None
    """Where sessions are saved; None: ``<home>/.iflow/sessions``."""
    hooks: HooksConfig = Field(default_factory=dict)
    """Commands run on the agent's events, in Claude Code's shape (:mod:`iflow.hooks`); the
    layers add up: every file's hooks run."""
    mcp_servers: dict[str, McpServerConfig] = Field(default_factory=dict)
    """MCP servers whose tools the agent gets (``mcpServers``, in Gemini CLI's shape); the
    layers merge by server name, a later layer's entry replacing an earlier one's."""

    _sources: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def sources(self) -> dict[str, str]:
        """Where each value that is not a default came from: a file path, an environment
        variable (``IFLOW_MODEL``) or a flag (``--model``)."""
        return dict(self._sources)

    def source(self, name: str) -> str:
        """Where setting ``name`` came from, or ``"default"``."""
        return self._sources.get(name, "default")

    def require(self, name: str) -> Any:
        """The value of setting ``name``; a :class:`ConfigError` saying where to set it
        when it is not set."""
        if name not in type(self).model_fields:
            raise ValueError(f"{name!r} is not a setting; use one of {_names()}")
        value = getattr(self, name)
        if value is None:
            what = _WHAT.get(name, name.replace("_", " "))
            env = f"IFLOW_{name.upper()}"
            if name in _FALLBACK_ENV:
                env += f" (or {_FALLBACK_ENV[name]})"
            raise ConfigError(
                f'no {what} is set: set "{name}" in ~/.iflow/settings.json or '
                f".iflow/settings.json, {env}, or {_flag(name)}."
            )
        return value


def load_settings(
    *,
    cwd: Path,
    home: Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> Settings:
    """The settings for a run in ``cwd``, from every layer (see the module docstring).

    ``home`` defaults to the user's home directory and ``env`` to ``os.environ``;
    ``flags`` maps setting names to command-line values. Raises :class:`ConfigError`
    for an unreadable or invalid file, an unknown key, or an invalid value.
    """
    cwd = cwd.expanduser().resolve()
    home = (Path.home() if home is None else home).expanduser().resolve()
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def put(name: str, value: Any, source: str, base: Path) -> None:
        if name in _MERGED:
            value = _merged(name, values.get(name), value, source)
        values[name] = _resolve_path(name, value, base)
        sources[name] = source

    for name, var in _FALLBACK_ENV.items():
        if env.get(var):
            put(name, env[var], var, cwd)
    files = [home / ".iflow" / "settings.json", _project_file(cwd, home)]
    for path in files:
        if path is not None and path.is_file():
            for name, value in _read_file(path).items():
                put(name, value, str(path), path.parent.parent)
    for name in Settings.model_fields:
        var = f"IFLOW_{name.upper()}"
        if env.get(var):
            put(name, env[var], var, cwd)
    table = _key_table()
    for key, value in (flags or {}).items():
        if value is None:
            continue
        if key not in table:
            raise ConfigError(f"unknown flag setting {key!r}; use one of {_names()}.")
        put(table[key], value, _flag(table[key]), cwd)

    try:
        settings = Settings.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, values, sources)) from None
    settings._sources = sources
    return settings


# -- helpers ----------------------------------------------------------------------------------


def _names() -> str:
    return ", ".join(Settings.model_fields)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _key_table() -> dict[str, str]:
    """Every key a settings file may use, mapped to its setting's name."""
    table: dict[str, str] = {}
    for name in Settings.model_fields:
        for key in _validation_alias(name).choices:
            table[str(key)] = name
    return table


def _project_file(cwd: Path, home: Path) -> Path | None:
    """The nearest ``.iflow/settings.json`` from ``cwd`` up to the repository root, never
    at or above ``home`` (home's own file is the global one)."""
    for directory in (cwd, *cwd.parents):
        if directory == home:
            return None
        candidate = directory / ".iflow" / "settings.json"
        if candidate.is_file():
            return candidate
        if (directory / ".git").exists():
            return None
    return None


def _read_file(path: Path) -> dict[str, Any]:
    """The settings in one file, keyed by setting name."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; save it as UTF-8 JSON.") from None
    except OSError as exc:
        raise ConfigError(
            f"{path} cannot be read ({exc.strerror or exc}); check its permissions or move it away."
        ) from None
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}; "
            "fix the file or move it away."
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path} holds a JSON {type(data).__name__}, not an object; "
            'write the settings as {"key": value, ...}.'
        )
    table = _key_table()
    found: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for key, value in data.items():
        if key in _IGNORED_KEYS:
            continue
        if key in _AMBIGUOUS:
            raise ConfigError(f"{path}: '{key}' is ambiguous; {_AMBIGUOUS[key]}.")
        if key not in table:
            guess = difflib.get_close_matches(key, list(table), n=1)
            hint = f" (did you mean '{guess[0]}'?)" if guess else ""
            raise ConfigError(
                f"{path}: unknown setting '{key}'{hint}; remove it or use one of the known "
                f"settings: {_names()}."
            )
        name = table[key]
        if name in seen:
            raise ConfigError(
                f"{path}: setting '{name}' is given twice (as '{seen[name]}' and '{key}'); "
                "keep one of them."
            )
        seen[name] = key
        found[name] = value
    return found


def _merged(name: str, earlier: Any, value: Any, source: str) -> Any:
    """A mapping setting's layers together: MCP servers by name (the later wins), hooks all
    of them (every layer's run)."""
    if isinstance(value, str):
        value = _json_value(name, value, source)
    if not isinstance(earlier, dict) or not isinstance(value, dict):
        return value
    if name == "hooks":
        both = {**earlier, **value}
        return {event: [*earlier.get(event, []), *value.get(event, [])] for event in both}
    return {**earlier, **value}


def _json_value(name: str, value: str, source: str) -> Any:
    """A mapping setting given as text (a variable or a flag): JSON."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{source} is not valid JSON for setting '{name}' ({exc.msg} at column {exc.colno}); "
            'give a JSON object such as {"git": {"command": "mcp-server-git"}}.'
        ) from None


def _resolve_path(name: str, value: Any, base: Path) -> Any:
    if name not in _PATH_FIELDS or not isinstance(value, str) or not value:
        return value
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    candidate = base / path
    if name == "model_path" and not candidate.exists():
        return value  # not a local path (perhaps a model id); leave it as written
    return str(candidate)


def _explain(exc: ValidationError, values: dict[str, Any], sources: dict[str, str]) -> str:
    """One sentence for the first problem: where the value came from and what to do."""
    error = exc.errors(include_url=False)[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    msg = error["msg"]
    reason = msg[:1].lower() + msg[1:]
    source = sources.get(name, "the settings")
    shown = "" if name == "api_key" else f" {values.get(name)!r}"
    if name in _MERGED and len(error["loc"]) > 1:
        where = ".".join(str(p) for p in error["loc"][1:])
        reason = f"at {where}: {reason}"
        shown = ""
    if source.startswith("--"):
        return f"{source} has an invalid value{shown} ({reason}); pass a valid value."
    if os.sep in source or source.endswith(".json"):
        return (
            f"{source}: setting '{name}' has an invalid value{shown} ({reason}); "
            "fix it in that file."
        )
    if source != "the settings":
        return (
            f"environment variable {source} has an invalid value{shown} ({reason}); "
            "correct it or unset it."
        )
    return f"setting '{name}' is invalid ({reason}); fix it."
