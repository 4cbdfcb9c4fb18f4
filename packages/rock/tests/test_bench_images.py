"""rock.bench.images: the image map, FROM rewriting, build plans, the digest."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench_fakes import (
    TASK_TOML,
    FakeClient,
    make_task,
)

from ale.task import load_task
from rock.bench.compose import ComposeError, read_compose
from rock.bench.images import (
    BENCH_BASE,
    BuildPlan,
    ImageBuilder,
    ImageMap,
    TaskImageError,
    build_digest,
    image_tag,
    plan_build,
    rewrite_dockerfile,
)


# -- images: the image map -------------------------------------------------------------------
def test_image_map_pairs_come_first_then_files_then_the_default_table(tmp_path: Path) -> None:
    table = tmp_path / "map.toml"
    table.write_text('[images]\n"node:*" = "local/node:20"\n"python:3.12*" = "from-file"\n')
    image_map = ImageMap.load(files=[table], pairs=[" python:3.12* = mine:latest "], user_file=None)
    assert image_map.lookup("python:3.12-slim") == ("mine:latest", "command line")
    assert image_map.lookup("node:20-alpine") == ("local/node:20", str(table))
    assert image_map.lookup("ubuntu:24.04") == (BENCH_BASE, "default table")
    assert image_map.lookup("python:3.11") == (BENCH_BASE, "default table")
    assert image_map.lookup("alpine:3.20") is None


def test_image_map_reads_the_user_table_and_skips_a_missing_one(tmp_path: Path) -> None:
    user = tmp_path / "bench-images.toml"
    assert ImageMap.load(user_file=user, default=False).entries == []
    user.write_text('[images]\n"golang:*" = "local/go"\n')
    image_map = ImageMap.load(user_file=user, default=False)
    assert image_map.lookup("golang:1.22") == ("local/go", str(user))
    assert image_map.lookup("Golang:1.22") is None  # patterns are case-sensitive


@pytest.mark.parametrize("pair", ["python:3.12", "=rock/base", "python:*=", "  =  "])
def test_image_map_refuses_a_bad_map_image_pair(pair: str) -> None:
    with pytest.raises(ValueError) as info:
        ImageMap.load(pairs=[pair], user_file=None, default=False)
    message = str(info.value)
    assert f"--map-image {pair!r} is not PATTERN=IMAGE" in message


def test_image_map_refuses_a_file_that_is_not_toml(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[images\n"python:*" = "x"\n')
    with pytest.raises(ValueError) as info:
        ImageMap.load(files=[bad], user_file=None, default=False)
    assert f"image map {bad} is not valid TOML" in str(info.value)


def test_image_map_refuses_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ValueError) as info:
        ImageMap.load(files=[missing], user_file=None, default=False)
    assert f"image map {missing} does not exist" in str(info.value)


@pytest.mark.parametrize(
    "text", ['[other]\n"a" = "b"\n', '[images]\n"python:*" = 3\n', 'images = "python"\n']
)
def test_image_map_refuses_a_file_without_an_images_table_of_strings(
    tmp_path: Path, text: str
) -> None:
    bad = tmp_path / "map.toml"
    bad.write_text(text)
    with pytest.raises(ValueError) as info:
        ImageMap.load(files=[bad], user_file=None, default=False)
    assert "needs an [images] table" in str(info.value)
    assert str(bad) in str(info.value)


def test_image_builder_resolve_order_and_the_unmapped_error() -> None:
    image_map = ImageMap.load(pairs=["node:*=local/node"], user_file=None)
    present = {"python:3.12-slim": "sha256:py", "node:20": "sha256:node"}
    builder = ImageBuilder(FakeClient(present), image_map)  # type: ignore[arg-type]
    # a command-line mapping wins over a local image of the same name
    assert builder.resolve("node:20") == "local/node"
    # a local image wins over the default table
    assert builder.resolve("python:3.12-slim") == "python:3.12-slim"
    # otherwise the default table
    assert builder.resolve("python:3.11-slim") == BENCH_BASE
    with pytest.raises(TaskImageError) as info:
        builder.resolve("alpine:3.20")
    message = str(info.value)
    assert "base image alpine:3.20 is not on this machine" in message
    assert "--map-image 'alpine:3.20=IMAGE'" in message
    assert builder.client.images.pulls == ["python:3.11-slim", "alpine:3.20"]  # offline: tried


def test_an_image_a_registry_has_is_pulled_before_the_stand_in() -> None:
    online = FakeClient({}, registry={"alpine:3.20": "sha256:a", "python:3.11-slim": "sha256:p"})
    builder = ImageBuilder(online, ImageMap.load(user_file=None))  # type: ignore[arg-type]
    assert builder.resolve("alpine:3.20") == "alpine:3.20"
    assert (
        builder.resolve("python:3.11-slim") == "python:3.11-slim"
    )  # the real one, not the stand-in
    builder.resolve("python:3.11-slim")
    assert online.images.pulls == ["alpine:3.20", "python:3.11-slim"]  # each tried once


def test_image_builder_ensure_base_refuses_a_missing_mapped_image() -> None:
    builder = ImageBuilder(FakeClient({"local/x": "sha256:x"}), ImageMap())  # type: ignore[arg-type]
    assert builder.ensure_base("local/x") == "sha256:x"
    with pytest.raises(TaskImageError, match="sends a base to local/y, which is not on this"):
        builder.ensure_base("local/y")


def test_image_tag_is_a_safe_repository_name() -> None:
    assert image_tag("My Task!", "0123456789abcdef" * 4) == "rock-bench/my-task:0123456789abcdef"
    assert image_tag("...", "ab" * 32) == f"rock-bench/task:{'ab' * 8}"


# -- images: rewriting FROM lines ------------------------------------------------------------
class Resolver:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, ref: str) -> str:
        self.calls.append(ref)
        return f"local/{ref.replace(':', '-')}"


def test_rewrite_dockerfile_replaces_the_base_and_keeps_the_rest() -> None:
    resolve = Resolver()
    text, bases = rewrite_dockerfile("FROM python:3.12-slim\nRUN echo hi\n", resolve)
    assert text == "FROM local/python-3.12-slim\nRUN echo hi\n"
    assert bases == {"python:3.12-slim": "local/python-3.12-slim"}
    assert resolve.calls == ["python:3.12-slim"]


def test_rewrite_dockerfile_expands_args_declared_before_the_first_from() -> None:
    dockerfile = (
        "ARG BASE=python:3.11-slim\n"
        'ARG OTHER="ubuntu:22.04"\n'
        "FROM ${BASE} AS py\n"
        "ARG LATE=debian:12\n"
        "FROM $OTHER\n"
        "FROM $LATE\n"
    )
    resolve = Resolver()
    text, bases = rewrite_dockerfile(dockerfile, resolve)
    # an ARG after the first FROM is not in scope for FROM lines (Docker's rule)
    assert resolve.calls == ["python:3.11-slim", "ubuntu:22.04", "$LATE"]
    assert text.splitlines() == [
        "ARG BASE=python:3.11-slim",
        'ARG OTHER="ubuntu:22.04"',
        "FROM local/python-3.11-slim AS py",
        "ARG LATE=debian:12",
        "FROM local/ubuntu-22.04",
        "FROM local/$LATE",
    ]
    assert set(bases) == {"python:3.11-slim", "ubuntu:22.04", "$LATE"}


def test_rewrite_dockerfile_keeps_stage_names_and_scratch() -> None:
    dockerfile = (
        "FROM golang:1.22 as build\n"
        "RUN go build -o /app .\n"
        "FROM build AS tested\n"
        "FROM scratch\n"
        "COPY --from=build /app /app\n"
        "from debian:bookworm-slim\n"
        "COPY --from=tested /app /app\n"
    )
    resolve = Resolver()
    text, bases = rewrite_dockerfile(dockerfile, resolve)
    assert resolve.calls == ["golang:1.22", "debian:bookworm-slim"]
    assert bases == {
        "golang:1.22": "local/golang-1.22",
        "debian:bookworm-slim": "local/debian-bookworm-slim",
    }
    assert text.splitlines() == [
        "FROM local/golang-1.22 as build",
        "RUN go build -o /app .",
        "FROM build AS tested",
        "FROM scratch",
        "COPY --from=build /app /app",
        "from local/debian-bookworm-slim",
        "COPY --from=tested /app /app",
    ]


def test_rewrite_dockerfile_keeps_platform_flags() -> None:
    dockerfile = (
        "FROM --platform=linux/amd64 python:3.12 AS base\n"
        "FROM --platform=$BUILDPLATFORM  ubuntu:24.04\n"
    )
    resolve = Resolver()
    text, _ = rewrite_dockerfile(dockerfile, resolve)
    assert resolve.calls == ["python:3.12", "ubuntu:24.04"]
    assert text.splitlines() == [
        "FROM --platform=linux/amd64 local/python-3.12 AS base",
        "FROM --platform=$BUILDPLATFORM  local/ubuntu-24.04",
    ]


# -- images: build plans ---------------------------------------------------------------------
def test_plan_build_of_a_dockerfile_task(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path, "df", files={"app/data.txt": "x"}))
    plan = plan_build(task)
    assert plan.context == tmp_path.resolve() / "df" / "environment"
    assert plan.dockerfile == "Dockerfile"
    assert plan.text == "FROM python:3.12-slim\nWORKDIR /app\n"


COMPOSE_MAIN = """\
services:
  main:
    build:
      context: .
      dockerfile: Dockerfile
    command: ["sh", "-c", "sleep infinity"]
    environment:
      - FOO=bar
      - EMPTY=
      - LOGS=${T_BENCH_LOGS}
      - NOVALUE
"""


def test_plan_build_of_a_compose_task_uses_the_main_service(tmp_path: Path) -> None:
    task = load_task(
        make_task(
            tmp_path,
            "composed",
            dockerfile="FROM ubuntu:24.04\n",
            compose=COMPOSE_MAIN,
        )
    )
    assert task.environment.compose_file is not None
    plan = plan_build(task)
    assert plan.context == tmp_path.resolve() / "composed" / "environment"
    assert plan.dockerfile == "Dockerfile"
    assert plan.text == "FROM ubuntu:24.04\n"
    compose = read_compose(task, env={"NOVALUE": "from-here"})
    assert compose is not None and compose.side == []
    assert compose.main.environment == {
        "FOO": "bar", "EMPTY": "", "LOGS": "", "NOVALUE": "from-here"
    }  # fmt: skip


def test_plan_build_of_a_compose_task_with_a_build_string_and_a_dict_environment(
    tmp_path: Path,
) -> None:
    compose = (
        "services:\n  app:\n    build: ./image\n    environment:\n      PORT: 8080\n      UNSET:\n"
    )
    task = load_task(
        make_task(
            tmp_path,
            "single",
            dockerfile=None,
            compose=compose,
            files={"image/Dockerfile": "FROM debian:12\n"},
        )
    )
    plan = plan_build(task)  # the only service is the main one, whatever its name
    assert plan.context == tmp_path.resolve() / "single" / "environment" / "image"
    assert plan.dockerfile == "Dockerfile"
    assert plan.text == "FROM debian:12\n"
    compose = read_compose(task, env={})
    assert compose is not None and compose.main.environment == {"PORT": "8080"}


def test_side_services_are_read_in_the_order_they_wait_for_each_other(tmp_path: Path) -> None:
    compose = (
        "services:\n"
        "  main:\n    build: .\n    depends_on:\n      db:\n        condition: service_healthy\n"
        "  app:\n    image: ${APP_IMAGE:-app:1}\n    depends_on: [db]\n"
        "    volumes: ['./init.sql:/init.sql:ro', 'data:/var/lib/data']\n"
        "  db:\n    image: postgres:16\n    environment: {POSTGRES_PASSWORD: pw}\n"
        "    healthcheck:\n      test: pg_isready\n      interval: 1m30s\n      retries: 5\n"
    )
    task = load_task(make_task(tmp_path, "sides", compose=compose, files={"init.sql": "--"}))
    assert plan_build(task).dockerfile == "Dockerfile"  # main still builds
    found = read_compose(task, env={})
    assert found is not None and found.main.depends_on == {"db": "service_healthy"}
    db, app = found.order()
    assert (db.name, db.image, db.environment) == ("db", "postgres:16", {"POSTGRES_PASSWORD": "pw"})
    assert db.healthcheck == {
        "test": ["CMD-SHELL", "pg_isready"],
        "interval": 90 * 10**9,
        "retries": 5,
    }
    assert (app.image, app.depends_on) == ("app:1", {"db": "service_started"})
    init = (tmp_path / "sides" / "environment" / "init.sql").resolve()
    assert app.volumes == [f"{init}:/init.sql:ro", "data:/var/lib/data:rw"]
    assert read_compose(task, env={"APP_IMAGE": "mine:2"}).side[0].image == "mine:2"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (
            "  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n    depends_on: [a]\n",
            "go round in a circle",
        ),
        ("  a:\n    image: x\n    depends_on: [nowhere]\n", "does not define"),
        (
            "  a:\n    image: x\n    depends_on:\n      main:\n        condition: ready\n",
            "which compose does not define",
        ),
        (
            "  a:\n    image: x\n    healthcheck:\n      test: 'true'\n      interval: soon\n",
            "is not a duration",
        ),
        ("  a:\n    image: x\n    volumes: ['./absent:/x']\n", "which does not exist"),
    ],
)
def test_bad_side_services_are_one_sentence(tmp_path: Path, extra: str, needle: str) -> None:
    task = load_task(
        make_task(tmp_path, "bad", compose="services:\n  main:\n    build: .\n" + extra)
    )
    with pytest.raises(ComposeError) as info:
        compose = read_compose(task, env={})
        assert compose is not None
        compose.order()
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_main_service_without_build_uses_the_task_s_dockerfile_as_harbor_does(
    tmp_path: Path,
) -> None:
    compose = "services:\n  main:\n    environment: {A: b}\n  db:\n    image: x\n"
    task = load_task(make_task(tmp_path, "harbor", compose=compose))
    assert plan_build(task).context == tmp_path.resolve() / "harbor" / "environment"


def test_plan_build_refuses_compose_without_a_build_section(tmp_path: Path) -> None:
    compose = "services:\n  main:\n    image: ubuntu:24.04\n"
    task = load_task(make_task(tmp_path, "nobuild", compose=compose, dockerfile=None))
    with pytest.raises(TaskImageError) as info:
        plan_build(task)
    assert "service 'main'" in str(info.value)
    assert "has no build section" in str(info.value)


@pytest.mark.parametrize(
    ("compose", "needle"),
    [
        ("services:\n  web:\n    build: .\n  db:\n    build: .\n", "none named main or client"),
        ("services: {}\n", "has no services"),
        ("version: '3'\n", "has no services"),
        ("services: [main\n", "is not valid YAML"),
        (
            "services:\n  main:\n    build:\n      context: .\n      dockerfile: Other\n",
            "which does not exist",
        ),
    ],
)
def test_plan_build_refuses_bad_compose_files(tmp_path: Path, compose: str, needle: str) -> None:
    task = load_task(make_task(tmp_path, "bad", compose=compose))
    with pytest.raises(TaskImageError) as info:
        plan_build(task)
    assert needle in str(info.value)
    assert "docker-compose.yaml" in str(info.value)


def test_plan_build_of_a_prebuilt_image_task_has_nothing_to_build(tmp_path: Path) -> None:
    toml = TASK_TOML + '\n[environment]\ndocker_image = "ubuntu:24.04"\n'
    task = load_task(make_task(tmp_path, "prebuilt", toml=toml, dockerfile=None))
    with pytest.raises(TaskImageError, match="declares no Dockerfile to build"):
        plan_build(task)


# -- images: the digest ----------------------------------------------------------------------
def _plan(tmp_path: Path) -> tuple[Path, BuildPlan]:
    task_dir = make_task(
        tmp_path,
        "digest",
        files={"app/main.py": "print('hi')\n", "requirements.txt": "requests\n"},
    )
    return task_dir / "environment", plan_build(load_task(task_dir))


def test_build_digest_is_stable(tmp_path: Path) -> None:
    context, plan = _plan(tmp_path)
    first = build_digest(plan, "FROM base\n", {"python:3.12": "sha256:1"})
    second = build_digest(plan, "FROM base\n", {"python:3.12": "sha256:1"})
    assert first == second
    assert len(first) == 64 and int(first, 16) >= 0
    # the task's own Dockerfile is not hashed as a file: the rewritten text stands for it
    (context / "Dockerfile").write_text("FROM something-else\n")
    assert build_digest(plan, "FROM base\n", {"python:3.12": "sha256:1"}) == first


def test_build_digest_changes_with_text_files_modes_and_bases(tmp_path: Path) -> None:
    context, plan = _plan(tmp_path)
    bases = {"python:3.12": "sha256:1"}
    original = build_digest(plan, "FROM base\n", bases)
    seen = {original}

    def check(digest: str) -> None:
        assert digest not in seen
        seen.add(digest)

    check(build_digest(plan, "FROM base\nRUN true\n", bases))
    check(build_digest(plan, "FROM base\n", {"python:3.12": "sha256:2"}))
    check(build_digest(plan, "FROM base\n", {"python:3.13": "sha256:1"}))

    main = context / "app" / "main.py"
    main.write_text("print('bye')\n")
    check(build_digest(plan, "FROM base\n", bases))
    main.write_text("print('hi')\n")
    assert build_digest(plan, "FROM base\n", bases) == original  # content, not mtime

    mode = main.stat().st_mode & 0o777
    main.chmod(mode ^ 0o111)
    check(build_digest(plan, "FROM base\n", bases))
    main.chmod(mode)
    assert build_digest(plan, "FROM base\n", bases) == original
    (context / "app" / "new.txt").write_text("")
    check(build_digest(plan, "FROM base\n", bases))


def test_build_digest_sees_a_rename(tmp_path: Path) -> None:
    context, plan = _plan(tmp_path)
    before = build_digest(plan, "FROM base\n", {})
    (context / "requirements.txt").rename(context / "requirements-dev.txt")
    assert build_digest(plan, "FROM base\n", {}) != before


def test_stage_names_are_case_insensitive_and_args_chain() -> None:
    text = "ARG PY=3.12\nARG BASE=python:${PY}-slim\nFROM $BASE AS Build\nFROM build\n"
    seen: list[str] = []
    out, bases = rewrite_dockerfile(text, lambda ref: seen.append(ref) or "local:img")
    assert seen == ["python:3.12-slim"] and bases == {"python:3.12-slim": "local:img"}
    assert out.splitlines()[-1] == "FROM build"
