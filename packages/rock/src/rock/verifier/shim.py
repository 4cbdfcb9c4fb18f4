"""rock's offline verifier toolchain: stand-ins for the installers test scripts call.

Copied into a task container at /opt/rock-verifier before its tests run, with bin/
first on PATH. Test scripts written for Terminal-Bench fetch uv with curl, install
pytest with uv, pip or apt-get, and run it with uvx or uv run; with the network closed
those calls would fail. Each stand-in here serves what the toolchain already holds
(pytest and common plugins, pure-Python, in /opt/rock-verifier/site.zip) and passes every
other use to the real tool, so behaviour is the same with or without a network.
Version pins in requests are not enforced: the toolchain's versions are used.

Runs on the container's python3 (3.10 or newer for pytest; the stand-ins themselves run on 3.8); stdlib only.
"""

import json
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "bin")
SITE = os.path.join(ROOT, "site.zip")
PROVIDED_FILE = os.path.join(ROOT, "provided.json")
UV_INSTALLER_RE = re.compile(r"^https?://(astral\.sh/uv/|github\.com/astral-sh/uv/).*install\.sh")
PTH_NAME = "zz-rock-verifier.pth"
WHEELHOUSE = os.path.join(ROOT, "wheelhouse")
"""Wheels a user added to the toolchain (compiled ones too): pip installs from here first."""


def say(msg):
    sys.stderr.write("rock-verifier: " + msg + "\n")
    sys.stderr.flush()


def provided():
    """Normalised names of the distributions the toolchain holds."""
    try:
        with open(PROVIDED_FILE) as fh:
            return set(json.load(fh))
    except (OSError, ValueError):
        return set()


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def real(tool):
    """The real ``tool`` further along PATH, skipping the toolchain's own bin dirs."""
    skip = {os.path.realpath(BIN), os.path.realpath(os.path.expanduser("~/.local/bin"))}
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if not entry or os.path.realpath(entry) in skip:
            continue
        cand = os.path.join(entry, tool)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            if os.path.realpath(cand).startswith(os.path.realpath(ROOT)):
                continue
            return cand
    return None


def exec_real(tool, args):
    path = real(tool)
    if path is None:
        say(f"{tool} is not installed in this container and the toolchain does not provide it")
        return 127
    os.execv(path, [tool, *list(args)])
    return 127  # not reached


def with_site(env=None):
    """An environment whose Python finds the toolchain's packages after its own."""
    env = dict(os.environ if env is None else env)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if SITE not in parts:
        parts.append(SITE)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def req_name(spec):
    """The normalised distribution name of a requirement like ``pytest==8.4.1``."""
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", str(spec))
    return norm(match.group(1)) if match else None


_TAKES_VALUE = {
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "--target",
    "-t",
    "--prefix",
    "--root",
    "-p",
    "--python",
    "--cache-dir",
    "--timeout",
    "--retries",
    "-e",
    "--editable",
    "--platform",
    "--python-version",
    "--implementation",
    "--abi",
    "--only-binary",
    "--no-binary",
    "--progress-bar",
    "--log",
    "--upgrade-strategy",
    "--trusted-host",
    "--proxy",
    "--src",
    "--index",
}
"""pip options followed by a value."""


def requirement_names(args, base="."):
    """Requirement names from pip-style arguments (options skipped, -r files read)."""
    names, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg in ("-r", "--requirement"):
            if i + 1 < len(args):
                names += _read_requirements(os.path.join(base, args[i + 1]))
            i += 2
            continue
        if arg.startswith("--requirement=") or (arg.startswith("-r") and len(arg) > 2):
            target = arg.split("=", 1)[1] if arg.startswith("--") else arg[2:]
            names += _read_requirements(os.path.join(base, target))
            i += 1
            continue
        if arg in _TAKES_VALUE:
            if arg in ("-e", "--editable"):
                names.append(None)  # an editable install is never provided
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        names.append(req_name(arg) if "/" not in arg else None)
        i += 1
    return names


def _read_requirements(path):
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return [None]
    out = []
    base = os.path.dirname(path) or "."
    for line in lines:
        line = line.split(" #", 1)[0].strip() if not line.startswith("#") else ""
        if not line:
            continue
        if line.startswith("-"):  # an option line, e.g. -r other.txt (relative to this file)
            out += requirement_names(line.split(), base)
        else:  # one requirement per line, spaces and markers included
            out.append(req_name(line) if "/" not in line.split(";")[0] else None)
    return out


def satisfied(names, python="python3"):
    """True when every name is provided by the toolchain or installed for ``python``."""
    have = provided()
    missing = [n for n in names if n is None or n not in have]
    if not missing:
        return True
    if None in missing:
        return False
    code = (
        "import sys\nfrom importlib import metadata\n"
        "def ok(n):\n    try:\n        metadata.version(n)\n        return True\n"
        "    except Exception:\n        return False\n"
        "sys.exit(0 if all(ok(n) for n in sys.argv[1:]) else 1)\n"
    )
    return subprocess.call([python, "-c", code, *missing], stderr=subprocess.DEVNULL) == 0


def add_pth(python="python3"):
    """Make the toolchain importable for ``python`` (its site-packages gets a .pth)."""
    code = (
        "import site, sys, os\n"
        "paths = [p for p in site.getsitepackages() if p.startswith(sys.prefix)]\n"
        "paths = paths or site.getsitepackages()\n"
        "d = paths[0]\n"
        "os.makedirs(d, exist_ok=True)\n"
        f"open(os.path.join(d, {PTH_NAME!r}), 'w').write({SITE!r} + '\\n')\n"
    )
    return subprocess.call([python, "-c", code])


# -- pip ---------------------------------------------------------------------------------
def held(names, python="python3"):
    """The names the toolchain provides or ``python`` already has (never an unnamed one)."""
    have = provided()
    out = {n for n in names if n is not None and n in have}
    rest = [n for n in names if n is not None and n not in out]
    if rest:
        code = (
            "import sys\nfrom importlib import metadata\n"
            "for n in sys.argv[1:]:\n    try:\n        metadata.version(n)\n"
            "        print(n)\n    except Exception:\n        pass\n"
        )
        done = subprocess.run([python, "-c", code, *rest], capture_output=True, text=True)
        out |= set(done.stdout.split())
    return out


def without(args, names):
    """pip arguments with the requirements named ``names`` left out (options kept)."""
    out, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg in _TAKES_VALUE:
            out += args[i : i + 2]
            i += 2
            continue
        if arg.startswith("-") or req_name(arg) not in names or "/" in arg:
            out.append(arg)
        i += 1
    return out


def pip(args, python="python3"):
    if not args or args[0] != "install":
        return subprocess.call([python, "-m", "pip", *list(args)])
    names = requirement_names(args[1:])
    have = held(names, python)
    lacking = [n for n in names if n not in have]
    if have:
        add_pth(python)
        for name in sorted(have):
            print(f"Requirement already satisfied: {name} (rock verifier toolchain)")
    if names and not lacking:
        return 0
    rest = without(list(args[1:]), have)
    env = dict(os.environ, PIP_RETRIES="0", PIP_TIMEOUT="10")
    sources = [["--no-index", "--find-links", WHEELHOUSE]] if os.path.isdir(WHEELHOUSE) else []
    code = 1
    for source in [*sources, []]:  # the toolchain's wheelhouse, then the index (if online)
        code = subprocess.call([python, "-m", "pip", "install", *source, *rest], env=env)
        if code == 0:
            return 0
    shown = ", ".join(n or "an unnamed requirement" for n in lacking)
    say(
        f"pip could not install {shown}: the toolchain does not hold it and the container is "
        "probably offline (what the toolchain holds was installed). Add a wheel of it to the "
        "toolchain with `rock bench toolchain --wheelhouse DIR`, or install it in the task's "
        "Dockerfile."
    )
    return code


# -- uv / uvx ----------------------------------------------------------------------------
def _venv_python():
    venv = os.environ.get("VIRTUAL_ENV")
    if not venv and os.path.isdir(".venv"):
        venv = os.path.abspath(".venv")
    if venv and os.path.exists(os.path.join(venv, "bin", "python")):
        return venv, os.path.join(venv, "bin", "python")
    return None, "python3"


def _split_options(args, value_opts, flag_opts=()):
    """(options {name: [values]}, rest) where rest starts at the first positional."""
    opts, i = {}, 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return opts, list(args[i + 1 :])
        if not arg.startswith("-"):
            break
        name, eq, value = arg.partition("=")
        if name in value_opts:
            if not eq:
                value = args[i + 1] if i + 1 < len(args) else ""
                i += 1
            opts.setdefault(name, []).append(value)
        else:
            opts.setdefault(name, []).append(True)
        i += 1
    return opts, list(args[i:])


_UV_VALUE_OPTS = {
    "-p",
    "--python",
    "-w",
    "--with",
    "--from",
    "--with-requirements",
    "--directory",
    "--project",
    "--index-url",
    "--extra-index-url",
    "-i",
    "--cache-dir",
    "--env-file",
    "--group",
    "--extra",
    "--package",
    "--prompt",
    "--seed-version",
    "--python-preference",
    "--color",
}


def run_tool(tool, args, python="python3", venv=None):
    env = with_site()
    if venv:
        env["VIRTUAL_ENV"] = venv
        env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    if tool in ("pytest", "py.test"):
        return subprocess.call([python, "-m", "pytest", *list(args)], env=env)
    if tool in ("python", "python3"):
        return subprocess.call([python, *list(args)], env=env)
    path = shutil.which(tool, path=env["PATH"])
    if path is None:
        say(f"{tool} is not on PATH and the toolchain does not provide it")
        return 127
    return subprocess.call([path, *list(args)], env=env)


def uvx(args):
    opts, rest = _split_options(args, _UV_VALUE_OPTS)
    if not rest:
        say("uvx needs a tool to run, e.g. uvx pytest")
        return 2
    tool = re.split(r"[@=<>~!]", rest[0])[0]
    wanted = [req_name(w) for w in opts.get("-w", []) + opts.get("--with", [])]
    if "--from" in opts:
        wanted.append(req_name(opts["--from"][0]))
    if tool not in ("pytest", "py.test", "python", "python3") or wanted:
        need = [n for n in [*wanted, norm(tool)] if n not in ("python", "python3", "py-test")]
        if need and not satisfied(need):
            say(
                "uvx cannot fetch {} offline; the toolchain holds {}".format(
                    ", ".join(need), ", ".join(sorted(provided()))
                )
            )
            return 1
    return run_tool(tool, rest[1:])


def uv(args):
    opts, rest = _split_options(args, _UV_VALUE_OPTS)
    if "--version" in opts or (rest[:1] == ["version"]):
        print("uv 0.0.0 (rock verifier toolchain, offline)")
        return 0
    if "--directory" in opts:
        os.chdir(str(opts["--directory"][-1]))
    if not rest:
        say("usage: uv venv|pip|run|add|sync|init|tool|python ...")
        return 2
    cmd, rest = rest[0], rest[1:]
    if cmd in _UV_COMMANDS:
        return _UV_COMMANDS[cmd](rest)
    if cmd in ("init", "sync", "lock", "python", "cache", "self"):
        return 0
    if cmd == "tool" and rest[:1] == ["run"]:
        return uvx(rest[1:])
    say(f"uv {cmd} is not supported offline by the rock verifier toolchain")
    return 2


def _uv_venv(rest):
    _vopts, vrest = _split_options(rest, _UV_VALUE_OPTS)
    target = vrest[0] if vrest else ".venv"
    code = subprocess.call(
        ["python3", "-m", "venv", "--without-pip", "--system-site-packages", "--clear", target]
    )
    if code == 0:
        add_pth(os.path.join(target, "bin", "python"))
        print(f"Created virtual environment at: {target} (rock verifier toolchain)")
        print(f"Activate with: source {target}/bin/activate")
    return code


def _uv_pip(rest):
    _venv, python = _venv_python()
    if rest and rest[0] == "install":
        return pip(rest, python)
    if rest and rest[0] == "sync":
        names = requirement_names(rest[1:])
        if names and satisfied(names, python):
            add_pth(python)
            print(f"Resolved {len(names)} packages from the rock verifier toolchain")
            return 0
        say(
            "uv cannot install {} offline; the toolchain holds {}".format(
                ", ".join(n or "?" for n in names), ", ".join(sorted(provided()))
            )
        )
        return 1
    if rest and rest[0] in ("list", "freeze", "show"):
        return subprocess.call([python, "-m", "pip", *rest], env=with_site())
    return 0


def _uv_run(rest):
    ropts, rrest = _split_options(rest, _UV_VALUE_OPTS)
    wanted = [req_name(w) for w in ropts.get("--with", []) + ropts.get("-w", [])]
    if wanted and not satisfied(wanted):
        say("uv run cannot fetch {} offline".format(", ".join(wanted)))
        return 1
    if not rrest:
        say("uv run needs a command")
        return 2
    venv, python = _venv_python()
    return run_tool(rrest[0], rrest[1:], python=python, venv=venv)


def _uv_add(rest):
    _venv, python = _venv_python()
    names = requirement_names([a for a in rest if not a.startswith("--dev")])
    if satisfied(names, python):
        add_pth(python)
        return 0
    say("uv add cannot fetch {} offline".format(", ".join(n or "?" for n in names)))
    return 1


_UV_COMMANDS = {"venv": _uv_venv, "pip": _uv_pip, "run": _uv_run, "add": _uv_add}


# -- curl / wget -------------------------------------------------------------------------
UV_INSTALL_SCRIPT = """#!/bin/sh
# uv installer stand-in (rock verifier toolchain, offline)
mkdir -p "$HOME/.local/bin"
ln -sf "%(bin)s/uv" "$HOME/.local/bin/uv"
ln -sf "%(bin)s/uvx" "$HOME/.local/bin/uvx"
cat > "$HOME/.local/bin/env" <<'ENVEOF'
#!/bin/sh
case ":${PATH}:" in
    *:"%(bin)s":*) ;;
    *) export PATH="%(bin)s:$HOME/.local/bin:$PATH" ;;
esac
ENVEOF
cp "$HOME/.local/bin/env" "$HOME/.local/bin/env.sh" 2>/dev/null || true
echo "installed uv (rock verifier toolchain, offline) to $HOME/.local/bin"
"""


def _fetch_uv(args, out_flag):
    urls = [a for a in args if UV_INSTALLER_RE.match(a)]
    if not urls:
        return None
    script = UV_INSTALL_SCRIPT % {"bin": BIN}
    out = None
    for i, a in enumerate(args):
        if a in out_flag and i + 1 < len(args):
            out = args[i + 1]
    if out and out != "-":
        with open(out, "w") as fh:
            fh.write(script)
    else:
        sys.stdout.write(script)
    return 0


def curl(args):
    done = _fetch_uv(args, ("-o", "--output"))
    return done if done is not None else exec_real("curl", args)


def wget(args):
    done = _fetch_uv(args, ("-O", "--output-document"))
    return done if done is not None else exec_real("wget", args)


# -- apt-get -----------------------------------------------------------------------------
def apt(tool, args):
    words = [a for a in args if not a.startswith("-")]
    if not words:
        return exec_real(tool, args)
    if words[0] == "update":
        print("rock verifier toolchain: offline, using the installed package lists")
        return 0
    if words[0] == "install":
        pkgs = [w.split("=")[0] for w in words[1:]]
        missing = [
            p
            for p in pkgs
            if subprocess.call(
                ["dpkg", "-s", p], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            != 0
        ]
        if not missing:
            for p in pkgs:
                print(f"{p} is already installed (rock verifier toolchain)")
            return 0
        code = subprocess.call([real(tool) or tool, *list(args)])
        if code != 0:
            say(
                "{} could not install {}; the container is probably offline. Install it in "
                "the task's Dockerfile.".format(tool, " ".join(missing))
            )
        return code
    return exec_real(tool, args)


def main(argv):
    if len(argv) < 2:
        say("usage: shim.py TOOL [ARGS...]")
        return 2
    tool, args = os.path.basename(argv[1]), argv[2:]
    if tool in ("pip", "pip3"):
        return pip(args)
    if tool == "uv":
        return uv(args)
    if tool == "uvx":
        return uvx(args)
    if tool in ("pytest", "py.test"):
        return run_tool("pytest", args)
    if tool == "curl":
        return curl(args)
    if tool == "wget":
        return wget(args)
    if tool in ("apt-get", "apt"):
        return apt(tool, args)
    say(f"unknown tool {tool}")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
