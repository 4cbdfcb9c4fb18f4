"""What the tests against the session's real vLLM server share (the fixtures: conftest.py)."""

import pytest

VLLM = pytest.mark.xdist_group("vllm")
"""Marks the tests that use :func:`vllm_server`: under ``pytest -n N --dist loadgroup`` they
share one worker, so the session still starts one server."""

VLLM_CONTEXT = 1024
"""The session server's context window (tokens)."""
