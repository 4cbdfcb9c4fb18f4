"""``iflow -p`` as users run it: a real subprocess, a scripted model, a real workspace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ale.atif import read_atif
from ale.jsonl import read_jsonl
from ale.trajectory import Trajectory
from iflow.sessions import SessionStore


def script(path: Path, responses: list) -> Path:
    path.write_text(json.dumps(responses))
    return path


def shell(command: str) -> dict:
    return {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": command}}]}


def finish(summary: str) -> dict:
    return {"tool_calls": [{"name": "finish", "arguments": {"summary": summary}}]}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("IFLOW_", "OPENAI_"))}
    return {**keep, "HOME": str(home)}


def iflow(args: list[str], env: dict[str, str], cwd: Path, stdin: str | None = None):
    return subprocess.run(
        [sys.executable, "-m", "iflow.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,  # (iflow reads a piped stdin)
    )


@pytest.fixture
def work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


def test_text_output_and_exit_code(tmp_path: Path, env, work: Path) -> None:
    s = script(tmp_path / "s.json", [shell("echo made > out.txt"), finish("made out.txt")])
    r = iflow(
        ["-p", "make a file", "--provider", "scripted", "--script", str(s), "--yolo"], env, work
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "made out.txt"
    assert (work / "out.txt").read_text() == "made\n"
    assert "· $ echo made > out.txt" in r.stderr  # progress goes to stderr


def test_json_output(tmp_path: Path, env, work: Path) -> None:
    s = script(tmp_path / "s.json", [shell("echo hi"), finish("ok")])
    r = iflow(
        ["-p", "go", "--provider", "scripted", "--script", str(s), "-y", "-o", "json"], env, work
    )
    assert r.returncode == 0, r.stderr
    record = json.loads(r.stdout)
    assert record["outcome"] == "finished" and record["result"] == "ok"
    assert record["turns"] == 2 and record["session_id"]
    assert record["usage"]["context_limit"] > 0


def test_stream_json_output(tmp_path: Path, env, work: Path) -> None:
    s = script(tmp_path / "s.json", [shell("echo hi"), finish("ok")])
    r = iflow(
        [
            "-p",
            "go",
            "--provider",
            "scripted",
            "--script",
            str(s),
            "-y",
            "--output-format",
            "stream-json",
        ],
        env,
        work,
    )
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    types = [line["type"] for line in lines]
    assert types[0] == "run_started" and types[-1] == "result"
    assert "tool_started" in types and "tool_finished" in types and "run_ended" in types
    shell_done = next(line for line in lines if line["type"] == "tool_finished")
    assert shell_done["metadata"]["exit_code"] == 0


def test_exit_code_is_nonzero_unless_finished(tmp_path: Path, env, work: Path) -> None:
    s = script(tmp_path / "s.json", [shell(f"echo {i}") for i in range(5)])
    r = iflow(
        [
            "-p",
            "go",
            "--provider",
            "scripted",
            "--script",
            str(s),
            "-y",
            "--max-turns",
            "2",
            "-o",
            "json",
        ],
        env,
        work,
    )
    assert r.returncode == 1
    assert json.loads(r.stdout)["outcome"] == "limits_exceeded"


def test_headless_refuses_to_ask(tmp_path: Path, env, work: Path) -> None:
    s = script(tmp_path / "s.json", [shell("touch nope"), finish("could not")])
    r = iflow(["-p", "go", "--provider", "scripted", "--script", str(s), "-o", "json"], env, work)
    assert r.returncode == 3  # finished, but with a call denied: the work may not be done
    record = json.loads(r.stdout)
    assert record["denied"] == ["run_shell_command"] and "were denied" in record["message"]
    assert not (work / "nope").exists()
    store = SessionStore(Path(env["HOME"]) / ".iflow" / "sessions")
    data, _ = store.latest()
    denied = data.trajectory.steps[3].tool_results[0]
    assert denied.is_error and "--yolo" in denied.content


def test_trajectory_and_atif_files(tmp_path: Path, env, work: Path) -> None:
    s = script(tmp_path / "s.json", [shell("echo hi"), finish("ok")])
    r = iflow(
        [
            "-p",
            "go",
            "--provider",
            "scripted",
            "--script",
            str(s),
            "-y",
            "--trajectory",
            str(tmp_path / "t.jsonl"),
            "--atif",
            str(tmp_path / "t.json"),
        ],
        env,
        work,
    )
    assert r.returncode == 0, r.stderr
    [traj] = list(read_jsonl(tmp_path / "t.jsonl", Trajectory))
    assert traj.agent.name == "iflow" and len(traj.steps) == 6
    assert read_atif(tmp_path / "t.json").steps == traj.steps


def test_resume_continues_a_session(tmp_path: Path, env, work: Path) -> None:
    s1 = script(tmp_path / "a.json", [finish("first")])
    r = iflow(["-p", "one", "--provider", "scripted", "--script", str(s1), "-o", "json"], env, work)
    sid = json.loads(r.stdout)["session_id"]
    s2 = script(tmp_path / "b.json", [finish("second")])
    r = iflow(
        [
            "-p",
            "two",
            "--provider",
            "scripted",
            "--script",
            str(s2),
            "-o",
            "json",
            "--resume",
            sid[:12],
        ],
        env,
        work,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["session_id"] == sid
    data = SessionStore(Path(env["HOME"]) / ".iflow" / "sessions").load(sid)
    users = [s.content for s in data.history if s.role.value == "user"]
    assert users == ["one", "two"]
    listing = iflow(["--list-sessions"], env, work)
    assert sid in listing.stdout and "one" in listing.stdout


def test_corrupt_session_is_a_clear_error(tmp_path: Path, env, work: Path) -> None:
    s = script(tmp_path / "a.json", [finish("first")])
    r = iflow(["-p", "one", "--provider", "scripted", "--script", str(s), "-o", "json"], env, work)
    good = json.loads(r.stdout)["session_id"]
    sessions = Path(env["HOME"]) / ".iflow" / "sessions"
    (sessions / "20990101-000000-abcdef.json").write_text("{not json")
    r = iflow(
        [
            "-p",
            "x",
            "--provider",
            "scripted",
            "--script",
            str(s),
            "--resume",
            "20990101-000000-abcdef",
        ],
        env,
        work,
    )
    assert r.returncode != 0
    assert "20990101-000000-abcdef" in r.stderr and "Traceback" not in r.stderr
    r = iflow(
        ["-p", "two", "--provider", "scripted", "--script", str(s), "-o", "json", "--resume", good],
        env,
        work,
    )
    assert r.returncode == 0 and json.loads(r.stdout)["session_id"] == good
    listing = iflow(["--list-sessions"], env, work)
    assert good in listing.stdout and "20990101-000000-abcdef" in listing.stderr


def test_missing_model_setting_is_one_sentence(env, work: Path) -> None:
    r = iflow(["-p", "go"], env, work)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "IFLOW_MODEL" in r.stderr and "settings.json" in r.stderr


def test_prompt_from_stdin(tmp_path: Path, env, work: Path) -> None:
    s = script(tmp_path / "s.json", [finish("from stdin")])
    r = iflow(["--provider", "scripted", "--script", str(s)], env, work, stdin="do it\n")
    assert r.returncode == 0 and r.stdout.strip() == "from stdin"


def test_piped_input_joins_a_p_prompt_and_a_long_one_is_cut_with_a_note(
    tmp_path: Path, env, work: Path
) -> None:
    """``cat log | iflow -p "summarize"``: the model gets the prompt, then the log (Claude
    Code's and Gemini CLI's habit); past the cap, the head of it and one line on stderr."""

    def first_request(stdin: str) -> tuple[str, str]:
        s = script(tmp_path / "s.json", [finish("ok")])
        out = tmp_path / f"t{len(stdin)}.jsonl"
        args = ["-p", "summarize", "--provider", "scripted", "--script", str(s)]
        args += ["--context-limit", "300000"]  # (room for the whole capped input)
        r = iflow([*args, "--trajectory", str(out)], env, work, stdin=stdin)
        assert r.returncode == 0, r.stderr
        [traj] = list(read_jsonl(out, Trajectory))
        user = next(step.content for step in traj.steps if step.role.value == "user")
        return str(user), r.stderr

    prompt, errors = first_request("ERROR disk full\nWARN slow\n")
    assert prompt == "summarize\n\nERROR disk full\nWARN slow" and "cut" not in errors
    prompt, errors = first_request("x" * 250_000)
    assert prompt == "summarize\n\n" + "x" * 200_000
    assert "iflow: the piped input was cut to its first 200000 characters.\n" in errors


def test_sessions_belong_to_the_directory_they_started_in(tmp_path: Path, env) -> None:
    """The issue's reproduction: after a session in proj2, ``--resume`` in proj finds no
    session of proj and says which one there is (it does not run in proj2's); the lists
    show this directory's (``--all``: every one's, with its directory); an id given resumes
    that session wherever; in proj2 ``--resume`` goes on with its own."""
    proj, proj2 = tmp_path / "proj", tmp_path / "proj2"
    proj.mkdir(), proj2.mkdir()
    s = script(tmp_path / "s.json", [shell("pwd"), finish("done")])
    scripted = ["--provider", "scripted", "--script", str(s), "-y"]
    assert iflow(["-p", "first", *scripted], env, proj2).returncode == 0
    [summary] = SessionStore(tmp_path / "home" / ".iflow" / "sessions").list()[0]
    refused = iflow(["--resume", "-p", "where am I", *scripted], env, proj)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"there is no saved session of {proj}" in refused.stderr
    assert f"iflow --resume {summary.id}" in refused.stderr
    mine = iflow(["--list-sessions"], env, proj)
    assert "No saved sessions" in mine.stdout and "--all" in mine.stdout
    every = iflow(["--list-sessions", "--all"], env, proj)
    assert summary.id in every.stdout and str(proj2) in every.stdout
    assert iflow(["--resume", summary.id, "-p", "go on", *scripted], env, proj).returncode == 0
    assert iflow(["--resume", "-p", "again", *scripted], env, proj2).returncode == 0


def test_an_at_path_in_a_p_prompt_puts_the_file_in_the_turn(
    tmp_path: Path, env, work: Path
) -> None:
    (work / "app.py").write_text("def add(a, b):\n    return a - b\n")
    s = script(tmp_path / "s.json", [finish("it subtracts")])
    out = tmp_path / "t.jsonl"
    args = ["-p", "why is @app.py wrong?", "--provider", "scripted", "--script", str(s)]
    r = iflow([*args, "--trajectory", str(out)], env, work)
    assert r.returncode == 0, r.stderr
    [traj] = list(read_jsonl(out, Trajectory))
    user = str(next(step.content for step in traj.steps if step.role.value == "user"))
    assert user.startswith("why is @app.py wrong?\n\n") and "return a - b" in user


def test_the_trace_shows_every_call_refused_and_plan_mode_exits_as_denied(
    tmp_path: Path, env, work: Path
) -> None:
    """An unknown tool, arguments that are not the tool's and a call that is not JSON each
    get a line in the text trace; plan mode refusing a change is a denial (exit 3), as the
    other modes' denials are."""
    calls = [
        {"tool_calls": [{"name": "launch_rockets", "arguments": {"count": 3}}]},
        {"tool_calls": [{"name": "read_file", "arguments": {"nonsense": True}}]},
        "<tool_call>{not json</tool_call>",
        finish("tried"),
    ]
    s = script(tmp_path / "s.json", calls)
    r = iflow(["-p", "go", "--provider", "scripted", "--script", str(s), "-y"], env, work)
    lines = [x for x in r.stderr.splitlines() if x.startswith("✗")]
    assert len(lines) == 3, r.stderr
    assert "launch_rockets" in lines[0] and "read_file" in lines[1]
    write = {"tool_calls": [{"name": "write_file", "arguments": {"path": "a", "content": "b"}}]}
    s = script(tmp_path / "p.json", [write, finish("planned")])
    args = ["-p", "go", "--provider", "scripted", "--script", str(s), "--approval-mode", "plan"]
    planned = iflow(args, env, work)
    assert planned.returncode == 3 and not (work / "a").exists()
    assert "✗ denied: write_file is not available in plan mode" in planned.stderr


def test_settings_files_are_used(tmp_path: Path, env, work: Path) -> None:
    s = script(tmp_path / "s.json", [shell("echo hi"), finish("ok")])
    (work / ".iflow").mkdir()
    (work / ".iflow" / "settings.json").write_text(
        json.dumps({"provider": "scripted", "script": str(s), "approvalMode": "yolo"})
    )
    r = iflow(["-p", "go", "-o", "json"], env, work)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["result"] == "ok"


def test_text_mode_shows_each_denial_and_exits_non_zero(tmp_path: Path, env, work: Path) -> None:
    (work / "calc.py").write_text("print(1 + 1)\n")
    write = {
        "tool_calls": [
            {"name": "write_file", "arguments": {"path": "calc.py", "content": "print(2)\n"}}
        ]
    }
    s = script(tmp_path / "s.json", [write, finish("Fixed")])
    r = iflow(["-p", "fix calc.py", "--provider", "scripted", "--script", str(s)], env, work)
    assert r.returncode == 3
    assert r.stdout.splitlines() == [  # the model's claim, marked as not applied
        "Fixed",
        "[not applied: the denied call(s) to write_file did not run]",
    ]
    assert "✗ denied: write_file needs approval in default mode" in r.stderr
    assert "--approval-mode auto-edit or --yolo allows it" in r.stderr
    assert "1 tool call(s) were denied (write_file)" in r.stderr and "Traceback" not in r.stderr
    assert (work / "calc.py").read_text() == "print(1 + 1)\n"
    shell_call = {"tool_calls": [{"name": "run_shell_command", "arguments": {"command": "ls"}}]}
    s = script(tmp_path / "t.json", [shell_call, finish("Listed")])
    args = ["-p", "list", "--provider", "scripted", "--script", str(s)]
    auto = iflow([*args, "--approval-mode", "auto-edit"], env, work)
    assert "needs approval in auto-edit mode" in auto.stderr  # the mode that decided
    assert "(--yolo allows it)" in auto.stderr and "auto-edit or --yolo" not in auto.stderr


def test_without_a_terminal_and_without_a_prompt_it_says_to_use_p(
    tmp_path: Path, env, work: Path
) -> None:
    s = script(tmp_path / "s.json", [finish("a session to resume")])
    assert (
        iflow(["-p", "go", "--provider", "scripted", "--script", str(s)], env, work).returncode == 0
    )
    for args in ([], ["--resume"]):
        r = subprocess.run(
            [sys.executable, "-m", "iflow.cli", "--provider", "scripted", *args],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert r.returncode == 2, r.stderr
        assert "needs a terminal" in r.stderr and '-p "PROMPT"' in r.stderr
        assert "\x1b[" not in r.stderr + r.stdout  # no TUI drawn
        assert len(r.stderr.strip().splitlines()) == 1


def test_a_trajectory_path_in_a_missing_directory_is_refused_before_the_run(
    tmp_path: Path, env, work: Path
) -> None:
    s = script(tmp_path / "s.json", [shell("touch ran"), finish("ok")])
    missing = tmp_path / "nonexist" / "dir" / "t.jsonl"
    for flag in ("--trajectory", "--atif"):
        r = iflow(
            ["-p", "go", "--provider", "scripted", "--script", str(s), "-y", flag, str(missing)],
            env,
            work,
        )
        assert r.returncode == 1 and "does not exist; create it" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    assert not (tmp_path / "nonexist").exists() and not (work / "ran").exists()


def test_a_trajectory_that_cannot_be_written_is_saved_elsewhere_and_said(
    tmp_path: Path, env, work: Path
) -> None:
    s = script(tmp_path / "s.json", [shell("echo hi"), finish("ok")])
    r = iflow(
        [
            "-p",
            "go",
            "--provider",
            "scripted",
            "--script",
            str(s),
            "-y",
            "--trajectory",
            "/proc/t.jsonl",
        ],
        env,
        work,
    )
    assert r.returncode == 0, r.stderr
    saved = Path(env["HOME"]) / ".iflow" / "trajectories" / "t.jsonl"
    assert f"it was saved to {saved} instead" in r.stderr and "Traceback" not in r.stderr
    assert next(iter(read_jsonl(saved, Trajectory))).steps
