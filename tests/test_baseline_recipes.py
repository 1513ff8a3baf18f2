"""Baselines keyed by the card's name (another checkpoint of the card, written anywhere, is compared with it), the
recipe's several checkpoints in one baseline (`--memerobust-baseline-add`, `memerobust baseline merge`), the gate's
resampling options, and `memerobust compare --json` read back."""
import copy
import json
import math
import re

import numpy as np
import pytest
import torch  # noqa: F401  (imported once, before pytester runs: see tests/test_plugin.py)

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.errors import ConfigError
from pytest_memerobust.judge.gate import compare_baselines
from pytest_memerobust.report.gate_tables import memes_needed_line, method_line, recipe_line
from pytest_memerobust.track.baseline import (FORMAT, card_record, load_baseline, merged_baselines, paired_cells,
                                              rekeyed)

from test_gate import SUITE  # the gate's suite: typos at 2 and 5, contrast at 3

QUICK = ["--memerobust-limit=60", "--memerobust-bootstrap=200", "--memerobust-gate-resamples=400", "-p",
         "no:cacheprovider"]
N = 120
VERSIONS = {"pytest-memerobust": "0.1.0", "imagecorruptions": "1.1.2", "textattack": None}
CARD = {"name": "minilm", "architecture": "demo", "task": "hate", "classes": ["non-hateful", "hateful"],
        "params": {"text_dim": 512}, "backbone": {}, "text_backbone": {}}


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    """Three checkpoints of one recipe (the demo card's, 3 epochs, seeds 1-3), each with the card `memerobust train`
    writes beside it, all named `minilm`, in three folders."""
    root = tmp_path_factory.mktemp("recipe")
    cards = []
    for seed, folder in zip((1, 2, 3), "abc"):
        out = root / folder / f"s{seed}.safetensors"
        assert cli_main(["train", "demo", "--demo", "--epochs", "3", "--seed", str(seed), "--name", "minilm",
                         "--cache-dir", str(root / "cache"), "--out", str(out), "--quiet"]) == 0
        cards.append(out.with_suffix(".card.toml"))
    return cards


def _run(pytester, card, *args):
    return pytester.runpytest(f"--memerobust-model={card}", *QUICK, *args, ".")


def test_a_baseline_of_one_card_file_gates_and_compares_another_checkpoint_of_the_card(pytester, tmp_path, recipe,
                                                                                       capsys):
    """Issue 52: a baseline saved with a/s1.card.toml was keyed by that path, so a run of b/s2.card.toml was a usage
    error and `compare` of their baselines said "share no model"; now both are keyed by the card's name."""
    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _run(pytester, recipe[0], f"--memerobust-save-baseline={a}").assert_outcomes(passed=4)
    saved = load_baseline(a)
    assert saved["format"] == FORMAT and list(saved["results"]) == ["minilm"]
    assert saved["checkpoints"][0]["paths"]["minilm"] == str(recipe[0].with_name("s1.safetensors"))
    assert saved["run"]["cards"]["minilm"]["architecture"] == "demo"
    gated = _run(pytester, recipe[1], f"--memerobust-baseline={a}", f"--memerobust-save-baseline={b}")
    gated.assert_outcomes(passed=4)  # no --memerobust-checkpoint workaround
    gated.stdout.fnmatch_lines(["*memerobust gate: this run against the baseline*",
                                "0 of 4 conditions and 0 of 1 family mean regressed (clean did not)*",
                                "Decided on 400 resamples: paired permutations*"])
    capsys.readouterr()
    assert cli_main(["compare", str(a), str(b), "--resamples", "400", "--json", str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert "share no model" not in out and "Decided on 400 resamples" in out
    assert " typos (mean of 2) " in out  # a family mean is a row like any other condition

    # the same name, another architecture: refused, naming the fact that differs
    other = json.loads(b.read_text())
    other["run"]["cards"]["minilm"]["architecture"] = "memeclip"
    b.write_text(json.dumps(other))
    assert cli_main(["compare", str(a), str(b), "--resamples", "400"]) == 2
    assert (f"card 'minilm' in {a} has architecture 'demo', {b}'s 'memeclip': a baseline compares checkpoints of one "
            "detector") in capsys.readouterr().err
    refused = _run(pytester, recipe[1], f"--memerobust-baseline={b}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines([f"*card 'minilm' in baseline {b} has architecture 'memeclip', this run's 'demo'*"])


def test_a_baseline_saved_before_cards_were_keyed_by_name_still_gates_its_card_path(pytester, tmp_path, recipe):
    """A format /1 baseline kept a card given by path under that path, its card as a digest and its checkpoint under
    `models`: it loads as it was saved, and gates a run of that path."""
    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    new = tmp_path / "new.json"
    _run(pytester, recipe[0], f"--memerobust-save-baseline={new}").assert_outcomes(passed=4)
    data = json.loads(new.read_text())
    path = str(recipe[0])
    old = {"format": "pytest-memerobust-baseline/1", "seed": data["seed"], "versions": data["versions"],
           "datasets": data["datasets"], "models": {path: data["checkpoints"][0]["models"]["minilm"]},
           "run": {"limit": 60, "tasks": {path: data["run"]["tasks"]["minilm"]},
                   "cards": {path: data["run"]["cards"]["minilm"]["digest"]}},
           "results": {path: data["results"]["minilm"]}, "memes": {path: data["memes"]["minilm"]}}
    (tmp_path / "old.json").write_text(json.dumps(old))
    loaded = load_baseline(tmp_path / "old.json")
    assert list(loaded["results"]) == [path] and loaded["checkpoints"] == [{"models": old["models"], "paths": {}}]
    gated = _run(pytester, recipe[0], f"--memerobust-baseline={tmp_path / 'old.json'}")
    gated.assert_outcomes(passed=4)
    gated.stdout.fnmatch_lines(["0 of 4 conditions and 0 of 1 family mean regressed (clean did not)*"])
    assert "not run" not in gated.stdout.str() and "not gated" not in gated.stdout.str()


def test_checkpoints_of_one_recipe_are_added_or_merged_into_one_baseline_and_gate_a_new_seed(pytester, tmp_path,
                                                                                           recipe, capsys):
    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    first, third, added = tmp_path / "s1.json", tmp_path / "s3.json", tmp_path / "recipe.json"
    _run(pytester, recipe[0], f"--memerobust-save-baseline={first}").assert_outcomes(passed=4)
    _run(pytester, recipe[2], f"--memerobust-save-baseline={third}").assert_outcomes(passed=4)
    added.write_text(first.read_text())
    grown = _run(pytester, recipe[2], f"--memerobust-save-baseline={added}", "--memerobust-baseline-add")
    grown.assert_outcomes(passed=4)
    grown.stdout.fnmatch_lines([f"memerobust: this run's checkpoint added to the baseline {added}: 4 conditions of 1 "
                                "model (minilm) on demo (60 memes), seed 0; 2 checkpoints of one recipe"])
    data = load_baseline(added)
    assert [c["paths"]["minilm"] for c in data["checkpoints"]] == [
        str(recipe[0].with_name("s1.safetensors")), str(recipe[2].with_name("s3.safetensors"))]
    cells = data["results"]["minilm"]["demo"]["text=typos@5"]
    assert len(cells) == 2 and cells[0] == load_baseline(first)["results"]["minilm"]["demo"]["text=typos@5"]
    assert cells[1] == load_baseline(third)["results"]["minilm"]["demo"]["text=typos@5"]
    # `memerobust baseline merge` writes the same baseline from the two saved ones
    merged = tmp_path / "merged.json"
    assert cli_main(["baseline", "merge", str(merged), str(first), str(third)]) == 0
    assert f"memerobust: 2 baselines merged into {merged}: 4 conditions" in capsys.readouterr().out
    assert json.loads(merged.read_text()) == json.loads(added.read_text())

    # the gate judges a new seed against the recipe's spread, and says so
    gated = _run(pytester, recipe[1], f"--memerobust-baseline={added}",
                 f"--memerobust-save-baseline={tmp_path / 'c.json'}", f"--memerobust-report={tmp_path / 'r.json'}")
    gated.assert_outcomes(passed=4)
    gated.stdout.fnmatch_lines(["Decided on 400 resamples: the paired bootstrap of the memes.",
                                "Judged against the recipe's spread over 2 checkpoints (seed-to-seed noise x*.** the "
                                "memes' own); warning: 2 checkpoints cannot estimate a recipe's spread (it may sit at "
                                "the floor, x1.00, and one of its own seeds then regress against the rest): add seeds up "
                                "to 3 or more."])
    gated.stdout.fnmatch_lines([f"memerobust: no flip ledger: {added} holds 2 checkpoints of a recipe and a ledger "
                                "pairs two checkpoints*"])
    recipe_of = json.loads((tmp_path / "r.json").read_text())["verdict"]["baseline"]["recipe"]
    assert recipe_of["checkpoints"] == 2 and recipe_of["inflation"] >= 1
    # the candidate is one checkpoint; a flip ledger pairs two
    assert cli_main(["compare", str(tmp_path / "c.json"), str(added)]) == 2
    assert f"{added} holds 2 checkpoints of a recipe: the candidate is one checkpoint" in capsys.readouterr().err
    assert cli_main(["compare", str(added), str(tmp_path / "c.json"), "--ledger", str(tmp_path / "l")]) == 2
    assert "a flip ledger pairs two checkpoints" in capsys.readouterr().err and not (tmp_path / "l").exists()

    # refused before any case, naming the field: the same checkpoint again, another seed, other conditions
    for card, args, says in ((recipe[0], [], f"this run holds a checkpoint of minilm (sha256 *) that baseline {added} "
                                             "(--memerobust-baseline-add) already holds: a checkpoint counted twice"),
                             (recipe[1], ["--memerobust-seed=3"], f"baseline {added} (--memerobust-baseline-add) was "
                                                                  "made with --memerobust-seed=0, this run uses 3"),
                             (recipe[1], ["-k", "typos"], "holds 1 condition the other does not (minilm on demo: "
                                                          "image=contrast@3)")):
        refused = _run(pytester, card, *args, "--memerobust-baseline-add", f"--memerobust-save-baseline={added}")
        assert refused.ret == pytest.ExitCode.USAGE_ERROR, refused.stdout.str()[-2000:]
        refused.stderr.fnmatch_lines([f"*{says}*"])
    assert load_baseline(added)["checkpoints"] == data["checkpoints"]  # left as it was
    for args, says in (([], "--memerobust-baseline-add adds this run's checkpoint to the baseline "
                            "--memerobust-save-baseline=FILE names: pass that option too"),
                       ([f"--memerobust-save-baseline={tmp_path / 'none.json'}"], "there is no baseline")):
        refused = _run(pytester, recipe[1], "--memerobust-baseline-add", *args)
        assert refused.ret == pytest.ExitCode.USAGE_ERROR
        refused.stderr.fnmatch_lines([f"*{says}*"])


def _cell(y, wrong):
    clean = np.where(y[:, None] == np.arange(2), 0.9, 0.1)
    perturbed = clean.copy()
    perturbed[wrong] = perturbed[wrong][:, ::-1]
    return {"y": y.tolist(), "clean": clean.tolist(), "perturbed": perturbed.tolist()}


def _baseline(wrong, checkpoint="c", **change):
    y = np.random.default_rng(0).integers(0, 2, N)
    data = {"format": FORMAT, "seed": 0, "versions": dict(VERSIONS), "datasets": {"demo": "a" * 64},
            "checkpoints": [{"models": {"minilm": checkpoint * 64}, "paths": {"minilm": f"{checkpoint}.safetensors"}}],
            "run": {"limit": None, "tasks": {"minilm": {"demo": "hate"}}, "cards": {"minilm": card_record(CARD)}},
            "results": {"minilm": {"demo": {"clean": _cell(y, []), "text=typos@1": _cell(y, list(wrong)),
                                            "text=typos@3": _cell(y, list(wrong))}}}}
    for key, value in change.items():
        data[key] = value
    return data


@pytest.mark.parametrize("change, says", [
    (lambda d: d.update(seed=4), "a.json was made with seed 0, b.json uses 4: perturbations differ, so they are not "
                                 "checkpoints of one recipe on the same memes: not merged"),
    (lambda d: d["run"].update(limit=50), "--memerobust-limit=None, b.json with --memerobust-limit=50"),
    (lambda d: d["datasets"].update(demo="b" * 64), "a.json was made on other data for 'demo'"),
    (lambda d: d["versions"].update(textattack="0.3"), "a.json was made with textattack None, b.json has 0.3"),
    (lambda d: d["run"]["cards"]["minilm"].update(backbone={"kind": "hf-clip"}),
     "card 'minilm' in a.json has backbone {}, b.json's {'kind': 'hf-clip'}"),
    (lambda d: d["run"]["tasks"]["minilm"].update(demo="target"), "a.json scored minilm on 'demo' for task 'hate', "
                                                                 "b.json for 'target'"),
    (lambda d: d["results"]["minilm"]["demo"].pop("text=typos@3"),
     "a.json and b.json hold other conditions (minilm on demo: text=typos@3 only in a.json)"),
    (lambda d: d["results"]["minilm"]["demo"]["text=typos@1"]["y"].__setitem__(0, 1 - d["results"]["minilm"]["demo"]
                                                                                ["text=typos@1"]["y"][0]),
     "hold other memes or labels for minilm on 'demo' (text=typos@1)"),
    (lambda d: d["checkpoints"][0]["models"].update(minilm="c" * 64), "b.json holds a checkpoint of minilm (sha256 "
                                                                      "cccccccccccc) that a.json already holds"),
])
def test_baselines_that_are_not_one_recipe_on_the_same_memes_are_not_merged(change, says):
    other = _baseline(range(10), checkpoint="d")
    change(other)
    with pytest.raises(ConfigError, match=re.escape(says)):
        merged_baselines(_baseline(range(10)), other, names=("a.json", "b.json"))


def test_a_merged_baseline_holds_every_checkpoints_cells_and_pairs_them_as_the_recipe(tmp_path):
    merged = merged_baselines(merged_baselines(_baseline(range(10)), _baseline(range(12), "d")),
                              _baseline(range(8), "e"))
    assert [c["models"]["minilm"][0] for c in merged["checkpoints"]] == ["c", "d", "e"]
    cells = merged["results"]["minilm"]["demo"]["text=typos@1"]
    assert [sum(np.argmax(c["perturbed"], 1) != c["y"]) for c in cells] == [10, 12, 8]
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(merged))
    assert load_baseline(path) == merged
    pairs = list(paired_cells(load_baseline(path), _baseline(range(20), "f")))
    assert [(condition, len(then)) for _, _, condition, then, _ in pairs] == [
        ("clean", 3), ("text=typos@1", 3), ("text=typos@3", 3)]


@pytest.mark.parametrize("damage, says", [
    (lambda d: d["results"]["minilm"]["demo"].update(clean=d["results"]["minilm"]["demo"]["clean"][:1]),
     "results/minilm/demo/clean is not a list of 2 condition entries, one per checkpoint"),
    (lambda d: d["results"]["minilm"]["demo"]["clean"][1]["y"].__setitem__(0, 5),
     "results/minilm/demo/clean[1]/y holds label 5"),
    (lambda d: d["results"]["minilm"]["demo"]["clean"][1]["y"].reverse(),
     "results/minilm/demo/clean[1] holds other labels than results/minilm/demo/clean[0]"),
    (lambda d: d.update(checkpoints=[]), "'checkpoints' is not a list of one or more checkpoints"),
])
def test_a_damaged_recipe_baseline_names_the_entry(tmp_path, damage, says):
    data = merged_baselines(_baseline(range(10)), _baseline(range(12), "d"))
    damage(data)
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=re.escape(says)):
        load_baseline(path)


def test_a_baseline_keyed_by_a_card_path_is_read_under_the_runs_label():
    data = _baseline(range(10))
    for block in (data["results"], data["run"]["tasks"], data["run"]["cards"], *data["checkpoints"][0].values()):
        block["a/s1.card.toml"] = block.pop("minilm")
    rekeyed(data, {"a/s1.card.toml": "minilm", "demo": "demo"})
    assert list(data["results"]) == ["minilm"] and data["checkpoints"][0]["paths"] == {"minilm": "c.safetensors"}
    assert rekeyed(copy.deepcopy(data), {"b/s2.card.toml": "minilm"}) == data  # already keyed so: unchanged


def test_compare_json_holds_every_comparison_and_the_verdict(tmp_path, monkeypatch, capsys):
    """Read back: every comparison with its rule, scores, difference, bound, raw and adjusted p, state, method and
    resamples as the gate computed them, and the verdict; numbers that are not finite are null."""
    monkeypatch.chdir(tmp_path)
    a, b = _baseline(range(10)), _baseline(range(40), "d")
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert cli_main(["compare", "a.json", "b.json", "--resamples", "500", "--method", "bootstrap", "--json",
                     "out.json"]) == 1
    assert "wrote 15 comparisons and the verdict to out.json" in capsys.readouterr().out
    written = json.loads((tmp_path / "out.json").read_text())
    expected = compare_baselines(paired_cells(a, b), n_resamples=500, method="bootstrap", seed=0)
    assert written["format"] == "pytest-memerobust-compare/1" and written["rules"] == ["acc", "auroc", "f1", "flip"]
    assert [(c["condition"], c["rule"]) for c in written["comparisons"]] == [
        (c.subject.condition, c.subject.rule) for c in expected]
    for row, c in zip(written["comparisons"], expected):
        fields = {"model": c.subject.model, "dataset": c.subject.dataset, "before": c.scores.before,
                  "now": c.scores.now, "difference": c.difference, "bound": c.decision.bound,
                  "p_raw": c.decision.p_raw, "p_value": c.decision.p_value, "state": c.decision.state,
                  "method": c.procedure.method, "resamples": c.procedure.resamples,
                  "regressed": c.decision.regressed, "members": c.subject.members}
        for key, value in fields.items():
            value = list(value) if isinstance(value, tuple) else value
            assert row[key] == (None if isinstance(value, float) and math.isnan(value) else value), (key, row)
    assert {c["condition"] for c in written["comparisons"]} >= {"text=typos (mean of 2)"}
    verdict = written["verdict"]
    assert verdict["passed"] is False and verdict["regressed"] >= 1 and verdict["method"] == "bootstrap"
    assert verdict["resamples"] == 500 and verdict["recipe"] is None and verdict["control"] == "fwer:0.05"
    assert " of 3 conditions and " in verdict["summary"]
    assert "rows" not in verdict
    assert cli_main(["compare", "a.json", "b.json", "--json", "a.json"]) == 2
    assert "--json a.json is a file this command reads" in capsys.readouterr().err
    assert cli_main(["compare", "a.json", "b.json", "--json", "nowhere/out.json"]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("flag, says", [(["--method", "jackknife"], "--method 'jackknife': expected one of auto, "
                                                                   "bootstrap, permutation"),
                                        (["--resamples", "5"], "--resamples=5: the gate's smallest p-value is 1/6")])
def test_bad_resampling_options_of_compare_are_one_line(tmp_path, monkeypatch, capsys, flag, says):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text(json.dumps(_baseline(range(10))))
    assert cli_main(["compare", "a.json", "a.json", *flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_baseline_merge_needs_two_baselines_and_a_json_file_to_write(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text(json.dumps(_baseline(range(10))))
    assert cli_main(["baseline", "merge", "out.json", "a.json"]) == 2
    assert "name two or more baselines to merge into out.json (got 1)" in capsys.readouterr().err
    assert cli_main(["baseline", "merge", "out.txt", "a.json", "a.json"]) == 2
    assert "expected a .json file" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_the_gate_lines_say_how_it_resampled_against_what_and_the_memes_needed_for_80_percent_power():
    assert method_line({"method": "bootstrap", "resamples": 10000}) == (
        "decided on 10,000 resamples: the paired bootstrap of the memes")
    assert method_line({"method": "bootstrap and permutation", "resamples": 2000}).startswith(
        "decided on 2,000 resamples: the paired bootstrap of the memes and paired permutations")
    assert recipe_line({"recipe": {"checkpoints": 4, "inflation": 1.3456}}) == (
        "judged against the recipe's spread over 4 checkpoints (seed-to-seed noise x1.35 the memes' own)")
    assert recipe_line({"recipe": None}) is None and method_line({}) is None
    assert memes_needed_line({"memes_needed": {"rules": 9, "median": 1900, "most": 12000, "never": 2,
                                               "memes": 160}}) == (
        "9 rules not shown non-inferior with 160 memes; memes needed for 80% power at their observed change: about "
        "1,900 (median; 12,000 the most); 2 cannot be shown with any number of memes (the change is past the margin)")


@pytest.mark.parametrize("option, says", [("--memerobust-gate-method=jackknife", "'jackknife'"),
                                          ("--memerobust-gate-resamples=0", "'0'")])
def test_bad_gate_resampling_options_are_usage_errors(pytester, option, says):
    result = pytester.runpytest("--memerobust-model=demo", option, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert says in result.stderr.str() and "Traceback" not in result.stderr.str()


def test_too_few_gate_resamples_are_refused_naming_the_option(pytester, tmp_path):
    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    base = tmp_path / "base.json"
    pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-save-baseline={base}", "-k", "typos",
                       ".").assert_outcomes(passed=2)
    refused = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}",
                                 "--memerobust-gate-resamples=10", "-k", "typos", ".")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*--memerobust-gate-resamples=10: the gate's smallest p-value is 1/11*"])
    report = tmp_path / "r.json"
    gated = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}", "-k", "typos",
                               "--memerobust-gate-method=bootstrap", f"--memerobust-report={report}",
                               f"--memerobust-report={tmp_path / 'r.md'}", f"--memerobust-report={tmp_path / 'r.html'}",
                               ".")
    gated.assert_outcomes(passed=2)
    gated.stdout.fnmatch_lines(["Decided on 400 resamples: the paired bootstrap of the memes."])
    verdict = json.loads(report.read_text())["verdict"]["baseline"]
    assert verdict["method"] == "bootstrap" and verdict["resamples"] == 400
    assert all(r["method"] == "bootstrap" and r["resamples"] == 400 for r in verdict["rows"])
    for suffix in ("md", "html"):
        assert "Decided on 400 resamples: the paired bootstrap of the memes." in (tmp_path / f"r.{suffix}").read_text()


def test_a_family_mean_renders_like_any_condition_with_its_bound_and_adjusted_p_and_names_itself_in_a_case():
    from pytest_memerobust.report.gate_tables import comparison_rows
    from pytest_memerobust.report.outline import regression_line

    comparisons = compare_baselines(paired_cells(_baseline(range(10)), _baseline(range(40), "d")), n_resamples=500,
                                    method="bootstrap")
    mean = next(c for c in comparisons if c.subject.members and c.subject.rule == "acc")
    assert mean.subject.condition == "text=typos (mean of 2)"
    assert mean.subject.members == ("text=typos@1", "text=typos@3")
    row = comparison_rows([mean.as_dict()])[0]
    assert row[1] == "typos (mean of 2)" and row[2] == "acc"
    assert row[5] == f"{mean.decision.bound:+.3f}".replace("-", "−") and row[6] == f"{mean.decision.p_value:.2g}"
    line = regression_line(mean.as_dict())
    assert line.startswith(f"{mean.decision.state} against the baseline: accuracy ") and line.endswith(
        "over text=typos (mean of 2)")
