"""The flip ledger: exactly the memes that flipped, McNemar's exact p, Markdown, files, refusals, `compare --ledger`."""
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.errors import ConfigError
from pytest_memerobust.judge.ledger import FORMAT as LEDGER_FORMAT
from pytest_memerobust.judge.results import Answers, Memes
from pytest_memerobust.run.gate import baseline_data
from pytest_memerobust.run.session_parts import Outcomes
from pytest_memerobust.track.baseline import FORMAT, flip_ledger_of, load_baseline
from pytest_memerobust.report.ledger import ledger_markdown, write_ledger

N = 20
Y = [i % 2 for i in range(N)]
IDS = [f"m{i:02d}" for i in range(N)]
CAPTIONS = [f"caption of meme {i}" for i in range(N)]
CAPTIONS[4] = "pipes | and\nnew lines"
VERSIONS = {"pytest-memerobust": "0.1.0", "imagecorruptions": "1.1.2", "textattack": None}


def _cell(p_true):
    """Binary probabilities giving each meme's true class `p_true[i]` (right when above 0.5); clean all right."""
    proba = [[1 - p, p] if y else [p, 1 - p] for y, p in zip(Y, p_true)]
    clean = [[0.1, 0.9] if y else [0.9, 0.1] for y in Y]
    return {"y": list(Y), "clean": clean, "perturbed": proba}


def _p_true(wrong: dict):
    """0.8 for every meme but those in `wrong` (row -> its probability of the true label, below 0.5)."""
    return [wrong.get(i, 0.8) for i in range(N)]


def _baseline(typos: dict, contrast: dict, seed=0, named=True):
    data = {"format": FORMAT, "seed": seed, "versions": dict(VERSIONS), "datasets": {"demo": "a" * 64},
            "checkpoints": [{"models": {"demo": "c" * 64}, "paths": {}}],
            "results": {"demo": {"demo": {"clean": _cell(_p_true({})), "text=typos@5": _cell(_p_true(typos)),
                                          "image=contrast@3": _cell(_p_true(contrast))}}}}
    if named:
        data["memes"] = {"demo": {"demo": {"ids": list(IDS), "captions": list(CAPTIONS)}}}
    return data


# before: right on every perturbed meme under typos; wrong on 0, 1, 2 under contrast.
# after: under typos wrong on 3-8 (6 newly wrong, none newly right); under contrast wrong on 0 and 9, 10
# (2 newly wrong: 9, 10; 2 newly right: 1, 2).
TYPOS_AFTER = {3: 0.45, 4: 0.1, 5: 0.3, 6: 0.2, 7: 0.4, 8: 0.35}
BEFORE = dict(typos={}, contrast={0: 0.2, 1: 0.3, 2: 0.45})
AFTER = dict(typos=TYPOS_AFTER, contrast={0: 0.2, 9: 0.4, 10: 0.1})


def _by_condition(ledger):
    return {c["condition"]: c for c in ledger["conditions"]}


def test_the_ledger_lists_exactly_the_memes_that_flipped_largest_change_first():
    ledger = flip_ledger_of(_baseline(**BEFORE), _baseline(**AFTER))
    assert ledger["format"] == LEDGER_FORMAT == "pytest-memerobust-ledger/1"
    assert json.loads(json.dumps(ledger)) == ledger  # plain JSON values
    c = _by_condition(ledger)
    assert list(c) == ["clean", "text=typos@5", "image=contrast@3"]  # the candidate's order, every shared condition
    typos = c["text=typos@5"]
    # largest probability change first: 0.8 -> 0.1 (row 4), 0.2 (6), 0.3 (5), 0.35 (8), 0.4 (7), 0.45 (3)
    assert [e["id"] for e in typos["newly_wrong"]] == ["m04", "m06", "m05", "m08", "m07", "m03"]
    assert typos["newly_right"] == [] and (typos["n_newly_wrong"], typos["n_newly_right"]) == (6, 0)
    assert typos["mcnemar_p"] == 2 * 0.5 ** 6 == 0.03125  # exact two-sided: 2 P(X <= 0), X ~ Bin(6, 1/2)
    first = typos["newly_wrong"][0]
    assert first["row"] == 4 and first["caption"] == CAPTIONS[4] and first["label"] == 0
    assert first["p_true_before"] == pytest.approx(0.8) and first["p_true_after"] == pytest.approx(0.1)
    assert first["change"] == pytest.approx(-0.7) and first["proba_after"] == [0.1, 0.9]
    assert (typos["accuracy_before"], typos["accuracy_after"]) == (1.0, 14 / 20)
    contrast = c["image=contrast@3"]
    assert [e["id"] for e in contrast["newly_wrong"]] == ["m10", "m09"]
    assert [e["id"] for e in contrast["newly_right"]] == ["m01", "m02"]  # +0.5 before +0.35
    assert contrast["mcnemar_p"] == 1.0  # 2 each way: 2 P(X <= 2) > 1 for X ~ Bin(4, 1/2), capped
    assert c["clean"]["n_newly_wrong"] == c["clean"]["n_newly_right"] == 0 and c["clean"]["mcnemar_p"] == 1.0


def test_baselines_saved_without_ids_name_memes_by_row_index():
    ledger = flip_ledger_of(_baseline(**BEFORE, named=False), _baseline(**AFTER, named=False))
    typos = _by_condition(ledger)["text=typos@5"]
    assert [e["id"] for e in typos["newly_wrong"]] == ["4", "6", "5", "8", "7", "3"]
    assert all(e["caption"] is None for e in typos["newly_wrong"])
    assert "| newly wrong | 4 | - | 0.800 | 0.100 | -0.700 |" in ledger_markdown(ledger)
    # one of the two with ids is enough
    mixed = flip_ledger_of(_baseline(**BEFORE), _baseline(**AFTER, named=False))
    assert _by_condition(mixed)["text=typos@5"]["newly_wrong"][0]["id"] == "m04"


def test_the_markdown_has_counts_p_value_and_the_memes():
    ledger = flip_ledger_of(_baseline(**BEFORE), _baseline(**AFTER), names=("old.json", "new.json"))
    md = ledger_markdown(ledger)
    assert md.startswith("# Flip ledger: old.json (before) -> new.json (after)")
    assert "## demo on demo: text=typos@5" in md
    assert "20 memes: **6 newly wrong**, **0 newly right**; McNemar p = 0.031; accuracy 1.0000 -> 0.7000" in md
    for meme in ("m03", "m04", "m05", "m06", "m07", "m08", "m09", "m10", "m01", "m02"):
        assert f"| {meme} |" in md
    assert "| newly wrong | m04 | pipes \\| and new lines | 0.800 | 0.100 | -0.700 |" in md  # one line, escaped
    assert "| newly right | m01 | caption of meme 1 | 0.300 | 0.800 | +0.500 |" in md
    assert "McNemar p <0.001;" in ledger_markdown({**ledger, "conditions": [{**ledger["conditions"][1],
                                                                           "mcnemar_p": 1e-5}]})
    short = ledger_markdown(ledger, max_rows=2)
    assert "| m04 |" in short and "| m06 |" in short and "| m05 |" not in short
    assert "4 more in flip-ledger.json" in short


def test_write_ledger_writes_json_and_markdown(tmp_path):
    ledger = flip_ledger_of(_baseline(**BEFORE), _baseline(**AFTER))
    paths = write_ledger(ledger, tmp_path / "new" / "folder")
    assert paths == [tmp_path / "new" / "folder" / "flip-ledger.json", tmp_path / "new" / "folder" / "flip-ledger.md"]
    assert json.loads(paths[0].read_text()) == ledger
    assert paths[1].read_text() == ledger_markdown(ledger)
    assert sorted(p.name for p in paths[0].parent.iterdir()) == ["flip-ledger.json", "flip-ledger.md"]  # no temp
    (tmp_path / "a-file").write_text("")
    with pytest.raises(ConfigError, match="ledger folder .*a-file is a file"):
        write_ledger(ledger, tmp_path / "a-file")


@pytest.mark.parametrize("change, says", [
    (lambda b: b.update(seed=3), "old.json was made with seed 0, new.json uses 3: perturbations differ"),
    (lambda b: b["datasets"].update(demo="b" * 64), "old.json was made on other data for 'demo'"),
    (lambda b: b["versions"].update(imagecorruptions="9"), "old.json was made with imagecorruptions 1.1.2"),
    (lambda b: b["memes"]["demo"]["demo"]["ids"].reverse(), "old.json and new.json hold other memes or labels"),
    (lambda b: b["results"]["demo"]["demo"]["clean"]["y"].reverse(), "hold other memes or labels for demo on "
                                                                      "'demo' (clean)"),
])
def test_incomparable_baselines_are_refused_naming_the_difference(change, says):
    after = _baseline(**AFTER)
    change(after)
    with pytest.raises(ConfigError, match="refused") as refused:
        flip_ledger_of(_baseline(**BEFORE), after, names=("old.json", "new.json"))
    assert says in str(refused.value)


def test_baselines_sharing_no_condition_are_refused():
    other = _baseline(**AFTER)
    other["results"] = {"memeclip": other["results"]["demo"]}
    with pytest.raises(ConfigError, match="share no model, dataset and condition"):
        flip_ledger_of(_baseline(**BEFORE), other)


def test_compare_ledger_writes_both_files_and_keeps_the_exit_code(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text(json.dumps(_baseline(**BEFORE)))
    (tmp_path / "b.json").write_text(json.dumps(_baseline(**AFTER)))
    plain = cli_main(["compare", "a.json", "b.json", "--bootstrap", "100"])
    capsys.readouterr()
    assert cli_main(["compare", "a.json", "b.json", "--bootstrap", "100", "--ledger", "out"]) == plain == 1
    out = capsys.readouterr().out
    assert "REGRESSED" in out  # the table is still printed
    assert ("flip ledger: 8 memes newly wrong and 2 newly right in B over 3 conditions; wrote "
            f"{Path('out', 'flip-ledger.json')} and {Path('out', 'flip-ledger.md')}") in out
    ledger = json.loads((tmp_path / "out" / "flip-ledger.json").read_text())
    assert ledger == flip_ledger_of(load_baseline(tmp_path / "a.json"), load_baseline(tmp_path / "b.json"),
                                 names=("a.json", "b.json"))
    assert "| m04 |" in (tmp_path / "out" / "flip-ledger.md").read_text()
    assert cli_main(["compare", "a.json", "a.json", "--bootstrap", "100", "--ledger", "same"]) == 0
    assert "0 memes newly wrong and 0 newly right" in capsys.readouterr().out


def test_compare_ledger_into_a_file_is_one_error_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text(json.dumps(_baseline(**BEFORE)))
    (tmp_path / "taken").write_text("")
    assert cli_main(["compare", "a.json", "a.json", "--bootstrap", "50", "--ledger", "taken"]) == 2
    assert capsys.readouterr().err.strip() == "memerobust: error: ledger folder taken is a file"


def _session(task="hate"):
    """A session as baseline_data reads it: results, the report's facts, and the dataset the results scored."""
    def result(p_true):
        cell = _cell(p_true)
        return SimpleNamespace(memes=Memes(np.array(Y)),
                               answers=Answers(np.array(cell["clean"]), np.array(cell["perturbed"])), task=task)

    memes = [SimpleNamespace(id=i, text=t) for i, t in zip(IDS, CAPTIONS)]
    dataset = SimpleNamespace(labelled=lambda task: SimpleNamespace(memes=memes))
    report = {"seed": 0, "versions": VERSIONS, "datasets": {"demo": {"fingerprint": "a" * 64}},
              "models": {"demo": {"checkpoint_sha256": "c" * 64}}}
    return SimpleNamespace(outcomes=Outcomes(results={("demo", "demo", "clean"): result(_p_true({})),
                                                      ("demo", "demo", "text=typos@5"): result(_p_true(TYPOS_AFTER))}),
                           report=lambda: report, dataset=lambda spec: dataset, model_label=lambda model: model)


def test_baselines_save_meme_ids_and_captions_and_old_ones_still_load(tmp_path):
    data = baseline_data(_session())
    assert data["memes"] == {"demo": {"demo": {"ids": IDS, "captions": CAPTIONS}}}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    assert load_baseline(path)["memes"]["demo"]["demo"]["ids"][4] == "m04"
    del data["memes"]  # saved by an earlier version
    path.write_text(json.dumps(data))
    assert "memes" not in load_baseline(path)
    unnamed = _session()
    del unnamed.dataset  # a session that cannot name its memes saves none
    assert baseline_data(unnamed)["memes"] == {}


@pytest.mark.parametrize("damage", [
    lambda m: m["demo"]["demo"]["ids"].pop(),
    lambda m: m["demo"]["demo"].pop("captions"),
    lambda m: m["demo"]["demo"]["ids"].__setitem__(0, 7),
    lambda m: m.update(memeclip={"demo": m["demo"]["demo"]}),
])
def test_a_damaged_memes_entry_is_named(tmp_path, damage):
    data = _baseline(**AFTER)
    damage(data["memes"])
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"baseline .*b.json: memes/(demo|memeclip)/demo is not a memes entry"):
        load_baseline(path)


def test_a_real_run_saves_the_ids_of_the_memes_it_scored(tmp_path):
    from pytest_memerobust.judge.results import StatsConfig
    from pytest_memerobust.run.options import CacheOptions, ComputeOptions, DataOptions, JudgingOptions, Options
    from pytest_memerobust.run.session import RobustnessSession

    session = RobustnessSession(Options(models=("demo",), data=DataOptions(limit=12),
                                        compute=ComputeOptions(device="cpu", cache=CacheOptions(folder=tmp_path)),
                                        judging=JudgingOptions(stats=StatsConfig(n_resamples=20))))
    session.evaluate("demo", "text=typos@5")
    data = baseline_data(session)
    named = data["memes"]["demo"]["demo"]
    memes = session.dataset("demo").memes
    assert named == {"ids": [m.id for m in memes], "captions": [m.text for m in memes]}
    assert len(named["ids"]) == len(data["results"]["demo"]["demo"]["text=typos@5"]["y"]) == 12


GATED_SUITE = """
[suite]
name = "gated"
[text]
typos = [5]
"""


def test_a_gated_run_writes_the_flip_ledger_beside_its_report(pytester):
    import torch  # noqa: F401  imported before pytester's in-process runs, which would re-import it

    pytester.makefile(".toml", **{"memerobust-gated": GATED_SUITE})
    quick = ["--memerobust-model=demo", "--memerobust-limit=20", "--memerobust-bootstrap=50", "-p", "no:cacheprovider"]
    pytester.runpytest(*quick, "--memerobust-save-baseline=b.json", ".").assert_outcomes(passed=2)
    saved = json.loads((pytester.path / "b.json").read_text())
    cell = saved["results"]["demo"]["demo"]["text=typos@5"]
    i = next(k for k, (y, p) in enumerate(zip(cell["y"], cell["perturbed"])) if p[y] > 0.5)  # a meme it gets right
    cell["perturbed"][i] = [1.0, 0.0] if cell["y"][i] == 1 else [0.0, 1.0]  # ... which the baseline now gets wrong
    (pytester.path / "b.json").write_text(json.dumps(saved))
    (pytester.path / "out").mkdir()
    result = pytester.runpytest(*quick, "--memerobust-baseline=b.json", "--memerobust-report=out/r.json", ".")
    assert "flip ledger against b.json: 0 memes newly wrong and 1 newly right over 2 conditions" in result.stdout.str()
    ledger = json.loads((pytester.path / "out" / "flip-ledger.json").read_text())
    [typos] = [c for c in ledger["conditions"] if c["condition"] == "text=typos@5"]
    assert [e["id"] for e in typos["newly_right"]] == [saved["memes"]["demo"]["demo"]["ids"][i]]
    assert typos["newly_wrong"] == []
    assert (pytester.path / "out" / "flip-ledger.md").read_text().startswith("# Flip ledger: b.json (before)")
