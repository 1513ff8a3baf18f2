"""Analyses as a kind of part (run/analysis_registry.py): registered by name and through an entry point, their
records kept once per (analysis, model, data) and carried by the worker wire, their tables in every report."""
import json
import pytest

from pytest_memerobust.run import analysis_registry
from pytest_memerobust.run.analysis_registry import Analysis, AnalysisRecords, AnalysisTable


def test_records_travel_from_a_worker_joined_by_their_analysis():
    worker = AnalysisRecords({("budgets", "m", "d"): {"typos": {"n": 1}}, ("reliance", "m", "d"): {"n": 5}})
    controller = AnalysisRecords({("budgets", "m", "d"): {"homoglyphs": {"n": 2}}, ("reliance", "m", "d"): {"n": 5}})
    controller.merge_wire(json.loads(json.dumps(worker.to_wire())))
    assert controller.of("budgets") == {("m", "d"): {"homoglyphs": {"n": 2}, "typos": {"n": 1}}}  # families joined
    assert controller.of("reliance") == {("m", "d"): {"n": 5}}
    assert not AnalysisRecords() and controller


def test_an_analysis_needs_a_table_and_a_name_of_its_own(monkeypatch):
    def run(session, model, spec, task):
        return {}

    analysis_registry.names()  # the built-ins loaded first, as any run loads them
    monkeypatch.setattr(analysis_registry, "_REGISTRY", dict(analysis_registry._REGISTRY))

    with pytest.raises(ValueError, match="table"):
        analysis_registry.register(Analysis("tableless", run))
    with pytest.raises(ValueError, match="already registered"):
        analysis_registry.register(Analysis("reliance", run, table=lambda record: None))


def test_analyses_made_when_the_report_is_built_are_placed_by_their_scope(monkeypatch):
    """As the transfer matrices (of the run) and the OCR view (per group) are: made from the session when the
    report is built, each part under its report key, the keys in the registry's order; no test asks for them, and
    a report without numbers leaves them out."""
    from types import SimpleNamespace

    from pytest_memerobust.run.analysis_registry import OF_THE_RUN, PER_GROUP, analysed, place_analyses

    monkeypatch.setattr(analysis_registry, "_REGISTRY", {})
    monkeypatch.setattr(analysis_registry, "_ensure_loaded", lambda: None)  # these four alone
    register = analysis_registry.register
    register(Analysis("per_group", lambda session, group: {"rows": group["results"]} if group["results"] else None,
                      report_key="rows_seen", scope=PER_GROUP))
    register(Analysis("asked", lambda session, model, spec, task: {}, report_key="asked",
                      entry=lambda model, label, spec, record: {"model": model, "dataset": spec, **record}))
    register(Analysis("whole", lambda session: [len(session.analyses.records)], report_key="whole",
                      scope=OF_THE_RUN))
    register(Analysis("tabled", lambda session, model, spec, task: {},
                      table=lambda record: AnalysisTable("t", ("n",), ((str(record["n"]),),))))
    session = SimpleNamespace(model_label=str.upper, analyses=AnalysisRecords(
        {("asked", "m", "d"): {"n": 1}, ("tabled", "m", "d"): {"n": 2}}))

    report = place_analyses(session, {"groups": [{"model": "m", "results": ["a"]}, {"model": "m", "results": []}]})
    assert list(report) == ["groups", "asked", "whole", "analyses"]
    assert report["groups"] == [{"model": "m", "results": ["a"], "rows_seen": {"rows": ["a"]}},
                                {"model": "m", "results": []}]  # None: nothing placed in that group
    assert report["asked"] == [{"model": "m", "dataset": "d", "n": 1}] and report["whole"] == [2]
    [entry] = report["analyses"]
    assert entry["analysis"] == "tabled" and entry["label"] == "M" and entry["table"]["rows"] == [["2"]]
    assert analysis_registry.empty_report_entries() == {"asked": []}
    with pytest.raises(ValueError, match="made when the report is built"):
        analysed(session, "whole", "m")
    with pytest.raises(ValueError, match="report_key"):
        register(Analysis("keyless", lambda session: [], table=lambda record: None, scope=OF_THE_RUN))
    with pytest.raises(ValueError, match="scope"):
        register(Analysis("sometimes", lambda session: [], report_key="sometimes", scope="sometimes"))


def test_an_analysis_asked_again_with_other_parameters_is_refused_not_answered_with_the_first(monkeypatch):
    """A run keeps one record per (analysis, model, data): the same question again gets the record made once; the
    same analysis with another k (or task) would have been given the first one's numbers."""
    from types import SimpleNamespace

    from pytest_memerobust.errors import ConfigError
    from pytest_memerobust.run.analysis_registry import analysed

    monkeypatch.setattr(analysis_registry, "_REGISTRY", {})
    monkeypatch.setattr(analysis_registry, "_ensure_loaded", lambda: None)
    runs = []
    analysis_registry.register(Analysis("draws", lambda session, model, spec, task, k=1: runs.append(k) or {"k": k},
                                        table=lambda record: AnalysisTable("t", ("k",), ((str(record["k"]),),))))
    session = SimpleNamespace(analyses=AnalysisRecords(), data_spec=lambda data: data or "demo",
                              task=lambda model, task: task or "hate")
    assert analysed(session, "draws", "m", k=10) == {"k": 10}
    assert analysed(session, "draws", "m", k=10) == {"k": 10} and runs == [10]  # made once
    with pytest.raises(ConfigError, match=r"'draws' of m on demo was asked for with task hate, k=10 and again with "
                                          r"task hate, k=5"):
        analysed(session, "draws", "m", k=5)
    with pytest.raises(ConfigError, match="task misogyny, k=10"):
        analysed(session, "draws", "m", task="misogyny", k=10)
    assert analysed(session, "draws", "m", data="other", k=5) == {"k": 5}  # other data: a record of its own


THIRD_PARTY = '''
from pytest_memerobust.run.analysis_registry import Analysis, AnalysisTable


def count_words(session, model, spec, task, longest=3):
    """A third party's analysis: the captions' length in words, asked of nothing but the memes."""
    lengths = [len(m.text.split()) for m in session.dataset(spec).memes]
    return {"memes": len(lengths), "long": sum(n > longest for n in lengths), "longest": longest}


def words_table(record):
    return AnalysisTable("caption lengths", ("memes", "longer than 3 words"),
                         ((str(record["memes"]), str(record["long"])),), ("counted by a third party",))


WORDS = Analysis("caption_words", count_words, table=words_table)
'''

CONFTEST = '''
from importlib.metadata import EntryPoint

import pytest

from pytest_memerobust.run import analysis_registry


@pytest.fixture(autouse=True, scope="session")
def _third_party_entry_point():
    """As an installed package's entry point in the pytest_memerobust.analyses group would."""
    analysis_registry._entry_points_loaded = False
    analysis_registry.entry_points = lambda group: [EntryPoint("caption_words", "third_party:WORDS", group)]
    yield
'''

TEST = '''
def test_captions_are_short(memerobust):
    from pytest_memerobust.run.analysis_registry import analysed

    record = analysed(memerobust.session, "caption_words", memerobust.model)
    assert record["memes"] == 12
'''


def test_a_third_party_analysis_through_the_entry_point_runs_and_renders_in_every_report(pytester, monkeypatch):
    for name in ("_REGISTRY", "entry_points", "_entry_points_loaded"):  # what the conftest changes, restored after
        value = getattr(analysis_registry, name)
        monkeypatch.setattr(analysis_registry, name, dict(value) if name == "_REGISTRY" else value)
    pytester.makepyfile(third_party=THIRD_PARTY, test_third=TEST)
    pytester.makeconftest(CONFTEST)
    pytester.syspathinsert()
    result = pytester.runpytest_inprocess(
        "--memerobust-model=demo", "--memerobust-limit=12", "test_third.py", "--memerobust-tables=full",
        "--memerobust-report=r.json", "--memerobust-report=r.md", "--memerobust-report=r.html", "-p",
        "no:cacheprovider")
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "r.json").read_text())
    [entry] = report["analyses"]
    assert entry["analysis"] == "caption_words" and entry["model"] == "demo" and entry["record"]["memes"] == 12
    assert entry["table"]["rows"][0][0] == "12"
    result.stdout.fnmatch_lines(["*caption lengths: demo on demo*", "*counted by a third party*"])
    assert "## caption lengths: demo on demo" in (pytester.path / "r.md").read_text()
    html = (pytester.path / "r.html").read_text()
    assert "<h2>caption lengths: demo on demo</h2>" in html and "counted by a third party" in html


def test_an_unknown_analysis_is_named_with_those_there_are():
    from pytest_memerobust.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="reliance"):
        analysis_registry.get("relience")
    assert {"reliance", "prompt_invariance", "budgets", "transfer", "ocr_view"} <= set(analysis_registry.names())
    assert AnalysisTable("t", ("a",), (("1",),)).as_dict() == {"title": "t", "headers": ["a"], "rows": [["1"]],
                                                               "notes": []}
