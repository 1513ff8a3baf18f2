"""Numbers a reviewer cannot misread (issue 49): what is fooled is counted among the memes right before the attack,
every count has one name in every artifact, a family's worst case is one notion, a run that ran nothing or skipped
everything never reads PASSED, a headline keeps its figure at 80 columns, and an OCR caption says so."""
import json

import numpy as np
import pytest
import torch  # noqa: F401  imported once here: pytester's in-process runs would otherwise re-import it

from pytest_memerobust.judge.verdict import run_verdict
from pytest_memerobust.report.tables import verdict_lines

QUICK = ["--memerobust-limit=24", "--memerobust-bootstrap=100", "-p", "no:cacheprovider"]


# --- 4: a collect-only run claims no verdict ----------------------------------------------------------------------

def test_a_collect_only_run_prints_no_verdict_and_writes_no_report(pytester, tmp_path):
    report = tmp_path / "r.json"
    result = pytester.runpytest("--memerobust-model=demo", "--co", f"--memerobust-report={report}", *QUICK)
    out = result.stdout.str()
    assert "tests collected" in out or "test collected" in out
    assert "memerobust verdict" not in out and "PASSED" not in out and "FAILED" not in out
    assert not report.exists()
