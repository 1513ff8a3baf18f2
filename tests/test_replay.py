"""Reproducible counterexamples: a failing case writes its worst memes exactly; `--memerobust-replay` reruns them."""
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch  # noqa: F401  imported here once: pytester's in-process runs would otherwise re-import it and crash

from pytest_memerobust.engine import Condition
from pytest_memerobust.results import ConditionResult, StatsConfig
from pytest_memerobust.replay import (FORMAT, MANIFEST_MEMES, ReplayError, check_replay, counterexamples,
                                      picture_digest, read_manifest, replay_entry, worst_flips)
from pytest_memerobust.session import Options, RobustnessSession

LIMIT = 60
RUN = [f"--memerobust-limit={LIMIT}", "--memerobust-bootstrap=50", "-p", "no:cacheprovider", "-p", "no:randomly"]

# Both conditions flip some of the demo detector's memes from right to wrong; no case can reach 1.5.
STRICT_SUITE = """
[suite]
name = "strict"
[thresholds]
min_relative_robustness = { accuracy = 1.5 }
[text]
hotflip = [3]
[image]
gaussian_noise = [5]
"""


def _run(cwd, *args):
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A run whose two cases fail, and the manifest it wrote."""
    where = tmp_path_factory.mktemp("recorded")
    (where / "memerobust-strict.toml").write_text(STRICT_SUITE)
    run = _run(where, "--memerobust-model=demo", *RUN, "--memerobust-counterexamples=cx.json", ".")
    assert run.returncode == 1, run.stdout + run.stderr
    return where, run, json.loads((where / "cx.json").read_text())


@pytest.fixture(scope="module")
def session():
    return RobustnessSession(Options(models=("demo",), limit=LIMIT, stats=StatsConfig(n_resamples=50)))


def _copy_manifest(recorded, pytester, name="cx.json", change=None):
    data = json.loads(json.dumps(recorded[2]))
    if change is not None:
        change(data)
    (pytester.path / name).write_text(json.dumps(data))
    return data


def test_a_failing_case_writes_its_worst_flips_as_the_engine_fed_them(recorded, session):
    where, run, manifest = recorded
    assert "counterexamples of 2 failing cases written to cx.json" in run.stdout
    assert manifest["format"] == FORMAT
    entries = manifest["entries"]
    assert {e["case"] for e in entries} == {"memerobust-strict.toml::demo::hotflip-3",
                                            "memerobust-strict.toml::demo::gaussian_noise-5"}
    engine = session.engine("demo", "demo")
    for condition in ("text=hotflip@3", "image=gaussian_noise@5"):
        mine = [e for e in entries if e["condition"] == condition]
        result = session.evaluate("demo", condition)
        # the worst flips, right clean and wrong perturbed, largest fall first, at most MANIFEST_MEMES
        assert [e["meme"] for e in mine] == [engine.ids[i] for i in worst_flips(result)]
        assert 0 < len(mine) <= MANIFEST_MEMES
        falls = [e["truth_probability_fall"] for e in mine]
        assert falls == sorted(falls, reverse=True) and min(falls) > 0
        parsed = Condition.parse(condition)
        captions = engine.inputs(*engine.text_side(parsed))
        for e in mine:
            i = engine.ids.index(e["meme"])
            assert e["row"] == i and e["label"] == int(result.y_true[i]) and e["seed"] == 0
            assert e["caption"] == captions[i]  # exactly as fed
            assert e["picture_digest"] == picture_digest(engine.picture(parsed, i))
            assert e["picture_recipe"]["image_side"] == (parsed.id if parsed.image else "clean")
            assert e["recipe_needs_batch"] is False  # hotflip attacks the caption; the picture is clean
            np.testing.assert_allclose(e["proba"], result.proba[i], rtol=1e-6)
            assert np.argmax(e["proba_clean"]) == e["label"] != np.argmax(e["proba"])
    assert any(e["caption"] != engine.dataset.memes[e["row"]].text for e in entries)  # hotflip's edits


def test_replay_on_the_same_model_fails_exactly_the_recorded_memes(recorded, pytester):
    entries = _copy_manifest(recorded, pytester)["entries"]
    result = pytester.runpytest("--memerobust-replay=cx.json", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=len(entries))
    failed = {line.split()[1] for line in result.stdout.lines if line.startswith("FAILED ")}
    assert failed == {f"cx.json::demo::{Condition.parse(e['condition']).test_name}::{e['meme']}" for e in entries}
    first = next(k for k, e in enumerate(entries) if e["condition"] == "text=hotflip@3")
    result.stdout.fnmatch_lines([f"*demo still gets meme * wrong under text=hotflip@3 (cx.json entry {first})*",
                                 "*caption: *", "*true label: *; its probability now *; recorded *, clean *"])
    assert "replaying the counterexamples of cx.json" in result.stdout.str()
    # a printed node id re-runs one counterexample
    one = f"cx.json::demo::gaussian_noise-5::{entries[0]['meme']}"
    again = pytester.runpytest("--memerobust-replay=cx.json", one, "-p", "no:cacheprovider")
    again.assert_outcomes(failed=1)


def test_a_caption_is_replayed_verbatim_and_a_changed_picture_is_a_clear_error(recorded, pytester, session):
    def tamper(data):
        edited = next(e for e in data["entries"] if e["condition"] == "text=hotflip@3")
        edited["caption"] = session.dataset("demo").memes[edited["row"]].text  # the clean one, which it got right
        data["entries"][0]["picture_digest"] = "0" * 32

    entries = _copy_manifest(recorded, pytester, change=tamper)["entries"]
    assert entries[0]["condition"] == "image=gaussian_noise@5"
    result = pytester.runpytest("--memerobust-replay=cx.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=len(entries) - 1)
    result.stdout.fnmatch_lines([f"*ReplayError: cx.json entry 0 (demo, image=gaussian_noise@5, meme "
                                 f"{entries[0]['meme']}): the regenerated picture * has digest *, not the recorded "
                                 f"000*: the dataset or the perturbation code changed*"])


@pytest.mark.parametrize("change, message", [
    (lambda d: "{not json", "--memerobust-replay=cx.json: not a JSON file*"),
    (lambda d: {**d, "format": "something/2"}, "*cx.json: not a counterexamples manifest (format 'something/2'*"),
    (lambda d: d["entries"][1].pop("caption") and None, "*cx.json entry 1 (demo, *, meme *): missing caption*"),
    (lambda d: d["entries"][0].update(seed="0"), "*cx.json entry 0 (demo, *): wrong type of seed*"),
    (lambda d: d["entries"][0].update(model="nope"), "*cx.json entry 0 (nope, *): unknown model 'nope'*"),
    (lambda d: d["entries"][0].update(dataset="nope:/x"), "*cx.json entry 0 (demo, *): *nope*"),
    (lambda d: d["entries"][2].update(meme="demo-9999"), "*cx.json entry 2 (demo, *, meme demo-9999): meme "
                                                         "'demo-9999' is not in 'demo'*"),
    (lambda d: d["entries"][0].update(condition="text=nope@2"), "*cx.json entry 0 (demo, text=nope@2, *): unknown "
                                                                "perturbation 'nope'*"),
])
def test_a_bad_manifest_is_one_usage_error_naming_it(recorded, pytester, change, message):
    data = json.loads(json.dumps(recorded[2]))
    changed = change(data)
    text = changed if isinstance(changed, str) else json.dumps(changed if isinstance(changed, dict) else data)
    (pytester.path / "cx.json").write_text(text)
    result = pytester.runpytest("--memerobust-replay=cx.json", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()


def test_replay_checks_old_counterexamples_against_another_model(recorded, pytester, session):
    entries = _copy_manifest(recorded, pytester)["entries"]
    result = pytester.runpytest("--memerobust-replay=cx.json", "--memerobust-model=demo:text", "-v",
                                "-p", "no:cacheprovider")
    outcomes = {line.split()[0]: line.split()[1] for line in result.stdout.lines
                if line.startswith("cx.json::") and line.split()[1] in ("PASSED", "FAILED")}
    assert len(outcomes) == len(entries)
    for e in entries:
        still, proba = replay_entry(session, e, "demo:text")  # the caption alone, as fed
        assert proba.shape == (2,)
        node = f"cx.json::demo:text::{Condition.parse(e['condition']).test_name}::{e['meme']}"
        assert outcomes[node] == ("FAILED" if still else "PASSED")


def test_an_attacked_picture_is_regenerated_by_the_whole_batch(session):
    """The demo detector resists its UAP, so the flips are made up: what is checked is the recipe."""
    condition = Condition(image="uap", image_severity=5)
    clean = session.evaluate("demo", "clean")
    proba = clean.proba.copy()
    proba[:, [0, 1]] = proba[:, [1, 0]]  # every meme flipped
    result = ConditionResult("demo", "demo", condition, clean.y_true, clean.proba, proba, StatsConfig(n_resamples=50),
                             task="hate")
    entries = counterexamples(result, session.engine("demo", "demo"), case="made-up")
    assert entries and all(e["recipe_needs_batch"] for e in entries)
    again = RobustnessSession(session.options)  # a fresh run: the attack is fitted again over the batch
    for e in entries:
        still, proba = replay_entry(again, e)  # its digest matched, or this raises
        assert still == (np.argmax(proba) != e["label"])
    with pytest.raises(ReplayError, match="replay with --memerobust-seed=3"):
        check_replay(again, [("cx.json", 0, {**entries[0], "seed": 3}, "demo")])


def test_worst_flips_are_right_to_wrong_only_largest_fall_first():
    y = np.array([1, 1, 0, 0, 1])
    clean = np.array([[.1, .9], [.4, .6], [.8, .2], [.3, .7], [.2, .8]])
    now = np.array([[.6, .4], [.45, .55], [.3, .7], [.1, .9], [.9, .1]])
    result = ConditionResult("m", "d", Condition(text="typos", text_severity=1), y, clean, now)
    assert worst_flips(result) == [4, 0, 2]  # meme 1 stays right, meme 3 was wrong clean
    assert worst_flips(result, limit=1) == [4]
    multi = ConditionResult("m", "d", Condition(text="typos", text_severity=1), np.array([[1, 0], [0, 1]]),
                            np.array([[.9, .1], [.2, .8]]), np.array([[.9, .6], [.2, .8]]))
    assert worst_flips(multi) == [0]


def test_read_manifest_rejects_what_is_not_one(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"format": FORMAT, "entries": {}}))
    with pytest.raises(ReplayError, match="'entries' must be a list"):
        read_manifest(path)
    path.write_text(json.dumps({"format": FORMAT, "entries": []}))
    assert read_manifest(path) == []


def test_under_xdist_the_controller_writes_the_same_manifest(recorded, tmp_path):
    pytest.importorskip("xdist", reason="pytest-xdist is in the dev extra")
    where, _, manifest = recorded
    shutil.copy(where / "memerobust-strict.toml", tmp_path)
    run = _run(tmp_path, "--memerobust-model=demo", *RUN, "-n", "2", "--memerobust-counterexamples=cx.json", ".")
    assert run.returncode == 1, run.stdout + run.stderr
    assert json.loads((tmp_path / "cx.json").read_text()) == manifest
