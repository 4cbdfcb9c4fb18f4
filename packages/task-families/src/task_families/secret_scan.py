"""secret-scan: find the credentials leaked in a project tree, report them and redact them.

A small project under /app holds leaked secrets of a few drawn kinds (AWS access key ids,
GitHub tokens, live Stripe keys, hard-coded passwords, PEM private keys) among look-alikes
that are not secrets: placeholders (``changeme``, ``<your-token>``, ``xxxx``, AWS's
``...EXAMPLE`` key), environment-variable references, a test fixture file marked as fake
data, public keys and certificates. The task needs interaction: which hits are real is only
known after grepping and reading them (and the fixture file's header), and the report and
the redaction are built from what was seen.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import string
import textwrap
from collections.abc import Callable
from typing import Any

from ale.synth.expert import Observation, shell, write
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._sources import fill, phrase_table, phrases

_PROJECTS = ["billing-api", "inventory-svc", "webshop", "datahub", "notifier", "reportgen"]
_PROJECTS += ["ticketing", "geo-index", "payroll", "chat-relay"]
_PKGS = ["core", "app", "service", "server", "lib"]
_HOSTS = [
    (".env", "env"),
    ("config/settings.py", "py"),
    ("deploy/values.yaml", "yaml"),
    ("scripts/sync.sh", "sh"),
    ("src/{pkg}/client.py", "py"),
    ("docker-compose.yml", "yaml"),
    ("config/app.ini", "ini"),
    (".github/workflows/ci.yml", "yaml"),
    ("config/prod.env", "env"),
    ("scripts/backup.sh", "sh"),
]
_KEYS = phrase_table("secret_scan", "keys")
_PLACEHOLDERS = {
    "aws": [
        "AKIAIOSFODNN7EXAMPLE",
        "<your-access-key-id>",
        "${AWS_ACCESS_KEY_ID}",
        "AKIA" + "X" * 16,
    ],
    "github": ["<your-token>", "ghp_" + "x" * 36, "${GITHUB_TOKEN}", "<github-token>"],
    "stripe": ["sk_live_" + "x" * 24, "<stripe-secret-key>", "${STRIPE_SECRET_KEY}"],
    "password": ["changeme", "", "<db-password>", "${DB_PASSWORD}", "xxxxxxxx", "********"],
}
_FILLER = phrase_table("secret_scan", "filler")
_FILLER["env"] += ["DB_PORT=5432", "REDIS_URL=redis://cache:6379/0", "WORKERS=4", "TZ=UTC"]
_FILLER["sh"] += ['tar czf "/tmp/{proj}.tgz" ./out', 'cd "$(dirname "$0")/.."', "DATE=$(date +%F)"]
_FILLER["py"] += ['DB_NAME = "{proj}"', "RETRIES = 3", 'ALLOWED_HOSTS = ["*"]']
_FILLER["yaml"] += ["port: 8080", "region: eu-west-1", "host: db.internal", "user: {proj}"]
_FILLER["ini"] += ["debug = false", "name = {proj}", "pool_size = 8"]
_FIRST = {"sh": ["#!/bin/bash", "set -euo pipefail"], "py": ["import os"], "ini": ["[main]"]}
_FIXTURE_HEADERS = phrases("secret_scan", "fixture_headers")
_PEM_PATHS = ["keys/deploy_key.pem", ".ssh/id_rsa", "certs/server.key", "config/jwt-signing.key"]
_PEM_TYPES = ["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY"]
_MARKERS = ["[REDACTED]", "REDACTED", "***REDACTED***", "<redacted>", "[SECRET-REMOVED]"]
_REPORTS = ["leaks.txt", "secret_report.txt", "audit/secrets.txt", "findings.txt"]
_REPORTS += ["reports/leaked.txt"]

_OPENERS = phrases("secret_scan", "openers")
_KIND_DESC = phrase_table("secret_scan", "kind_desc")
_LOOK_FOR = phrases("secret_scan", "look_for")
_NOT_SECRET = phrases("secret_scan", "not_secret")
_FIXTURE = phrases("secret_scan", "fixture")
_REPORT = phrases("secret_scan", "report")
_REDACT = phrases("secret_scan", "redact")
_PEM_REDACT = phrases("secret_scan", "pem_redact")

_TOKEN = {
    "aws": re.compile(r"AKIA[0-9A-Z]{16}"),
    "github": re.compile(r"ghp_[A-Za-z0-9]{36}"),
    "stripe": re.compile(r"sk_live_[A-Za-z0-9]{24}"),
}
_PASSWORD = re.compile(r"(?i)passw(?:or)?d\w*[\"']?\s*[:=]\s*(.*)$")
_DUMMIES = {"changeme", "change-me", "replace-me", "your-password-here", "example"}
GREP = (
    "grep -rnE 'AKIA[0-9A-Z]{16}|ghp_[A-Za-z0-9]{36}|sk_live_[A-Za-z0-9]{24}|"
    "[Pp][Aa][Ss][Ss][Ww]([Oo][Rr])?[Dd][A-Za-z_]*[\"'\\'']?[[:space:]]*[:=]|"
    "-----BEGIN [A-Z ]*PRIVATE KEY-----'"
)


def is_placeholder(value: str) -> bool:
    """Whether a value only stands in for a secret."""
    v = value.strip()
    low = v.lower()
    for prefix in ("akia", "ghp_", "sk_live_"):
        if low.startswith(prefix):
            low = low[len(prefix) :]
    return (
        not v
        or (v.startswith("<") and v.endswith(">"))
        or "${" in v
        or "os.environ" in v
        or "getenv" in v
        or "example" in v.lower()
        or re.fullmatch(r"[x*]+", low) is not None
        or low in _DUMMIES
    )


def classify(content: str) -> tuple[str, str] | None:
    """``(kind, value)`` of a real secret on a grep hit's line, or None for a look-alike."""
    if re.search(r"-----BEGIN [A-Z ]*PRIVATE KEY-----", content):
        return "pem", content.strip()
    for kind, pattern in _TOKEN.items():
        m = pattern.search(content)
        if m:
            return None if is_placeholder(m.group(0)) else (kind, m.group(0))
    m = _PASSWORD.search(content)
    if m is None:
        return None
    rest = m.group(1).strip().rstrip(",")
    if len(rest) >= 2 and rest[0] in "\"'" and rest[-1] == rest[0]:
        rest = rest[1:-1]
    return None if is_placeholder(rest) else ("password", rest)


def _token(rng: random.Random, kind: str) -> str:
    if kind == "aws":
        return "AKIA" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=16))
    alnum = string.ascii_letters + string.digits
    if kind == "github":
        return "ghp_" + "".join(rng.choices(alnum, k=36))
    if kind == "stripe":
        return "sk_live_" + "".join(rng.choices(alnum, k=24))
    return "".join(rng.choices(alnum, k=rng.randint(8, 12))) + "".join(rng.choices("-_!@%+", k=2))


def _render(fmt: str, key: str, value: str) -> str:
    if fmt == "py" and ("os.environ" in value or "getenv" in value):
        return f"{key} = {value}"
    if fmt == "env":
        return f"{key}={value}"
    if fmt == "sh":
        return f'export {key}="{value}"'
    if fmt == "py":
        return f'{key} = "{value}"'
    if fmt == "ini":
        return f"{key.lower()} = {value}"
    quoted = f'"{value}"' if not value or value[0] in "<$*" else value
    return f"{key.lower()}: {quoted}"


def _pem(rng: random.Random, label: str) -> list[str]:
    alphabet = string.ascii_letters + string.digits + "+/"
    body = ["".join(rng.choices(alphabet, k=64)) for _ in range(rng.randint(5, 9))]
    body.append("".join(rng.choices(alphabet, k=rng.randint(8, 40))) + "==")
    return [f"-----BEGIN {label}-----", *body, f"-----END {label}-----"]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@register
class SecretScan(Family):
    name = "secret-scan"
    category = "security"
    description = "Report and redact the real credentials leaked in a project, skipping decoys."
    multi_turn = True

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        proj = rng.choice(_PROJECTS)
        pkg = rng.choice(_PKGS)
        kinds, n_real, n_decoy = _draw_kinds(rng, difficulty)
        hosts = rng.sample(_HOSTS, {"easy": 3, "medium": 4, "hard": 6}[difficulty])
        hosts = [(p.format(pkg=pkg), f) for p, f in hosts]
        flat_kinds = [k for k in kinds if k != "pem"]
        slots = _place_secrets(rng, hosts, kinds, n_real, n_decoy)

        marker = rng.choice(_MARKERS)
        files, redacted, report, secrets = _host_files(rng, proj, hosts, slots, marker)
        if "pem" in kinds:
            _add_pem_pair(rng, marker, files, (redacted, report, secrets))
        if difficulty != "easy":
            files.update(_fixture_files(rng, flat_kinds))
        files["README.md"] = (
            f"# {proj}\n\nInternal service. Configure it through environment variables"
            + ("; see `.env.example`.\n" if ".env.example" in files else ".\n")
        )
        files[f"src/{pkg}/__init__.py"] = f'"""{proj} package."""\n'

        proj_dir = f"/app/{proj}"
        abs_files: dict[str, str | bytes] = {f"{proj_dir}/{p}": c for p, c in sorted(files.items())}
        out = rng.choice(_REPORTS)
        instruction = _instruction(rng, difficulty, proj, kinds, out, marker)

        untouched = {
            f"{proj_dir}/{p}": _sha(c) for p, c in sorted(files.items()) if p not in redacted
        }
        tests = _tests(
            proj_dir, f"/app/{out}", marker, sorted(report), redacted, secrets, untouched
        )
        solution = _solution(proj_dir, f"/app/{out}", marker, sorted(report), secrets)

        return TaskDraft(
            instruction=instruction,
            files=abs_files,
            modes={f"{proj_dir}/{p}": 0o755 for p, f in hosts if f == "sh"},
            tests=tests,
            solution=solution,
            expert=_expert(proj, out, marker),
            params={
                "project": proj_dir,
                "kinds": kinds,
                "leaks": sorted(report),
                "decoys": n_decoy,
                "marker": marker,
                "report": f"/app/{out}",
            },
            mistakes=[
                shell(f"cat {proj}/config/secrets.yaml", "Maybe there is a secrets file."),
                shell(f"grep -rn password /app/{proj}/etc", "Where are passwords set?"),
            ],
            tags=["secrets", "grep", "sed"],
        )


def _draw_kinds(rng: random.Random, difficulty: str) -> tuple[list[str], int, int]:
    """The kinds of secret leaked (hard drafts add a private key), how many real leaks and
    how many decoys."""
    n_kinds, n_real, n_decoy = {"easy": (2, 2, 2), "medium": (3, 4, 4), "hard": (4, 6, 6)}[
        difficulty
    ]
    token_kinds = sorted(_KEYS)
    kinds = rng.sample(token_kinds, n_kinds - (difficulty == "hard"))
    if difficulty == "hard":
        kinds.append("pem")
    n_real += rng.randint(0, 1)
    return kinds, n_real, n_decoy


def _add_pem_pair(
    rng: random.Random,
    marker: str,
    files: dict[str, str],
    found: tuple[dict[str, str], list[str], dict[str, list[str]]],
) -> None:
    """Put a private key (a leak) and its public half (not one) into ``files``, and the key
    into what the tests expect: its redacted text, its report line and its secret lines."""
    redacted, report, secrets = found
    path, block, pub, pub_text = _draw_pem_pair(rng)
    files[path] = "\n".join(block) + "\n"
    redacted[path] = marker + "\n"
    report.append(f"{path}:1")
    secrets[path] = block[1:-1]
    files[pub] = pub_text


def _place_secrets(
    rng: random.Random, hosts: list[tuple[str, str]], kinds: list[str], n_real: int, n_decoy: int
) -> dict[str, list[tuple[str, str | None]]]:
    """Host path -> its planted lines: (line text, secret value, or None for a decoy)."""
    slots: dict[str, list[tuple[str, str | None]]] = {p: [] for p, _ in hosts}
    fmt_of = dict(hosts)
    flat_kinds = [k for k in kinds if k != "pem"]
    real_kinds = flat_kinds + [rng.choice(flat_kinds) for _ in range(n_real - len(kinds))]
    used: set[tuple[str, str]] = set()

    def place(kind: str) -> tuple[str, str]:
        """A host file and a key name not used in it yet."""
        options = [(p, k) for p in sorted(slots) for k in _KEYS[kind] if (p, k) not in used]
        path, key = rng.choice(options)
        used.add((path, key))
        return path, key

    for kind in real_kinds:
        path, key = place(kind)
        value = _token(rng, kind)
        slots[path].append((_render(fmt_of[path], key, value), value))
    for _ in range(n_decoy):
        kind = rng.choice(flat_kinds)
        path, key = place(kind)
        value = rng.choice(_PLACEHOLDERS[kind])
        if kind == "password" and fmt_of[path] == "py" and rng.random() < 0.5:
            value = rng.choice([f'os.environ["{key}"]', f'os.getenv("{key}")'])
        slots[path].append((_render(fmt_of[path], key, value), None))
    return slots


def _host_files(
    rng: random.Random,
    proj: str,
    hosts: list[tuple[str, str]],
    slots: dict[str, list[tuple[str, str | None]]],
    marker: str,
) -> tuple[dict[str, str], dict[str, str], list[str], dict[str, list[str]]]:
    """Host files (filler plus planted lines), their redacted texts, leak lines and secrets."""
    files: dict[str, str] = {}
    redacted: dict[str, str] = {}
    report: list[str] = []
    secrets: dict[str, list[str]] = {}
    for path, fmt in hosts:
        filler = [f.format(proj=proj) for f in _FILLER[fmt]]
        body: list[tuple[str, str | None]] = [
            (f, None) for f in rng.sample(filler, rng.randint(3, len(filler)))
        ]
        for slot in slots[path]:
            body.insert(rng.randint(0, len(body)), slot)
        first = _FIRST.get(fmt, [])
        head = [(first[0], None)] if fmt == "sh" else []
        head.append((f"# {proj}: {path.rsplit('/', 1)[-1]}", None))
        head += [(line, None) for line in first[len(head) - 1 :]]
        lines = head + body
        files[path] = "\n".join(t for t, _ in lines) + "\n"
        for i, (_text, secret) in enumerate(lines, 1):
            if secret is not None:
                report.append(f"{path}:{i}")
                secrets.setdefault(path, []).append(secret)
        if path in secrets:
            redacted[path] = "\n".join(t.replace(v, marker) if v else t for t, v in lines) + "\n"
    return files, redacted, report, secrets


def _draw_pem_pair(rng: random.Random) -> tuple[str, list[str], str, str]:
    """A leaked private key (path, PEM lines) and a public look-alike (path, text)."""
    path = rng.choice(_PEM_PATHS)
    block = _pem(rng, rng.choice(_PEM_TYPES))
    pub = rng.choice(["keys/signing.pub", "certs/server.crt", "certs/ca.pem"])
    label = "PUBLIC KEY" if pub.endswith(".pub") else "CERTIFICATE"
    return path, block, pub, "\n".join(_pem(rng, label)) + "\n"


def _fixture_files(rng: random.Random, flat_kinds: list[str]) -> dict[str, str]:
    """A test fixture of fake tokens (marked as fake) and a `.env.example` of placeholders."""
    fixture = rng.choice(["tests/fixtures/credentials.env", "tests/fixtures/fake.env"])
    fixture_lines = [rng.choice(_FIXTURE_HEADERS)]
    for kind in rng.sample(flat_kinds, len(flat_kinds)):
        fixture_lines.append(_render("env", rng.choice(_KEYS[kind]), _token(rng, kind)))
    files = {fixture: "\n".join(fixture_lines) + "\n"}
    files[".env.example"] = (
        "\n".join(_render("env", _KEYS[k][0], rng.choice(_PLACEHOLDERS[k])) for k in flat_kinds)
        + "\n"
    )
    return files


def _instruction(
    rng: random.Random, difficulty: str, proj: str, kinds: list[str], out: str, marker: str
) -> str:
    """The instruction: what to look for, what is not a secret, the report, the redaction."""
    descs = [rng.choice(_KIND_DESC[k]).format() for k in kinds]
    rng.shuffle(descs)
    parts = [
        rng.choice(_OPENERS).format(proj=proj),
        "",
        rng.choice(_LOOK_FOR),
        "",
        *[f"- {d}" for d in descs],
        "",
        rng.choice(_NOT_SECRET).format()
        + (" " + rng.choice(_FIXTURE) if difficulty != "easy" else ""),
        "",
        rng.choice(_REPORT).format(report=f"/app/{out}", proj=proj),
        rng.choice(_REDACT).format(marker=marker),
    ]
    if "pem" in kinds:
        parts.append(rng.choice(_PEM_REDACT).format(marker=marker))
    return "\n".join(parts)


def _expert(proj: str, out: str, marker: str) -> Callable[[], ExpertProgram]:
    """The expert: grep for credentials, check file headers for fakes, report, redact, recheck."""

    def expert() -> ExpertProgram:
        hits: Observation = yield shell(
            f"{GREP} {proj} 2>/dev/null",
            "I grep the tree for the credential patterns and password assignments.",
        )
        found = []
        for row in hits.output.splitlines():
            name, _, rest = row.partition(":")
            line, _, content = rest.partition(":")
            if line.isdigit():
                found.append((name, int(line), content))
        names = sorted({n for n, _, _ in found})
        if not names:
            return "grep found nothing that looks like a credential."
        heads: Observation = yield shell(
            "head -n 1 " + " ".join(names) + " 2>/dev/null",
            f"{len(found)} hits in {len(names)} files. Before deciding, I check the file "
            "headers for test fixtures.",
        )
        fake = set()
        current = names[0] if len(names) == 1 else ""
        for row in heads.output.splitlines():
            m = re.match(r"==> (.*) <==", row)
            if m:
                current = m.group(1)
            elif "fake" in row.lower() and current:
                fake.add(current)
        real: list[list[Any]] = []
        for name, line_no, content in found:
            got = None if name in fake else classify(content)
            if got is not None:
                real.append([name, line_no, got[0], got[1]])
        rel = [f"{n[len(proj) + 1 :]}:{ln}" for n, ln, _, _ in real]
        skipped = len(found) - len(real)
        yield write(
            f"/app/{out}",
            "\n".join(rel) + "\n",
            f"{len(real)} hits are real; {skipped} are placeholders, env lookups or fake "
            f"fixtures ({', '.join(sorted(fake)) or 'none'}). I write the report first.",
        )
        yield write("/tmp/redact.py", _redactor(real, marker), "Now a small redaction script.")
        check: Observation = yield shell(
            f"python3 /tmp/redact.py && {GREP} {proj}; cat /app/{out}",
            "I run it and grep again: only the look-alikes should be left.",
        )
        if "Traceback" in check.output:
            return "The redaction script failed; see above."
        return f"Reported {len(real)} leaks in /app/{out} and replaced them with {marker}."

    return expert


def _redactor(real: list[list[Any]], marker: str) -> str:
    """A script that redacts the hits (bottom-up per file, so line numbers hold)."""
    return fill("secret_scan", "redact", hits=json.dumps(real), mark=marker)


def _solution(
    proj_dir: str, out: str, marker: str, report: list[str], secrets: dict[str, list[str]]
) -> str:
    return textwrap.dedent(
        f"""\
        mkdir -p "$(dirname {out})"
        printf '%s\\n' {" ".join(report)} > {out}
        python3 - <<'PY'
        import json
        from pathlib import Path

        SECRETS = json.loads({json.dumps(secrets)!r})
        MARK = {marker!r}
        for name, values in SECRETS.items():
            path = Path({proj_dir!r}) / name
            text = path.read_text()
            if text.startswith("-----BEGIN"):
                path.write_text(MARK + "\\n")
                continue
            for value in values:
                text = text.replace(value, MARK)
            path.write_text(text)
        PY
        """
    )


def _tests(
    proj_dir: str,
    out: str,
    marker: str,
    report: list[str],
    redacted: dict[str, str],
    secrets: dict[str, list[str]],
    untouched: dict[str, str],
) -> str:
    return fill(
        "secret_scan",
        "test_outputs",
        proj_dir=proj_dir,
        out=out,
        marker=marker,
        report=json.dumps(report),
        redacted=json.dumps(redacted),
        secrets=json.dumps(secrets),
        untouched=json.dumps(untouched),
    )
