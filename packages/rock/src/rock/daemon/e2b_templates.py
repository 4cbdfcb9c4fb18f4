"""E2B's template API on rock: templates the ``e2b`` SDK builds (``Template().from_dockerfile``,
``from_image``, ``Template.build`` / ``build_in_background``, ``alias_exists``, ``get_tags``)
become local images, which ``Sandbox.create(template=...)`` starts from.

How a build goes, as the SDK drives it: ``POST /v3/templates`` names the template (``name`` or
``name:tag``, with the sandboxes' CPUs and memory) and hands out a template and a build id;
each COPY step's files are asked for by hash (``GET /templates/{id}/files/{hash}``) and, when
not here yet, uploaded as a tar to the URL given (a daemon route guarded by a token made for
that upload); ``POST /v2/templates/{id}/builds/{build}`` sends the steps, which rock writes
back as a Dockerfile (FROM the base image or another template, COPY of the uploaded files,
RUN, ENV, WORKDIR, USER) and builds with its offline image machinery (base images mapped to
local ones, no pulls); ``GET .../status`` gives the build's state and its log lines as they
come. A template's image keeps its name ``rock-e2b-template/<name>:<tag>`` on the engine, so
templates outlive the daemon. A build that fails is E2B's ``error`` state with the failing
step's last lines; nothing is left half-built (a failed ``docker build`` leaves no image).

What rock does differently: E2B's user ``user`` is created (``useradd -m``) before a USER
step names it when the image lacks it, as E2B's base images have it; start and ready commands
are not run (rock starts a sandbox's own keeper).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import shutil
import tarfile
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from rock.daemon.e2b_gate import Failed, Gate, TemplateImage, read_json, rest
from rock.errors import RockError
from rock.images.base import BASE_IMAGE

TEMPLATES = "rock-e2b-template"
"""The repository of built templates' images: ``rock-e2b-template/<name>:<tag>``."""
DEFAULT_TAG = "default"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,99}$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_HASH = re.compile(r"^[A-Za-z0-9]{8,128}$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclass
class _Build:
    id: str
    template_id: str
    tag: str
    status: str = "waiting"
    logs: list[dict[str, str]] = field(default_factory=list)
    reason: dict[str, Any] | None = None
    created: datetime = field(default_factory=lambda: datetime.now(UTC))

    def log(self, message: str, level: str = "info") -> None:
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        self.logs.append({"timestamp": stamp, "level": level, "message": message})


@dataclass
class _Template:
    id: str
    name: str
    cpus: float | None = None
    memory_mb: int | None = None
    tags: dict[str, str] = field(default_factory=dict)
    """Each tag and the build it names (once that build is ready)."""
    builds: dict[str, _Build] = field(default_factory=dict)


class Templates:
    """The templates of one daemon: kept in memory while it runs, their images on the
    engine (found again by name after a restart)."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate
        self.files = Path(tempfile.mkdtemp(prefix="rock-e2b-files-"))
        """The uploaded COPY sources, one tar per hash."""
        self._by_id: dict[str, _Template] = {}
        self._lock = threading.Lock()

    # -- names -----------------------------------------------------------------------------
    def request(self, body: dict[str, Any]) -> tuple[_Template, _Build]:
        """A new build of the template ``body`` names (``name`` or ``name:tag``; ``alias``
        in older clients), with its ``tags``."""
        raw = str(body.get("name") or body.get("alias") or "")
        name, _, tag = raw.partition(":")
        tags = [tag] if tag else [str(t) for t in body.get("tags") or []] or [DEFAULT_TAG]
        if not _NAME.fullmatch(name):
            raise Failed(
                400,
                f"template name {raw!r} is not allowed; use lower-case letters, digits, '.', "
                "'_' or '-' (and ':tag').",
            )
        bad = [t for t in tags if not _TAG.fullmatch(t)]
        if bad:
            raise Failed(400, f"template tag {bad[0]!r} is not allowed; use letters, digits, "
                               "'.', '_' or '-'.")  # fmt: skip
        with self._lock:
            template = self._find(name)
            if template is None:
                template = _Template(id=f"rt-{uuid.uuid4().hex[:16]}", name=name)
                self._by_id[template.id] = template
            cpus, memory = body.get("cpuCount"), body.get("memoryMB")
            template.cpus = float(cpus) if cpus else template.cpus
            template.memory_mb = int(memory) if memory else template.memory_mb
            build = _Build(id=str(uuid.uuid4()), template_id=template.id, tag=",".join(tags))
            template.builds[build.id] = build
            for tag in tags:  # a tag names its build from the start, as E2B's do
                template.tags[tag] = build.id
        return template, build

    def _find(self, name_or_id: str) -> _Template | None:
        found = self._by_id.get(name_or_id)
        if found is not None:
            return found
        for template in self._by_id.values():
            if template.name == name_or_id:
                return template
        if _NAME.fullmatch(name_or_id) and self._tags_on_engine(name_or_id):
            template = _Template(id=f"rt-{uuid.uuid4().hex[:16]}", name=name_or_id)
            self._by_id[template.id] = template  # (built before this daemon started)
            return template
        return None

    def find(self, name_or_id: str) -> _Template | None:
        with self._lock:
            return self._find(name_or_id)

    def _tags_on_engine(self, name: str) -> dict[str, str]:
        """``tag: image id`` of the template images of ``name`` on the engine."""
        return self.gate.manager.tags_of(f"{TEMPLATES}/{name}")

    def image(self, ref: str) -> TemplateImage | None:
        """The image a create request's template names (``name``, ``name:tag`` or
        ``name:build id``, the tag ``default`` when none is given, or a template id); None
        when ``ref`` is no template (a plain image); E2B's 404 when the tag's build is not
        ready (still building, or failed)."""
        name, _, tag = ref.partition(":")
        template = self.find(name)
        if template is None:
            return None
        tag = tag or DEFAULT_TAG
        image = f"{TEMPLATES}/{template.name}:{tag}"
        if not self.gate.manager.has_image(image):
            raise Failed(404, f"tag '{tag}' does not exist for template '{template.name}'")
        return TemplateImage(image=image, cpus=template.cpus, memory_mb=template.memory_mb)

    def tags(self, name_or_id: str) -> list[dict[str, Any]]:
        template = self.find(name_or_id)
        if template is None:
            raise Failed(404, f"template '{name_or_id}' not found")
        engine = self._tags_on_engine(template.name)
        built_as = {image: tag for tag, image in engine.items() if _UUID.fullmatch(tag)}
        """Each image and the build id it is also tagged with (its build, before a restart)."""
        names = set(template.tags) | {t for t in engine if not _UUID.fullmatch(t)}
        return [
            {
                "tag": tag,
                "buildID": template.tags.get(tag)
                or built_as.get(engine.get(tag, ""))
                or str(uuid.uuid5(uuid.NAMESPACE_URL, f"{template.name}:{tag}")),
                "createdAt": datetime.now(UTC).isoformat(),
            }
            for tag in sorted(names)
        ]

    def build_of(self, template_id: str, build_id: str) -> _Build:
        template = self.find(template_id)
        build = template.builds.get(build_id) if template else None
        if build is None:
            raise Failed(404, f"build '{build_id}' of template '{template_id}' not found")
        return build

    # -- files ----------------------------------------------------------------------------
    def upload_token(self, files_hash: str) -> str:
        return hmac.new(self.gate.expected, files_hash.encode(), hashlib.sha256).hexdigest()

    def has(self, files_hash: str) -> bool:
        return (self.files / f"{files_hash}.tar").is_file()

    # -- a build --------------------------------------------------------------------------
    def start(self, build: _Build, body: dict[str, Any]) -> None:
        """Build the steps of ``body`` in a thread; the build's status follows it."""
        if build.status != "waiting":
            raise Failed(409, f"build '{build.id}' was started already")
        template = self.find(build.template_id)
        assert template is not None
        build.status = "building"
        threading.Thread(
            target=self._run, args=(template, build, body), name=f"e2b-build-{build.id[:8]}",
            daemon=True,
        ).start()  # fmt: skip

    def _run(self, template: _Template, build: _Build, body: dict[str, Any]) -> None:
        with tempfile.TemporaryDirectory(prefix="rock-e2b-build-") as tmp:
            context = Path(tmp)
            try:
                text = self._dockerfile(body, context)
                (context / "Dockerfile").write_text(text)
                for line in text.splitlines():
                    build.log(line)
                made = self.gate.manager.build_folder(
                    context, context / "Dockerfile", template.name
                )
                for line in made.log.splitlines():
                    if line.strip():
                        build.log(line.rstrip())
                for tag in [*build.tag.split(","), build.id]:  # (its id names it too)
                    self.gate.manager.tag_image(made.tag, f"{TEMPLATES}/{template.name}:{tag}")
            except (RockError, Failed, OSError, ValueError) as exc:
                message = exc.message if isinstance(exc, Failed) else str(exc)
                build.log(message, "error")
                build.reason = {"message": message, "logEntries": build.logs[-5:]}
                build.status = "error"
                return
            build.log(f"template {template.name} ({build.tag}) is ready")
            build.status = "ready"

    def _dockerfile(self, body: dict[str, Any], context: Path) -> str:
        """The Dockerfile of the SDK's steps; the COPY sources unpacked under ``context``."""
        base = body.get("fromTemplate")
        if base:
            found = self.image(str(base))
            if found is None:
                raise Failed(400, f"the base template '{base}' is not built here")
            lines = [f"FROM {found.image}"]
        else:
            lines = [f"FROM {body.get('fromImage') or BASE_IMAGE}"]
        users = {"root"}
        for index, step in enumerate(body.get("steps") or []):
            kind, args = str(step.get("type") or ""), [str(a) for a in step.get("args") or []]
            if kind == "COPY":
                lines += self._copy(step, args, context, index)
            elif kind == "RUN" and args:
                if len(args) > 1 and args[1]:
                    lines += [*self._user(args[1], users), f"RUN {args[0]}", "USER root"]
                else:
                    lines.append(f"RUN {args[0]}")
            elif kind == "ENV" and len(args) % 2 == 0:
                pairs = zip(args[::2], args[1::2], strict=True)
                lines.append("ENV " + " ".join(f"{k}={json.dumps(v)}" for k, v in pairs))
            elif kind == "WORKDIR" and args:
                lines.append(f"WORKDIR {args[0]}")
            elif kind == "USER" and args:
                lines += self._user(args[0], users)
            else:
                raise Failed(400, f"step {index + 1} ({kind} {args}) is not one rock builds")
        return "\n".join(lines) + "\n"

    def _copy(self, step: dict[str, Any], args: list[str], context: Path, index: int) -> list[str]:
        files_hash = str(step.get("filesHash") or "")
        source = self.files / f"{files_hash}.tar"
        if not _HASH.fullmatch(files_hash) or not source.is_file():
            raise Failed(400, f"step {index + 1} copies files that were not uploaded")
        src, dest, user, mode = [*args, "", "", "", ""][:4]
        into = context / "files" / files_hash
        if not into.is_dir():
            into.mkdir(parents=True)
            with tarfile.open(source) as tar:
                tar.extractall(into, filter="data")
        chown = f"--chown={user} " if user else ""
        lines = [f"COPY {chown}files/{files_hash}/{src} {dest}"]
        if mode:  # (the classic builder has no COPY --chmod)
            target = f"{dest}{Path(src).name}" if dest.endswith("/") else dest
            lines.append(f"RUN chmod {mode} {target}")
        return lines

    @staticmethod
    def _user(name: str, users: set[str]) -> list[str]:
        """USER ``name``, made first when the image lacks it (E2B's ``user``)."""
        lines = []
        if name not in users:
            lines.append(f"RUN id -u {name} >/dev/null 2>&1 || useradd -m -s /bin/bash {name}")
            users.add(name)
        return [*lines, f"USER {name}"]


def template_routes(app: FastAPI, gate: Gate) -> Templates:
    """Add the template routes to ``app``; the gate's creates then find built templates."""
    templates = Templates(gate)
    gate.template_image = templates.image
    _build_routes(app, gate, templates)
    _build_status_routes(app, gate, templates)
    _upload_route(app, templates)
    _name_routes(app, gate, templates)
    return templates


def _build_routes(app: FastAPI, gate: Gate, templates: Templates) -> None:
    """A build: requested, and its files asked for."""

    @app.post("/v3/templates", include_in_schema=False)
    @app.post("/v2/templates", include_in_schema=False)
    async def request_build(request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            body = await read_json(request)
            template, build = await run_in_threadpool(templates.request, body)
            tags = build.tag.split(",")
            return JSONResponse(
                {
                    "templateID": template.id,
                    "buildID": build.id,
                    "public": False,
                    "aliases": [template.name],
                    "names": [f"{template.name}:{t}" for t in tags],
                    "tags": tags,
                },
                status_code=202,
            )

        return await rest(answer)

    @app.get("/templates/{template_id}/files/{files_hash}", include_in_schema=False)
    async def file_link(template_id: str, files_hash: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            if not _HASH.fullmatch(files_hash):
                raise Failed(400, f"files hash {files_hash!r} is not one the SDK makes")
            if await run_in_threadpool(templates.find, template_id) is None:
                raise Failed(404, f"template '{template_id}' not found")
            if templates.has(files_hash):
                return JSONResponse({"present": True}, status_code=201)
            token = templates.upload_token(files_hash)
            url = f"{str(request.base_url).rstrip('/')}/e2b-files/{files_hash}?token={token}"
            return JSONResponse({"present": False, "url": url}, status_code=201)

        return await rest(answer)


def _build_status_routes(app: FastAPI, gate: Gate, templates: Templates) -> None:
    """A build: started, and watched."""

    @app.post("/v2/templates/{template_id}/builds/{build_id}", include_in_schema=False)
    async def start_build(template_id: str, build_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            body = await read_json(request)
            build = await run_in_threadpool(templates.build_of, template_id, build_id)
            templates.start(build, body)
            return Response(status_code=202)

        return await rest(answer)

    @app.get("/templates/{template_id}/builds/{build_id}/status", include_in_schema=False)
    async def status(template_id: str, build_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            build = await run_in_threadpool(templates.build_of, template_id, build_id)
            offset = int(request.query_params.get("logsOffset") or 0)
            entries = build.logs[offset : offset + 100]
            body: dict[str, Any] = {
                "templateID": build.template_id,
                "buildID": build.id,
                "status": build.status,
                "logEntries": entries,
                "logs": [e["message"] for e in entries],
            }
            if build.reason is not None and build.status == "error":
                body["reason"] = build.reason
            return JSONResponse(body)

        return await rest(answer)


def _upload_route(app: FastAPI, templates: Templates) -> None:
    """Where the SDK uploads a COPY step's files (no API key: the URL's token)."""

    @app.put("/e2b-files/{files_hash}", include_in_schema=False)
    async def upload(files_hash: str, request: Request) -> Response:
        """The upload URL handed out above: the token made for this hash is the key."""
        given = request.query_params.get("token", "")
        if not _HASH.fullmatch(files_hash) or not hmac.compare_digest(
            given, templates.upload_token(files_hash)
        ):
            return JSONResponse({"code": 403, "message": "the upload token is wrong"}, 403)
        part = templates.files / f"{files_hash}.part"
        with part.open("wb") as out:
            async for chunk in request.stream():
                out.write(chunk)
        try:
            with tarfile.open(part) as tar:  # gzipped or not, as the SDK chose
                tar.getmembers()
        except (tarfile.TarError, OSError):
            part.unlink(missing_ok=True)
            return JSONResponse({"code": 400, "message": "the upload is not a tar archive"}, 400)
        shutil.move(part, templates.files / f"{files_hash}.tar")
        return Response(status_code=200)


def _name_routes(app: FastAPI, gate: Gate, templates: Templates) -> None:
    """A template's name and tags."""

    @app.get("/templates/aliases/{alias}", include_in_schema=False)
    async def alias(alias: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            template = await run_in_threadpool(templates.find, alias)
            if template is None:
                raise Failed(404, f"template alias '{alias}' not found")
            return JSONResponse({"templateID": template.id, "public": False})

        return await rest(answer)

    @app.get("/templates/{template_id}/tags", include_in_schema=False)
    async def tags(template_id: str, request: Request) -> Response:
        async def answer() -> Response:
            gate.api_key(request)
            return JSONResponse(await run_in_threadpool(templates.tags, template_id))

        return await rest(answer)
