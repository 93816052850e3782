"""The README stays a front door, its settings table stays whole, and no link is broken."""

from __future__ import annotations

import re
from pathlib import Path

from agentrun.core.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_is_at_most_15_kb():
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 15_000, f"README.md is {size} bytes: move reference to docs/"


def test_the_settings_table_names_every_setting():
    readme = (ROOT / "README.md").read_text()
    variables = {
        str(field.validation_alias)
        for field in Settings.model_fields.values()
        if isinstance(field.validation_alias, str)
    }
    missing = sorted(v for v in variables if f"`{v}`" not in readme)
    assert not missing, f"the README's settings table lacks {missing}"


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
