"""TextAttack's recipes run by textattack itself, offline, as caption attacks (perturb/textattack_recipes.py).

These run in the `textattack` environment (tests/textattack_adapter/run.sh builds it); elsewhere they skip."""
import json
import os
import socket

import numpy as np
import pytest

from pytest_memerobust.perturb.textattack_recipes import installed

if not installed():  # found, not imported: the adapter imports it, offline
    pytest.skip("textattack is not installed here: tests/textattack_adapter/run.sh runs these in their own "
                "environment", allow_module_level=True)

from pytest_memerobust.data import demo_dataset  # noqa: E402
from pytest_memerobust.detectors import load_detector  # noqa: E402
from pytest_memerobust.engine import AttackState, Engine  # noqa: E402
from pytest_memerobust.judge.metrics import attack_success_rate  # noqa: E402
from pytest_memerobust.perturb import get  # noqa: E402
from pytest_memerobust.perturb.textattack_recipes import (  # noqa: E402
    PREFIX, RECIPES, WORD_BUDGET, recipe_status, textattack_home, textattack_summary)

OFFLINE = ("deepwordbug", "pruthi", "textbugger-chars", "pwws", "leap")
pytest_plugins = ["pytester"]


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """Each offline recipe at severities 1 and 3 on 12 demo memes, with every socket connection and name lookup
    recorded and refused: the recipes must run (and textattack import) without one."""
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args[:2])
        raise OSError("network refused by the test")

    patch = pytest.MonkeyPatch()
    for name in ("getaddrinfo", "create_connection"):
        patch.setattr(socket, name, refuse)
    patch.setattr(socket.socket, "connect", lambda self, *a: refuse(*a))
    hf_home_before = os.environ.get("HF_HOME")
    try:
        detector, memes = load_detector("demo"), demo_dataset("test").head(12)
        cache = tmp_path_factory.mktemp("cache")
        context = Engine(detector, memes,
                         attacks=AttackState(labels=memes.labels("hate"), cache_dir=cache)).attack_context()
        texts, ids = [m.text for m in memes.memes], [m.id for m in memes.memes]
        out = {(name, s): get(PREFIX + name).apply(texts, ids, s, 0, context) for name in OFFLINE for s in (1, 3)}
    finally:
        patch.undo()
    return {"out": out, "context": context, "texts": texts, "ids": ids, "attempts": attempts, "cache": cache,
            "hf_home": (hf_home_before, os.environ.get("HF_HOME"))}


def test_recipes_run_without_a_single_network_attempt_and_leave_hugging_faces_cache_alone(attacked):
    assert attacked["attempts"] == []
    before, after = attacked["hf_home"]
    assert before == after  # textattack sets HF_HOME at import; it is put back
    home = textattack_home(attacked["cache"])
    assert (home / "post_install_check_3").is_file()  # textattack's first-time NLTK downloads never ran
    assert (home / "nltk_data" / "corpora" / "wordnet" / "data.noun").stat().st_size == 15300280  # LF, as Princeton's


@pytest.mark.parametrize("name", OFFLINE)
def test_textattacks_success_rate_is_the_share_of_right_memes_the_detector_now_gets_wrong(attacked, name):
    context = attacked["context"]
    for severity in (1, 3):
        captions = attacked["out"][(name, severity)]
        measured = textattack_summary(context.outcomes[("text", PREFIX + name, severity)])
        assert measured["succeeded"] + measured["failed"] + measured["skipped"] == 12
        assert measured["max_words"] == WORD_BUDGET[severity - 1]
        rows = range(12)
        clean = context.probabilities(attacked["texts"], rows).argmax(1)
        now = context.probabilities(captions, rows).argmax(1)
        ours = attack_success_rate(context.labels, clean, now)
        assert measured["skipped"] == int((clean != context.labels).sum())
        assert measured["success_rate"] == pytest.approx(ours)
        for k in np.flatnonzero(clean != context.labels):  # already wrong: textattack skips it, caption untouched
            assert captions[k] == attacked["texts"][k]
        if measured["succeeded"]:
            assert measured["avg_queries"] > 1 and 0 < measured["words_changed"] <= 1


@pytest.mark.parametrize("name", ["deepwordbug", "pwws"])  # recipes that keep the number of words
def test_no_more_words_change_than_the_severitys_budget(attacked, name):
    for severity in (1, 3):
        for before, after in zip(attacked["texts"], attacked["out"][(name, severity)]):
            a, b = before.split(), after.split()
            assert len(a) == len(b)
            assert sum(x != y for x, y in zip(a, b)) <= WORD_BUDGET[severity - 1]


def test_an_attack_is_the_same_on_every_run(attacked):
    context = attacked["context"]
    again = get(PREFIX + "deepwordbug").apply(attacked["texts"], attacked["ids"], 3, 0, context)
    assert again == attacked["out"][("deepwordbug", 3)]
    other_seed = get(PREFIX + "deepwordbug").apply(attacked["texts"], attacked["ids"], 3, 1, context)
    assert len(other_seed) == 12


def test_recipes_change_captions(attacked):
    for name in OFFLINE:
        assert attacked["out"][(name, 3)] != attacked["texts"], name


def test_listing_says_which_recipes_run_here_and_what_the_others_lack(tmp_path):
    home = textattack_home(tmp_path)
    for name in OFFLINE:
        assert recipe_status(RECIPES[name], home) == "runs offline here"
    assert "counter-fitted word embeddings" in recipe_status(RECIPES["textfooler"], home)
    assert "Universal Sentence Encoder" in recipe_status(RECIPES["textfooler"], home)
    assert "'bert-base-uncased'" in recipe_status(RECIPES["bae"], home)
    (home / "word_embeddings" / "paragramcf").mkdir(parents=True)
    assert "counter-fitted" not in recipe_status(RECIPES["iga"], home)  # the check reads the disk


def test_every_recipe_textattack_ships_is_listed(attacked):  # (textattack imported by `attacked`, offline)
    import inspect

    from pytest_memerobust.perturb.textattack_recipes import import_textattack

    textattack = import_textattack(textattack_home(attacked["cache"]))
    shipped = {name for name, cls in inspect.getmembers(textattack.attack_recipes, inspect.isclass)
               if issubclass(cls, textattack.attack_recipes.AttackRecipe)
               and cls is not textattack.attack_recipes.AttackRecipe}
    assert shipped == {recipe.textattack_class for recipe in RECIPES.values()}


def test_a_suite_runs_recipes_alone_and_in_the_grid_skips_one_lacking_a_resource_and_reports_the_same_at_any_thread_count(
        pytester, tmp_path):
    """A suite of recipes on memeblip2-tda, in a fresh process at one OpenMP thread and in this one at three (a fresh
    run's minute is mostly importing transformers and textattack): textattack's measures are in the report, a recipe
    whose resources are not here skips its case naming them, textattack's cache is the project's, and the reports are
    the same. TextAttack's searches query the detector (torch encoders here) and keep what the numbers say
    (tests/test_determinism.py checks the other perturbations' thread counts)."""
    pytester.makefile(".toml", **{"memerobust-ta": '[suite]\nname = "ta"\n[thresholds]\nmax_flip_rate = 1.0\n'
                                  'min_relative_robustness = { accuracy = 0.0 }\n'
                                  '[text]\n"textattack:deepwordbug" = [1]\nhotflip = [1]\n'
                                  '"textattack:textfooler" = [1]\n'
                                  '[grid]\ntext = ["textattack:pruthi@1"]\nimage = ["gaussian_noise@2"]\n'})
    env_home = tmp_path / "home"
    env_home.mkdir()
    pytester._monkeypatch.setenv("HOME", str(env_home))
    pytester._monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    from pytest_memerobust.determinism import fixed_threads

    reports = []
    for threads in (1, 3):
        report = tmp_path / f"report-{threads}.json"
        args = ("--memerobust-model=memeblip2-tda", "memerobust-ta.toml", "--memerobust-limit=12",
                "--memerobust-bootstrap=100", "-p", "no:cacheprovider", "--memerobust-tables=full", "-rs",
                f"--memerobust-report={report}", f"--memerobust-cache-dir={pytester.path / f'cache-{threads}'}")
        if threads == 1:
            pytester._monkeypatch.setenv("OMP_NUM_THREADS", "1")
            result = pytester.runpytest_subprocess(*args)
        else:
            with fixed_threads(threads):
                result = pytester.runpytest_inprocess(*args)
        # clean, two caption attacks, the grid cell; and textfooler's case: its word embeddings are not on this machine
        result.assert_outcomes(passed=4, skipped=1)
        result.stdout.fnmatch_lines(["*caption attacks: success, queries and words changed*",
                                     "*textattack:deepwordbug@1 *", "*hotflip@1 *",
                                     "*textattack:textfooler needs what is not on this machine: counter-fitted*"])
        reports.append(json.loads(report.read_text()))
    rows = {r["condition"]: r for g in reports[0]["groups"] for r in g["results"]}
    measured = rows["text=textattack:deepwordbug@1"]["caption_edit"]["textattack"]
    assert measured["recipe"] == "DeepWordBugGao2018"
    assert measured["success_rate"] == pytest.approx(rows["text=textattack:deepwordbug@1"]["attack_success_rate"])
    assert "textattack" not in rows["text=hotflip@1"]["caption_edit"]
    assert 0 < rows["text=hotflip@1"]["caption_edit"]["words_changed"] <= 1
    assert "text=textattack:pruthi@1+image=gaussian_noise@2" in rows
    assert not (env_home / ".cache" / "textattack").exists()  # textattack's cache is the project's, not ~/.cache
    assert (pytester.path / "cache-1" / "textattack" / "post_install_check_3").is_file()
    for report in reports:  # versions and the checkpoint's path aside
        report.pop("versions")
        for model in report["models"].values():
            model.pop("checkpoint")
    assert reports[0] == reports[1]
