"""Every case of tests/support/hostile_cases.py (the hostile-input report) is clean: refused by name, or done right."""

import pytest
from hostile_cases import CASES, classify, workspace


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return workspace(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("case", CASES, ids=[f"{case.area}: {case.name}" for case in CASES])
def test_hostile_case_is_handled_cleanly(case, ws):
    column, what = classify(case, ws)
    assert column == "clean", what


def test_the_command_line_page_counts_every_case():
    """docs/command-line.md states the catalogue's size and, as this file requires, every case clean."""
    from pathlib import Path

    page = (Path(__file__).parents[2] / "docs" / "command-line.md").read_text(encoding="utf-8")
    assert f"`python tests/support/hostile_cases.py` runs {len(CASES)} such cases" in page
    assert f"| {len(CASES)} | 0 | 0 | 0 | 0 |" in page
