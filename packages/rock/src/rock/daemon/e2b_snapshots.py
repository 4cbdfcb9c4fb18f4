"""E2B snapshots on rock: a sandbox's file system committed as a local image that
``Sandbox.create(template=snapshot_id)`` starts from, listed and deleted, routes of the E2B
REST API (:mod:`rock.daemon.e2b`).
"""

from __future__ import annotations

import re
import secrets

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from rock.backends.base import SandboxConflict
from rock.daemon.e2b_gate import Failed, Gate, read_json, rest, running
from rock.daemon.manager import SandboxManager

SNAPSHOTS = "rock-e2b-snapshot"
"""The repository of E2B snapshots: ``rock-e2b-snapshot:<sandbox id>-<name>``."""
_SNAPSHOT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,60}")


def snapshot_routes(app: FastAPI, gate: Gate) -> None:
    """Snapshots: a commit of the sandbox's file system as a local image, which
    ``Sandbox.create(template=snapshot_id)`` starts from (memory and processes are not kept:
    E2B's memory snapshots are not served)."""

    @app.post("/sandboxes/{sandbox_id}/snapshots", include_in_schema=False)
    async def snapshot(sandbox_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            name = str((await read_json(request)).get("name") or "")
            if name and not _SNAPSHOT_NAME.fullmatch(name):
                raise Failed(
                    400,
                    f"snapshot name {name!r} is not allowed; use up to 60 letters, digits, "
                    "'.', '_' or '-'.",
                )
            await run_in_threadpool(running, gate.manager, sandbox_id, True)
            tag = f"{SNAPSHOTS}:{sandbox_id}-{name or secrets.token_hex(6)}"
            await run_in_threadpool(gate.manager.snapshot, sandbox_id, tag)
            return JSONResponse({"snapshotID": tag, "names": [tag]}, status_code=201)

        return await rest(answer)

    @app.get("/snapshots", include_in_schema=False)
    async def snapshots(request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            query = request.query_params
            of = query.get("sandboxID") or ""
            name = query.get("name") or ""
            tags = sorted(await run_in_threadpool(_snapshot_tags, gate.manager))
            tags = [
                t
                for t in tags
                if t.split(":", 1)[1].startswith(f"{of}-" if of else "")
                and (not name or t.endswith(f"-{name}"))
            ]
            start = int(query.get("nextToken") or 0)
            limit = int(query.get("limit") or 0) or len(tags) or 1
            more = start + limit < len(tags)
            rows = [{"snapshotID": t, "names": [t]} for t in tags[start : start + limit]]
            return JSONResponse(rows, headers={"x-next-token": str(start + limit)} if more else {})

        return await rest(answer)

    @app.delete("/templates/{template_id}", include_in_schema=False)
    async def delete_snapshot(template_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            if template_id not in await run_in_threadpool(_snapshot_tags, gate.manager):
                raise Failed(404, f"snapshot {template_id!r} does not exist")
            try:
                await run_in_threadpool(gate.manager.remove_image, template_id)
            except SandboxConflict as exc:
                raise Failed(409, str(exc)) from None
            return Response(status_code=204)

        return await rest(answer)


def _snapshot_tags(manager: SandboxManager) -> set[str]:
    return {t for image in manager.images() for t in image.tags if t.startswith(f"{SNAPSHOTS}:")}
