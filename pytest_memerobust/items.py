"""Suite files as pytest collectors: file -> one node per model -> one item per condition.

Node ids read `rainbow-noise.toml::demo::text=typos@3+image=gaussian_noise@3`, so `-k` and node ids select them.
"""
from __future__ import annotations

import pytest

from .errors import BackendMissing, MemeRobustError, ModeNotRead


class RobustnessFailure(Exception):
    """Raised by an item whose result violates the suite's thresholds; rendered as a short table."""

    def __init__(self, violations, result, regressions=()):
        super().__init__(violations)
        self.violations, self.result, self.regressions = violations, result, list(regressions)


def junit_properties(result) -> list[tuple[str, str]]:
    """A case's numbers as JUnit XML properties (what `record_property` would add)."""
    props = [(f"memerobust.{m}", f"{v:.6f}") for m, v in result.values.items()]
    if result.condition.kind != "clean":
        props += [(f"memerobust.relative_robustness.{m}", f"{result.relative_robustness(m):.6f}")
                  for m in result.values]
        props.append(("memerobust.flip_rate", f"{result.flip_rate:.6f}"))
    return props


class SuiteFile(pytest.File):
    def collect(self):
        from .plugin import DISABLED_HINT, _session
        from .suite import load_suite

        suite = load_suite(self.path)
        session = _session(self.config)
        if not session.options.models:
            yield SkippedSuite.from_parent(self, name="suites-disabled")
            return
        for model in suite.model_specs(session.options.models):
            yield ModelNode.from_parent(self, name=model, suite=suite)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, MemeRobustError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class ModelNode(pytest.Collector):
    def __init__(self, *, suite, **kwargs):
        super().__init__(**kwargs)
        self.suite = suite

    def collect(self):
        for condition in self.suite.conditions:
            yield CaseItem.from_parent(self, name=condition.id, model=self.name, suite=self.suite,
                                       condition=condition)


class SkippedSuite(pytest.Item):
    def runtest(self):
        from .plugin import DISABLED_HINT

        pytest.skip(DISABLED_HINT)

    def reportinfo(self):
        return self.path, None, f"{self.path.name} (needs --memerobust-model)"


class CaseItem(pytest.Item):
    def __init__(self, *, model, suite, condition, **kwargs):
        super().__init__(**kwargs)
        self.model, self.suite, self.condition = model, suite, condition
        self.add_marker(pytest.mark.memerobust)

    def runtest(self):
        from .plugin import _session
        from .thresholds import check

        session = _session(self.config)
        try:
            unread = session.unread_modalities(self.model, self.condition)
        except ModeNotRead as exc:  # the channel ablation's `:image` of a caption-only detector
            pytest.skip(f"{self.model}: {exc}")
        if unread:
            pytest.skip(f"{self.model} does not read the {' or '.join(unread)}")
        suite = self.suite
        session.declare_grid(self.model, suite.dataset, suite.grid_text, suite.grid_image, suite.captions)
        try:
            result = session.evaluate(self.model, self.condition, data=suite.dataset, task=suite.task,
                                      group=suite.group, captions=suite.captions)
        except BackendMissing as exc:
            pytest.skip(str(exc))
        self.user_properties += junit_properties(result)  # CI systems that read JUnit XML show these
        violations = check(result, self.suite.thresholds_for(self.condition))
        regressions = session.regressions(self.model, self.condition, result, data=suite.dataset,
                                          captions=suite.captions)
        if violations or regressions:
            raise RobustnessFailure(violations, result, regressions)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, RobustnessFailure):
            from .report.tables import failure_table

            failure = excinfo.value
            return failure_table(self.model, self.condition.id, failure.violations, failure.result,
                                 failure.regressions)
        if isinstance(excinfo.value, MemeRobustError):
            return f"{type(excinfo.value).__name__}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.suite.name}::{self.model}::{self.condition.id}"
