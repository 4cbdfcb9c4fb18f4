"""What an E2B sandbox uses and its network: ``get_metrics`` (one sample read from the
sandbox's cgroup) and ``update_network`` (the network opened or closed as a whole), routes of
the E2B REST API (:mod:`rock.daemon.e2b`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from rock.backends.base import SandboxError
from rock.daemon.e2b_gate import Failed, Gate, read_json, rest, running
from rock.models import ExecRequest, SandboxInfo


def usage_routes(app: FastAPI, gate: Gate) -> None:
    """What a running sandbox uses, and its network."""

    @app.get("/sandboxes/{sandbox_id}/metrics", include_in_schema=False)
    async def metrics(sandbox_id: str, request: Request) -> Response:
        """``get_metrics``: one sample taken now (rock keeps no history of them), whatever
        ``start`` and ``end`` ask: CPU over half a second and memory from the sandbox's
        cgroup, disk from its root file system."""

        async def answer() -> Response:
            gate.api_key(request)
            info = await run_in_threadpool(running, gate.manager, sandbox_id)
            probe = ExecRequest(command=["sh", "-c", _SAMPLE], timeout=30)
            done = await run_in_threadpool(gate.manager.exec, sandbox_id, probe)
            return JSONResponse([_metric(info, done.stdout_text)])

        return await rest(answer)

    @app.put("/sandboxes/{sandbox_id}/network", include_in_schema=False)
    async def network(sandbox_id: str, request: Request) -> Response:
        """``update_network``: ``allow_internet_access`` opens or closes the sandbox's
        network as a whole (rock filters no egress: allow/deny lists and rules are refused
        in one sentence); a sandbox made closed has no network to open."""

        async def answer() -> Response:
            gate.api_key(request)
            body = await read_json(request)
            filters = [k for k in _EGRESS if body.get(k)]
            if filters:
                raise Failed(
                    400,
                    f"rock opens or closes a sandbox's network as a whole and filters no egress "
                    f"({', '.join(filters)}); give allow_internet_access only.",
                )
            await run_in_threadpool(running, gate.manager, sandbox_id)
            if "allow_internet_access" in body:
                on = bool(body["allow_internet_access"])
                try:
                    await run_in_threadpool(gate.manager.set_network, sandbox_id, on)
                except SandboxError as exc:
                    raise Failed(400, str(exc)) from None
            return Response(status_code=204)

        return await rest(answer)


_SAMPLE = (
    "c=/sys/fs/cgroup; cpu() { if [ -r $c/cpu.stat ]; then "
    "echo $(( $(sed -n 's/^usage_usec //p' $c/cpu.stat) * 1000 )); "
    "else cat $c/cpuacct/cpuacct.usage; fi 2>/dev/null; }; "
    "u1=$(cpu); t1=$(date +%s%N); sleep 0.5; u2=$(cpu); t2=$(date +%s%N); "
    "m=$(cat $c/memory.current || cat $c/memory/memory.usage_in_bytes) 2>/dev/null; "
    "f=$(sed -n 's/^file //p' $c/memory.stat || sed -n 's/^cache //p' $c/memory/memory.stat) "
    "2>/dev/null; "
    'echo "${u1:-0} $t1 ${u2:-0} $t2 ${m:-0} ${f:-0} $(df -B1 --output=used,size / | tail -1)"'
)
"""A sandbox's usage, read inside it from its cgroup (v2, or v1's cpuacct and memory): CPU
nanoseconds and the clock twice half a second apart, memory in use and of it the page
cache, then the root file system's used and size."""


def _metric(info: SandboxInfo, sample: str) -> dict[str, Any]:
    """E2B's SandboxMetric from one :data:`_SAMPLE` (zeros where the sandbox has no
    cgroup files to read)."""
    try:
        u1, t1, u2, t2, mem, cache, used, size = (int(x) for x in sample.split()[:8])
    except ValueError:
        u1 = t1 = u2 = t2 = mem = cache = used = size = 0
    cpus = max(1, round(info.spec.cpus))
    busy = (u2 - u1) / max(t2 - t1, 1) / cpus * 100
    now = datetime.now(UTC)
    return {
        "timestamp": now.isoformat(),
        "timestampUnix": int(now.timestamp()),
        "cpuCount": cpus,
        "cpuUsedPct": round(min(max(busy, 0.0), 100.0), 2),
        "memUsed": mem,
        "memTotal": info.spec.memory_mb * 1024 * 1024,
        "memCache": cache,
        "diskUsed": used,
        "diskTotal": size,
    }


_EGRESS = ("allowOut", "denyOut", "rules", "egressProxy", "dnsServers")
"""The egress filters of E2B's network update, which rock does not serve."""
