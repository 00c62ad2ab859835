"""Every documentation page the code and the docs name exists, and every relative link in docs/ resolves.

The pages are named as repository paths (a docs path in a help string, a comment, the Makefile, the README) or
as relative markdown links between the pages of docs/. A page moved or renamed without its references fails here.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A repository path of a page: docs/<folders>/<name>.md, or BENCHMARKS.md, not inside a longer path.
PAGE_PATH = re.compile(r"(?<![\w/.-])(docs/[\w/.-]*?\w\.md|BENCHMARKS\.md)(?![\w])")
# A markdown link's target: [text](target), the target up to a space or the closing parenthesis.
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)

SCANNED = ("src", "tests", "benchmarks", "examples", "docs")
SCANNED_FILES = ("Makefile", "pyproject.toml", "README.md", "BENCHMARKS.md")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".sh", ".json", ".cfg", ".ini", ".j2", ".html", ""}


def _scanned_files():
    files = [ROOT / name for name in SCANNED_FILES if (ROOT / name).is_file()]
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*")):
            built = any(part == "__pycache__" or part.endswith(".egg-info") for part in path.parts)
            if path.is_file() and path.suffix in SUFFIXES and not built:
                files.append(path)
    return files


def _named_pages():
    named = {}
    for path in _scanned_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for match in PAGE_PATH.finditer(text):
            named.setdefault(match.group(1), set()).add(str(path.relative_to(ROOT)))
    return named


def _doc_pages():
    return sorted((ROOT / "docs").rglob("*.md"))


def test_the_docs_have_pages():
    assert (ROOT / "docs" / "README.md").is_file()
    assert len(_named_pages()) > 5


@pytest.mark.parametrize("page", sorted(_named_pages()))
def test_every_named_page_exists(page):
    where = ", ".join(sorted(_named_pages()[page]))
    assert (ROOT / page).is_file(), f"{page} is named in {where} but does not exist"


def _relative_links(page):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor on the same page
        yield target


@pytest.mark.parametrize("page", _doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_in_docs_resolves(page):
    broken = []
    for target in _relative_links(page):
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)} links to missing {broken}"
