"""The README stays a front door, the settings table (docs/using.md) stays whole, and no link
or named section is broken."""

from __future__ import annotations

import re
from pathlib import Path

from agentledger.core.config import AgentLedgerConfig

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_is_at_most_15_kb():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 15_000, f"README.md is {size} bytes: move reference to docs/"


def test_the_settings_table_names_every_setting():
    readme = (ROOT / "docs" / "using.md").read_text().split("## Settings", 1)[1]
    variables = {
        str(field.validation_alias)
        for field in AgentLedgerConfig.model_fields.values()
        if isinstance(field.validation_alias, str)
    }
    missing = sorted(v for v in variables if f"`{v}`" not in readme)
    assert not missing, f"the settings table in docs/using.md lacks {missing}"


def test_relative_links_resolve():
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if (
                not target.startswith(("http://", "https://"))
                and not (page.parent / target).exists()
            ):
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces
    as hyphens, a repeated one numbered; headings inside code blocks are not headings."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = None if in_code else re.match(r"#{1,6} (.+)", line)
        if heading:
            slug = re.sub(r"[^\w\- ]", "", heading[1].strip().lower()).replace(" ", "-")
            repeats = seen.get(slug, 0)
            seen[slug] = repeats + 1
            anchors.add(slug if not repeats else f"{slug}-{repeats}")
    return anchors


def test_section_links_and_named_sections_exist():
    """`page.md#anchor` links and `README "Section"` mentions name headings that exist."""
    missing = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            dest = (page.parent / target) if target else page
            if dest.suffix == ".md" and anchor not in heading_anchors(dest):
                missing.append(f"{page.relative_to(ROOT)} -> {target}#{anchor}")
        for section in re.findall(r"README(?:'s)? \"([^\"]+)\"", text):
            if not re.search(rf"^#+ {re.escape(section)}$", (ROOT / "README.md").read_text(), re.M):
                missing.append(f'{page.relative_to(ROOT)} -> README "{section}"')
    assert not missing, missing


def test_sections_named_from_examples_exist():
    """An example's comment that names a page's section (`docs/using.md "Section"` or
    `README "Section"`) names a heading that page has."""
    missing = []
    for example in sorted((ROOT / "examples").rglob("*")):
        if example.suffix not in (".py", ".yaml", ".yml", ".md"):
            continue
        text = example.read_text()
        for page, section in re.findall(r"(README|docs/[\w-]+\.md)(?:'s)? \"([^\"]+)\"", text):
            target = ROOT / ("README.md" if page == "README" else page)
            if not re.search(rf"^#+ {re.escape(section)}$", target.read_text(), re.M):
                missing.append(f'{example.relative_to(ROOT)} -> {page} "{section}"')
    assert not missing, missing
