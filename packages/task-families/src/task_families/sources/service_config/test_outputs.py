import hashlib
import json
import re
import subprocess
from pathlib import Path

ACTIVE = "$active"
SEP = "$sep"
WANT = json.loads("$want")
OTHERS = json.loads("$others")
UNTOUCHED = json.loads("$untouched")
LAUNCHER = "$launcher"
PRINTED = json.loads("$printed")


def _is_key(line):
    return any(re.match(r"^\s*" + re.escape(k) + r"\s*" + SEP, line) for k in WANT)


def test_active_has_new_values():
    lines = Path(ACTIVE).read_text().splitlines()
    for key, value in WANT.items():
        hits = [ln for ln in lines if re.match(r"^\s*" + re.escape(key) + r"\s*" + SEP, ln)]
        assert len(hits) == 1, (key, hits)
        got = hits[0].split(SEP, 1)[1].strip().strip('"').strip("'")
        assert got == value, (key, got)


def test_rest_of_active_unchanged():
    lines = Path(ACTIVE).read_text().splitlines()
    rest = [ln.rstrip() for ln in lines if not _is_key(ln)]
    assert rest == [ln.rstrip() for ln in OTHERS]


def test_other_files_untouched():
    for path, digest in UNTOUCHED.items():
        assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest, path


def test_launcher_reports_new_values():
    out = subprocess.run(
        ["bash", LAUNCHER, "--print-config"], capture_output=True, text=True, timeout=30
    ).stdout
    seen = dict(ln.split("=", 1) for ln in out.splitlines() if "=" in ln)
    for key, value in PRINTED.items():
        assert seen.get(key) == value, (key, seen.get(key))
