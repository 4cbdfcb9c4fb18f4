"""service-config: change a setting in the config file a service's launcher really reads.

A fake service lives under /opt/<svc> or /srv/<svc>; its bash launcher reads exactly one of
several look-alike config files (the live one, a ``.bak``, an ``.example``, a staging copy...)
and which one is drawn per task. The instruction names the launcher and the setting but not
the file, so the task needs interaction: the expert reads the launcher (and, on hard drafts,
the environment file the launcher sources, which overrides the launcher's default path),
then edits the file it found and checks the result with the launcher's dry-run mode. Harder
drafts add a commented-out old path in the launcher, a commented duplicate of the key in the
active file, more decoy files and a second setting to change.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from ale.synth.expert import Observation, shell
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._sources import fill, phrase_table, phrases

_SERVICES = phrases("service_config", "services")
_LAUNCHERS = ["bin/start.sh", "bin/{svc}ctl", "run.sh", "bin/launch", "scripts/start-{svc}.sh"]
_CONF_VARS = ["CONFIG", "CONF_FILE", "CFG_PATH", "{SVC}_CONF", "SETTINGS_FILE"]
_ENV_FILES = ["/etc/default/{svc}", "/etc/sysconfig/{svc}", "{root}/launcher.env"]
_CANDIDATES = phrases("service_config", "candidates")
_HEADERS = {
    ".bak": "# backup copy taken before the last upgrade",
    ".example": "# example configuration: copy it and edit the copy",
    ".orig": "# configuration as shipped by the package",
    "staging": "# staging settings",
    "production": "# production settings",
}
_SETTINGS: dict[str, list[str]] = phrase_table("service_config", "settings")
_MEANING = {
    "port": "the port it listens on",
    "workers": "the number of worker processes",
    "log_level": "the log level",
    "data_dir": "the data directory",
    "max_connections": "the connection limit",
    "timeout": "the request timeout in seconds",
    "cache_mb": "the cache size in MB",
}
_LEVELS = ["debug", "info", "warning", "error"]
_FORMATS = {"ini": " = ", "env": "=", "colon": ": "}

_OPENERS = phrases("service_config", "openers")
_CLUTTER = phrases("service_config", "clutter")
_ASKS = phrases("service_config", "asks")
_NOTES = phrases("service_config", "notes")
_VERIFY = phrases("service_config", "verify")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _value(rng: random.Random, setting: str, svc: str) -> str:
    if setting == "port":
        return str(rng.randrange(1025, 65000))
    if setting == "workers":
        return str(rng.randint(1, 32))
    if setting == "log_level":
        return rng.choice(_LEVELS)
    if setting == "data_dir":
        return rng.choice(
            [f"/var/lib/{svc}", f"/srv/{svc}/data", f"/data/{svc}", f"/mnt/store/{svc}"]
        ) + rng.choice(["", "/main", "/v2", "/current"])
    if setting == "max_connections":
        return str(rng.randrange(50, 5000, 10))
    if setting == "timeout":
        return str(rng.randint(5, 300))
    return str(rng.choice([64, 128, 256, 512, 1024, 2048, 4096]))


def _line(fmt: str, key: str, value: str) -> str:
    if fmt == "env":
        key = key.upper()
        if not value.isdigit():
            value = f'"{value}"'
    return f"{key}{_FORMATS[fmt]}{value}"


def _render_config(
    fmt: str, header: str, keys: dict[str, str], values: dict[str, str], old: dict[str, str]
) -> str:
    lines = [header, ""]
    for setting, key in keys.items():
        if setting in old:
            lines.append("# " + _line(fmt, key, old[setting]) + "  (previous value)")
        lines.append(_line(fmt, key, values[setting]))
    lines.append(_line(fmt, "bind_address", "0.0.0.0"))
    return "\n".join(lines) + "\n"


def _launcher(svc: str, var: str, assign: str, env_file: str | None, old_path: str | None) -> str:
    source = f'[ -r "{env_file}" ] && . "{env_file}"\n' if env_file else ""
    old = f"# {var}={old_path}   # location before the 2.x migration\n" if old_path else ""
    body = f"""\
        #!/bin/bash
        # {svc} launcher: reads its settings and starts the daemon.
        set -eu

        {{source}}{{old}}{var}={assign}

        read_config() {{
            local line key val
            local re='^[[:space:]]*([A-Za-z_][A-Za-z0-9_]*)[[:space:]]*[=:][[:space:]]*(.*[^[:space:]])[[:space:]]*$'
            while IFS= read -r line || [ -n "$line" ]; do
                line="${{line%%#*}}"
                if [[ $line =~ $re ]]; then
                    key="${{BASH_REMATCH[1]}}"
                    val="${{BASH_REMATCH[2]}}"
                    val="${{val#\\"}}"
                    val="${{val%\\"}}"
                    printf '%s=%s\\n' "${{key,,}}" "$val"
                fi
            done < "${var}"
        }}

        case "${{1:-start}}" in
            --print-config|print-config)
                read_config
                ;;
            start)
                [ -r "${var}" ] || {{ echo "{svc}: cannot read config" >&2; exit 1; }}
                echo "{svc}: starting (dry run) with:"
                read_config | sed 's/^/  /'
                ;;
            *)
                echo "usage: $0 [start|--print-config]" >&2
                exit 2
                ;;
        esac
        """
    return textwrap.dedent(body).replace("{source}", source).replace("{old}", old)


def find_config(launcher: str, env_text: str = "") -> tuple[str | None, str | None]:
    """The config path a launcher reads and the environment file it sources (if any),
    using ``env_text`` (that file's content) to resolve a ``${VAR:-default}`` path."""
    code = [ln for ln in launcher.splitlines() if not ln.lstrip().startswith("#")]
    text = "\n".join(code)
    sourced = re.search(r'(?:^|&&\s*)(?:\.|source)\s+"?([^"\s]+)"?', text, re.M)
    used = re.search(r'done\s*<\s*"?\$\{?(\w+)\}?', text)
    if used is None:
        return None, sourced.group(1) if sourced else None
    assign = re.search(rf"^\s*{used.group(1)}=(.+)$", text, re.M)
    if assign is None:
        return None, sourced.group(1) if sourced else None
    value = assign.group(1).strip().strip("\"'")
    indirect = re.fullmatch(r"\$\{(\w+):-([^}]+)\}", value)
    if indirect is None:
        return value, sourced.group(1) if sourced else None
    env = re.search(rf'^\s*(?:export\s+)?{indirect.group(1)}="?([^"\s]+)"?', env_text, re.M)
    return (env.group(1) if env else indirect.group(2)), sourced.group(1) if sourced else None


@register
class ServiceConfig(Family):
    name = "service-config"
    category = "system-administration"
    description = "Change a setting in the one config file (of several) a service launcher reads."
    multi_turn = True

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        s = _draw_setup(rng, difficulty)
        files, new = _draw_configs(rng, s)
        env_file = _add_launcher(rng, s, files, difficulty)
        file_keys = {k: (s.keys[k].upper() if s.fmt == "env" else s.keys[k]) for k in s.targets}
        instruction = _instruction(rng, s, file_keys, new)
        sep = _FORMATS[s.fmt].strip()
        want = {file_keys[k]: new[k] for k in s.targets}
        printed = {s.keys[k].lower(): new[k] for k in s.targets}
        solution = "".join(
            f'sed -i -E \'s|^([[:space:]]*{k}[[:space:]]*{sep}[[:space:]]*"?)[^"]*'
            f"(\"?[[:space:]]*)$|\\1{v}\\2|' {s.active}\n"
            for k, v in want.items()
        )
        return TaskDraft(
            instruction=instruction,
            files=dict(files),
            modes={s.launcher: 0o755},
            tests=_tests_of(s, files, sep, want, printed),
            solution=solution,
            expert=_expert(s.launcher, sep, want, printed),
            params={
                "service": s.svc,
                "launcher": s.launcher,
                "format": s.fmt,
                "active": s.active,
                "decoys": s.decoys,
                "env_file": env_file,
                "changes": want,
            },
            mistakes=[
                shell(f"cat /etc/{s.svc}/config.yaml", "Let me look at the service's config."),
                shell(
                    f"grep -n {file_keys[s.targets[0]]} /etc/{s.svc}.conf", "Where is the key set?"
                ),
            ],
            tags=["config", "bash"],
        )


@dataclass(frozen=True)
class _Setup:
    """What a draft is made around: the service, its launcher and its config files."""

    svc: str
    root: str
    launcher: str
    var: str
    """The launcher's variable holding the config path."""
    fmt: str
    active: str
    """The config file the launcher reads."""
    decoys: list[str]
    settings: list[str]
    keys: dict[str, str]
    """The key each setting has in the files."""
    targets: list[str]
    """The settings to change."""
    comment_key: str | None
    """The setting the active file also holds as a commented-out old line (hard drafts)."""


def _draw_setup(rng: random.Random, difficulty: str) -> _Setup:
    svc = rng.choice(_SERVICES)
    root = f"{rng.choice(['/opt', '/srv'])}/{svc}"
    launcher = f"{root}/" + rng.choice(_LAUNCHERS).format(svc=svc)
    var = rng.choice(_CONF_VARS).format(SVC=svc.upper())
    fmt = rng.choice(sorted(_FORMATS))
    n_files = {"easy": 3, "medium": 4, "hard": rng.randint(5, 6)}[difficulty]
    paths = [p.format(svc=svc, root=root) for p in rng.sample(_CANDIDATES, n_files)]
    settings = rng.sample(sorted(_SETTINGS), k=rng.randint(4, 6))
    keys = {s: rng.choice(_SETTINGS[s]) for s in settings}
    n_targets = 2 if difficulty == "hard" else 1
    targets = rng.sample(settings, n_targets)
    return _Setup(
        svc=svc,
        root=root,
        launcher=launcher,
        var=var,
        fmt=fmt,
        active=paths[0],
        decoys=paths[1:],
        settings=settings,
        keys=keys,
        targets=targets,
        comment_key=targets[0] if difficulty == "hard" else None,
    )


def _draw_configs(rng: random.Random, s: _Setup) -> tuple[dict[str, str], dict[str, str]]:
    """The config files (path -> text) and the new value of each target setting."""
    files: dict[str, str] = {}
    active_values: dict[str, str] = {}
    for path in [s.active, *s.decoys]:
        values = {k: _value(rng, k, s.svc) for k in s.settings}
        tag = next((t for t in _HEADERS if t in path.rsplit("/", 1)[-1]), "")
        header = _HEADERS.get(tag, f"# {s.svc} settings")
        if path == s.active:
            active_values = values
        old = {}
        if path == s.active and s.comment_key is not None:
            old[s.comment_key] = _value(rng, s.comment_key, s.svc)
        files[path] = _render_config(s.fmt, header, s.keys, values, old)
    new: dict[str, str] = {}
    for k in s.targets:
        value = _value(rng, k, s.svc)
        while value == active_values[k]:
            value = _value(rng, k, s.svc)
        new[k] = value
    return files, new


def _add_launcher(
    rng: random.Random, s: _Setup, files: dict[str, str], difficulty: str
) -> str | None:
    """Put the launcher (and, in hard drafts, the environment file it sources, which names the
    active file) into ``files``; return the environment file's path."""
    env_file = None
    if difficulty == "hard":
        env_file = rng.choice(_ENV_FILES).format(svc=s.svc, root=s.root)
        env_var = f"{s.svc.upper()}_CONFIG"
        assign = f'"${{{env_var}:-{s.decoys[0]}}}"'
        files[env_file] = (
            f"# environment for the {s.svc} launcher\n{s.svc.upper()}_USER={s.svc}\n"
            f'{env_var}="{s.active}"\n{s.svc.upper()}_OPTS="--no-color"\n'
        )
    else:
        assign = f'"{s.active}"'
    old_path = s.decoys[-1] if difficulty != "easy" else None
    files[s.launcher] = _launcher(s.svc, s.var, assign, env_file, old_path)
    return env_file


def _instruction(
    rng: random.Random, s: _Setup, file_keys: dict[str, str], new: dict[str, str]
) -> str:
    changes = " and ".join(
        f"`{file_keys[k]}` ({_MEANING[k]}) to `{new[k]}`"
        if rng.random() < 0.5
        else f"`{file_keys[k]}` to `{new[k]}`"
        for k in s.targets
    )
    ask = rng.choice(_ASKS)
    if "so that" in ask:
        changes = " and ".join(f"`{file_keys[k]}` is `{new[k]}`" for k in s.targets)
    parts = [
        rng.choice(_OPENERS).format(svc=s.svc, launcher=s.launcher),
        rng.choice(_CLUTTER),
        ask.format(changes=changes),
        rng.choice(_NOTES),
        rng.choice(_VERIFY).format(launcher=s.launcher),
    ]
    return " ".join(p for p in parts if p)


def _tests_of(
    s: _Setup, files: dict[str, str], sep: str, want: dict[str, str], printed: dict[str, str]
) -> str:
    """The tests: the active file has the new values and its other lines as they were, the
    other files are untouched and the launcher prints the new values."""
    key_re = {key: rf"^\s*{re.escape(key)}\s*{sep}" for key in want}
    others = [
        ln
        for ln in files[s.active].splitlines()
        if not any(re.match(r, ln) for r in key_re.values())
    ]
    untouched = {p: _sha(files[p]) for p in sorted(files) if p != s.active}
    return _tests(s.active, sep, want, others, untouched, s.launcher, printed)


def _expert(
    launcher: str, sep: str, want: dict[str, str], printed: dict[str, str]
) -> Callable[[], ExpertProgram]:
    """Read the launcher (and what it sources), edit the file it reads, check with the
    launcher's dry run."""

    def expert() -> ExpertProgram:
        seen: Observation = yield shell(
            f"cat {launcher}", "First I read the launcher to see which config it loads."
        )
        path, sourced = find_config(seen.output)
        if sourced:
            env: Observation = yield shell(
                f"cat {sourced}",
                f"The launcher sources {sourced} before choosing its config path; "
                "that file may override the default.",
            )
            path, _ = find_config(seen.output, env.output)
        if path is None:
            return "I could not tell which config file the launcher reads."
        conf: Observation = yield shell(
            f"grep -n '' {path}", f"The launcher reads {path}. Let me look at it."
        )
        edits, notes = [], []
        for key, value in want.items():
            m = re.search(rf"^\d+:\s*{re.escape(key)}\s*{sep}\s*(.*)$", conf.output, re.M)
            current = m.group(1).strip() if m else "?"
            edits.append(
                f'sed -i -E \'s|^([[:space:]]*{key}[[:space:]]*{sep}[[:space:]]*"?)[^"]*'
                f"(\"?[[:space:]]*)$|\\1{value}\\2|' {path}"
            )
            edits.append(f"grep -nE '^[[:space:]]*{key}[[:space:]]*{sep}' {path}")
            notes.append(f"`{key}` is currently {current}")
        note = "; ".join(notes) + ". I change only the uncommented line(s)."
        yield shell(" && ".join(edits), note[0].upper() + note[1:])
        check: Observation = yield shell(
            f"{launcher} --print-config 2>&1", "Now I check what the launcher would use."
        )
        good = all(f"{k.lower()}={v}" in check.output for k, v in printed.items())
        if not good:
            return "The launcher does not show the new value yet; see the output above."
        done = ", ".join(f"{k}={v}" for k, v in want.items())
        return f"Set {done} in {path}, the file {launcher} reads; the other copies are untouched."

    return expert


def _tests(
    active: str,
    sep: str,
    want: dict[str, str],
    others: list[str],
    untouched: dict[str, str],
    launcher: str,
    printed: dict[str, str],
) -> str:
    return fill(
        "service_config",
        "test_outputs",
        active=active,
        sep=sep,
        want=json.dumps(want),
        others=json.dumps(others),
        untouched=json.dumps(untouched),
        launcher=launcher,
        printed=json.dumps(printed),
    )
