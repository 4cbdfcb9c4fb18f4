"""file-permissions: bring a project tree's owners and modes in line with a written policy.

Setup creates a team group, an owning user (and on harder drafts a service account and a
stray user), places a project tree under /srv, /opt or /var/www and scrambles its owners
and modes. The instruction states the policy as rules: a general owner and mode, executable
scripts, owner-only secrets, a setgid group-writable shared directory, root-owned config,
service-owned logs, world-readable public files, and on hard drafts a few named exceptions.
The tests stat every path against the expected owner, group and mode.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from ale.synth.expert import Observation, shell
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._sources import fill, phrase_table, phrases

_PROJECTS = ["atlas", "bluebird", "cinder", "dynamo", "ember", "falcon", "granite", "helix"]
_PROJECTS += ["juniper", "kestrel", "lumen", "meridian", "nimbus", "onyx", "quarry"]
_BASES = ["/srv", "/opt", "/var/www", "/data/projects"]
_USERS = ["alice", "bram", "chen", "dana", "eliska", "farid", "gwen", "hiro", "ines", "jonas"]
_USERS += ["kemal", "lena", "mateo", "nadia", "oskar", "priya"]
_TEAMS = ["devs", "webteam", "ops", "analysts", "builders", "research", "infra", "platform"]
_DIRS = phrase_table("file_permissions", "dirs")
_FILES = phrase_table("file_permissions", "files")
_FILE_MODES = [0o644, 0o666, 0o755, 0o777, 0o600, 0o700, 0o604]
_DIR_MODES = ["0755", "0777", "0700", "0775", "0705"]

_OPENERS = phrases("file_permissions", "openers")
_POLICY_INTRO = phrases("file_permissions", "policy_intro")
_BASE_RULE = phrases("file_permissions", "base_rule")
_RULES = phrase_table("file_permissions", "rules")
_SECRET_SVC = phrases("file_permissions", "secret_svc")
_EXCEPTIONS = {
    "bin": "`{p}` may be run by its owner only: `0700`",
    "secrets": "`{p}` is documentation, not a secret: `{owner}:{team}` and `0640`",
    "shared": "`{p}` is an archive: read-only for owner and group (`0440`)",
    "public": "`{p}` is not published yet: `0640`",
}
_EXC_INTRO = ["Exceptions (these win over the rules above):", "Exceptions to the rules above:"]
_EXC_INTRO += ["These exceptions override everything else:", "But note these exceptions:"]
_CLOSERS = phrases("file_permissions", "closers")


def _content(name: str, proj: str, rng: random.Random) -> str:
    if name.endswith((".sh", "Makefile")):
        return f"#!/bin/sh\n# {proj}: {name}\necho {rng.randrange(10**6)}\n"
    if name.endswith(".py"):
        return f"#!/usr/bin/env python3\nprint({rng.randrange(10**6)})\n"
    return f"{proj} {name} {rng.randrange(10**9):x}\n"


@register
class FilePermissions(Family):
    name = "file-permissions"
    category = "system-administration"
    description = "Set owners, groups and modes of a project tree to match a stated policy."
    multi_turn = False

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        proj = rng.choice(_PROJECTS)
        root = f"{rng.choice(_BASES)}/{proj}"
        owner, stray = rng.sample(_USERS, 2)
        team = rng.choice(_TEAMS)
        svc = rng.choice([f"svc-{proj}", f"{proj}d", f"{proj}-svc"])
        areas, dirs = _draw_areas(rng, difficulty)
        files, placed = _place_files(rng, difficulty, root, proj, areas, dirs)
        all_dirs = sorted(
            {root} | {p.rsplit("/", 1)[0] for p in files} | {f"{root}/{d}" for d in dirs.values()}
        )

        secret_owner = svc if difficulty == "hard" else owner
        expected = _policy_state(
            root, areas, dirs, all_dirs, files, (owner, team, svc, secret_owner)
        )
        exceptions: list[tuple[str, str]] = []
        if difficulty == "hard":
            exceptions = _draw_exceptions(rng, root, dirs, placed)
            for area, pick in exceptions:
                expected[pick] = [owner, team, _EXCEPTION_MODES[area]]

        setup, modes = _draw_setup(
            rng, difficulty, root, files, all_dirs, (owner, team, svc, stray)
        )

        rel = {a: dirs[a] for a in areas}
        instruction = _instruction(rng, difficulty, root, rel, exceptions, (owner, team, svc))

        want = {p: [o, g, m] for p, (o, g, m) in sorted(expected.items())}
        tests = _tests(want)
        solution = _fix_commands(want)

        steps = _policy_steps(root, rel, owner, team, svc if difficulty == "hard" else None)
        if exceptions:
            steps.append(_exception_step(exceptions, want))

        return TaskDraft(
            instruction=instruction,
            files=dict(files),
            modes=modes,
            setup=setup,
            tests=tests,
            solution=solution,
            expert=_expert(root, steps, want),
            params={
                "root": root,
                "owner": owner,
                "team": team,
                "service_user": svc if difficulty == "hard" else None,
                "areas": rel,
                "exceptions": [p for _, p in exceptions],
                "paths": len(want),
            },
            mistakes=[
                shell(f"chown {owner}:{team} {root}/nonexistent", "I start with the owner."),
                shell(f"ls -l {root}/{proj}", "Let me look inside."),
            ],
            tags=["permissions", "chmod", "chown"],
        )


def _draw_areas(rng: random.Random, difficulty: str) -> tuple[list[str], dict[str, str]]:
    """The areas of the project (more in harder drafts) and the directory each one is."""
    areas = ["bin", "secrets"]
    if difficulty != "easy":
        areas += ["shared", "conf"]
    if difficulty == "hard":
        areas += ["logs", "public"]
    return areas, {a: rng.choice(_DIRS[a]) for a in areas}


def _exception_step(
    exceptions: list[tuple[str, str]], want: dict[str, list[Any]]
) -> tuple[str, str]:
    """The expert's last step: the exceptions, which override the rules."""
    return (
        "Last, the exceptions, which override the rules.",
        " && ".join(
            f"chown {want[p][0]}:{want[p][1]} {p} && chmod {want[p][2]:04o} {p}"
            for _, p in exceptions
        ),
    )


_EXCEPTION_MODES = {"bin": 0o700, "secrets": 0o640, "shared": 0o440, "public": 0o640}
"""The mode an exception gives its path (owned by the general owner and team)."""


def _place_files(
    rng: random.Random,
    difficulty: str,
    root: str,
    proj: str,
    areas: list[str],
    dirs: dict[str, str],
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The tree's files with their contents, and the paths placed in each area."""
    per = {"easy": 2, "medium": 3, "hard": 4}[difficulty]
    files: dict[str, str] = {}
    placed: dict[str, list[str]] = {}
    for area in ["base", *areas]:
        names = rng.sample(_FILES[area], min(per, len(_FILES[area])))
        if area == "secrets" and difficulty == "hard":
            names.append("README.txt")
        prefix = f"{root}/{dirs[area]}" if area != "base" else root
        placed[area] = [f"{prefix}/{n}" for n in sorted(names)]
        for path in placed[area]:
            files[path] = _content(path.rsplit("/", 1)[-1], proj, rng)
    return files, placed


def _policy_state(
    root: str,
    areas: list[str],
    dirs: dict[str, str],
    all_dirs: list[str],
    files: dict[str, str],
    who: tuple[str, str, str, str],
) -> dict[str, list[object]]:
    """[owner, group, mode] of every path under the rules (exceptions not yet applied)."""
    owner, team, svc, secret_owner = who
    expected: dict[str, list[object]] = {}
    for d in all_dirs:
        expected[d] = [owner, team, 0o750]
    for p in files:
        expected[p] = [owner, team, 0o640]

    def subtree(area: str) -> list[str]:
        top = f"{root}/{dirs[area]}"
        return [p for p in [*all_dirs, *files] if p == top or p.startswith(top + "/")]

    for area in areas:
        for p in subtree(area):
            is_dir = p in all_dirs
            if area == "bin" and not is_dir:
                expected[p][2] = 0o750
            elif area == "secrets":
                expected[p] = [secret_owner, team, 0o700 if is_dir else 0o600]
            elif area == "shared":
                expected[p][2] = 0o2770 if is_dir else 0o660
            elif area in ("conf", "logs"):
                expected[p][0] = "root" if area == "conf" else svc
            elif area == "public":
                expected[p][2] = 0o755 if is_dir else 0o644
    return expected


def _draw_exceptions(
    rng: random.Random, root: str, dirs: dict[str, str], placed: dict[str, list[str]]
) -> list[tuple[str, str]]:
    """Three (area, path) exceptions of a hard draft, in the order they are stated."""
    exceptions: list[tuple[str, str]] = []
    for area in rng.sample(sorted(_EXCEPTIONS), 3):
        pick = f"{root}/{dirs[area]}/README.txt" if area == "secrets" else rng.choice(placed[area])
        exceptions.append((area, pick))
    return exceptions


def _draw_setup(
    rng: random.Random,
    difficulty: str,
    root: str,
    files: dict[str, str],
    all_dirs: list[str],
    who: tuple[str, str, str, str],
) -> tuple[list[str], dict[str, int]]:
    """Setup commands (users, scrambled owners and directory modes) and scrambled file modes."""
    owner, team, svc, stray = who
    users = [owner] + ([svc] if difficulty == "hard" else [])
    setup = [f"groupadd {team}"]
    setup += [f"useradd -M -g {team} -s /bin/bash {u}" for u in users]
    setup.append(f"useradd -M -s /bin/bash {stray}")
    modes = {p: rng.choice(_FILE_MODES) for p in sorted(files)}
    dir_cmds = " && ".join(f"chmod {rng.choice(_DIR_MODES)} {d}" for d in all_dirs)
    setup.append(f"chown -R root:root {root} && {dir_cmds}")
    strays = rng.sample(sorted(files), {"easy": 1, "medium": 2, "hard": 4}[difficulty])
    setup.append(f"chown {stray} " + " ".join(strays))
    return setup, modes


def _instruction(
    rng: random.Random,
    difficulty: str,
    root: str,
    rel: dict[str, str],
    exceptions: list[tuple[str, str]],
    who: tuple[str, str, str],
) -> str:
    """The instruction: opener, the policy as a list of rules, the exceptions, a closer."""
    owner, team, svc = who
    rules = [rng.choice(_RULES[a]).format(d=rel[a], owner=owner, team=team, svc=svc) for a in rel]
    if difficulty == "hard":
        rules.append(
            rng.choice(_SECRET_SVC).format(d=rel["secrets"], svc=svc, team=team, owner=owner)
        )
    rng.shuffle(rules)
    base_rule = rng.choice(_BASE_RULE).format(root=root, owner=owner, team=team)
    lines = [rng.choice(_OPENERS).format(root=root), "", rng.choice(_POLICY_INTRO), ""]
    lines += [f"- {base_rule}"] + [f"- {r}" for r in rules]
    if exceptions:
        lines += ["", rng.choice(_EXC_INTRO), ""]
        lines += [
            "- " + _EXCEPTIONS[a].format(p=p[len(root) + 1 :], owner=owner, team=team)
            for a, p in exceptions
        ]
    lines += ["", "All paths above are relative to `" + root + "`. " + rng.choice(_CLOSERS)]
    return "\n".join(lines)


def _expert(
    root: str, steps: list[tuple[str, str]], want: dict[str, list[Any]]
) -> Callable[[], ExpertProgram]:
    """The expert: look at the tree, apply the policy step by step, check against it."""

    def expert() -> ExpertProgram:
        seen: Observation = yield shell(
            f"find {root} -printf '%M %u:%g %p\\n' | sort -k3",
            "First I look at the tree and its current owners and modes.",
        )
        count = len(seen.output.splitlines())
        yield shell(steps[0][1], f"There are {count} paths. {steps[0][0]}")
        for thought, command in steps[1:]:
            yield shell(command, thought)
        check: Observation = yield shell(
            f"find {root} -printf '%m %u:%g %p\\n' | sort -k3",
            "Now I check the result against the policy.",
        )
        lines = check.output.splitlines()
        wrong = [p for p, (o, g, m) in want.items() if f"{m:o} {o}:{g} {p}" not in lines]
        if wrong:
            return "These paths still differ from the policy: " + ", ".join(wrong)
        return f"Owners and modes under {root} now follow the policy."

    return expert


def _policy_steps(
    root: str, rel: dict[str, str], owner: str, team: str, svc: str | None
) -> list[tuple[str, str]]:
    """The policy as (thought, command) steps: general rule first, then each area."""
    general = (
        f"chown -R {owner}:{team} {root} && find {root} -type d -exec chmod 0750 {{}} + "
        f"&& find {root} -type f -exec chmod 0640 {{}} +"
    )
    steps = [("I apply the general rule to the whole tree first.", general)]
    cmds = []
    for area, d in rel.items():
        top = f"{root}/{d}"
        if area == "bin":
            cmds.append(f"find {top} -type f -exec chmod 0750 {{}} +")
        elif area == "secrets":
            if svc:
                cmds.append(f"chown -R {svc}:{team} {top}")
            cmds.append(f"chmod 0700 {top} && find {top} -type f -exec chmod 0600 {{}} +")
        elif area == "shared":
            cmds.append(
                f"find {top} -type d -exec chmod 2770 {{}} + "
                f"&& find {top} -type f -exec chmod 0660 {{}} +"
            )
        elif area in ("conf", "logs"):
            cmds.append(f"chown -R {'root' if area == 'conf' else svc}:{team} {top}")
        elif area == "public":
            cmds.append(
                f"find {top} -type d -exec chmod 0755 {{}} + "
                f"&& find {top} -type f -exec chmod 0644 {{}} +"
            )
    steps.append(("Now the rules for the specific directories.", " && ".join(cmds)))
    return steps


def _fix_commands(want: dict[str, list[Any]]) -> str:
    """chown/chmod lines reaching ``want``, grouped by target so the script stays short."""
    by_owner: dict[str, list[str]] = {}
    by_mode: dict[str, list[str]] = {}
    for path, (o, g, m) in want.items():
        by_owner.setdefault(f"{o}:{g}", []).append(path)
        by_mode.setdefault(f"0{m:o}" if m < 0o1000 else f"{m:o}", []).append(path)
    lines = [f"chown {who} " + " ".join(paths) for who, paths in sorted(by_owner.items())]
    lines += [f"chmod {mode} " + " ".join(paths) for mode, paths in sorted(by_mode.items())]
    return "\n".join(lines) + "\n"


def _tests(want: dict[str, list[Any]]) -> str:
    return fill("file_permissions", "test_outputs", want=json.dumps(want))
