"""The TUI through Textual's pilot: sessions saved, resumed and exported, the agent built
from settings, models switched, and edits and approvals shown (see test_tui.py)."""

from __future__ import annotations

import json
from pathlib import Path

from textual.widgets import Button, Static
from tui_pilot import blocks, ends, notices, panels, run_prompt, send, shell, texts, tui, wait_for

from ale.atif import read_atif
from ale.jsonl import read_jsonl
from iflow.sessions import SessionStore
from iflow.settings import Settings
from iflow.tui.app import IflowApp
from iflow.tui.widgets import UserMessage
from iflow.workspace.local import LocalWorkspace


async def test_session_is_saved_and_resume_rerenders_it(tmp_path: Path) -> None:
    responses = [shell("echo saved-output", "Checking."), "Finished the check."]
    async with tui(tmp_path, responses, mode="yolo") as (app, pilot):
        await run_prompt(pilot, "check something")
        assert app.recorder is not None and app.recorder.saves > 0
        session_id = app.recorder.data.id
    assert (tmp_path / "sessions" / f"{session_id}.json").is_file()

    async with tui(tmp_path, []) as (app, pilot):
        await send(pilot, "/resume")
        listing = blocks(app, "info-block")[-1]
        assert session_id in listing and "check something" in listing
        await send(pilot, f"/resume {session_id[:17]}")
        await wait_for(pilot, lambda: app.query(UserMessage))
        assert [str(u.content) for u in app.query(UserMessage)] == ["› check something"]
        (panel,) = panels(app)
        assert "saved-output" in panel.output and panel.exit_code == 0
        assert texts(app) == ["Checking.", "Finished the check."]
        assert "turn 1 · 2 model calls" in app.status_bar.plain  # (as /rewind counts turns)
        assert app.recorder is not None and app.recorder.data.id == session_id
        await send(pilot, "/resume nosuchsession")
        assert "no saved session matches" in notices(app)[-1]


async def test_resume_of_another_directory_s_session_says_which_and_asks(tmp_path: Path) -> None:
    """/resume lists this directory's sessions; a session of another directory is not
    resumed until asked again with ``!``."""
    async with tui(tmp_path, ["Done there."], mode="yolo", folder="proj2") as (app, pilot):
        await run_prompt(pilot, "work in proj2")
        assert app.recorder is not None
        session_id = app.recorder.data.id
    async with tui(tmp_path, [], folder="proj") as (app, pilot):
        await send(pilot, "/resume")
        assert session_id not in "\n".join(blocks(app, "info-block"))
        await send(pilot, f"/resume {session_id}")
        assert notices(app)[-1].startswith(f"Session {session_id} belongs to {tmp_path / 'proj2'}")
        assert not app.query(UserMessage)
        await send(pilot, f"/resume {session_id}!")
        await wait_for(pilot, lambda: app.query(UserMessage))
        assert [str(u.content) for u in app.query(UserMessage)] == ["› work in proj2"]


async def test_save_writes_ale_jsonl_by_default_and_atif_by_suffix(tmp_path: Path) -> None:
    async with tui(tmp_path, ["Hello."]) as (app, pilot):
        await run_prompt(pilot, "hi")
        await send(pilot, "/save")
        await wait_for(pilot, lambda: any("saved to" in n for n in notices(app)))
        assert app.recorder is not None
        saved = tmp_path / "sessions" / f"{app.recorder.data.id}.jsonl"
        (trajectory,) = list(read_jsonl(saved))
        assert [s.role.value for s in trajectory.steps] == ["system", "user", "assistant"]
        await send(pilot, "/save out/run.atif.json")
        await wait_for(pilot, lambda: any("ATIF" in n for n in notices(app)))
        atif = tmp_path / "ws" / "out" / "run.atif.json"
        assert json.loads(atif.read_text())
        assert read_atif(atif).steps[-1].content == "Hello."


async def test_app_builds_its_agent_from_settings_after_the_first_frame(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["Built from settings."]))
    settings = Settings(provider="scripted", script=str(script))
    store = SessionStore(tmp_path / "sessions")
    async with LocalWorkspace(root) as workspace:
        app = IflowApp(settings=settings, workspace=workspace, cwd=root, home=tmp_path, store=store)
        async with app.run_test(size=(100, 30)) as pilot:
            await send(pilot, "hello")  # typed before the model is ready: queued or run
            await wait_for(pilot, lambda: ends(app) and not app.busy)
            assert texts(app) == ["Built from settings."]
            assert app.recorder is not None and app.recorder.saves > 0


async def test_a_session_given_at_start_is_rerendered(tmp_path: Path) -> None:
    async with tui(tmp_path, [shell("echo earlier"), "Earlier answer."], mode="yolo") as (
        app,
        pilot,
    ):
        await run_prompt(pilot, "an earlier task")
        assert app.recorder is not None
        session_id = app.recorder.data.id
    store = SessionStore(tmp_path / "sessions")
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["Continued."]))
    settings = Settings(provider="scripted", script=str(script), approval_mode="yolo")
    root = tmp_path / "ws"
    async with LocalWorkspace(root) as workspace:
        app = IflowApp(
            settings=settings,
            workspace=workspace,
            cwd=root,
            home=tmp_path,
            store=store,
            resume=store.load(session_id),
        )
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: any("Resumed session" in n for n in notices(app)))
            assert notices(app)[-1].startswith(f"Resumed session {session_id} (2 turns)")
            assert [str(u.content) for u in app.query(UserMessage)] == ["› an earlier task"]
            assert "earlier" in panels(app)[0].output
            await run_prompt(pilot, "and now?")
            assert texts(app)[-1] == "Continued."
            assert app.recorder is not None and app.recorder.data.id == session_id


async def test_a_model_that_cannot_start_is_explained(tmp_path: Path) -> None:
    settings = Settings(provider="scripted")  # no script: the model cannot be built
    async with LocalWorkspace(tmp_path) as workspace:
        app = IflowApp(settings=settings, workspace=workspace, cwd=tmp_path, home=tmp_path)
        async with app.run_test() as pilot:
            await wait_for(pilot, lambda: app.failed)
            assert "no script is set" in notices(app)[-1]
            assert "no model" in app.status_bar.plain
            await send(pilot, "hello")
            assert notices(app)[-1].startswith("No model is available")
            await send(pilot, "/help")
            assert blocks(app, "help")


async def test_an_edit_asks_with_a_diff_against_the_file_and_the_panel_waits(
    tmp_path: Path,
) -> None:
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "ws" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    call = {
        "tool_calls": [
            {
                "name": "replace",
                "arguments": {"path": "calc.py", "old_string": "a - b", "new_string": "a + b"},
            }
        ]
    }
    async with tui(tmp_path, [call, "Fixed."]) as (app, pilot):
        await send(pilot, "fix calc.py")
        await wait_for(pilot, lambda: app.approval_panel.display)
        question = str(app.query_one("#approval-detail", Static).content)
        assert "--- a/calc.py" in question and "+++ b/calc.py" in question
        assert "-    return a - b" in question and "+    return a + b" in question
        assert "new_string: a + b" not in question  # the diff, not the raw arguments
        (panel,) = panels(app)
        assert str(panel.meta_view.content) == "waiting for your approval…"
        await pilot.press("y")
        await wait_for(pilot, lambda: ends(app) and not app.busy)
        assert (tmp_path / "ws" / "calc.py").read_text().endswith("return a + b\n")


async def test_model_switches_the_model_and_keeps_the_conversation(tmp_path: Path) -> None:
    from openai_server import Reply, serve_openai

    root = tmp_path / "ws"
    root.mkdir()
    with serve_openai() as server:
        server.push(Reply("First answer."), Reply("Second answer."))
        settings = Settings(
            provider="openai", model="model-a", base_url=server.base_url, api_key="k"
        )
        async with LocalWorkspace(root) as workspace:
            app = IflowApp(settings=settings, workspace=workspace, cwd=root, home=tmp_path)
            async with app.run_test(size=(110, 40)) as pilot:
                await wait_for(pilot, lambda: app.agent is not None)
                await run_prompt(pilot, "hello")
                await send(pilot, "/model model-b")
                await wait_for(pilot, lambda: any("switched to model-b" in n for n in notices(app)))
                assert "model-b" in app.status_bar.plain
                await run_prompt(pilot, "and again")
                assert [r["model"] for r in server.requests] == ["model-a", "model-b"]
                assert len(server.requests[1]["messages"]) > len(server.requests[0]["messages"])
                await send(pilot, "/model")
                await wait_for(
                    pilot, lambda: any("Model: model-b" in b for b in blocks(app, "info-block"))
                )
                shown = [b for b in blocks(app, "info-block") if "Model: model-b" in b][-1]
                assert "model from:    /model, in this session" in shown
            assert app.agent is not None
            await app.agent.aclose()


async def test_an_approval_names_what_always_allows_and_cuts_long_arguments_visibly(
    tmp_path: Path,
) -> None:
    """An MCP tool's "always" names the tool (not "edits"); an argument line longer than the
    panel shows ends with an ellipsis."""
    async with tui(tmp_path, []) as (app, pilot):
        panel = app.approval_panel
        panel.ask("git_status", "mcp", "git_status", {"repo": "r" * 400})
        await pilot.pause()
        label = str(panel.query_one("#allow_always", Button).label)
        assert label == "Always allow git_status (a)"
        detail = str(panel.query_one("#approval-detail", Static).render())
        assert "r" * 300 + " …" in detail
