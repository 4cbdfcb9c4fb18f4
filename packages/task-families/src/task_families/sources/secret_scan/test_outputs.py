import hashlib
import json
from pathlib import Path

PROJ = "$proj_dir"
REPORT = "$out"
MARK = "$marker"
LEAKS = json.loads("$report")
REDACTED = json.loads("$redacted")
SECRETS = json.loads("$secrets")
UNTOUCHED = json.loads("$untouched")


def _entry(line):
    line = line.strip()
    if line.startswith(PROJ + "/"):
        line = line[len(PROJ) + 1 :]
    while line.startswith("./"):
        line = line[2:]
    return line


def _norm(text):
    out = []
    for line in text.rstrip("\n").split("\n"):
        line = line.rstrip().replace('"' + MARK + '"', MARK).replace("'" + MARK + "'", MARK)
        out.append(line)
    return out


def test_report_lists_exactly_the_leaks():
    got = [_entry(ln) for ln in Path(REPORT).read_text().splitlines() if ln.strip()]
    assert sorted(set(got)) == sorted(LEAKS)


def test_secret_values_are_gone():
    for name, values in SECRETS.items():
        text = (Path(PROJ) / name).read_text()
        for value in values:
            assert value not in text, (name, value[:12])


def test_files_redacted_with_marker():
    for name, want in REDACTED.items():
        got = (Path(PROJ) / name).read_text()
        assert _norm(got) == _norm(want), name


def test_other_files_untouched():
    for path, digest in UNTOUCHED.items():
        assert hashlib.sha256(Path(path).read_bytes()).hexdigest() == digest, path
