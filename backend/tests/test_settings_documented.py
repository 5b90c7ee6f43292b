"""Every setting Config declares is documented in .env.example and in docs/CONFIGURATION.md, and neither
documents a setting Config does not have."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from app.config import setting_names

REPO = Path(__file__).resolve().parents[2]
ENV_EXAMPLE = REPO / ".env.example"
REFERENCE = REPO / "docs" / "CONFIGURATION.md"

# `NAME=value`, or commented out as `# NAME=value` (a setting unset by default), at the start of a line.
_ENV_LINE = re.compile(r"^#?[ \t]*([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)
# A reference table's row: its first cell names the variables it explains, each in backticks.
_TABLE_ROW = re.compile(r"^\|([^|\n]*)\|", re.MULTILINE)
_NAMED = re.compile(r"`([^`]+)`")


def names_in_env_example(text: str) -> set[str]:
    return set(_ENV_LINE.findall(text))


def names_in_reference(text: str) -> set[str]:
    """The variables named in the first column of the reference's tables (`| variable | default | meaning |`)."""
    names = set()
    for cell in _TABLE_ROW.findall(text):
        if cell.strip() in ("variable", "---"):
            continue
        names.update(_NAMED.findall(cell))
    return names


def mismatches(documented: set[str]) -> dict[str, list[str]]:
    """What the documentation leaves out, and what it names that is no setting (an abbreviation such as
    `_COOLDOWN_S` counts as unknown: every variable is written out)."""
    declared = set(setting_names())
    return {"missing": sorted(declared - documented), "unknown": sorted(documented - declared)}


def test_env_example_documents_exactly_the_settings():
    assert mismatches(names_in_env_example(ENV_EXAMPLE.read_text(encoding="utf-8"))) == {"missing": [], "unknown": []}


def test_configuration_reference_documents_exactly_the_settings():
    assert mismatches(names_in_reference(REFERENCE.read_text(encoding="utf-8"))) == {"missing": [], "unknown": []}


@pytest.mark.parametrize("original, read, left_out", [
    (ENV_EXAMPLE, names_in_env_example, "RERANKER_BUDGET_S"),
    (ENV_EXAMPLE, names_in_env_example, "FALKORDB_URL"),  # commented out: a setting unset by default
    (REFERENCE, names_in_reference, "RERANKER_BUDGET_S"),
    (REFERENCE, names_in_reference, "RERANKER_BREAKER_COOLDOWN_S"),  # one of several in its row
], ids=["env-example", "env-example-commented", "reference", "reference-shared-row"])
def test_the_check_catches_a_setting_left_out_or_made_up(tmp_path, original, read, left_out):
    copy = tmp_path / original.name
    shutil.copyfile(original, copy)
    text = copy.read_text(encoding="utf-8")
    assert left_out in read(text)
    copy.write_text(_without(text, left_out), encoding="utf-8")
    assert mismatches(read(copy.read_text(encoding="utf-8"))) == {"missing": [left_out], "unknown": []}
    made_up = ("\nRERANKER_TEMPERATURE=0\n" if original == ENV_EXAMPLE
               else "\n| variable | default | meaning |\n| --- | --- | --- |\n| `RERANKER_TEMPERATURE` | `0` | |\n")
    assert mismatches(read(text + made_up)) == {"missing": [], "unknown": ["RERANKER_TEMPERATURE"]}


def _without(text: str, name: str) -> str:
    """The text with `name` taken out: its .env line, or its mention in a table row's first cell."""
    lines = []
    for line in text.splitlines(keepends=True):
        if re.match(rf"#?[ \t]*{name}=", line):
            continue
        first_cell = _TABLE_ROW.match(line)
        if first_cell and f"`{name}`" in first_cell.group(1):
            line = line.replace(f"`{name}`", name.lower(), 1)
        lines.append(line)
    return "".join(lines)
