"""Suite files as pytest collectors: file -> one node per model -> one item per condition; and a counterexample
manifest being replayed (--memerobust-replay): file -> model -> condition -> one item per recorded meme.

Node ids read `rainbow-noise.toml::demo::text=typos@3+image=gaussian_noise@3`, so `-k` and node ids select them.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from .errors import BackendMissing, MemeRobustError
from .run.replay import ReplayError, entry_where, read_manifest, replay_entry, truth_probability
from .stash import session_of


def stop_when_endpoint_down(item, call) -> None:
    """A test that met a hosted endpoint found down (errors.EndpointDown: its breaker open) stops the run: every later
    case would fail the same way, after nothing or after the same timeouts. pytest ends the run as interrupted, with
    the endpoint's one-line reason."""
    from .errors import EndpointDown

    if call.excinfo is not None and isinstance(call.excinfo.value, EndpointDown) and not item.session.shouldstop:
        item.session.shouldstop = f"memerobust: {call.excinfo.value}"


class RobustnessFailure(Exception):
    """Raised by an item whose result violates the suite's thresholds; rendered as a short table."""

    def __init__(self, violations, result, regressions=()):
        super().__init__(violations)
        self.violations, self.result, self.regressions = violations, result, list(regressions)


def junit_properties(result) -> list[tuple[str, str]]:
    """A case's numbers as JUnit XML properties (what `record_property` would add): each value with its interval,
    and McNemar's p-value of the change in accuracy."""
    def interval(name, ci):
        return [(f"{name}.ci_low", f"{ci[0]:.6f}"), (f"{name}.ci_high", f"{ci[1]:.6f}")]

    props = []
    for m, v in result.values.items():
        props += [(f"memerobust.{m}", f"{v:.6f}"), *interval(f"memerobust.{m}", result.ci(m, "metric"))]
    if result.condition.kind != "clean":
        for m in result.values:
            props += [(f"memerobust.relative_robustness.{m}", f"{result.relative_robustness(m):.6f}"),
                      *interval(f"memerobust.relative_robustness.{m}", result.ci(m, "relative"))]
        props += [("memerobust.flip_rate", f"{result.flip_rate:.6f}"),
                  *interval("memerobust.flip_rate", result.ci("flip_rate", "flip_rate")),
                  ("memerobust.mcnemar_p", f"{result.mcnemar_p:.6g}")]
    return props


class SuiteFile(pytest.File):
    def collect(self):
        from .stash import session_of
        from .run.suite import load_suite

        suite = load_suite(self.path, root=self.config.rootpath)
        session = session_of(self.config)
        if not session.options.models:
            yield SkippedSuite.from_parent(self, name="suites-disabled")
            return
        for model in suite.model_specs(session.options.models):
            yield ModelNode.from_parent(self, name=session.model_label(model), model=model, suite=suite)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, MemeRobustError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class ModelNode(pytest.Collector):
    """One model's cases of a suite; named by the model's label (the card's name, not its path)."""

    def __init__(self, *, model, suite, **kwargs):
        super().__init__(**kwargs)
        self.model, self.suite = model, suite

    def collect(self):
        for condition in self.suite.conditions:
            if condition.source == self.model:  # crafted on this model itself: its white-box case, already there
                continue
            yield CaseItem.from_parent(self, name=condition.test_name, model=self.model, suite=self.suite,
                                       condition=condition)
        if self.suite.checks.budgets is not None:
            yield BudgetItem.from_parent(self, name="budgets", model=self.model, suite=self.suite)


class SkippedSuite(pytest.Item):
    def runtest(self):
        from .stash import DISABLED_HINT

        pytest.skip(DISABLED_HINT)

    def reportinfo(self):
        return self.path, None, f"{self.path.name} (needs --memerobust-model)"


class CaseItem(pytest.Item):
    def __init__(self, *, model, suite, condition, **kwargs):
        super().__init__(**kwargs)
        self.model, self.suite, self.condition = model, suite, condition
        self.add_marker(pytest.mark.memerobust)

    def runtest(self):
        from .stash import session_of
        from .judge.gate import gates_thresholds
        from .judge.thresholds import assess, case_p_value, failing, judged_count, not_judged, not_judged_reason
        from .judge.verdict import case_record

        session, suite = session_of(self.config), self.suite
        settings = suite.settings  # the [suite] table: what the case runs on
        skipped = session.skip_reason(self.model, self.condition, settings.dataset, settings.task, settings.captions)
        if skipped:
            pytest.skip(skipped)
        session.declare_grid(self.model, settings.dataset, suite.grid.text, suite.grid.image, settings.captions,
                             suite=suite.name, conditions=[c.id for c in suite.conditions])
        if suite.export is not None:  # the run writes this suite's memes as a dataset at its end
            session.planned.exports[suite.name] = suite.export
        try:
            result = session.evaluate(self.model, self.condition, data=settings.dataset, task=settings.task,
                                      group=settings.group, captions=settings.captions)
        except BackendMissing as exc:
            pytest.skip(str(exc))
        self.user_properties += junit_properties(result)  # CI systems that read JUnit XML show these
        thresholds = suite.checks.thresholds_for(self.condition)
        violations, unjudged = assess(result, thresholds), not_judged(result, thresholds)
        from .run.gate import baseline_key, regressions

        comparisons = regressions(session, self.model, self.condition, result, data=settings.dataset,
                                  captions=settings.captions)
        regressed = sorted((c for c in comparisons if c.decision.regressed), key=lambda c: c.room)  # clearest first
        record = case_record(nodeid=self.nodeid, model=session.model_label(self.model),
                             dataset=session.data_spec(settings.dataset, settings.captions), suite=suite.name,
                             condition=self.condition, thresholds=thresholds, violations=violations,
                             decision=thresholds.decision, p_value=case_p_value(result, thresholds),
                             comparisons=comparisons, gate=session.gate, unjudged=unjudged,
                             judged=judged_count(result, thresholds))
        record["baseline_key"] = baseline_key(session, self.model, self.condition, settings.dataset,
                                              settings.captions)
        failed = failing(violations, thresholds.decision)
        # What the run's verdict reads back from the test reports (also on a pytest-xdist controller).
        self.user_properties += [
            ("memerobust.case", json.dumps(record)),
            ("memerobust.verdict", record["verdict"]),
            ("memerobust.shortfall", max((v.shortfall for v in violations), default=0.0)),
            ("memerobust.line", compact_line(violations, regressed, result)),
            ("memerobust.decision", thresholds.decision),
            *([("memerobust.p_value", record["p_value"])] if record["p_value"] is not None else [])]
        if failed or regressed:
            from .run.replay import case_property

            self.user_properties.append(case_property(session, self.model, result, self.nodeid))  # the manifest's
        if record["gated_by"]:
            raise RobustnessFailure(failed if "thresholds" in record["gated_by"] else [], result,
                                    regressed if "regressions" in record["gated_by"] else [])
        if failed or regressed:  # reported, not gating (--memerobust-gate): an expected failure, with its numbers
            what = "below its thresholds" if failed else f"{regressed[0].decision.state} against the baseline"
            pytest.xfail(f"{what}, not gating under --memerobust-gate={session.gate}: "
                         f"{compact_line(failed, regressed, result)}")
        if record["verdict"] == "not judged" and gates_thresholds(session.gate):  # neither a pass nor a failure
            pytest.skip(not_judged_reason(unjudged))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, RobustnessFailure):
            from .report.tables import failure_table

            failure = excinfo.value
            # the first line is what pytest's short summary shows (-v, -r): the numbers first
            return (compact_line(failure.violations, failure.regressions, failure.result) + "\n"
                    + failure_table(self.model, self.condition.id, failure.violations, failure.result,
                                    failure.regressions))
        if isinstance(excinfo.value, MemeRobustError):
            return f"{type(excinfo.value).__name__}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        # not the node id itself: pytest's -v line prints the dots of a suffix that is the domain as `::`, and
        # `memerobust-mine::toml::demo::clean` did not re-run
        return self.path, None, f"case {self.nodeid}"


def compact_line(violations, regressions, result) -> str:
    """The one line a failing case prints by default: its worst violation (value, limit, interval) and
    McNemar's p-value of the change in accuracy; `-v` prints the whole table."""
    from .report.outline import p_value

    worst = sorted(violations, key=lambda v: (not v.sure, -v.shortfall))
    clauses = [v.short() for v in worst[:1]] + ([f"+{len(worst) - 1} more"] if len(worst) > 1 else [])
    clauses += [str(r) for r in regressions[:1]]
    mcnemar = ("" if result.condition.kind == "clean" or not result.labelled  # no labels: no change in accuracy
               else f"; McNemar p {p_value(result.mcnemar_p)}")
    return "; ".join(clauses) + mcnemar


class BudgetFailure(Exception):
    def __init__(self, violations, entries):
        super().__init__(violations)
        self.violations, self.entries = violations, entries


def budget_violations(entries: list[dict], floors, confidence: float):
    """A thresholds.Violation per family whose median evasion budget is below its floor: the point estimate, or
    (Violation.sure) its whole interval; a family with no meme to search has an undefined (nan) median."""
    from .judge.thresholds import Violation

    def number(value):
        return float("nan") if value is None else float(value)  # "inf" (censored) reads as inf

    by_family = {e["family"]: e for e in entries}
    out = []
    for family, floor in floors:
        e = by_family[family]
        median, ci = number(e["median"]), tuple(number(v) for v in e["median_ci"])
        if not (median >= floor and ci[1] >= floor):
            out.append(Violation(f"median {family} budget", median, floor, ">=", ci, confidence))
    return out


class BudgetItem(pytest.Item):
    """A suite's evasion-budget case for one model: searches each harmful meme's smallest evading edit per family
    and holds the medians to the suite's floors (min_median_budget), under the suite's decision."""

    def __init__(self, *, model, suite, **kwargs):
        super().__init__(**kwargs)
        self.model, self.suite = model, suite
        self.add_marker(pytest.mark.memerobust)

    def runtest(self):
        from .stash import session_of
        from .judge.gate import gates_thresholds
        from .judge.thresholds import failing, verdict
        from .run.analyses import budgets

        session = session_of(self.config)
        suite, settings = self.suite, self.suite.settings
        reads = getattr(session.detector(self.model), "modalities", ("image", "text"))
        entries = budgets(session, self.model, suite.checks.budgets.searched(reads), data=settings.dataset,
                          task=settings.task, captions=settings.captions)
        floors = suite.checks.budgets.min_median_budget
        violations = budget_violations(entries, floors, session.options.judging.stats.confidence)
        self.user_properties += [
            ("memerobust.verdict", verdict(violations)),
            ("memerobust.shortfall", max((v.shortfall for v in violations), default=0.0)),
            ("memerobust.line", "; ".join(v.short() for v in violations))]
        failed = failing(violations, suite.checks.thresholds.decision)
        if failed and not gates_thresholds(session.gate):
            pytest.xfail(f"evasion budgets below the suite's floors, not gating under --memerobust-gate="
                         f"{session.gate}: " + "; ".join(v.short() for v in failed))
        if failed:
            raise BudgetFailure(failed, entries)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, BudgetFailure):
            from .report.tables import budget_table

            failure = excinfo.value
            return "\n".join([f"{self.model}: evasion budgets below the suite's floors:",
                              *(f"  {v}" for v in failure.violations), budget_table(failure.entries)])
        if isinstance(excinfo.value, MemeRobustError):
            return f"{type(excinfo.value).__name__}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        # not the node id itself: pytest's -v line prints the dots of a suffix that is the domain as `::`, and
        # `memerobust-mine::toml::demo::clean` did not re-run
        return self.path, None, f"case {self.nodeid}"


# --- replayed counterexamples (replay.py reads and checks the manifest) --------------------------------------


def manifest_file(file_path: Path, parent, replay: Path | None):
    """The collector of the manifest being replayed, for collect.collect_file; None for any other file."""
    if replay is None:
        return None
    config = parent.config
    if Path(file_path).resolve() != (config.invocation_params.dir / replay).resolve():
        return None
    inside = Path(file_path).resolve().is_relative_to(config.rootpath.resolve())
    return ManifestFile.from_parent(parent, path=file_path, nodeid=None if inside else Path(file_path).name)


class StillEvades(Exception):
    """A replayed counterexample the detector still gets wrong."""

    def __init__(self, model: str, entry: dict, proba: np.ndarray, classes):
        super().__init__(model, entry["meme"])
        self.model, self.entry, self.proba, self.classes = model, entry, proba, list(classes)


class ManifestFile(pytest.File):
    """A counterexamples manifest: one node per model replayed, one per condition, one item per meme."""

    def collect(self):
        from .perturb.conditions import Condition

        session = session_of(self.config)
        tree: dict = {}
        for k, entry in enumerate(read_manifest(self.path)):
            for model in session.options.models or (entry["model"],):
                label = session.model_label(model) if session.options.models else entry.get("model_label") or model
                name = Condition.parse(entry["condition"]).test_name
                tree.setdefault(label, {}).setdefault(name, []).append((model, k, entry))
        for label, conditions in tree.items():
            yield ReplayGroup.from_parent(self, name=label, members=conditions)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, MemeRobustError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class ReplayGroup(pytest.Collector):
    """A model's replayed counterexamples (members: condition -> entries), or a condition's (a list of entries)."""

    def __init__(self, *, members, **kwargs):
        super().__init__(**kwargs)
        self.members = members

    def collect(self):
        if isinstance(self.members, dict):
            for name, members in self.members.items():
                yield ReplayGroup.from_parent(self, name=name, members=members)
            return
        names = [entry["meme"] for _, _, entry in self.members]
        for model, k, entry in self.members:
            name = entry["meme"] if names.count(entry["meme"]) == 1 else f"{entry['meme']}[{k}]"
            yield ReplayItem.from_parent(self, name=name, model=model, index=k, entry=entry)


class ReplayItem(pytest.Item):
    """One recorded counterexample shown to a detector again: it fails while the meme still evades it."""

    def __init__(self, *, model: str, index: int, entry: dict, **kwargs):
        super().__init__(**kwargs)
        self.model, self.index, self.entry = model, index, entry
        self.manifest = os.path.relpath(self.path, self.config.invocation_params.dir)  # as messages name it

    def runtest(self):
        session = session_of(self.config)
        try:
            still, proba = replay_entry(session, self.entry, self.model, manifest=self.path)
        except ReplayError as exc:
            raise ReplayError(f"{entry_where(self.manifest, self.index, self.entry)}: {exc}") from None
        if still:
            raise StillEvades(self.model, self.entry, proba, session.detector(self.model).classes)

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, StillEvades):
            return evasion_message(excinfo.value, f"{self.manifest} entry {self.index}")
        if isinstance(excinfo.value, MemeRobustError):
            return f"{type(excinfo.value).__name__}: {excinfo.value}"
        return super().repr_failure(excinfo)

    def reportinfo(self):
        # (not the node id itself: pytest's -v line would print the dots of `counterexamples.json` as `::`)
        return self.path, None, f"replay of {self.nodeid}"


def evasion_message(failure: StillEvades, where: str) -> str:
    e = failure.entry
    label = np.asarray(e["label"])
    named = (", ".join(c for c, on in zip(failure.classes, label) if on) or "none") if label.ndim \
        else (failure.classes[int(label)] if int(label) < len(failure.classes) else str(int(label)))
    now = truth_probability(label[None], failure.proba[None])[0]
    then = (f"; recorded {truth_probability(label[None], np.asarray(e['proba'])[None])[0]:.3f}, clean "
            f"{truth_probability(label[None], np.asarray(e['proba_clean'])[None])[0]:.3f}"
            if "proba" in e and "proba_clean" in e else "")
    return (f"{failure.model} still gets meme {e['meme']} wrong under {e['condition']} ({where})\n"
            f"  caption: {e['caption']!r}\n"
            f"  true label: {named}; its probability now {now:.3f}{then}")
