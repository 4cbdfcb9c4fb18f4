"""The documentation's link check (part of make test): docs/ builds with MkDocs in strict
mode (a link to a missing page or anchor, or a page left out of the navigation, is an
error), and every relative link of README.md points at a file of the repository, and at a
heading that exists when it names one in docs/."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# [text](target) and ![alt](target); a target has no spaces (a title after one is dropped)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def relative_links(markdown: str) -> list[str]:
    """The links of a Markdown text that point inside the repository (code left out)."""
    text = INLINE_CODE.sub("", FENCE.sub("", markdown))
    return [
        target
        for target in LINK.findall(text)
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)  # http:, mailto:...
        and not target.startswith("#")
    ]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, (
        f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    )
    return out


def test_the_docs_build_in_strict_mode(site: Path) -> None:
    assert (site / "index.html").is_file()
    pages = sorted(p.stem for p in (ROOT / "docs").glob("*.md") if p.stem != "index")
    missing = [p for p in pages if not (site / p / "index.html").is_file()]
    assert not missing, f"docs pages not built: {missing}"


def test_every_relative_link_of_the_readme_points_at_a_file(site: Path) -> None:
    links = relative_links(README.read_text(encoding="utf-8"))
    assert links, "README.md has no relative links: the pattern no longer matches"
    broken = []
    for link in links:
        path, _, anchor = link.partition("#")
        target = (ROOT / path).resolve()
        if not target.exists():
            broken.append(f"{link}: no such file")
            continue
        if anchor and target.suffix == ".md" and target.parent == ROOT / "docs":
            html = site / ("index.html" if target.stem == "index" else f"{target.stem}/index.html")
            if f'id="{anchor}"' not in html.read_text(encoding="utf-8"):
                broken.append(f"{link}: no heading with that anchor in {path}")
    assert not broken, "broken links in README.md:\n" + "\n".join(broken)


def test_the_link_pattern_skips_code_and_urls() -> None:
    text = (
        "[a](docs/a.md) ![b](docs/b.png#x) [c](https://example.com) [d](#here)\n"
        "`[e](nowhere.md)`\n```\n[f](nowhere.md)\n```\n"
    )
    assert relative_links(text) == ["docs/a.md", "docs/b.png#x"]
