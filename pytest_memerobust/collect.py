"""What pytest collects for a run: the built-in and the user's suites (or a counterexample manifest being replayed)
chosen at configure time, their files as collectors named wherever they are installed, and, once collection ends,
the properties every robustness test carries, the plan of conditions the engine computes ahead, and the checks that
make a bad option, card, dataset, defence, baseline or manifest one usage error before any case runs. The pytest
face: plugin.py's collection hooks call these."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from .errors import MemeRobustError
from .stash import session_of as _session

COLLECTED_KEY = pytest.StashKey[int]()  # how many robustness tests were selected: an interrupted run says how far


def choose_tests(config, session) -> bool:
    """Point pytest at what the run tests: a replayed manifest's counterexamples, or (with a model) the built-in
    suites and the user's memerobust-*.toml suites, or a pasted built-in node id re-run from any directory. True when
    the robustness suites run (the run then gathers their reports)."""
    from .run.suite import builtin_suite_arg, builtin_suite_paths, find_suite_files

    if session.options.probes.replay is not None:  # the manifest's counterexamples instead of the suites
        from .run.replay import read_manifest, replay_arguments

        try:
            read_manifest(session.options.probes.replay)  # a bad manifest is one usage error, before anything runs
        except MemeRobustError as exc:
            raise pytest.UsageError(str(exc)) from None
        config.args[:] = replay_arguments(config.args, session.options.probes.replay,
                                          named=config.args_source == pytest.Config.ArgsSource.ARGS)
        return False
    if not session.options.models:
        if config.args_source == pytest.Config.ArgsSource.ARGS:  # a pasted built-in case id, without its model
            from .run.suite import builtin_suite_model_hint

            hint = next(filter(None, map(builtin_suite_model_hint, config.args)), None)
            if hint is not None:
                raise pytest.UsageError(hint)
        return False
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        # A pasted node id of a built-in suite re-runs from any directory.
        config.args[:] = [builtin_suite_arg(arg) for arg in config.args]
    else:
        # A model and no paths: the robustness job. The built-in suites and the user's memerobust-*.toml suites
        # under the test paths run, not the rest of the test tree (a project's unit tests are not robustness cases;
        # name their paths to run them too).
        config.args[:] = [*map(str, builtin_suite_paths()), *map(str, find_suite_files(config.args))]
    return True


def builtin_nodeid(file_path: Path) -> str | None:
    """Built-in suites are named by their name wherever they are installed: `rainbow-noise`, `test_caption_fuzz.py`
    (outside the rootdir pytest would give them an empty file part)."""
    from .run.suite import builtin_suite_dir

    if file_path.resolve().parent != builtin_suite_dir().resolve():
        return None
    return file_path.stem if file_path.suffix == ".toml" else file_path.name


def collect_file(file_path: Path, parent):
    """The collector of a suite file, or of the manifest being replayed; None for any other file."""
    from .items import manifest_file
    from .run.suite import is_suite_file

    manifest = manifest_file(file_path, parent, _session(parent.config).options.probes.replay)
    if manifest is not None:
        return manifest
    if is_suite_file(file_path):
        from .items import SuiteFile

        return SuiteFile.from_parent(parent, path=file_path, nodeid=builtin_nodeid(file_path))
    return None


def make_module(module_path: Path, parent):
    """A built-in Python suite as a module named by its file's name (wherever the package is installed)."""
    nodeid = builtin_nodeid(module_path)
    if nodeid is not None:
        return pytest.Module.from_parent(parent, path=module_path, nodeid=nodeid)
    return None


def is_robustness_test(report) -> bool:
    """A suite case or a test of a built-in Python suite: collection marked both (`mark_robustness_tests`)."""
    return any(name in ("memerobust.model", "memerobust.suite") for name, _ in report.user_properties)


def mark_robustness_tests(items, session) -> None:
    """Properties every report of a robustness test carries (also to a pytest-xdist controller): a case's model
    label, or the built-in Python suite a test comes from."""
    from .items import BudgetItem, CaseItem
    from .run.suite import builtin_suite_paths

    builtin = {p.name for p in builtin_suite_paths() if p.suffix == ".py"}
    for item in items:
        if isinstance(item, (CaseItem, BudgetItem)):
            item.user_properties.append(("memerobust.model", session.model_label(item.model)))
            item.user_properties.append(("memerobust.where", json.dumps(_where(item, session))))
        elif Path(str(item.path)).name in builtin:
            item.user_properties.append(("memerobust.suite", Path(str(item.path)).name))


def _where(item, session) -> dict:
    """Where a case sits, for the record of a case that is skipped before it runs."""
    from .items import CaseItem
    from .judge.verdict import condition_family

    suite, s = item.suite, item.suite.settings
    condition = item.condition if isinstance(item, CaseItem) else None
    return {"model": session.model_label(item.model), "dataset": session.data_spec(s.dataset, s.captions),
            "suite": suite.name, "condition": condition.id if condition else item.name,
            "family": condition_family(condition) if condition else "evasion budgets"}


def modify_items(config, items) -> None:
    """Positions of the selected tests, which order the report the same with or without pytest-xdist, and the
    conditions they will evaluate, whose perturbations the engine then computes ahead."""
    from .items import CaseItem

    rs = _session(config)
    rs.ordering.positions = {item.nodeid: i for i, item in enumerate(items)}
    if rs.options.models:
        mark_robustness_tests(items, rs)
        config.stash[COLLECTED_KEY] = sum(is_robustness_test(item) for item in items)
    cases = {}
    for item in items:
        if isinstance(item, CaseItem):
            s = item.suite.settings  # the [suite] table: what its cases run on
            rs.plan(item.model, s.dataset, item.condition, s.captions, task=s.task, group=s.group, nodeid=item.nodeid)
            cases.setdefault((item.model, s.dataset, s.task, s.captions, s.group), item.nodeid)
    if any(("memerobust.suite", Path(str(item.path)).name) in item.user_properties for item in items):
        cases.setdefault((rs.options.models[0], None, None, None, None), "")  # the Python suites' model and data
    # Options, cards, checkpoints, modes and dataset rows checked once, before any case runs: a problem is one
    # usage error naming the culprit, not the same failure in every case.
    for (model, data, task, captions, group), nodeid in cases.items():
        try:
            rs.check_case(model, data, task, captions, group)
        except MemeRobustError as exc:
            where = f" (the dataset a suite names, first used by {nodeid})" if data and not rs.options.data.spec else ""
            raise pytest.UsageError(f"memerobust: {exc}{where}") from None
    if rs.notes.warnings:  # e.g. a --memerobust-limit of one class: once, in pytest's warnings summary
        import warnings

        from .data.selection import SelectionWarning

        for line in rs.notes.warnings:  # no source line to show: the data caused it
            warnings.warn_explicit(SelectionWarning(line), SelectionWarning, "memerobust", 0)
    try:  # a suite's [defence] whose extra is missing: one usage error, not every defended case skipped
        from .detectors.defences import check_defences

        check_defences((i.condition.defence, Path(str(i.path)).name) for i in items if isinstance(i, CaseItem))
    except MemeRobustError as exc:
        raise pytest.UsageError(f"memerobust: {exc}") from None
    try:  # a suite's transfer_from model that no card names: one usage error naming the known ones
        check_transfer_sources(items)
    except MemeRobustError as exc:
        raise pytest.UsageError(f"memerobust: {exc}") from None
    try:  # a baseline that does not match the run: one usage error naming the field
        from .run.gate import check_baseline

        check_baseline(rs, [(model, data, task, captions) for model, data, task, captions, _ in cases])
    except MemeRobustError as exc:
        raise pytest.UsageError(f"memerobust: {exc}") from None
    from .run.accounting import hosted_requests

    try:  # a hosted model's requests, said before the first is sent, and refused beyond its card's max_requests
        estimates = hosted_requests(rs)
    except MemeRobustError as exc:
        raise pytest.UsageError(f"memerobust: {exc}") from None
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    for line in estimates:
        rs.notes.add(line)
        if reporter is not None:
            reporter.write_line(f"memerobust: {line}")
    if rs.options.probes.replay is not None:  # likewise every counterexample's model, dataset, perturbations and meme
        from .items import ReplayItem
        from .run.replay import check_replay

        try:
            check_replay(rs, [(i.manifest, i.index, i.entry, i.model) for i in items if isinstance(i, ReplayItem)])
        except MemeRobustError as exc:
            raise pytest.UsageError(f"memerobust: {exc}") from None


def check_transfer_sources(items) -> None:
    """Every model a selected case's attacks are crafted on ([suite].transfer_from) has a card: an unknown name failed
    each transfer case at run time ("fail for sure") instead of stopping the run once. A ConfigError naming the suite
    and the known models otherwise."""
    from .detectors import find_card
    from .errors import ConfigError
    from .items import CaseItem
    from .run.options import split_model

    sources = {(i.condition.source, Path(str(i.path)).name) for i in items
               if isinstance(i, CaseItem) and i.condition.source}
    for source, suite in sorted(sources):
        try:
            find_card(split_model(source)[0])
        except MemeRobustError as exc:
            raise ConfigError(f"{suite}: [suite].transfer_from = {source!r}: {exc}") from None


def collected_count(session) -> int | None:
    """How many robustness tests the run selected (on a pytest-xdist controller, which collects nothing itself, how
    many tests its workers collected); None when it was interrupted before collection ended."""
    collected = session.config.stash.get(COLLECTED_KEY, None)
    if collected is None and getattr(session.config.option, "numprocesses", None):
        return session.testscollected or None
    return collected
