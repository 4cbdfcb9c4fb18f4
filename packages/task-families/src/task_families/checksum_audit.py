"""checksum-audit: check a release directory against its checksum manifest.

A release tree ships with a manifest of MD5, SHA-1 or SHA-256 sums, in GNU
(``hash  path``, maybe ``*path``) or BSD (``SHA256 (path) = hash``) layout; the algorithm,
the layout and, often, a manifest name that does not say which hash it holds are drawn per
task. Some files were altered after the manifest was made and some are gone; on hard
drafts files the manifest does not list were added, some with spaces in their names or
hidden. The task needs interaction: the expert reads the manifest to tell the algorithm,
runs the matching checker, parses its failures and lists the tree to find the extras.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable

from ale.synth.expert import Observation, shell, write
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._sources import fill, phrase_table, phrases

_NAMES = ["skyforge", "tern", "pavlova", "quokka-cli", "mirth", "bramble", "zenith", "cask"]
_NAMES += ["lattice", "pylon", "waxwing", "umbra"]
_ROOTS = ["/app", "/srv/releases", "/opt/dist", "/var/tmp/incoming"]
_ALGOS = {"md5": ("MD5", 32), "sha1": ("SHA1", 40), "sha256": ("SHA256", 64)}
_GENERIC = ["CHECKSUMS", "manifest.txt", "checksums.txt", "DIGESTS"]
_LAYOUT = phrases("checksum_audit", "layout")
_EXTRAS = phrases("checksum_audit", "extras")
_KEYS = phrase_table("checksum_audit", "keys")

_OPENERS = phrases("checksum_audit", "openers")
_MANIFEST = phrases("checksum_audit", "manifest")
_DEFS = phrase_table("checksum_audit", "defs")
_JSON_ASK = phrases("checksum_audit", "json_ask")
_TEXT_ASK = phrases("checksum_audit", "text_ask")
_NOTES = phrases("checksum_audit", "notes")


def _digest(algo: str, data: bytes) -> str:
    return hashlib.new(algo, data).hexdigest()


def _content(rng: random.Random, path: str, name: str) -> bytes:
    if path.endswith((".png", ".mo", ".so.1", ".a", ".pdf", ".so")) or path.startswith("bin/"):
        return rng.randbytes(rng.randint(200, 3000))
    words = ["build", "release", name, "config", "install", "notes", "version", "module"]
    lines = [" ".join(rng.choices(words, k=rng.randint(3, 9))) for _ in range(rng.randint(3, 15))]
    return ("\n".join(lines) + "\n").encode()


def _tamper(rng: random.Random, data: bytes) -> bytes:
    how = rng.choice(["flip", "append", "truncate"])
    if how == "flip" or len(data) < 4:
        i = rng.randrange(len(data))
        return data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :]
    if how == "append":
        return data + rng.choice([b"\n", b" ", b"# patched\n", b"\x00"])
    return data[: rng.randrange(1, len(data))]


def parse_manifest(text: str) -> tuple[str | None, list[str]]:
    """The algorithm a manifest's lines use (by BSD tag or hash length) and its paths."""
    algo = None
    paths = []
    by_len = {n: a for a, (_, n) in _ALGOS.items()}
    by_tag = {t: a for a, (t, _) in _ALGOS.items()}
    for line in text.splitlines():
        bsd = re.match(r"^(MD5|SHA1|SHA256) \((.*)\) = ([0-9a-f]+)$", line)
        gnu = re.match(r"^([0-9a-f]+) [ *](.*)$", line)
        if bsd:
            algo = by_tag[bsd.group(1)]
            paths.append(bsd.group(2))
        elif gnu:
            algo = by_len.get(len(gnu.group(1)), algo)
            paths.append(gnu.group(2))
    return algo, [p.removeprefix("./") for p in paths]


def parse_check(output: str) -> tuple[list[str], list[str]]:
    """Tampered and missing paths from ``*sum -c`` output."""
    tampered, missing = [], []
    for line in output.splitlines():
        if line.endswith(": FAILED open or read"):
            missing.append(line[: -len(": FAILED open or read")].removeprefix("./"))
        elif line.endswith(": FAILED"):
            tampered.append(line[: -len(": FAILED")].removeprefix("./"))
    return sorted(tampered), sorted(missing)


@register
class ChecksumAudit(Family):
    name = "checksum-audit"
    category = "security"
    description = "Find tampered, missing and unlisted files of a release against its manifest."
    multi_turn = True

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        rel, name, algo, layout, manifest, prefix = _draw_release(rng)
        n_files = {"easy": 8, "medium": 14, "hard": 20}[difficulty] + rng.randint(0, 3)
        pool = [p for p in _LAYOUT if " " not in p or difficulty == "hard"]
        paths = sorted(p.format(n=name) for p in rng.sample(pool, min(n_files, len(pool))))
        original = {p: _content(rng, p, name) for p in paths}
        tampered, missing, extra = _draw_damage(rng, difficulty, name, paths)
        files: dict[str, str | bytes] = {
            f"{rel}/{manifest}": _manifest_text(algo, layout, prefix, paths, original)
        }
        files.update(
            _release_files(rng, rel, algo, name, paths, original, (tampered, missing, extra))
        )

        cats = ["tampered", "missing"] + (["extra"] if difficulty == "hard" else [])
        keys = {c: rng.choice(_KEYS[c]) for c in cats}
        expected = {keys["tampered"]: tampered, keys["missing"]: missing}
        if "extra" in keys:
            expected[keys["extra"]] = extra
        as_json, out, ask = _draw_report(rng, cats, keys)
        instruction = _instruction(rng, rel, manifest, cats, keys, ask)
        script = [
            f"cd {rel}",
            f"{algo}sum -c --quiet {manifest} > /tmp/check.txt 2>/dev/null || true",
            "T=$(sed -n 's/: FAILED$//p' /tmp/check.txt | sed 's|^\\./||')",
            "M=$(sed -n 's/: FAILED open or read$//p' /tmp/check.txt | sed 's|^\\./||')",
        ]
        script += _solution_tail(out, as_json, keys, manifest, layout)
        return TaskDraft(
            instruction=instruction,
            files=files,
            tests=_tests(rel, out, as_json, expected),
            solution="\n".join(script) + "\n",
            expert=_expert(rel, manifest, keys, as_json, out),
            params={
                "release": rel,
                "manifest": manifest,
                "algorithm": algo,
                "layout": layout,
                "files": len(paths),
                "tampered": tampered,
                "missing": missing,
                "extra": extra,
                "report": out,
                "json": as_json,
            },
            mistakes=[
                shell(f"sha512sum -c {rel}/{manifest}", "Let me verify the sums."),
                shell(f"cat {rel}/SHA256SUMS.asc", "Is there a signature?"),
            ],
            tags=["checksums", "integrity"],
        )


def _instruction(
    rng: random.Random, rel: str, manifest: str, cats: list[str], keys: dict[str, str], ask: str
) -> str:
    """The release and its manifest, what each category of the report means, how to report."""
    defs = [f"- `{keys[c]}`: {rng.choice(_DEFS[c])}" for c in cats]
    parts = [
        rng.choice(_OPENERS).format(rel=rel, manifest=manifest),
        rng.choice(_MANIFEST).format(manifest=manifest),
        "Find the following:",
        "",
        *defs,
        "",
        ask,
        rng.choice(_NOTES),
    ]
    return " ".join(parts[:2]) + "\n\n" + "\n".join(parts[2:])


def _draw_release(rng: random.Random) -> tuple[str, str, str, str, str, str]:
    """The release directory, the project's name, the algorithm, the manifest's line layout,
    the manifest's name and the prefix its paths carry."""
    name = rng.choice(_NAMES)
    version = f"{rng.randint(0, 4)}.{rng.randint(0, 19)}.{rng.randint(0, 9)}"
    rel = f"{rng.choice(_ROOTS)}/{name}-{version}"
    algo = rng.choice(sorted(_ALGOS))
    tag, _ = _ALGOS[algo]
    layout = rng.choice(["gnu", "gnu", "binary", "bsd"])
    if rng.random() < 0.5:
        manifest = rng.choice(_GENERIC)
    else:
        manifest = rng.choice([f"{tag}SUMS", f"{algo}sums.txt", f"{tag}SUMS.txt"])
    prefix = "./" if rng.random() < 0.3 else ""
    return rel, name, algo, layout, manifest, prefix


def _draw_damage(
    rng: random.Random, difficulty: str, name: str, paths: list[str]
) -> tuple[list[str], list[str], list[str]]:
    """The files that were changed, the ones that are gone and (hard drafts) the extra ones."""
    n_bad, n_gone, n_extra = {
        "easy": (1, 1, 0),
        "medium": (rng.randint(2, 3), rng.randint(1, 2), 0),
        "hard": (rng.randint(2, 4), rng.randint(2, 3), rng.randint(2, 3)),
    }[difficulty]
    chosen = rng.sample(paths, n_bad + n_gone)
    tampered, missing = sorted(chosen[:n_bad]), sorted(chosen[n_bad:])
    extra = sorted(e.format(n=name) for e in rng.sample(_EXTRAS, n_extra))
    return tampered, missing, extra


def _manifest_text(
    algo: str, layout: str, prefix: str, paths: list[str], original: dict[str, bytes]
) -> str:
    """The manifest: one line per listed path, in the drawn layout (draws nothing)."""
    tag, _ = _ALGOS[algo]
    lines = []
    for p in paths:
        digest = _digest(algo, original[p])
        if layout == "bsd":
            lines.append(f"{tag} ({prefix}{p}) = {digest}")
        else:
            lines.append(f"{digest} {'*' if layout == 'binary' else ' '}{prefix}{p}")
    return "\n".join(lines) + "\n"


def _release_files(
    rng: random.Random,
    rel: str,
    algo: str,
    name: str,
    paths: list[str],
    original: dict[str, bytes],
    damage: tuple[list[str], list[str], list[str]],
) -> dict[str, str | bytes]:
    """The release tree on disk: originals, tampered copies (drawn in path order), extras."""
    tampered, missing, extra = damage
    files: dict[str, str | bytes] = {}
    for p in paths:
        if p in missing:
            continue
        data = original[p]
        if p in tampered:
            data = _tamper(rng, data)
            while _digest(algo, data) == _digest(algo, original[p]):
                data = _tamper(rng, data)
        files[f"{rel}/{p}"] = data
    for p in extra:
        files[f"{rel}/{p}"] = _content(rng, p, name)
    return files


def _draw_report(
    rng: random.Random, cats: list[str], keys: dict[str, str]
) -> tuple[bool, str, str]:
    """Whether the report is JSON, its path and the sentence asking for it."""
    as_json = rng.random() < 0.5
    if as_json:
        out = rng.choice(["/app/audit.json", "/app/verify-report.json", "/app/out/report.json"])
        key_list = ", ".join(f"`{keys[c]}`" for c in cats)
        ask = rng.choice(_JSON_ASK).format(out=out, keys=key_list)
    else:
        out = rng.choice(["/app/audit", "/app/report", "/app/results"])
        file_list = ", ".join(f"`{keys[c]}.txt`" for c in cats)
        ask = rng.choice(_TEXT_ASK).format(out=out, files=file_list)
    return as_json, out, ask


def _expert(
    rel: str, manifest: str, keys: dict[str, str], as_json: bool, out: str
) -> Callable[[], ExpertProgram]:
    """The expert: read the manifest, run the matching checker, list extras, write the report."""

    def expert() -> ExpertProgram:
        seen: Observation = yield shell(
            f"ls -la {rel} && cat {rel}/{manifest}",
            "First I look at the release and its manifest to see which hash it uses.",
        )
        found_algo, listed = parse_manifest(seen.output)
        if found_algo is None:
            return "I could not tell which checksum the manifest holds."
        check: Observation = yield shell(
            f"cd {rel} && {found_algo}sum -c --quiet {manifest} 2>/dev/null",
            f"The manifest lists {len(listed)} files with {found_algo.upper()} sums; "
            f"I check them with {found_algo}sum.",
        )
        bad, gone = parse_check(check.output)
        result = {keys["tampered"]: bad, keys["missing"]: gone}
        note = f"{len(bad)} files fail the check and {len(gone)} are missing."
        if "extra" in keys:
            tree: Observation = yield shell(
                f"cd {rel} && find . -type f | sed 's|^\\./||' | sort",
                note + " Now I list the tree to find files the manifest does not know.",
            )
            on_disk = [ln for ln in tree.output.splitlines() if ln]
            unknown = sorted(set(on_disk) - set(listed) - {manifest})
            result[keys["extra"]] = unknown
            note = f"{len(unknown)} files on disk are not in the manifest."
        if as_json:
            yield write(out, json.dumps(result, indent=2) + "\n", note + " Writing the report.")
        else:
            for i, (key, items) in enumerate(result.items()):
                text = "".join(f"{p}\n" for p in items)
                yield write(f"{out}/{key}.txt", text, note if i == 0 else f"Now {key}.txt.")
        shown: Observation = yield shell(
            f"cat {out}" if as_json else f"head -n 50 {out}/*.txt", "Let me check the report."
        )
        if not shown.ok:
            return "Writing the report failed; see above."
        counts = ", ".join(f"{len(v)} {k}" for k, v in result.items())
        return f"Checked {rel} against {manifest}: {counts}."

    return expert


def _solution_tail(
    out: str, as_json: bool, keys: dict[str, str], manifest: str, layout: str
) -> list[str]:
    """Shell lines finding the extras (when asked) and writing the report."""
    lines = []
    if "extra" in keys:
        listed = (
            "sed -E 's/^[A-Z0-9]+ \\((.*)\\) = [0-9a-f]+$/\\1/'"
            if layout == "bsd"
            else "sed -E 's/^[0-9a-f]+ [ *]//'"
        )
        lines += [
            f"{listed} {manifest} | sed 's|^\\./||' | sort > /tmp/listed.txt",
            f"find . -type f ! -path './{manifest}' | sed 's|^\\./||' | sort > /tmp/disk.txt",
            "X=$(comm -13 /tmp/listed.txt /tmp/disk.txt)",
        ]
    names = {"tampered": "T", "missing": "M", "extra": "X"}
    if as_json:
        pairs = ", ".join(f'"{keys[c]}": os.environ["{names[c]}"]' for c in keys)
        lines += [
            f"mkdir -p {out.rsplit('/', 1)[0]}",
            f"export {' '.join(names[c] for c in keys)}",
            "python3 - <<'PY'",
            "import json, os",
            f"data = {{{pairs}}}",
            "data = {k: [p for p in v.split('\\n') if p] for k, v in data.items()}",
            f"json.dump(data, open({out!r}, 'w'), indent=2)",
            "PY",
        ]
    else:
        lines.append(f"mkdir -p {out}")
        for c, key in keys.items():
            lines.append(f'printf "%s\\n" "${names[c]}" | sed "/^$/d" > {out}/{key}.txt')
    return lines


def _tests(rel: str, out: str, as_json: bool, expected: dict[str, list[str]]) -> str:
    return fill(
        "checksum_audit",
        "test_outputs",
        rel=rel,
        out=out,
        as_json=as_json,
        expected=json.dumps(expected),
    )
