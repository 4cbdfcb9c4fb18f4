"""Settings: layers, aliases, sources and the sentences users see."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from iflow.errors import ConfigError
from iflow.settings import Settings, load_settings


def write(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_defaults_without_any_layer(home: Path, repo: Path) -> None:
    settings = load_settings(cwd=repo, home=home, env={})
    assert settings == Settings()
    assert settings.provider == "openai"
    assert settings.max_turns == 100
    assert settings.approval_mode == "default"
    assert settings.sources == {}
    assert settings.source("model") == "default"


def test_layers_home_project_env_flags(home: Path, repo: Path) -> None:
    home_file = write(
        home / ".iflow" / "settings.json",
        {"model": "home-model", "max_turns": 10, "temperature": 0.1, "shell_timeout": 5},
    )
    project_file = write(
        repo / ".iflow" / "settings.json", {"model": "project-model", "max_turns": 20}
    )
    env = {"IFLOW_MAX_TURNS": "30", "IFLOW_TEMPERATURE": "0.5"}
    flags = {"max_turns": 40, "model": None}

    settings = load_settings(cwd=repo, home=home, env=env, flags=flags)

    assert settings.model == "project-model"
    assert settings.max_turns == 40
    assert settings.temperature == 0.5
    assert settings.shell_timeout == 5
    assert settings.sources == {
        "model": str(project_file),
        "max_turns": "--max-turns",
        "temperature": "IFLOW_TEMPERATURE",
        "shell_timeout": str(home_file),
    }


def test_project_file_found_from_a_subdirectory(home: Path, repo: Path) -> None:
    project_file = write(repo / ".iflow" / "settings.json", {"model": "m"})
    deep = repo / "src" / "pkg"
    deep.mkdir(parents=True)
    settings = load_settings(cwd=deep, home=home, env={})
    assert settings.model == "m"
    assert settings.source("model") == str(project_file)


def test_nearest_project_file_wins(home: Path, repo: Path) -> None:
    write(repo / ".iflow" / "settings.json", {"model": "outer"})
    inner = write(repo / "sub" / ".iflow" / "settings.json", {"max_turns": 7})
    settings = load_settings(cwd=repo / "sub", home=home, env={})
    assert settings.model is None  # only the nearest project file is read
    assert settings.max_turns == 7
    assert settings.source("max_turns") == str(inner)


def test_project_file_not_looked_for_above_the_git_root(home: Path, repo: Path) -> None:
    write(repo.parent / ".iflow" / "settings.json", {"model": "above-the-repo"})
    settings = load_settings(cwd=repo, home=home, env={})
    assert settings.model is None


def test_project_file_not_looked_for_at_or_above_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write(tmp_path / ".iflow" / "settings.json", {"model": "above-home"})
    write(home / ".iflow" / "settings.json", {"max_turns": 9})
    cwd = home / "notes"
    cwd.mkdir(parents=True)
    settings = load_settings(cwd=cwd, home=home, env={})
    assert settings.model is None
    assert settings.max_turns == 9
    assert settings.source("max_turns") == str(home / ".iflow" / "settings.json")


def test_camel_case_aliases(home: Path, repo: Path) -> None:
    write(
        home / ".iflow" / "settings.json",
        {
            "baseUrl": "http://localhost:8000/v1",
            "apiKey": "sk-from-file",
            "modelName": "Qwen3-Coder",
            "approvalMode": "auto-edit",
            "maxSessionTurns": 12,
            "compressThreshold": 0.5,
            "theme": "Default",
            "selectedAuthType": "openai-compatible",
        },
    )
    settings = load_settings(cwd=repo, home=home, env={})
    assert settings.base_url == "http://localhost:8000/v1"
    assert settings.api_key is not None
    assert settings.api_key.get_secret_value() == "sk-from-file"
    assert settings.model == "Qwen3-Coder"
    assert settings.approval_mode == "auto-edit"
    assert settings.max_turns == 12
    assert settings.compress_threshold == 0.5


def test_same_setting_twice_in_one_file(home: Path, repo: Path) -> None:
    path = write(home / ".iflow" / "settings.json", {"model": "a", "modelName": "b"})
    with pytest.raises(ConfigError, match="given twice") as info:
        load_settings(cwd=repo, home=home, env={})
    assert str(path) in str(info.value)


def test_unknown_key_names_the_file_and_suggests(home: Path, repo: Path) -> None:
    path = write(repo / ".iflow" / "settings.json", {"modle": "x"})
    with pytest.raises(ConfigError) as info:
        load_settings(cwd=repo, home=home, env={})
    message = str(info.value)
    assert message.startswith(f"{path}: unknown setting 'modle'")
    assert "did you mean 'model'?" in message
    assert "max_turns" in message  # the known settings are listed


def test_invalid_json_names_file_line_and_column(home: Path, repo: Path) -> None:
    path = write(home / ".iflow" / "settings.json", '{\n  "model": "m",\n  "max_turns": ,\n}\n')
    with pytest.raises(ConfigError) as info:
        load_settings(cwd=repo, home=home, env={})
    message = str(info.value)
    assert str(path) in message
    assert "line 3, column 16" in message


def test_settings_file_must_hold_an_object(home: Path, repo: Path) -> None:
    write(home / ".iflow" / "settings.json", "[1, 2]")
    with pytest.raises(ConfigError, match="not an object"):
        load_settings(cwd=repo, home=home, env={})


def test_empty_settings_file_is_no_settings(home: Path, repo: Path) -> None:
    write(home / ".iflow" / "settings.json", "\n")
    assert load_settings(cwd=repo, home=home, env={}) == Settings()


def test_invalid_value_in_a_file_names_the_file(home: Path, repo: Path) -> None:
    path = write(home / ".iflow" / "settings.json", {"approvalMode": "sometimes"})
    with pytest.raises(ConfigError) as info:
        load_settings(cwd=repo, home=home, env={})
    message = str(info.value)
    assert message.startswith(f"{path}: setting 'approval_mode' has an invalid value 'sometimes'")


def test_invalid_env_value_names_the_variable(home: Path, repo: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(cwd=repo, home=home, env={"IFLOW_MAX_TURNS": "lots"})
    message = str(info.value)
    assert message.startswith("environment variable IFLOW_MAX_TURNS has an invalid value 'lots'")
    assert message.endswith("correct it or unset it.")


def test_out_of_range_value_is_an_error(home: Path, repo: Path) -> None:
    with pytest.raises(ConfigError, match="IFLOW_COMPRESS_THRESHOLD"):
        load_settings(cwd=repo, home=home, env={"IFLOW_COMPRESS_THRESHOLD": "1.5"})


def test_invalid_flag_value_names_the_flag(home: Path, repo: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--provider has an invalid value 'cloud'"):
        load_settings(cwd=repo, home=home, env={}, flags={"provider": "cloud"})


def test_env_values_are_converted_and_empty_ones_ignored(home: Path, repo: Path) -> None:
    env = {
        "IFLOW_PROVIDER": "scripted",
        "IFLOW_MAX_WALL_SEC": "2.5",
        "IFLOW_CONTEXT_LIMIT": "32768",
        "IFLOW_MODEL": "",
    }
    settings = load_settings(cwd=repo, home=home, env=env)
    assert settings.provider == "scripted"
    assert settings.max_wall_sec == 2.5
    assert settings.context_limit == 32768
    assert settings.model is None


def test_openai_variables_are_only_a_fallback(home: Path, repo: Path) -> None:
    env = {"OPENAI_API_KEY": "sk-openai", "OPENAI_BASE_URL": "http://openai.example/v1"}
    settings = load_settings(cwd=repo, home=home, env=env)
    assert settings.api_key is not None
    assert settings.api_key.get_secret_value() == "sk-openai"
    assert settings.sources == {"api_key": "OPENAI_API_KEY", "base_url": "OPENAI_BASE_URL"}

    write(home / ".iflow" / "settings.json", {"baseUrl": "http://iflow.example/v1"})
    env["IFLOW_API_KEY"] = "sk-iflow"
    settings = load_settings(cwd=repo, home=home, env=env)
    assert settings.api_key is not None
    assert settings.api_key.get_secret_value() == "sk-iflow"
    assert settings.base_url == "http://iflow.example/v1"
    assert settings.source("api_key") == "IFLOW_API_KEY"


def test_api_key_is_never_printed(home: Path, repo: Path) -> None:
    settings = load_settings(cwd=repo, home=home, env={"IFLOW_API_KEY": "sk-very-secret"})
    assert "sk-very-secret" not in repr(settings)
    assert "sk-very-secret" not in str(settings)
    assert "sk-very-secret" not in settings.model_dump_json()


def test_invalid_api_key_value_is_not_echoed(home: Path, repo: Path) -> None:
    write(home / ".iflow" / "settings.json", {"apiKey": 12345678})
    with pytest.raises(ConfigError) as info:
        load_settings(cwd=repo, home=home, env={})
    assert "12345678" not in str(info.value)
    assert "'api_key'" in str(info.value)


def test_require_says_where_to_set_it(home: Path, repo: Path) -> None:
    settings = load_settings(cwd=repo, home=home, env={})
    with pytest.raises(ConfigError) as info:
        settings.require("model")
    assert str(info.value) == (
        'no model name is set: set "model" in ~/.iflow/settings.json or .iflow/settings.json, '
        "IFLOW_MODEL, or --model."
    )
    with pytest.raises(ConfigError, match=r"IFLOW_API_KEY \(or OPENAI_API_KEY\), or --api-key\."):
        settings.require("api_key")
    assert settings.require("max_turns") == 100


def test_relative_paths_follow_their_layer(home: Path, repo: Path) -> None:
    write(repo / ".iflow" / "settings.json", {"script": "responses.json", "model_path": "hub/id"})
    sub = repo / "sub"
    sub.mkdir()
    settings = load_settings(cwd=sub, home=home, env={"IFLOW_SESSIONS_DIR": "~/s"})
    assert settings.script == str(repo / "responses.json")
    assert settings.model_path == "hub/id"  # no such local path: kept as written
    assert settings.sessions_dir == str(Path("~/s").expanduser())


def test_unknown_flag_is_an_error(home: Path, repo: Path) -> None:
    with pytest.raises(ConfigError, match="unknown flag setting 'colour'"):
        load_settings(cwd=repo, home=home, env={}, flags={"colour": "red"})


def test_settings_model_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="modle"):
        Settings.model_validate({"modle": "x"})


def test_max_tokens_is_ambiguous_and_a_null_output_cap_sends_none(tmp_path: Path) -> None:
    """``maxTokens`` could mean one answer or a whole run: refused, naming both; the run's
    budget is ``maxRunTokens``; ``"maxOutputTokens": null`` sends no cap to the server."""
    from iflow.runner import model_from

    home, cwd = tmp_path / "home", tmp_path / "work"
    (home / ".iflow").mkdir(parents=True)
    cwd.mkdir()
    settings_file = home / ".iflow" / "settings.json"
    settings_file.write_text('{"maxTokens": 4096}')
    with pytest.raises(ConfigError, match="'maxTokens' is ambiguous; write 'maxOutputTokens'"):
        load_settings(cwd=cwd, home=home, env={})
    settings_file.write_text('{"maxRunTokens": 50000}')
    assert load_settings(cwd=cwd, home=home, env={}).max_tokens == 50000
    base = '"provider": "openai", "model": "o4-mini", "baseUrl": "http://127.0.0.1:9/v1"'
    settings_file.write_text("{" + base + ', "maxOutputTokens": null}')
    assert model_from(load_settings(cwd=cwd, home=home, env={})).max_tokens is None  # type: ignore[attr-defined]
    settings_file.write_text("{" + base + "}")
    assert model_from(load_settings(cwd=cwd, home=home, env={})).max_tokens == 8192  # type: ignore[attr-defined]
