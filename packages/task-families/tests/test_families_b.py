"""Families of group b: service-config, file-permissions, secret-scan, checksum-audit.

No Docker: determinism, rendering, instruction variety, and experts driven with
observations made by hand from the draft's own files.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from pathlib import Path

import pytest
from task_families.checksum_audit import parse_check, parse_manifest
from task_families.secret_scan import classify, is_placeholder
from task_families.service_config import find_config

from ale.synth.dedup import jaccard
from ale.synth.expert import Action, ExpertRun, Final, Observation
from ale.synth.family import DIFFICULTIES, draft_for, get_family
from ale.synth.render import render_task
from ale.task import load_task

FAMILIES = ["service-config", "file-permissions", "secret-scan", "checksum-audit"]


def _drive(draft, replies):
    """Run the draft's expert; ``replies(action)`` makes each observation. Returns the
    actions taken and the final message."""
    run = ExpertRun(draft.expert())
    actions: list[Action] = []
    step = run.next(None)
    while not isinstance(step, Final):
        actions.append(step)
        step = run.next(replies(step))
        assert len(actions) <= 12, "the expert should finish in a few actions"
    return actions, step.message


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_deterministic(family: str, difficulty: str) -> None:
    for seed in (1, 7, 23):
        a, b = draft_for(family, seed, difficulty), draft_for(family, seed, difficulty)
        assert (a.instruction, a.files, a.tests, a.solution) == (
            b.instruction,
            b.files,
            b.tests,
            b.solution,
        )
        assert a.params == b.params and a.setup == b.setup and a.modes == b.modes
        json.dumps(a.params)
        compile(a.tests, "test_outputs.py", "exec")
    assert (
        draft_for(family, 1, difficulty).instruction != draft_for(family, 2, difficulty).instruction
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_renders_and_loads(family: str, tmp_path: Path) -> None:
    fam = get_family(family)
    for difficulty in DIFFICULTIES:
        draft = draft_for(family, 5, difficulty)
        dest = render_task(
            draft,
            tmp_path / f"{family}-{difficulty}",
            family=family,
            category=fam.category,
            difficulty=difficulty,
            seed=5,
        )
        task = load_task(dest)
        assert task.metadata.difficulty == difficulty
        assert task.metadata.category == fam.category
        assert task.metadata.extra.get("family") == family
        assert task.instruction.strip() == draft.instruction.strip()
        for path in draft.files:
            assert (dest / "environment" / "rootfs" / path.lstrip("/")).is_file()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_instruction_variety(family: str, difficulty: str) -> None:
    texts = [draft_for(family, seed, difficulty).instruction for seed in range(30)]
    scores = [jaccard(a, b) for a, b in itertools.combinations(texts, 2)]
    assert sum(scores) / len(scores) < 0.3
    assert max(scores) < 0.8


# --- service-config -------------------------------------------------------------------


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_service_config_expert_follows_the_launcher(difficulty: str) -> None:
    for seed in range(6):
        draft = draft_for("service-config", seed, difficulty)
        p = draft.params
        files = draft.files

        def reply(action: Action, p=p, files=files) -> Observation:
            cmd = action.command
            if cmd.startswith("cat "):
                return Observation(files[cmd[4:]], 0)
            if cmd.startswith("grep -n '' "):
                text = files[cmd.split()[-1]]
                return Observation(
                    "\n".join(f"{i}:{ln}" for i, ln in enumerate(text.splitlines(), 1)), 0
                )
            if "--print-config" in cmd:
                return Observation(
                    "\n".join(f"{k.lower()}={v}" for k, v in p["changes"].items()), 0
                )
            return Observation("", 0)

        actions, final = _drive(draft, reply)
        cmds = [a.command for a in actions]
        assert cmds[0] == f"cat {p['launcher']}"
        if p["env_file"]:
            assert cmds[1] == f"cat {p['env_file']}"
        edit = next(c for c in cmds if "sed -i" in c)
        assert set(re.findall(r"' (/\S+)", edit)) == {p["active"]}
        for key, value in p["changes"].items():
            assert key in edit and value in edit
        assert p["active"] in final


def test_find_config_prefers_the_sourced_override() -> None:
    launcher = (
        '[ -r "/etc/default/x" ] && . "/etc/default/x"\n'
        "# CONF=/etc/x/old.conf\n"
        'CONF="${X_CONFIG:-/etc/x/x.conf}"\n'
        'done < "$CONF"\n'
    )
    assert find_config(launcher) == ("/etc/x/x.conf", "/etc/default/x")
    assert find_config(launcher, 'X_CONFIG="/etc/x/live.conf"\n')[0] == "/etc/x/live.conf"
    assert find_config('CONF="/a.conf"\n# CONF=/b.conf\ndone < "$CONF"\n') == ("/a.conf", None)


# --- file-permissions -----------------------------------------------------------------


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_file_permissions_expert_checks_its_work(difficulty: str) -> None:
    draft = draft_for("file-permissions", 3, difficulty)
    want = json.loads(re.search(r"json.loads\((.*)\)\n", draft.tests).group(1)[1:-1])
    good = "\n".join(f"{m:o} {o}:{g} {p}" for p, (o, g, m) in want.items())

    _, final = _drive(draft, lambda a: Observation(good if "%m" in a.command else "", 0))
    assert "now follow the policy" in final
    _, final = _drive(draft, lambda a: Observation("", 0))
    assert "still differ" in final
    assert len(draft.setup) >= 3 and any("useradd" in s for s in draft.setup)
    assert draft.params["root"] in draft.instruction
    if difficulty == "hard":
        assert draft.params["service_user"] in draft.instruction
        assert any(m == 0o2770 for _, _, m in want.values())


# --- secret-scan ----------------------------------------------------------------------

_GREP = re.compile(
    r"AKIA[0-9A-Z]{16}|ghp_[A-Za-z0-9]{36}|sk_live_[A-Za-z0-9]{24}|"
    r"[Pp][Aa][Ss][Ss][Ww]([Oo][Rr])?[Dd][A-Za-z_]*[\"']?\s*[:=]|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)


def _secret_reply(draft):
    proj = draft.params["project"].removeprefix("/app/")
    rel = {f"{proj}/{p[len(draft.params['project']) + 1 :]}": c for p, c in draft.files.items()}

    def reply(action: Action) -> Observation:
        if action.kind == "write":
            return Observation("Wrote it.", 0)
        if action.command.startswith("grep"):
            hits = [
                f"{name}:{i}:{line}"
                for name, text in sorted(rel.items())
                for i, line in enumerate(text.splitlines(), 1)
                if _GREP.search(line)
            ]
            return Observation("\n".join(hits), 0)
        if action.command.startswith("head -n 1 "):
            names = action.command[len("head -n 1 ") :].split()[:-1]
            if len(names) == 1:
                return Observation(rel[names[0]].splitlines()[0], 0)
            return Observation(
                "\n\n".join(f"==> {n} <==\n{rel[n].splitlines()[0]}" for n in names), 0
            )
        return Observation("", 0)

    return reply


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_secret_scan_expert_reports_only_real_leaks(difficulty: str) -> None:
    for seed in range(8):
        draft = draft_for("secret-scan", seed, difficulty)
        actions, final = _drive(draft, _secret_reply(draft))
        report = next(a for a in actions if a.kind == "write" and a.path == draft.params["report"])
        assert sorted(report.content.split()) == draft.params["leaks"], seed
        script = next(a for a in actions if a.path == "/tmp/redact.py")
        assert draft.params["marker"] in script.content
        assert "Reported" in final


def test_secret_classifier() -> None:
    assert classify('DB_PASSWORD = "Xk29dkQ!a"') == ("password", "Xk29dkQ!a")
    assert classify("password: changeme") is None
    assert classify('DB_PASSWORD = os.environ["DB_PASSWORD"]') is None
    assert classify("AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE") is None
    assert classify("GH_TOKEN=ghp_" + "x" * 36) is None
    assert classify("export T=ghp_" + "a1" * 18)[0] == "github"
    assert classify("-----BEGIN RSA PRIVATE KEY-----")[0] == "pem"
    assert is_placeholder("<your-token>") and is_placeholder("${X}") and is_placeholder("")
    assert not is_placeholder("hunter2-Zq")


# --- checksum-audit -------------------------------------------------------------------


def _checksum_reply(draft):
    p = draft.params
    rel, manifest = p["release"], p["manifest"]
    on_disk = sorted(f[len(rel) + 1 :] for f in draft.files)

    def reply(action: Action) -> Observation:
        cmd = action.command
        if action.kind == "write":
            return Observation("Wrote it.", 0)
        if cmd.startswith("ls -la"):
            return Observation("total 8\n" + draft.files[f"{rel}/{manifest}"], 0)
        if "sum -c" in cmd:
            assert f"{p['algorithm']}sum -c" in cmd
            lines = [f"{t}: FAILED" for t in p["tampered"]]
            lines += [f"{m}: FAILED open or read" for m in p["missing"]]
            return Observation("\n".join(lines), 1)
        if cmd.startswith(f"cd {rel} && find"):
            return Observation("\n".join(on_disk), 0)
        return Observation("", 0)

    return reply


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_checksum_expert_reads_the_manifest(difficulty: str) -> None:
    for seed in range(8):
        draft = draft_for("checksum-audit", seed, difficulty)
        p = draft.params
        actions, final = _drive(draft, _checksum_reply(draft))
        writes = [a for a in actions if a.kind == "write"]
        if p["json"]:
            got = json.loads(writes[0].content)
        else:
            got = {Path(a.path).stem: a.content.split("\n")[:-1] for a in writes}
        values = sorted(got.values())
        want = [p["tampered"], p["missing"]] + ([p["extra"]] if difficulty == "hard" else [])
        assert values == sorted(want), seed
        assert p["manifest"] in final


def test_manifest_and_check_parsers() -> None:
    data = b"hello\n"
    sha = hashlib.sha256(data).hexdigest()
    assert parse_manifest(f"{sha}  ./a b.txt\n{sha} *c") == ("sha256", ["a b.txt", "c"])
    md5 = hashlib.md5(data).hexdigest()
    assert parse_manifest(f"MD5 (x/y) = {md5}\n") == ("md5", ["x/y"])
    assert parse_manifest("nothing here") == (None, [])
    out = "./a: FAILED\nb c: FAILED open or read\nd: OK\n"
    assert parse_check(out) == (["a"], ["b c"])
