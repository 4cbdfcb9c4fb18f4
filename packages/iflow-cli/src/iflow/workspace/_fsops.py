"""File-system queries for the tools: ``list``, ``glob``, ``search`` and ``stat``.

Standard library only, and runnable on Python 3.7+: the sandbox workspace sends this
file's source to ``python3`` inside the sandbox, where nothing else is installed. Run as
a script it reads one JSON object ``{"op": ..., "args": {...}}`` on stdin and writes one
JSON result on stdout. Every operation returns a JSON-able dict; failures are
``{"error": "one sentence"}``.

``.gitignore`` files are honoured with a small implementation of git's rules: nested
files (deeper ones win), ``!`` negation, ``dir/`` (directories only), ``/x`` and
``a/b`` (anchored to the file's directory), ``*``, ``?``, ``[...]`` and ``**``, comments
and escaped characters. Inside a git repository the ``.gitignore`` files of the
directories above the starting point and ``.git/info/exclude`` count too; outside one,
those from the optional ``root`` argument (the workspace root) down apply. ``.git`` is
never entered.
"""

from __future__ import annotations

import json
import os
import re
import stat as stat_mod
import sys

MAX_LIST = 1000  # entries ``list`` returns at most
MAX_GLOB = 500  # paths ``glob`` returns at most
MAX_WALK = 200_000  # files one walk visits before it stops and says so
MAX_MATCHES = 200  # default cap on ``search`` matches
MAX_SEARCH_FILE = 5 * 1024 * 1024  # ``search`` skips larger files
MAX_LINE = 300  # ``search`` clips matched lines to this many characters
BINARY_PROBE = 8192  # a NUL byte in this many leading bytes marks a file as binary


# --- glob patterns -> regular expressions ---------------------------------------------


def _class(pat: str, i: int) -> tuple[str, int] | None:
    """The regex of the bracket expression starting at ``pat[i] == '['`` and the index after it."""
    j = i + 1
    negate = j < len(pat) and pat[j] in "!^"
    if negate:
        j += 1
    parts: list[str] = []
    first = True
    while j < len(pat):
        c = pat[j]
        if c == "]" and not first:
            body = "".join(parts)
            return ("(?!/)[^" + body + "]" if negate else "[" + body + "]"), j + 1
        if c == "\\" and j + 1 < len(pat):
            j += 1
            c = pat[j]
        parts.append(c if c == "-" else "\\" + c if c in "\\^[]&~|" else c)
        first = False
        j += 1
    return None


def _braces(pat: str, i: int) -> tuple[list[str], int] | None:
    """The alternatives of the brace group starting at ``pat[i] == '{'`` and the index after it."""
    depth, start, alts, j = 0, i + 1, [], i
    while j < len(pat):
        c = pat[j]
        if c == "\\":
            j += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                alts.append(pat[start:j])
                return (alts, j + 1) if len(alts) > 1 else None
        elif c == "," and depth == 1:
            alts.append(pat[start:j])
            start = j + 1
        j += 1
    return None


def translate(pat: str, braces: bool = False) -> str:
    """A regex (no anchors) for a glob: ``*`` and ``?`` stop at ``/``; ``**`` as a whole
    segment spans directories; ``{a,b}`` alternatives when ``braces``."""
    out, i, n = [], 0, len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            j = i
            while j < n and pat[j] == "*":
                j += 1
            whole = j - i == 2 and (i == 0 or pat[i - 1] == "/") and (j == n or pat[j] == "/")
            if whole and j == n:
                out.append(".*")
            elif whole:
                out.append("(?:.*/)?")
                j += 1
            else:
                out.append("[^/]*")
            i = j
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[":
            found = _class(pat, i)
            if found:
                out.append(found[0])
                i = found[1]
                continue
            out.append("\\[")
        elif c == "\\":
            i += 1
            out.append(re.escape(pat[i]) if i < n else "\\\\")
        elif c == "{" and braces:
            group = _braces(pat, i)
            if group:
                out.append("(?:" + "|".join(translate(a, True) for a in group[0]) + ")")
                i = group[1]
                continue
            out.append("\\{")
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A compiled full-match regex for a glob with ``**`` and ``{a,b}``."""
    return re.compile("^" + translate(pattern, braces=True) + "$", re.DOTALL)


# --- .gitignore -----------------------------------------------------------------------


class Rule:
    """One line of a ``.gitignore`` file."""

    __slots__ = ("anchored", "dir_only", "negate", "regex")

    def __init__(self, regex: re.Pattern[str], negate: bool, dir_only: bool, anchored: bool):
        self.regex, self.negate, self.dir_only, self.anchored = regex, negate, dir_only, anchored


def parse_gitignore(text: str) -> list[Rule]:
    """The rules of a ``.gitignore`` file's text, in file order."""
    rules = []
    for raw in text.splitlines():
        line = raw
        end = len(line)
        while end > 0 and line[end - 1] == " " and not (end > 1 and line[end - 2] == "\\"):
            end -= 1
        line = line[:end]
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        dir_only = line.endswith("/") and not line.endswith("\\/")
        if dir_only:
            line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/") if anchored else line
        regex = re.compile("^" + translate(line) + "$", re.DOTALL)
        rules.append(Rule(regex, negate, dir_only, anchored))
    return rules


def _read_rules(path: str) -> list[Rule]:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return parse_gitignore(fh.read())
    except OSError:
        return []


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _repo_root(path: str) -> str | None:
    current = path
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


class Ignorer:
    """Decides whether a path is ignored: by ``.gitignore`` rules (when respected) and by
    ``.git``, which is always skipped."""

    def __init__(self, start: str, respect_gitignore: bool = True, root: str | None = None):
        self.respect = respect_gitignore
        self._rules: dict[str, list[Rule]] = {}
        self._top = start
        self._exclude: list[Rule] = []
        if respect_gitignore:
            repo = _repo_root(start)
            if repo is not None:
                self._top = repo
                self._exclude = _read_rules(os.path.join(repo, ".git", "info", "exclude"))
            elif root and _under(start, os.path.abspath(root)):
                self._top = os.path.abspath(root)

    def _rules_of(self, directory: str) -> list[Rule]:
        rules = self._rules.get(directory)
        if rules is None:
            rules = _read_rules(os.path.join(directory, ".gitignore"))
            if directory == self._top:
                rules = self._exclude + rules
            self._rules[directory] = rules
        return rules

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Whether the absolute ``path`` is ignored (its parents are not checked: walks
        prune ignored directories, as git does)."""
        if os.path.basename(path) == ".git":
            return True
        if not self.respect:
            return False
        parent = os.path.dirname(path)
        if not _under(parent, self._top):
            return False
        chain, current = [], parent
        while True:
            chain.append(current)
            if current == self._top:
                break
            current = os.path.dirname(current)
        result = False
        for directory in reversed(chain):
            rel = os.path.relpath(path, directory).replace(os.sep, "/")
            name = rel.rsplit("/", 1)[-1]
            for rule in self._rules_of(directory):
                if rule.dir_only and not is_dir:
                    continue
                if rule.regex.match(rel if rule.anchored else name):
                    result = not rule.negate
        return result


# --- walking --------------------------------------------------------------------------


def _clean(text: str) -> str:
    """Text safe to encode as UTF-8 (undecodable file-name bytes become U+FFFD)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _walk(top: str, ignorer: Ignorer, max_depth: int | None, counter: list[int]):
    """Yield (absolute path, path relative to ``top``) of the files under ``top``, sorted,
    pruning ignored directories; stop after ``MAX_WALK`` entries (``counter[1]`` set)."""
    for dirpath, dirnames, filenames in os.walk(top):
        depth = 0 if dirpath == top else os.path.relpath(dirpath, top).count(os.sep) + 1
        keep = []
        for name in sorted(dirnames):
            full = os.path.join(dirpath, name)
            if os.path.islink(full) or ignorer.ignored(full, True):
                continue
            if max_depth is None or depth + 1 < max_depth:
                keep.append(name)
        dirnames[:] = keep
        for name in sorted(filenames):
            counter[0] += 1
            if counter[0] > MAX_WALK:
                counter[1] = 1
                return
            full = os.path.join(dirpath, name)
            if ignorer.ignored(full, False):
                continue
            yield full, os.path.relpath(full, top).replace(os.sep, "/")


def _ignorer(start: str, args: dict) -> Ignorer:
    return Ignorer(start, bool(args.get("respect_gitignore", True)), args.get("root"))


def _need_path(args: dict) -> str:
    value = args.get("path", ".")
    if not isinstance(value, str) or not value:
        raise ValueError("'path' must be a non-empty string path.")
    return os.path.abspath(value)


def _missing(path: str) -> dict:
    return {"error": f"{path} does not exist; check the path (list_directory shows what is there)."}


# --- operations -----------------------------------------------------------------------


def op_list(args: dict) -> dict:
    """The entries of a directory: directories first, then by name."""
    path = _need_path(args)
    if not os.path.exists(path):
        return _missing(path)
    if not os.path.isdir(path):
        return {"error": f"{path} is a file, not a directory; use read_file to read it."}
    patterns = [glob_regex(p) for p in args.get("ignore") or []]
    ignorer = _ignorer(path, args)
    entries, ignored = [], 0
    for name in os.listdir(path):
        full = os.path.join(path, name)
        try:
            info = os.lstat(full)
        except OSError:
            continue
        kind = _kind(info.st_mode)
        is_dir = kind == "dir" or (kind == "symlink" and os.path.isdir(full))
        if any(p.match(name) for p in patterns) or ignorer.ignored(full, is_dir):
            ignored += 1
            continue
        size = info.st_size if kind == "file" else None
        entries.append({"name": _clean(name), "type": kind, "size": size})
    entries.sort(key=lambda e: (e["type"] != "dir", e["name"]))
    return {
        "path": _clean(path),
        "entries": entries[:MAX_LIST],
        "truncated": max(0, len(entries) - MAX_LIST),
        "ignored": ignored,
    }


def _kind(mode: int) -> str:
    if stat_mod.S_ISLNK(mode):
        return "symlink"
    if stat_mod.S_ISDIR(mode):
        return "dir"
    return "file" if stat_mod.S_ISREG(mode) else "other"


def _split_static(pattern: str) -> tuple[str, str]:
    """The leading directories of a glob without wildcards, and the rest."""
    parts = pattern.split("/")
    static = []
    while len(parts) > 1 and not any(c in parts[0] for c in "*?[{\\"):
        static.append(parts.pop(0))
    return "/".join(static), "/".join(parts)


def op_glob(args: dict) -> dict:
    """Files matching a glob, most recently modified first."""
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern.strip():
        return {"error": "The glob pattern is empty; pass one such as **/*.py."}
    base = _need_path(args)
    static, rest = _split_static(pattern)
    if pattern.startswith("/"):
        base = static or "/"
    elif static:
        base = os.path.normpath(os.path.join(base, static))
    if not os.path.isdir(base):
        if os.path.exists(base):
            return {"error": f"{base} is a file, not a directory; glob searches directories."}
        return _missing(base)
    regex = glob_regex(rest)
    max_depth = None if "**" in rest else rest.count("/") + 1
    counter = [0, 0]
    found = []
    for full, rel in _walk(base, _ignorer(base, args), max_depth, counter):
        if regex.match(rel):
            try:
                mtime = os.stat(full).st_mtime
            except OSError:
                mtime = 0.0
            found.append((mtime, rel))
    found.sort(key=lambda item: (-item[0], item[1]))
    return {
        "base": _clean(base),
        "files": [_clean(rel) for _, rel in found[:MAX_GLOB]],
        "total": len(found),
        "incomplete": bool(counter[1]),
    }


def op_search(args: dict) -> dict:
    """Lines matching a Python regex in the files under a path (or in one file)."""
    compiled = _search_regexes(args)
    if isinstance(compiled, dict):
        return compiled
    regex, prefilter = compiled
    path = _need_path(args)
    if not os.path.exists(path):
        return _missing(path)
    include = args.get("include") or None
    include_re = glob_regex(include) if include else None
    limit = int(args.get("max_matches") or MAX_MATCHES)
    counter = [0, 0]
    if os.path.isdir(path):
        base = path
        files = _walk(base, _ignorer(base, args), None, counter)
    else:
        base = os.path.dirname(path)
        files = iter([(path, os.path.basename(path))])
    matches: list[dict] = []
    counts = {"searched": 0, "binary": 0, "large": 0}
    more = False
    for full, rel in files:
        if include_re and not include_re.match(
            rel if "/" in str(include) else rel.rsplit("/", 1)[-1]
        ):
            continue
        text = _searchable_text(full, counts)
        if text is None or (prefilter is not None and not prefilter.search(text)):
            continue
        more = _add_matches(text, rel, regex, limit, matches)
        if more:
            break
    return {
        "base": _clean(base),
        "matches": matches,
        "truncated": more,
        "files_searched": counts["searched"],
        "skipped_binary": counts["binary"],
        "skipped_large": counts["large"],
        "incomplete": bool(counter[1]),
    }


def _search_regexes(args: dict) -> tuple[re.Pattern[str], re.Pattern[str] | None] | dict:
    """The search's line regex and its whole-file pre-check (None where ``\\A`` or ``\\Z``
    would match differently over a whole file), or the error of a bad pattern."""
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        return {"error": "The search pattern is empty; pass a regular expression."}
    flags = 0 if args.get("case_sensitive", True) else re.IGNORECASE
    try:
        regex = re.compile(pattern, flags)
    except re.error as exc:
        return {
            "error": f"The regex {pattern!r} is invalid ({exc}); fix it, escaping characters "
            "such as ( [ . * + ? with a backslash to match them literally."
        }
    # A whole-file pre-check skips files without a match fast (\A and \Z differ there).
    whole_file_differs = "\\A" in pattern or "\\Z" in pattern
    return regex, None if whole_file_differs else re.compile(pattern, flags | re.MULTILINE)


def _searchable_text(full: str, counts: dict) -> str | None:
    """The text of a file to search, or None for one skipped (too large, binary or
    unreadable); ``counts`` counts the files searched and skipped."""
    try:
        if os.path.getsize(full) > MAX_SEARCH_FILE:
            counts["large"] += 1
            return None
        with open(full, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if b"\0" in data[:BINARY_PROBE]:
        counts["binary"] += 1
        return None
    counts["searched"] += 1
    return data.decode("utf-8", "replace").replace("\r\n", "\n")


def _add_matches(text: str, rel: str, regex: re.Pattern[str], limit: int, matches: list) -> bool:
    """Add the lines of ``text`` that match to ``matches``; True when a match is left out
    because ``limit`` was reached."""
    for number, line in enumerate(text.split("\n"), 1):
        if regex.search(line):
            if len(matches) >= limit:
                return True
            clipped = line if len(line) <= MAX_LINE else line[:MAX_LINE] + " [...]"
            matches.append({"file": _clean(rel), "line": number, "text": clipped})
    return False


def op_stat(args: dict) -> dict:
    """Whether a path exists, and its type, size, permission bits and modification time."""
    path = _need_path(args)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        try:
            info = os.lstat(path)  # a dangling symlink
        except FileNotFoundError:
            return {"path": _clean(path), "exists": False}
    return {
        "path": _clean(path),
        "exists": True,
        "type": _kind(info.st_mode),
        "size": info.st_size,
        "mode": stat_mod.S_IMODE(info.st_mode),
        "mtime": info.st_mtime,
    }


def op_tree(args: dict) -> dict:
    """Every regular file under ``path`` (ignored ones left out) with its size, modification
    time in ns and mode: what checkpoints compare to find the files a turn changed."""
    path = _need_path(args)
    if not os.path.isdir(path):
        return _missing(path)
    counter = [0, 0]
    files = []
    for full, rel in _walk(path, _ignorer(path, args), None, counter):
        try:
            info = os.lstat(full)
        except OSError:
            continue
        if stat_mod.S_ISREG(info.st_mode):
            files.append([_clean(rel), info.st_size, info.st_mtime_ns, info.st_mode & 0o7777])
    return {"path": _clean(path), "files": files, "truncated": bool(counter[1])}


OPS = {"list": op_list, "glob": op_glob, "search": op_search, "stat": op_stat, "tree": op_tree}


def run(op: str, args: dict) -> dict:
    """Run one operation; every failure becomes ``{"error": ...}``."""
    func = OPS.get(op)
    if func is None:
        return {"error": f"Unknown file-system operation {op!r}; use one of {', '.join(OPS)}."}
    if not isinstance(args, dict):
        return {"error": "The arguments of a file-system operation must be a JSON object."}
    try:
        return func(args)
    except (ValueError, TypeError) as exc:
        return {"error": str(exc)}
    except PermissionError as exc:
        return {"error": f"Permission denied for {exc.filename}; pick a path you can read."}
    except OSError as exc:
        return {"error": f"{op} failed on {exc.filename or 'a path'}: {exc.strerror or exc}."}


def main(raw: bytes | None = None) -> None:
    """Read ``{"op", "args"}`` as JSON (``raw``, else stdin); write the result as JSON on stdout."""
    try:
        data = sys.stdin.buffer.read() if raw is None else raw
        request = json.loads(data.decode("utf-8"))
        result = run(request["op"], request.get("args") or {})
    except (ValueError, KeyError, TypeError, AttributeError):
        result = {"error": "The file-system helper got a malformed request (a bug in iflow)."}
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
