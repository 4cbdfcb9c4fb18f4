"""The stdlib file-system helper: gitignore semantics, list, glob, search, stat, and its
script protocol (JSON in on stdin, JSON out on stdout)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from iflow.workspace import _fsops
from iflow.workspace._fsops import glob_regex, parse_gitignore, run


def make(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def visible(root: Path, respect: bool = True, pattern: str = "**/*") -> set[str]:
    result = run("glob", {"pattern": pattern, "path": str(root), "respect_gitignore": respect})
    assert "error" not in result, result
    return set(result["files"])


# --- glob patterns --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("**/*.py", "a.py", True),
        ("**/*.py", "x/y/a.py", True),
        ("**/*.py", "a.pyc", False),
        ("*.py", "x/a.py", False),
        ("src/*.ts", "src/a.ts", True),
        ("src/*.ts", "src/a/b.ts", False),
        ("src/**/*.ts", "src/a/b/c.ts", True),
        ("src/**/*.ts", "src/c.ts", True),
        ("*.{ts,tsx}", "a.tsx", True),
        ("*.{ts,tsx}", "a.js", False),
        ("file?.txt", "file1.txt", True),
        ("file?.txt", "file10.txt", False),
        ("[a-c]*.md", "beta.md", True),
        ("[!a-c]*.md", "beta.md", False),
        ("[!a-c]*.md", "delta.md", True),
        ("lit\\*.txt", "lit*.txt", True),
        ("lit\\*.txt", "litx.txt", False),
        ("a/**", "a/b/c", True),
        ("a/**", "a", False),
    ],
)
def test_glob_regex(pattern: str, path: str, matches: bool) -> None:
    assert bool(glob_regex(pattern).match(path)) is matches


def test_parse_gitignore_skips_comments_blanks_and_trailing_spaces() -> None:
    rules = parse_gitignore("# comment\n\n  \n*.log   \n\\#hash\n!keep.log\nbuild/\n/top\n")
    assert [(r.regex.pattern, r.negate, r.dir_only, r.anchored) for r in rules] == [
        (r"^[^/]*\.log$", False, False, False),
        (r"^\#hash$", False, False, False),
        (r"^keep\.log$", True, False, False),
        (r"^build$", False, True, False),
        (r"^top$", False, False, True),
    ]


# --- gitignore semantics ---------------------------------------------------------------


def test_gitignore_patterns_negation_dirs_and_anchoring(tmp_path: Path) -> None:
    make(
        tmp_path,
        {
            ".gitignore": "# build output\n*.log\n!keep.log\nbuild/\n/root.txt\ndocs/*.md\n",
            "a.log": "",
            "keep.log": "",
            "sub/b.log": "",
            "sub/keep.log": "",
            "build/out.bin": "",
            "sub/build": "a file named build is not a directory",
            "root.txt": "",
            "sub/root.txt": "",
            "docs/a.md": "",
            "docs/deep/b.md": "",
            "other/docs/a.md": "",
            "#hash": "",
            "src/main.py": "",
        },
    )
    assert visible(tmp_path) == {
        ".gitignore",
        "keep.log",
        "sub/keep.log",
        "sub/build",
        "sub/root.txt",
        "docs/deep/b.md",
        "other/docs/a.md",
        "#hash",
        "src/main.py",
    }


def test_gitignore_double_star_forms(tmp_path: Path) -> None:
    make(
        tmp_path,
        {
            ".gitignore": "**/cache\na/**/z.txt\nlogs/**\n",
            "cache/x": "",
            "deep/er/cache/y": "",
            "a/z.txt": "",
            "a/b/c/z.txt": "",
            "b/a/z.txt": "",
            "logs/today/1.txt": "",
            "logs.txt": "",
        },
    )
    assert visible(tmp_path) == {".gitignore", "b/a/z.txt", "logs.txt"}


def test_nested_gitignore_files_apply_below_their_directory_and_win(tmp_path: Path) -> None:
    make(
        tmp_path,
        {
            ".gitignore": "*.log\n",
            "sub/.gitignore": "*.txt\n!important.log\n/only-here.md\n",
            "top.txt": "",
            "top.log": "",
            "sub/a.txt": "",
            "sub/important.log": "",
            "sub/other.log": "",
            "sub/only-here.md": "",
            "sub/deeper/only-here.md": "",
            "sub/deeper/b.txt": "",
        },
    )
    assert visible(tmp_path) == {
        ".gitignore",
        "sub/.gitignore",
        "top.txt",
        "sub/important.log",
        "sub/deeper/only-here.md",
    }


def test_files_inside_an_ignored_directory_cannot_be_re_included(tmp_path: Path) -> None:
    make(tmp_path, {".gitignore": "dir/\n!dir/keep.txt\n", "dir/keep.txt": "", "x": ""})
    assert visible(tmp_path) == {".gitignore", "x"}


def test_character_classes_question_mark_and_escaped_trailing_space(tmp_path: Path) -> None:
    make(
        tmp_path,
        {
            ".gitignore": "file[0-2].txt\n?.tmp\nspace\\ \n",
            "file1.txt": "",
            "file5.txt": "",
            "a.tmp": "",
            "ab.tmp": "",
            "space ": "",
            "space": "",
        },
    )
    assert visible(tmp_path) == {".gitignore", "file5.txt", "ab.tmp", "space"}


def test_git_directory_is_always_skipped(tmp_path: Path) -> None:
    make(tmp_path, {".git/HEAD": "ref", ".git/objects/x": "", "a.py": ""})
    assert visible(tmp_path, respect=False) == {"a.py"}
    listed = run("list", {"path": str(tmp_path), "respect_gitignore": False})
    assert [e["name"] for e in listed["entries"]] == ["a.py"]


def test_repository_root_rules_apply_when_starting_in_a_subdirectory(tmp_path: Path) -> None:
    make(
        tmp_path,
        {
            ".git/HEAD": "ref",
            ".git/info/exclude": "*.secret\n",
            ".gitignore": "pkg/gen/\n*.o\n",
            "pkg/a.c": "",
            "pkg/a.o": "",
            "pkg/key.secret": "",
            "pkg/gen/out.c": "",
        },
    )
    assert visible(tmp_path / "pkg") == {"a.c"}
    assert visible(tmp_path / "pkg", respect=False) == {"a.c", "a.o", "key.secret", "gen/out.c"}


def test_gitignore_applies_outside_a_repository_too(tmp_path: Path) -> None:
    make(tmp_path, {".gitignore": "node_modules/\n", "node_modules/m/index.js": "", "i.js": ""})
    assert visible(tmp_path) == {".gitignore", "i.js"}


def test_workspace_root_rules_apply_below_it_outside_a_repository(tmp_path: Path) -> None:
    make(tmp_path, {".gitignore": "*.tmp\n", "sub/a.tmp": "", "sub/a.txt": ""})
    assert visible(tmp_path / "sub") == {"a.tmp", "a.txt"}  # no repository, no root given
    args = {"pattern": "*", "path": str(tmp_path / "sub"), "root": str(tmp_path)}
    assert run("glob", args)["files"] == ["a.txt"]


# --- list ------------------------------------------------------------------------------


def test_list_puts_directories_first_and_reports_sizes_and_ignored(tmp_path: Path) -> None:
    make(tmp_path, {"b.txt": "12345", "a/x": "", "C/y": "", ".gitignore": "*.tmp\n", "z.tmp": ""})
    (tmp_path / "link").symlink_to(tmp_path / "b.txt")
    result = run("list", {"path": str(tmp_path)})
    assert [(e["name"], e["type"]) for e in result["entries"]] == [
        ("C", "dir"),
        ("a", "dir"),
        (".gitignore", "file"),
        ("b.txt", "file"),
        ("link", "symlink"),
    ]
    assert result["entries"][3]["size"] == 5 and result["entries"][0]["size"] is None
    assert result["ignored"] == 1 and result["truncated"] == 0
    names = [
        e["name"] for e in run("list", {"path": str(tmp_path), "ignore": ["*.txt", "C"]})["entries"]
    ]
    assert names == ["a", ".gitignore", "link"]
    everything = run("list", {"path": str(tmp_path), "respect_gitignore": False})
    assert "z.tmp" in [e["name"] for e in everything["entries"]]


def test_list_caps_entries_and_counts_the_rest(tmp_path: Path) -> None:
    for i in range(_fsops.MAX_LIST + 7):
        (tmp_path / f"f{i:05d}").touch()
    result = run("list", {"path": str(tmp_path)})
    assert len(result["entries"]) == _fsops.MAX_LIST and result["truncated"] == 7


def test_list_errors_are_sentences(tmp_path: Path) -> None:
    (tmp_path / "f").touch()
    assert "does not exist" in run("list", {"path": str(tmp_path / "nope")})["error"]
    assert "use read_file" in run("list", {"path": str(tmp_path / "f")})["error"]


# --- glob ------------------------------------------------------------------------------


def test_glob_orders_newest_first_and_counts(tmp_path: Path) -> None:
    make(tmp_path, {"old.py": "", "mid.py": "", "new.py": "", "sub/deep.py": "", "x.txt": ""})
    for age, name in enumerate(["new.py", "sub/deep.py", "mid.py", "old.py"]):
        stamp = 1_700_000_000 - age * 100
        os.utime(tmp_path / name, (stamp, stamp))
    result = run("glob", {"pattern": "**/*.py", "path": str(tmp_path)})
    assert result["files"] == ["new.py", "sub/deep.py", "mid.py", "old.py"]
    assert result["total"] == 4 and result["base"] == str(tmp_path)
    assert run("glob", {"pattern": "*.py", "path": str(tmp_path)})["total"] == 3


def test_glob_starts_at_the_static_prefix_and_takes_absolute_patterns(tmp_path: Path) -> None:
    make(tmp_path, {"src/a.ts": "", "src/b/c.ts": "", "lib/d.ts": ""})
    result = run("glob", {"pattern": "src/**/*.ts", "path": str(tmp_path)})
    assert result["base"] == str(tmp_path / "src") and set(result["files"]) == {"a.ts", "b/c.ts"}
    absolute = run("glob", {"pattern": f"{tmp_path}/lib/*.ts", "path": "/"})
    assert absolute["base"] == str(tmp_path / "lib") and absolute["files"] == ["d.ts"]
    missing = run("glob", {"pattern": "nope/*.ts", "path": str(tmp_path)})
    assert "does not exist" in missing["error"]
    assert "empty" in run("glob", {"pattern": " ", "path": str(tmp_path)})["error"]


def test_glob_caps_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fsops, "MAX_GLOB", 3)
    make(tmp_path, {f"f{i}.c": "" for i in range(5)})
    result = run("glob", {"pattern": "*.c", "path": str(tmp_path)})
    assert len(result["files"]) == 3 and result["total"] == 5


# --- search ----------------------------------------------------------------------------


def test_search_reports_file_line_and_text(tmp_path: Path) -> None:
    make(
        tmp_path,
        {
            "a.py": "import os\ndef main():\n    return os.getcwd()\n",
            "sub/b.py": "x = 1\n# TODO: main thing\n",
            "notes.md": "main idea\n",
        },
    )
    result = run("search", {"pattern": r"main\b", "path": str(tmp_path), "include": "*.py"})
    assert [(m["file"], m["line"], m["text"]) for m in result["matches"]] == [
        ("a.py", 2, "def main():"),
        ("sub/b.py", 2, "# TODO: main thing"),
    ]
    assert result["files_searched"] == 2 and not result["truncated"]
    by_path = run("search", {"pattern": "main", "path": str(tmp_path), "include": "sub/*.py"})
    assert [m["file"] for m in by_path["matches"]] == ["sub/b.py"]
    one_file = run("search", {"pattern": "os", "path": str(tmp_path / "a.py")})
    assert [m["line"] for m in one_file["matches"]] == [1, 3]


def test_search_skips_binary_large_and_ignored_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_fsops, "MAX_SEARCH_FILE", 1000)
    make(
        tmp_path,
        {
            "text.txt": "needle\n",
            "blob.bin": b"needle\x00\x01\x02",
            "big.txt": "needle\n" * 200,
            ".gitignore": "ignored.txt\n",
            "ignored.txt": "needle\n",
        },
    )
    result = run("search", {"pattern": "needle", "path": str(tmp_path)})
    assert [m["file"] for m in result["matches"]] == ["text.txt"]
    assert result["skipped_binary"] == 1 and result["skipped_large"] == 1
    unfiltered = run(
        "search", {"pattern": "needle", "path": str(tmp_path), "respect_gitignore": False}
    )
    assert [m["file"] for m in unfiltered["matches"]] == ["ignored.txt", "text.txt"]


def test_search_case_limits_and_long_lines(tmp_path: Path) -> None:
    make(tmp_path, {"a.txt": "Hello\nhello\nHELLO\n" + "hello " * 200 + "\n"})
    path = str(tmp_path)
    assert len(run("search", {"pattern": "hello", "path": path})["matches"]) == 2
    insensitive = run("search", {"pattern": "hello", "path": path, "case_sensitive": False})
    assert len(insensitive["matches"]) == 4
    assert len(run("search", {"pattern": "(?i)hello", "path": path})["matches"]) == 4
    capped = run("search", {"pattern": "(?i)hello", "path": path, "max_matches": 2})
    assert len(capped["matches"]) == 2 and capped["truncated"]
    long = run("search", {"pattern": "hello hello", "path": path})["matches"][0]["text"]
    assert len(long) <= _fsops.MAX_LINE + 10 and long.endswith("[...]")


def test_search_line_anchors_and_crlf(tmp_path: Path) -> None:
    make(tmp_path, {"w.txt": "alpha\r\nbeta\r\n", "z.txt": "x\nstart here\n"})
    result = run("search", {"pattern": "^(beta|start)$|^start", "path": str(tmp_path)})
    assert [(m["file"], m["line"], m["text"]) for m in result["matches"]] == [
        ("w.txt", 2, "beta"),
        ("z.txt", 2, "start here"),
    ]


def test_search_with_string_anchors_checks_every_line(tmp_path: Path) -> None:
    make(tmp_path, {"a.txt": "x\nfoo bar\n"})
    assert [
        m["line"] for m in run("search", {"pattern": r"\Afoo", "path": str(tmp_path)})["matches"]
    ] == [2]


def test_search_names_the_regex_problem(tmp_path: Path) -> None:
    error = run("search", {"pattern": "foo(bar", "path": str(tmp_path)})["error"]
    assert "'foo(bar' is invalid" in error and "missing )" in error
    assert (
        "does not exist" in run("search", {"pattern": "x", "path": str(tmp_path / "no")})["error"]
    )


# --- stat and the protocol ---------------------------------------------------------------


def test_stat(tmp_path: Path) -> None:
    make(tmp_path, {"f.sh": "echo hi\n"})
    (tmp_path / "f.sh").chmod(0o755)
    info = run("stat", {"path": str(tmp_path / "f.sh")})
    assert info["exists"] and info["type"] == "file" and info["size"] == 8
    assert info["mode"] == 0o755 and info["mtime"] > 0
    assert run("stat", {"path": str(tmp_path)})["type"] == "dir"
    assert run("stat", {"path": str(tmp_path / "nope")}) == {
        "path": str(tmp_path / "nope"),
        "exists": False,
    }


def test_stat_of_a_dangling_symlink(tmp_path: Path) -> None:
    (tmp_path / "dangling").symlink_to(tmp_path / "missing")
    info = run("stat", {"path": str(tmp_path / "dangling")})
    assert info["exists"] and info["type"] == "symlink"


def test_source_parses_as_python_3_7() -> None:
    """It runs on whatever python3 a sandbox image has."""
    ast.parse(Path(_fsops.__file__).read_text(), feature_version=(3, 7))


def test_unknown_ops_and_bad_arguments_are_errors() -> None:
    assert "Unknown file-system operation 'rm'" in run("rm", {})["error"]
    assert "non-empty string" in run("stat", {"path": 3})["error"]


def test_runs_as_a_script_with_json_on_stdin(tmp_path: Path) -> None:
    make(tmp_path, {"a.py": "print('hi')\n"})
    request = json.dumps({"op": "search", "args": {"pattern": "hi", "path": str(tmp_path)}})
    proc = subprocess.run(
        [sys.executable, "-I", "-S", _fsops.__file__],
        input=request.encode(),
        capture_output=True,
        check=True,
    )
    assert json.loads(proc.stdout)["matches"][0]["file"] == "a.py"
    broken = subprocess.run(
        [sys.executable, "-I", "-S", _fsops.__file__], input=b"{", capture_output=True, check=True
    )
    assert "malformed request" in json.loads(broken.stdout)["error"]
