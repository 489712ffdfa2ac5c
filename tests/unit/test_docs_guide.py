"""The user guide and the READMEs stay navigable: every relative link names a file that
exists (and a heading there, for #anchors), and every Python block is valid Python."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "docs" / "ARCHITECTURE.md",
                *(ROOT / "docs" / "guide").glob("*.md"), *(ROOT / "docs" / "api").glob("*.md")])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    text = FENCE.sub("", page.read_text())  # a '#' line in a code block is no heading
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


def test_the_guide_has_its_pages() -> None:
    guide = {p.name for p in (ROOT / "docs" / "guide").glob("*.md")}
    assert {"README.md", "quickstart.md", "concepts.md", "deployment.md"} <= guide


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: pathlib.Path) -> None:
    text = FENCE.sub("", page.read_text())
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no {file.relative_to(ROOT)}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


def test_slugs_follow_github() -> None:
    assert slug("Sink mode: `iterations=N`") == "sink-mode-iterationsn"
    assert slug("The torch.compile backend") == "the-torchcompile-backend"
    assert slug("`graphengine dump-graph`") == "graphengine-dump-graph"


@pytest.mark.parametrize("page", [p for p in PAGES if "guide" in p.parts]
                         + [ROOT / "README.md"], ids=lambda p: p.name)
def test_python_blocks_parse(page: pathlib.Path) -> None:
    blocks = [body for lang, body in FENCE.findall(page.read_text()) if lang == "python"]
    for body in blocks:
        ast.parse(body)  # a SyntaxError names the line
