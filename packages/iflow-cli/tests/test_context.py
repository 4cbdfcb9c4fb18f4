"""Context pieces on their own: the token meter, the loop detector, compression's split."""

from __future__ import annotations

from ale.trajectory import Role, Step, ToolCall, ToolResult
from iflow.context.compress import split_point
from iflow.context.loop import LoopDetector
from iflow.context.tokens import TokenMeter
from iflow.models.base import estimate_messages, estimate_tokens
from iflow.models.scripted import ScriptedModel


def step(role: Role, text: str = "") -> Step:
    return Step(role=role, content=text)


def test_estimate_is_a_quarter_of_the_bytes() -> None:
    assert estimate_tokens("abcd" * 10) == 10
    assert estimate_tokens("é") == 1  # two bytes, rounded up


def test_meter_counts_incrementally_and_uses_the_servers_count() -> None:
    meter = TokenMeter(ScriptedModel([]), [], exact=False)
    history = [step(Role.SYSTEM, "s" * 400), step(Role.USER, "u" * 40)]
    assert meter.count(history) == estimate_messages(history)
    history.append(step(Role.ASSISTANT, "a" * 80))
    assert meter.count(history) == estimate_messages(history)
    meter.reported(3, 1000)  # the server counted the first three messages as 1000
    history.append(step(Role.USER, "v" * 40))
    assert meter.count(history) == 1000 + estimate_messages(history[3:])
    rewritten = [history[0], step(Role.USER, "short")]
    meter.reset()
    assert meter.count(rewritten) == estimate_messages(rewritten)


def test_meter_notices_a_replaced_first_step() -> None:
    meter = TokenMeter(ScriptedModel([]), [], exact=False)
    history = [step(Role.SYSTEM, "s" * 400), step(Role.USER, "u")]
    meter.count(history)
    history[0] = step(Role.SYSTEM, "t" * 40)
    assert meter.count(history) == estimate_messages(history)


def pair(i: int, *, error: bool = False, command: str = "ls") -> tuple[ToolCall, ToolResult]:
    return (
        ToolCall(id=f"c{i}", name="run_shell_command", arguments={"command": command}),
        ToolResult(call_id=f"c{i}", content="", is_error=error),
    )


def test_loop_detector_warns_once_then_stops() -> None:
    d = LoopDetector(threshold=3, fail_threshold=5, grace=2)
    verdicts = [d.observe(*pair(i)) for i in range(5)]
    assert verdicts == ["ok", "ok", "warn", "ok", "stop"]


def test_loop_detector_resets_on_a_different_working_call() -> None:
    d = LoopDetector(threshold=3)
    assert [d.observe(*pair(i)) for i in range(3)][-1] == "warn"
    assert d.observe(*pair(9, command="pwd")) == "ok"
    assert [d.observe(*pair(i)) for i in range(3)][-1] == "warn"  # warned afresh


def test_loop_detector_counts_failures_of_different_calls() -> None:
    d = LoopDetector(threshold=3, fail_threshold=3, grace=1)
    verdicts = [d.observe(*pair(i, error=True, command=f"bad {i}")) for i in range(4)]
    assert verdicts == ["ok", "ok", "warn", "stop"]
    assert "failed" in d.describe()


def test_split_keeps_head_and_whole_recent_turns() -> None:
    h = [step(Role.SYSTEM), step(Role.USER, "task")]
    for _ in range(4):
        h += [step(Role.ASSISTANT), step(Role.TOOL)]
    head_end, tail_start = split_point(h, keep_recent_turns=2)
    assert head_end == 2 and h[tail_start].role is Role.ASSISTANT
    assert len(h) - tail_start == 4
    assert split_point(h[:4], keep_recent_turns=2) == (2, 2)  # nothing in the middle
