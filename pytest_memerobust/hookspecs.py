"""The hooks a third-party plugin (or a conftest.py) implements to extend a memerobust run, registered by plugin.py
with `pytest_addhooks`, as pytest-benchmark registers its `pytest_benchmark_*` hooks. docs/extending.md, "Hooks",
shows them in use. Each is called by the pytest face; the library below it knows nothing of them."""
from __future__ import annotations


def pytest_memerobust_report(report: dict, config) -> None:
    """Add to or change the run's report before any of its files is written.

    `report` is the dict the .json report holds; the .md and .html reports, the run history, the tracker runs and the
    exports are rendered from the same dict, so they carry the change (a key the Markdown and HTML do not know is in
    the JSON only). Called once per run that builds its report (a report file, a history, a tracker or an export
    asks for it), after every case ran and the verdict was decided; not for an interrupted or refused run, whose
    report files hold the verdict alone. Change `report` in place; the return value is not used."""


def pytest_memerobust_gate(comparisons: list[dict], config) -> None:
    """See the baseline gate's decisions, once per run gated with --memerobust-baseline, after the gate decided and
    before the verdict is printed.

    `comparisons`: one dict per rule and condition, as the report's case records hold them under `regressions`
    (`model`, `dataset`, `condition`, `rule`, `before`, `now`, `p_value`, `regressed`, `state`, ...); copies, so
    changing them changes nothing. The return value is not used."""
