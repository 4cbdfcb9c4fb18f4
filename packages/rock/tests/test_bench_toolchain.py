"""rock.verifier: the offline stand-ins (shim) and the toolchain builder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from bench_fakes import (
    SHIM_PATH,
    load_shim,
)

import rock.verifier.toolchain as toolchain


@pytest.fixture(scope="module")
def shim() -> ModuleType:
    return load_shim()


# -- the verifier shim -----------------------------------------------------------------------
def test_shim_req_name(shim: ModuleType) -> None:
    assert shim.req_name("pytest==8.4.1") == "pytest"
    assert shim.req_name("  Pytest_Mock>=3.0") == "pytest-mock"
    assert shim.req_name("pytest[testing]~=8.0") == "pytest"
    assert shim.req_name("zope.interface") == "zope-interface"
    assert shim.req_name("requests; python_version>'3.8'") == "requests"
    assert shim.req_name("==1.0") is None
    assert shim.req_name("") is None
    assert shim.norm("Foo__Bar..baz") == "foo-bar-baz"


def test_shim_requirement_names_skip_options_and_read_files(
    shim: ModuleType, tmp_path: Path
) -> None:
    nested = tmp_path / "nested.txt"
    nested.write_text("iniconfig\n")
    reqs = tmp_path / "requirements.txt"
    reqs.write_text(
        "# test requirements\n"
        "requests==2.32.0  # pinned\n"
        "\n"
        "PyYAML>=6\n"
        f"-r {nested}\n"
        "pytest-json-ctrf==0.3.5 --hash=sha256:abc\n"
    )
    args = [
        "-q",
        "pytest==8.4.1",
        "--index-url",
        "https://pypi.example/simple",
        "--no-cache-dir",
        "pytest-mock>=3",
        "-r",
        str(reqs),
        "--target",
        "/opt/site",
        "--only-binary=:all:",
        "git+https://github.com/org/repo",
        "-e",
        ".",
        "Typing_Extensions",
    ]
    assert shim.requirement_names(args) == [
        "pytest",
        "pytest-mock",
        "requests",
        "pyyaml",
        "iniconfig",
        "pytest-json-ctrf",
        None,  # a URL is never provided
        None,  # nor is an editable install
        "typing-extensions",
    ]


def test_shim_requirement_names_of_a_missing_file_is_unknown(
    shim: ModuleType, tmp_path: Path
) -> None:
    assert shim.requirement_names(["-r", str(tmp_path / "nope.txt")]) == [None]
    assert shim.requirement_names(["--requirement", str(tmp_path / "nope.txt")]) == [None]
    assert shim.requirement_names(["-r"]) == []
    assert shim.requirement_names([]) == []


def test_shim_split_options(shim: ModuleType) -> None:
    value_opts = {"--with", "-w", "--python"}
    opts, rest = shim._split_options(
        [
            "--with",
            "pytest-mock",
            "-w=requests",
            "--isolated",
            "--python=3.12",
            "pytest",
            "-k",
            "x",
        ],
        value_opts,
    )
    assert opts == {
        "--with": ["pytest-mock"],
        "-w": ["requests"],
        "--isolated": [True],
        "--python": ["3.12"],
    }
    assert rest == ["pytest", "-k", "x"]

    opts, rest = shim._split_options(["--quiet", "--", "-not-an-option", "x"], value_opts)
    assert opts == {"--quiet": [True]} and rest == ["-not-an-option", "x"]

    opts, rest = shim._split_options(["--with"], value_opts)
    assert opts == {"--with": [""]} and rest == []

    opts, rest = shim._split_options(["--with", "a", "--with", "b", "run"], value_opts)
    assert opts == {"--with": ["a", "b"]} and rest == ["run"]


def test_shim_main_refuses_unknown_tools_and_bad_usage(
    shim: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shim.main(["shim.py"]) == 2
    assert "usage: shim.py TOOL" in capsys.readouterr().err
    assert shim.main(["shim.py", "/opt/rock-verifier/bin/nosuchtool"]) == 2
    assert "unknown tool nosuchtool" in capsys.readouterr().err
    assert shim.uvx([]) == 2
    assert "uvx needs a tool to run" in capsys.readouterr().err
    assert shim.uv(["--version"]) == 0
    assert "rock verifier toolchain" in capsys.readouterr().out


def test_shim_curl_serves_the_uv_installer_offline(shim: ModuleType, tmp_path: Path) -> None:
    out = tmp_path / "install.sh"
    assert shim.curl(["-LsSf", "https://astral.sh/uv/install.sh", "-o", str(out)]) == 0
    script = out.read_text()
    assert script.startswith("#!/bin/sh\n")
    assert f'ln -sf "{shim.BIN}/uv"' in script


# -- the toolchain ---------------------------------------------------------------------------
def test_toolchain_wrapper_text() -> None:
    text = toolchain._wrapper("uvx")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert "uvx: rock verifier toolchain stand-in" in lines[1]
    assert 'exec "$py" /opt/rock-verifier/lib/shim.py uvx "$@"' in text
    assert 'grep -v "^/opt/rock-verifier/bin$"' in text
    assert lines[-1] == 'exec uvx "$@"'
    assert text.endswith("\n")


def _wrapper_bin(tmp_path: Path, with_python: bool) -> tuple[Path, Path]:
    """A PATH directory with the few tools the wrapper needs, a fake ``mytool`` and, when
    asked, a fake python3 that prints its arguments."""
    tools = {name: shutil.which(name) for name in ("tr", "grep", "paste")}
    if not all(tools.values()):
        pytest.fail(f"the wrapper test needs tr, grep and paste on PATH: {tools}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, path in tools.items():
        (bin_dir / name).symlink_to(str(path))
    fake_tool = bin_dir / "mytool"
    fake_tool.write_text('#!/bin/sh\necho "real mytool $* PATH=$PATH"\n')
    fake_tool.chmod(0o755)
    if with_python:
        fake_py = bin_dir / "python3"
        fake_py.write_text('#!/bin/sh\necho "python3 $*"\n')
        fake_py.chmod(0o755)
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(toolchain._wrapper("mytool"))
    return bin_dir, wrapper


@pytest.mark.parametrize("with_python", [True, False])
def test_toolchain_wrapper_runs_the_shim_or_falls_back(tmp_path: Path, with_python: bool) -> None:
    bin_dir, wrapper = _wrapper_bin(tmp_path, with_python)
    env = {"PATH": f"{toolchain.TOOLCHAIN_DIR}/bin:{bin_dir}"}
    done = subprocess.run(
        ["/bin/sh", str(wrapper), "a", "b c"], env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    if with_python:
        assert done.stdout == f"python3 {toolchain.TOOLCHAIN_DIR}/lib/shim.py mytool a b c\n"
    else:
        # the toolchain's bin/ is dropped from PATH so the real tool runs, not the wrapper
        assert done.stdout == f"real mytool a b c PATH={bin_dir}\n"


def test_toolchain_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCK_CACHE", str(tmp_path / "cache"))
    got = toolchain.info()
    digest = toolchain.digest()
    assert len(digest) == 16 and int(digest, 16) >= 0
    assert got["digest"] == digest
    assert got["path"] == str(tmp_path / "cache" / "verifier" / digest)
    assert got["built"] is False
    assert got["container_path"] == "/opt/rock-verifier"
    assert got["packages"] == list(toolchain.REQUIREMENTS)
    assert any(p.startswith("pytest==") for p in got["packages"])
    assert got["shims"] == list(toolchain.SHIM_TOOLS)
    assert {"uv", "uvx", "pip", "pytest", "curl", "apt-get"} <= set(got["shims"])

    built = Path(got["path"])
    built.mkdir(parents=True)
    (built / "provided.json").write_text(json.dumps(["pytest"]))
    assert toolchain.info()["built"] is True


def test_requirement_files_keep_one_requirement_per_line(shim: ModuleType, tmp_path: Path) -> None:
    inner = tmp_path / "sub" / "inner.txt"
    inner.parent.mkdir()
    inner.write_text("requests ; python_version >= '3.8'\n")
    outer = tmp_path / "sub" / "req.txt"
    outer.write_text("pytest >= 8.0  # the runner\n-r inner.txt\n# a comment\n")
    assert shim.requirement_names(["-r", str(outer)]) == ["pytest", "requests"]
    assert shim.requirement_names([f"--requirement={outer}"]) == ["pytest", "requests"]
    assert shim.requirement_names([f"-r{outer}"]) == ["pytest", "requests"]


def test_shim_imports_standalone_with_python_only() -> None:
    """The shim runs in task containers on a bare python3: it imports nothing from rock."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('s', {str(SHIM_PATH)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(sorted(k for k in sys.modules if k.startswith(('rock', 'ale', 'pydantic'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_shim_leaves_out_what_is_held_and_keeps_options(shim: ModuleType) -> None:
    args = ["-q", "pytest==8.4.2", "--index-url", "http://x", "requests", "psutil>=5", "./pkg"]
    assert shim.without(args, {"pytest", "requests"}) == [
        "-q",
        "--index-url",
        "http://x",
        "psutil>=5",
        "./pkg",
    ]


def test_shim_held_names_what_the_toolchain_or_python_has(
    shim: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shim, "provided", lambda: {"pytest", "requests"})
    names = ["pytest", "requests", "pip", "no-such-dist-xyz", None]
    assert shim.held(names, sys.executable) == {"pytest", "requests", "pip"}


def test_add_wheels_fills_the_wheelhouse_or_says_what_to_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROCK_CACHE", str(tmp_path / "cache"))
    with pytest.raises(toolchain.ToolchainError, match="holds no wheels"):
        toolchain.add_wheels(tmp_path)
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "demo-1.0-py3-none-any.whl").write_bytes(b"PK")
    assert toolchain.add_wheels(tmp_path / "w") == ["demo-1.0-py3-none-any.whl"]
    assert toolchain.info()["wheelhouse"] == ["demo-1.0-py3-none-any.whl"]


def _import_from(archive: Path, module: str, expr: str) -> str:
    code = (
        f"import sys; sys.path.insert(0, {str(archive)!r}); import {module} as m; print(({expr}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _rewrite(archive: Path, changes: dict[str, bytes]) -> None:
    import zipfile

    with zipfile.ZipFile(archive) as zf:
        entries = {name: zf.read(name) for name in zf.namelist()}
    entries.update(changes)
    with zipfile.ZipFile(archive, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)


def test_the_zipped_packages_carry_bytecode_that_python_imports_unchecked(tmp_path: Path) -> None:
    """Each module goes in with its .pyc beside it; python imports the bytecode without
    checking it against the source (the zip's times are fixed), passes over bytecode of
    another python for the source, and a module this python cannot compile goes in alone."""
    tree = tmp_path / "site"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "__init__.py").write_text("X = 1\n")
    (tree / "newer.py").write_text("match = (\n")  # not python at all: no bytecode
    archive = tmp_path / "site.zip"
    toolchain._zip_tree(tree, archive)
    import zipfile

    names = zipfile.ZipFile(archive).namelist()
    assert sorted(names) == ["newer.py", "pkg/__init__.py", "pkg/__init__.pyc"]
    shown = f"{toolchain.TOOLCHAIN_DIR}/site.zip/pkg/__init__.py"
    assert _import_from(archive, "pkg", "m.__file__, m.X, m.__spec__.loader.get_code('pkg')"
                        ".co_filename") == str((f"{archive}/pkg/__init__.pyc", 1, shown))  # fmt: skip

    _rewrite(archive, {"pkg/__init__.py": b"X = 2\n"})  # the bytecode is what runs
    assert _import_from(archive, "pkg", "m.X") == "1"
    with zipfile.ZipFile(archive) as zf:
        compiled = bytearray(zf.read("pkg/__init__.pyc"))
    compiled[0] ^= 0xFF  # another python's magic number: the source runs
    _rewrite(archive, {"pkg/__init__.pyc": bytes(compiled)})
    assert _import_from(archive, "pkg", "m.X, m.__file__") == str((2, f"{archive}/pkg/__init__.py"))


def test_the_digest_names_the_bytecode_it_carries() -> None:
    """A toolchain built by another python (another bytecode) is another toolchain."""
    assert toolchain.ZIP_FORMAT and sys.implementation.cache_tag
    import hashlib

    h = hashlib.sha256()
    h.update(toolchain.ZIP_FORMAT.encode())
    h.update(b"cpython-0")
    h.update("\n".join(toolchain.REQUIREMENTS).encode())
    h.update(toolchain.SHIM_SOURCE.read_bytes())
    assert h.hexdigest()[:16] != toolchain.digest()
