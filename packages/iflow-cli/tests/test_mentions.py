"""``@path`` references: which count, what the model gets, and the caps."""

from __future__ import annotations

from pathlib import Path

from iflow.mentions import MAX_FILE_CHARS, MAX_FILES, as_typed, expand_mentions, mentioned


def test_a_file_and_a_folder_are_attached_with_gitignore_honoured(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text("print('app')\n")
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("A = 1\n")
    (src / "b.py").write_text("B = 2\n")
    (src / "build.log").write_text("noise\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    (tmp_path / ".git").mkdir()
    prompt = "explain @app.py, then review @src/ (mail me@example.com, ping @nobody)"
    text, notes = expand_mentions(prompt, tmp_path)
    assert notes == [] and as_typed(text) == prompt
    attached = text[len(prompt) :]
    assert "<file path=\"app.py\">\nprint('app')\n\n</file>" in attached
    assert attached.index('path="src/b.py"') < attached.index('path="src/pkg/a.py"')
    assert "build.log" not in attached and "example.com" not in attached
    assert [raw for raw, _ in mentioned(prompt, tmp_path)] == ["app.py", "src/"]


def test_outside_the_working_directory_binary_and_too_big_are_notes(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "secret.txt").write_text("outside\n")
    (work / "blob.bin").write_bytes(b"\0\1\2" * 10)
    (work / "big.txt").write_text("x" * (MAX_FILE_CHARS + 10))
    many = work / "many"
    many.mkdir()
    for i in range(MAX_FILES + 3):
        (many / f"f{i:03}.txt").write_text(f"{i}\n")
    text, notes = expand_mentions("@../secret.txt @blob.bin @big.txt @many", work)
    assert "outside" not in text
    assert notes[0] == "@blob.bin is not text; it was left out."
    assert notes[1] == f"@big.txt was cut to its first {MAX_FILE_CHARS} characters."
    assert notes[2] == f"@many holds more than {MAX_FILES} files; the first were kept."
    assert text.count("<file path=") == 1 + MAX_FILES
    assert expand_mentions("no references here", work) == ("no references here", [])
