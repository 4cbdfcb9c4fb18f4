"""What the tests against the session's real vLLM server share (the fixtures: conftest.py)."""

from pathlib import Path

import pytest

from roll.generation.vllm_server import LOG_ENV

VLLM = pytest.mark.xdist_group("vllm")
"""Marks the tests that use :func:`vllm_server`: under ``pytest -n N --dist loadgroup`` they
share one worker, so the session still starts one server."""

VLLM_CONTEXT = 2048
"""The session server's context window (tokens): mini-swe-agent's prompt takes about 1,300."""


def group_processes(log: Path) -> list[int]:
    """Processes whose environment marks them as the launched server of ``log``."""
    marker = f"{LOG_ENV}={log}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
