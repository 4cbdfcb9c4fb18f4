"""Realistic sample trajectories, deterministic by seed, for demos, benchmarks and tests.

They look like what iflow records for a shell task: a system prompt, the
instruction, then rounds of (assistant with a tool call, tool observation), each
assistant step with prompt and sampled token ids, log-probs and a policy version,
and a verifier result at the end.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from ale.trajectory import (
    AgentInfo,
    Role,
    Step,
    Timings,
    ToolCall,
    ToolResult,
    Trajectory,
    Usage,
    VerifierResult,
    VerifierTest,
)

_COMMANDS = [
    (
        "ls -la /app",
        "total 12\ndrwxr-xr-x 2 root root 4096 .\n-rw-r--r-- 1 root root  220 data.csv\n",
    ),
    ("cat /app/data.csv | head -5", "id,name,score\n1,alice,91\n2,bob,78\n3,carol,85\n4,dave,62\n"),
    ("python3 -c 'import sys; print(sys.version)'", "3.11.2 (main, Mar 13 2023) [GCC 12.2.0]\n"),
    ("grep -rn TODO src/ | wc -l", "7\n"),
    (
        "pytest -q tests/",
        "....F.\nFAILED tests/test_parse.py::test_empty - AssertionError\n1 failed, 5 passed\n",
    ),
    (
        "sed -n '1,40p' src/parse.py",
        "def parse(line):\n    if not line:\n        return None\n    return line.split(',')\n",
    ),
    ("git status --short", " M src/parse.py\n?? notes.txt\n"),
    ("awk -F, '{s+=$3} END {print s/NR}' /app/data.csv", "79.0\n"),
]


def sample_trajectory(seed: int, steps: int = 30, vocab: int = 32_000) -> Trajectory:
    """One realistic trajectory with ``steps`` steps (system, user, then tool rounds)."""
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=seed)
    system = (
        "You are iflow, a terminal agent. Use the tools to complete the task, then call finish."
    )
    instruction = (
        f"Task {seed}: compute the mean score in /app/data.csv and write it to /app/mean.txt."
    )
    out: list[Step] = [
        Step(role=Role.SYSTEM, content=system, timestamp=start),
        Step(role=Role.USER, content=instruction, timestamp=start),
    ]
    prompt = [rng.randrange(vocab) for _ in range(len(system) // 4 + len(instruction) // 4)]
    prompt_tokens = completion_tokens = 0
    round_no = 0
    while len(out) < steps:
        round_no += 1
        command, output = _COMMANDS[rng.randrange(len(_COMMANDS))]
        call_id = f"call_{seed}_{round_no}"
        at = start + timedelta(seconds=2 * round_no)
        sampled = [rng.randrange(vocab) for _ in range(rng.randint(20, 60))]
        out.append(_assistant_step(rng, command, call_id, at, prompt, sampled))
        prompt_tokens += len(prompt)
        completion_tokens += len(sampled)
        prompt.extend(sampled)
        if len(out) >= steps:
            break
        out.append(
            Step(
                role=Role.TOOL,
                tool_results=[
                    ToolResult(call_id=call_id, content=output, metadata={"exit_code": 0})
                ],
                timestamp=at + timedelta(seconds=1),
            )
        )
        prompt.extend(rng.randrange(vocab) for _ in range(len(output) // 4 + 4))
    usage = Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
    return _finished(rng, seed, start, out, round_no, usage)


def _assistant_step(
    rng: random.Random,
    command: str,
    call_id: str,
    at: datetime,
    prompt: list[int],
    sampled: list[int],
) -> Step:
    """The policy's step of one round: a shell call, with the prompt it saw and the tokens
    and log-probs it sampled."""
    return Step(
        role=Role.ASSISTANT,
        content=f"Let me look at this with `{command.split()[0]}`.",
        tool_calls=[ToolCall(id=call_id, name="run_shell_command", arguments={"command": command})],
        timestamp=at,
        usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(sampled)),
        prompt_token_ids=list(prompt),
        token_ids=sampled,
        logprobs=[round(-rng.expovariate(3.0), 6) for _ in sampled],
        policy_version=3,
    )


def _finished(
    rng: random.Random, seed: int, start: datetime, steps: list[Step], rounds: int, usage: Usage
) -> Trajectory:
    """The trajectory of ``steps``, with a verifier that passed it or not by chance."""
    passed = rng.random() < 0.5
    return Trajectory(
        trajectory_id=f"traj-{seed:08d}",
        task_id=f"mean-score-{seed % 50}",
        episode_id=f"ep-{seed}",
        group_id=f"group-{seed // 8}",
        agent=AgentInfo(name="iflow", version="0.1.0"),
        model="tiny-qwen",
        steps=steps,
        reward=1.0 if passed else 0.0,
        verifier=VerifierResult(
            reward=1.0 if passed else 0.0,
            passed=passed,
            exit_code=0 if passed else 1,
            tests=[VerifierTest(name="test_mean_written", status="passed" if passed else "failed")],
        ),
        timings=Timings(
            started_at=start,
            finished_at=start + timedelta(seconds=2 * rounds + 5),
            agent_sec=2.0 * rounds,
        ),
        usage=usage,
    )
