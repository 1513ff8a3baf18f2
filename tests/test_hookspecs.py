"""The pytest_memerobust_* hooks (hookspecs.py, docs/extending.md "Hooks"), as a third-party plugin uses them: a
conftest.py that adds to the report before its files are written and records the baseline gate's decisions."""
from __future__ import annotations

import json

import torch  # noqa: F401  (imported once, before pytester runs: see tests/conftest.py)
from test_run_edges import QUICK, SUITE  # a quick demo run and its one-condition suite

# A team's plugin: its review stamp in the report (a key of its own, and a word in the verdict's summary, which the
# Markdown and HTML reports print), and the gate's decisions kept for its dashboard.
TEAM_PLUGIN = '''
import json


def pytest_memerobust_report(report, config):
    report["reviewed_by"] = {"team": "trust-and-safety", "cases": len(report["cases"])}
    report["verdict"]["summary"] += "; reviewed by trust-and-safety"


def pytest_memerobust_gate(comparisons, config):
    with open("gate-decisions.json", "a") as out:
        out.write(json.dumps(comparisons) + "\\n")
    comparisons.clear()  # a copy: the run's own decisions stay as they are
'''


def test_a_plugin_changes_the_report_before_every_file_is_written(pytester):
    pytester.makefile(".toml", **{"memerobust-edge": SUITE})
    pytester.makeconftest(TEAM_PLUGIN)
    result = pytester.runpytest(*QUICK, "--memerobust-report=r.json", "--memerobust-report=r.md",
                                "--memerobust-report=r.html", ".")
    result.assert_outcomes(passed=2)
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["reviewed_by"] == {"team": "trust-and-safety", "cases": 2}
    assert report["verdict"]["summary"].endswith("; reviewed by trust-and-safety")
    for name in ("r.md", "r.html"):  # rendered from the same dict
        assert "reviewed by trust-and-safety" in (pytester.path / name).read_text(encoding="utf-8")
    assert not (pytester.path / "gate-decisions.json").exists()  # no baseline: no gate hook


def test_a_plugin_sees_the_gates_decisions_once_per_gated_run(pytester):
    pytester.makefile(".toml", **{"memerobust-edge": SUITE})
    assert pytester.runpytest(*QUICK, "--memerobust-save-baseline=b.json", ".").ret == 0
    pytester.makeconftest(TEAM_PLUGIN)
    result = pytester.runpytest(*QUICK, "--memerobust-baseline=b.json", "--memerobust-report=r.json", ".")
    result.assert_outcomes(passed=2)
    calls = [json.loads(line) for line in (pytester.path / "gate-decisions.json").read_text().splitlines()]
    assert len(calls) == 1
    seen = calls[0]
    # the default rules on both conditions (no flip rate against itself for clean), none regressed: the same run
    assert sorted((c["condition"], c["rule"]) for c in seen) == sorted(
        [("clean", rule) for rule in ("acc", "auroc", "f1")]
        + [("text=typos@2", rule) for rule in ("acc", "auroc", "f1", "flip")])
    assert all(c["model"] == "demo" and not c["regressed"] for c in seen)
    report = json.loads((pytester.path / "r.json").read_text())
    assert seen == [c for case in report["cases"] for c in case["regressions"]]  # what the report holds, unchanged
