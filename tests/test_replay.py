"""Reproducible counterexamples: a failing case writes its worst memes exactly; `--memerobust-replay` reruns them."""
import dataclasses
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch  # imported here once: pytester's in-process runs would otherwise re-import it and crash

from built_once import built_once
from pytest_memerobust.determinism import device_type
from pytest_memerobust.engine import Condition
from pytest_memerobust.judge.results import Answers, ConditionResult, Memes, StatsConfig
from pytest_memerobust.run.replay import (FORMAT, MANIFEST_MEMES, ReplayError, check_replay, counterexamples,
                                      perturbation_code, picture_digest, picture_store, read_manifest, replay_entry,
                                      worst_flips, write_manifest)
from pytest_memerobust.run.options import DataOptions, JudgingOptions, Options
from pytest_memerobust.run.session import RobustnessSession

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
    """A run whose two cases fail: its folder, what it printed, and the manifest it wrote. Run once for the session,
    whichever pytest-xdist worker asks first."""
    def build(where):
        (where / "memerobust-strict.toml").write_text(STRICT_SUITE)
        run = _run(where, "--memerobust-model=demo", *RUN, "--memerobust-counterexamples=cx.json", ".")
        assert run.returncode == 1, run.stdout + run.stderr
        (where / "stdout.txt").write_text(run.stdout)

    where = built_once(tmp_path_factory, "replay-recorded", build)
    return where, (where / "stdout.txt").read_text(), json.loads((where / "cx.json").read_text())


@pytest.fixture(scope="module")
def session():
    return RobustnessSession(Options(models=("demo",), data=DataOptions(limit=LIMIT),
                                     judging=JudgingOptions(stats=StatsConfig(n_resamples=50))))


def _copy_manifest(recorded, pytester, name="cx.json", change=None):
    data = json.loads(json.dumps(recorded[2]))
    if change is not None:
        change(data)
    (pytester.path / name).write_text(json.dumps(data))
    return data


def test_a_failing_case_writes_its_worst_flips_as_the_engine_fed_them(recorded, session):
    where, printed, manifest = recorded
    assert "counterexamples of 2 failing cases written to cx.json" in printed
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
            assert e["row"] == i and e["label"] == int(result.memes.y_true[i]) and e["seed"] == 0
            assert e["caption"] == captions[i]  # exactly as fed
            assert e["picture_digest"] == picture_digest(engine.picture(parsed, i))
            assert e["picture_recipe"]["image_side"] == (parsed.id if parsed.image else "clean")
            assert e["recipe_needs_batch"] is False  # hotflip attacks the caption; the picture is clean
            np.testing.assert_allclose(e["proba"], result.answers.proba[i], rtol=1e-6)
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
    here = device_type(session.engine("demo", "demo"))
    result = pytester.runpytest("--memerobust-replay=cx.json", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=len(entries) - 1)
    result.stdout.fnmatch_lines([f"*ReplayError: cx.json entry 0 (demo, image=gaussian_noise@5, meme "
                                 f"{entries[0]['meme']}): the regenerated picture * has digest *, not the recorded "
                                 f"000* (its stored picture cx.pictures/*.png is not beside the manifest: copy the "
                                 f"folder cx.pictures/ with it): the meme's clean picture, the perturbations' code and "
                                 f"the seed are as recorded, so the perturbation computes a different picture here "
                                 f"(recorded on {here} with torch *, regenerated on {here} with torch *)"])


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
    (lambda d: d["entries"][0].update(picture_file="../../secret.png"), "*cx.json entry 0 (demo, *): picture_file "
                                                                        "must name a PNG in the pictures folder*"),
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
    proba = clean.answers.proba.copy()
    proba[:, [0, 1]] = proba[:, [1, 0]]  # every meme flipped
    result = ConditionResult("demo", "demo", condition, Memes(clean.memes.y_true), Answers(clean.answers.proba, proba),
                             StatsConfig(n_resamples=50), task="hate")
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
    result = ConditionResult("m", "d", Condition(text="typos", text_severity=1), Memes(y), Answers(clean, now))
    assert worst_flips(result) == [4, 0, 2]  # meme 1 stays right, meme 3 was wrong clean
    assert worst_flips(result, limit=1) == [4]
    multi = ConditionResult("m", "d", Condition(text="typos", text_severity=1), Memes(np.array([[1, 0], [0, 1]])),
                            Answers(np.array([[.9, .1], [.2, .8]]), np.array([[.9, .6], [.2, .8]])))
    assert worst_flips(multi) == [0]


def test_read_manifest_rejects_what_is_not_one(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"format": FORMAT, "entries": {}}))
    with pytest.raises(ReplayError, match="'entries' must be a list"):
        read_manifest(path)
    path.write_text(json.dumps({"format": FORMAT, "entries": []}))
    assert read_manifest(path) == []


def test_under_xdist_the_controller_writes_the_same_manifest(recorded, pytester):
    """The controller runs in this process (pytester), its two workers in their own."""
    pytest.importorskip("xdist", reason="pytest-xdist is in the dev extra")
    where, _, manifest = recorded
    shutil.copy(where / "memerobust-strict.toml", pytester.path)
    run = pytester.runpytest("--memerobust-model=demo", *RUN, "-n", "2", "--memerobust-counterexamples=cx.json", ".")
    assert run.ret == 1, run.stdout.str() + run.stderr.str()
    assert json.loads((pytester.path / "cx.json").read_text()) == manifest


# --- the pictures stored beside the manifest, and the merge by case ------------------------------------------------


def test_every_picture_fed_is_stored_beside_the_manifest_with_what_it_depends_on(recorded, session):
    from PIL import Image

    where, _, manifest = recorded
    engine = session.engine("demo", "demo")
    stored = sorted(p.name for p in (where / "cx.pictures").iterdir())
    assert stored == sorted({e["picture_file"].split("/")[1] for e in manifest["entries"]})
    for e in manifest["entries"]:
        assert e["picture_file"] == f"cx.pictures/{e['picture_digest']}.png"
        picture = np.asarray(Image.open(where / e["picture_file"]).convert("RGB"))
        assert picture_digest(picture) == e["picture_digest"]  # lossless: the very picture fed
        clean = engine.picture(Condition(), e["row"])
        assert e["clean_picture_digest"] == picture_digest(clean)
        image = Condition.parse(e["condition"]).image
        assert e["perturbation_code"] == ({image: perturbation_code(image)} if image else {})
        if image is None:  # hotflip edits the caption only: the picture fed is the clean one
            assert e["picture_digest"] == e["clean_picture_digest"]
        made_on = {"device": device_type(engine), "torch": torch.__version__}  # cuda on a GPU machine
        assert e["made_on"] == made_on and "attack_fingerprint" not in e


def test_a_replay_uses_the_stored_picture_even_where_it_would_not_regenerate(recorded, pytester):
    where = recorded[0]
    shutil.copytree(where / "cx.pictures", pytester.path / "cx.pictures")

    def code_changed(data):  # as if gaussian_noise's code had changed since: its pictures no longer regenerate
        for e in data["entries"]:
            e["perturbation_code"] = {name: "0" * 16 for name in e["perturbation_code"]}

    entries = _copy_manifest(recorded, pytester, change=code_changed)["entries"]
    result = pytester.runpytest("--memerobust-replay=cx.json", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=len(entries))  # every one still evades the demo detector, none is a ReplayError
    assert "ReplayError" not in result.stdout.str()


def test_a_damaged_stored_picture_is_a_clear_error(recorded, tmp_path, session):
    from PIL import Image

    where, _, manifest = recorded
    shutil.copytree(where / "cx.pictures", tmp_path / "cx.pictures")
    e = next(e for e in manifest["entries"] if e["condition"] == "image=gaussian_noise@5")
    path = tmp_path / e["picture_file"]
    pixels = np.asarray(Image.open(path)).copy()
    pixels[0, 0] ^= 1
    Image.fromarray(pixels).save(path)
    with pytest.raises(ReplayError, match=rf"its stored picture {re.escape(str(path))} has digest \w+, not the "
                                          rf"recorded {e['picture_digest']}: the file was changed or damaged"):
        replay_entry(session, e, manifest=tmp_path / "cx.json")


def test_a_picture_that_no_longer_regenerates_says_what_changed(recorded, session):
    entry = next(e for e in recorded[2]["entries"] if e["condition"] == "image=gaussian_noise@5")

    def failure(**changes) -> str:
        with pytest.raises(ReplayError) as caught:
            replay_entry(session, {**entry, **changes})  # no manifest: nothing stored, the picture is regenerated
        return str(caught.value)

    said = failure(picture_digest="1" * 32, clean_picture_digest="2" * 32)
    assert f"has digest {entry['picture_digest']}, not the recorded {'1' * 32}: the meme's clean picture changed " \
           f"(digest {entry['clean_picture_digest']}, recorded {'2' * 32})" in said
    said = failure(picture_digest="1" * 32, perturbation_code={"gaussian_noise": "3" * 16}, version="0.0.1")
    assert f"the code of perturbation 'gaussian_noise' changed (source digest " \
           f"{perturbation_code('gaussian_noise')}, recorded {'3' * 16})" in said
    assert "recorded by pytest-memerobust 0.0.1" in said and "clean picture" not in said


def _case(name, *entries):
    return {"case": name, "entries": [dict(e, case=name) for e in entries]}


def _entry(meme, digest):
    return {"meme": meme, "picture_digest": digest, "picture_file": f"cx.pictures/{digest}.png"}


def test_write_manifest_merges_by_case_and_removes_the_pictures_no_entry_names(tmp_path):
    path, store = tmp_path / "cx.json", picture_store(tmp_path / "cx.json")
    digests = {k: f"{k:032x}" for k in range(1, 7)}
    store.mkdir()

    def stored(*ks):  # what the cases' items write as they record their entries
        for k in ks:
            (store / f"{digests[k]}.png").write_bytes(b"png")

    stored(1, 2, 3, 4)
    first = [_case("s::m::a", _entry("m1", digests[1]), _entry("m2", digests[2])),
             _case("s::m::b", _entry("m3", digests[3])), _case("s::m::c", _entry("m4", digests[4]))]
    write_manifest(path, first)
    assert [e["meme"] for e in json.loads(path.read_text())["entries"]] == ["m1", "m2", "m3", "m4"]
    stored(5, 6)
    # a later run of a subset: a fails again on other memes, b now passes, c's recording failed, d is new
    lines = write_manifest(path, [_case("s::m::a", _entry("m5", digests[5])), {"case": "s::m::b", "entries": []},
                                  {"case": "s::m::c", "error": "OSError: disk full"},
                                  _case("s::m::d", _entry("m6", digests[6]))])
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT
    assert [(e["case"], e["meme"]) for e in data["entries"]] == [("s::m::a", "m5"), ("s::m::c", "m4"),
                                                                  ("s::m::d", "m6")]
    assert sorted(p.name for p in store.iterdir()) == sorted(f"{digests[k]}.png" for k in (4, 5, 6))
    assert lines == ["memerobust: could not record the counterexamples of s::m::c (OSError: disk full)",
                     f"memerobust: 2 counterexamples of 2 failing cases written to {path} (1 of 1 other case kept "
                     f"from earlier runs); replay them with pytest --memerobust-replay={path}"]
    # a run where the failing cases all pass now: their entries go, the rest stay
    assert write_manifest(path, [{"case": "s::m::a", "entries": []}, {"case": "s::m::d", "entries": []}]) == [
        f"memerobust: 2 counterexamples of cases that now pass or flip no meme removed from {path} (1 of 1 other "
        f"case kept from earlier runs)"]
    assert [e["meme"] for e in json.loads(path.read_text())["entries"]] == ["m4"]
    assert [p.name for p in store.iterdir()] == [f"{digests[4]}.png"]
    # nothing ran that touches the manifest: left as it is
    before = path.stat().st_mtime_ns
    assert write_manifest(path, [{"case": "s::m::z", "entries": []}]) == []
    assert path.stat().st_mtime_ns == before
    # a file there that is not a manifest is replaced, and the run says so
    path.write_text("{not json")
    lines = write_manifest(path, [_case("s::m::a", _entry("m5", digests[5]))])
    assert lines[0].startswith(f"memerobust: {path} held no readable counterexamples manifest (JSONDecodeError")
    assert [e["meme"] for e in json.loads(path.read_text())["entries"]] == ["m5"]


def test_a_subset_run_keeps_the_other_cases_counterexamples(recorded, pytester):
    """Both runs in this process (pytester)."""
    project = pytester.path
    where, _, manifest = recorded
    shutil.copy(where / "cx.json", project)
    shutil.copytree(where / "cx.pictures", project / "cx.pictures")
    noisy = "memerobust-strict.toml::demo::gaussian_noise-5"
    # the noise case passes now (same case id, lenient thresholds); only it runs
    (project / "memerobust-strict.toml").write_text(STRICT_SUITE.replace("accuracy = 1.5", "accuracy = 0.0"))
    run = pytester.runpytest("--memerobust-model=demo", *RUN, "--memerobust-counterexamples=cx.json", ".",
                             "-k", "gaussian_noise")
    assert run.ret == 0, run.stdout.str() + run.stderr.str()
    after = json.loads((project / "cx.json").read_text())["entries"]
    assert after == [e for e in manifest["entries"] if e["case"] != noisy]  # the hotflip case's, untouched
    dropped = len(manifest["entries"]) - len(after)
    assert (f"memerobust: {dropped} counterexamples of cases that now pass or flip no meme removed from cx.json "
            f"({len(after)} of 1 other case kept from earlier runs)") in run.stdout.str()
    assert sorted(p.name for p in (project / "cx.pictures").iterdir()) == \
        sorted({e["picture_file"].split("/")[1] for e in after})
    # it fails again: its entries come back, and the whole manifest is the full run's again
    (project / "memerobust-strict.toml").write_text(STRICT_SUITE)
    run = pytester.runpytest("--memerobust-model=demo", *RUN, "--memerobust-counterexamples=cx.json", ".",
                             "-k", "gaussian_noise")
    assert run.ret == 1, run.stdout.str() + run.stderr.str()
    assert json.loads((project / "cx.json").read_text()) == manifest


def test_an_attacked_picture_replays_against_a_new_checkpoint_without_fitting_the_attack_again(session, tmp_path,
                                                                                                monkeypatch):
    """The UAP of the recorded weights is in the stored picture: a new checkpoint meets exactly it. Without the
    stored picture, the attack fitted again on the new weights makes another picture, and the error says so."""
    from PIL import Image

    from pytest_memerobust import cli
    from pytest_memerobust.perturb import uap

    condition = Condition(image="uap", image_severity=5)
    clean = session.evaluate("demo", "clean")
    proba = clean.answers.proba.copy()
    proba[:, [0, 1]] = proba[:, [1, 0]]  # every meme flipped (made up: the recipe is what is checked)
    result = ConditionResult("demo", "demo", condition, Memes(clean.memes.y_true), Answers(clean.answers.proba, proba),
                             StatsConfig(n_resamples=50), task="hate")
    manifest = tmp_path / "cx.json"
    entries = counterexamples(result, session.engine("demo", "demo"), case="made-up", store=picture_store(manifest))
    assert write_manifest(manifest, [{"case": "made-up", "entries": entries}])
    entries = read_manifest(manifest)
    fingerprint = session.engine("demo", "demo").attack_context().fingerprint
    assert entries and all(e["recipe_needs_batch"] and e["attack_fingerprint"] == fingerprint for e in entries)

    new = tmp_path / "new.safetensors"  # another head: two epochs from another seed
    assert cli.main(["train", "demo", "--demo", "--out", str(new), "--epochs", "2", "--seed", "1", "--no-cache",
                     "--quiet"]) == 0
    retrained = RobustnessSession(dataclasses.replace(session.options, checkpoints={"demo": str(new)}, seed=7))

    def no_fitting(*args, **kwargs):
        raise AssertionError("the attack was fitted again")

    with monkeypatch.context() as mp:
        mp.setattr(uap, "fit_uap", no_fitting)
        check_replay(retrained, [(manifest, k, e, "demo") for k, e in enumerate(entries)])  # any seed will do
        for e in entries:
            still, proba = replay_entry(retrained, e, manifest=manifest)
            assert still == (np.argmax(proba) != e["label"])
            engine = retrained.engine("demo", "demo")
            row = engine.ids.index(e["meme"])
            shown = np.asarray(Image.open(tmp_path / e["picture_file"]).convert("RGB"))
            np.testing.assert_allclose(proba, engine.probabilities([shown], [e["caption"]])[0], rtol=1e-6)
            assert picture_digest(shown) != picture_digest(engine.picture(Condition(), row))  # the attacked one
    shutil.rmtree(picture_store(manifest))  # the manifest alone: the new weights get a new attack
    again = RobustnessSession(dataclasses.replace(retrained.options, seed=0))
    with pytest.raises(ReplayError, match=r"is not beside the manifest: copy the folder cx.pictures/ with it\): the "
                                          r"attack was fitted again on other weights \(fingerprint \w+, recorded "
                                          rf"{fingerprint[:16]}\): another checkpoint gets another attack"):
        replay_entry(again, entries[0], manifest=manifest)
