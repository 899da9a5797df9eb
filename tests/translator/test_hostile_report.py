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
