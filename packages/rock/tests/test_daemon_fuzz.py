"""Fuzz the daemon's HTTP API from its own OpenAPI spec: whatever arrives, no 5xx.

A bounded number of examples per operation keeps this to well under a minute. Every
request carries the token, so the fuzzing reaches the routes behind it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from rock_daemons import Running, start_daemon, stop_daemon
from schemathesis.checks import not_a_server_error

pytestmark = pytest.mark.docker

EXAMPLES = 25

# Archives are tar streams; the fuzzer sends arbitrary bytes as one.
schemathesis.serializer.alias("application/x-tar", "application/octet-stream")


@pytest.fixture(scope="module")
def fuzz_daemon(
    tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient
) -> Iterator[Running]:
    running = start_daemon(Path(tmp_path_factory.mktemp("rock-fuzz")), cleanup=True)
    yield running
    stop_daemon(running, docker_client)


def test_no_request_makes_the_daemon_fail(fuzz_daemon: Running) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzz_daemon.url}/openapi.json")
    headers = {"Authorization": f"Bearer {fuzz_daemon.token}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    failures: list[str] = []
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
        def fuzz(case: schemathesis.Case) -> None:
            case.call_and_validate(headers=headers, checks=[not_a_server_error], timeout=120)

        try:
            fuzz()
        except Exception as exc:
            failures.append(f"{operation.label}: {str(exc)[:2000]}")
    assert not failures, "\n\n".join(failures)
