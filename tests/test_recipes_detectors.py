"""Recipe against recipe and detector against detector (judge/recipes.py, judge/detectors.py), their null
constructions' error, and `memerobust compare --recipe` / `memerobust compare` of detectors as a user runs them."""
import json

import numpy as np
import pytest

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.judge.detectors import DetectorOutputs, compare_detectors, verdict
from pytest_memerobust.judge.recipes import RecipeCell, judge_recipes, seed_warnings
from pytest_memerobust.judge.simulated import simulated_checkpoint, simulated_world, swapped
from pytest_memerobust.track.baseline import FORMAT

VERSIONS = {"pytest-memerobust": "0.1.0", "imagecorruptions": "1.1.2", "textattack": None}
SMALL = ("clean", "typos@1", "typos@3", "jpeg@2")


def _cells(a, b, conditions=None):
    conditions = conditions or list(a[0])
    return [RecipeCell("m", "sim", c, "clean" if c == "clean" else "perturbed", tuple(x[c] for x in a),
                       tuple(x[c] for x in b)) for c in conditions]


def _arms(rng, world, k, shift=0.0, seed_sd=0.15):
    return ([simulated_checkpoint(world, rng, seed_sd=seed_sd) for _ in range(k)],
            [simulated_checkpoint(world, rng, seed_sd=seed_sd, shift=shift) for _ in range(k)])


def test_two_seed_sets_of_one_recipe_claim_a_difference_at_most_5_percent_of_the_time():
    """The recipe comparison's null construction: 200 comparisons of two disjoint seed sets of one recipe, each with
    its own memes and seeds; a false alarm is any rule said worse or better beyond the seeds' spread (two-sided, the
    whole family at 5%)."""
    rng = np.random.default_rng(11)
    alarms = 0
    for i in range(200):
        world = simulated_world(rng, 120, SMALL)
        a, b = _arms(rng, world, 3)
        out = judge_recipes(_cells(a, b), n_resamples=300, seed=i)
        alarms += any(c.decision.regressed or c.improvement.improved for c in out)
    assert alarms <= 10, f"{alarms} of 200 null comparisons claimed a difference"


def test_a_recipe_that_halves_what_the_edits_take_is_found_better_and_clean_is_not_touched():
    rng = np.random.default_rng(5)
    world = simulated_world(rng, 400)
    a, b = _arms(rng, world, 5, shift=0.6, seed_sd=0.05)
    out = {(c.subject.condition, c.subject.rule): c for c in judge_recipes(_cells(a, b), n_resamples=2000)}
    typos = out[("typos (mean of 3)", "acc")]
    assert typos.improvement.improved and not typos.decision.regressed and typos.scores.now > typos.scores.before
    assert typos.improvement.bound > 0  # the bound that decided lies past no change
    assert not any(c.improvement.improved or c.decision.regressed for (condition, _), c in out.items()
                   if condition == "clean")
    assert typos.procedure.recipe == 5 and "5 + 5 seeds" in typos.procedure.test


def test_the_comparison_is_symmetric_in_its_arms_and_deterministic():
    rng = np.random.default_rng(2)
    world = simulated_world(rng, 200, SMALL)
    a, b = _arms(rng, world, 3, shift=0.5)
    forward = judge_recipes(_cells(a, b), n_resamples=500, seed=4)
    again = judge_recipes(_cells(a, b), n_resamples=500, seed=4)
    assert [c.as_dict() for c in forward] == [c.as_dict() for c in again]
    backward = {(c.subject.condition, c.subject.rule): c for c in judge_recipes(_cells(b, a), n_resamples=500, seed=4)}
    for c in forward:
        mirror = backward[(c.subject.condition, c.subject.rule)]
        assert mirror.difference == pytest.approx(-c.difference)
        assert ((mirror.decision.regressed, mirror.improvement.improved)
                == (c.improvement.improved, c.decision.regressed))


def test_power_is_stated_and_shrinks_with_more_seeds():
    rng = np.random.default_rng(9)
    world = simulated_world(rng, 300, SMALL)
    detects = {}
    for k in (3, 6):
        a, b = _arms(rng, world, k)
        out = judge_recipes(_cells(a, b), n_resamples=1000)
        detects[k] = np.median([c.power.detectable for c in out if c.subject.rule == "acc" and c.judged])
    assert 0 < detects[6] < detects[3] < 1


def test_fewer_than_three_seeds_warn_and_one_is_refused():
    assert seed_warnings(3, 3) == []
    (warning,) = seed_warnings(2, 4)
    assert warning.startswith("recipe A has 2 seeds: the seeds' spread cannot be estimated from fewer than 3")
    rng = np.random.default_rng(0)
    world = simulated_world(rng, 50, SMALL)
    a, b = _arms(rng, world, 2)
    with pytest.raises(ValueError, match="at least 2 checkpoints a side"):
        judge_recipes(_cells(a[:1], b), n_resamples=100)


def _two_detectors(rng, memes=300):
    world = simulated_world(rng, memes)
    return simulated_checkpoint(world, rng, meme_sd=0.8), simulated_checkpoint(world, rng, meme_sd=0.8)


def test_a_detector_against_itself_with_per_meme_swaps_claims_a_difference_at_most_5_percent_of_the_time():
    rng = np.random.default_rng(21)
    world = simulated_world(rng, 150, SMALL)
    first, second = (simulated_checkpoint(world, rng, meme_sd=0.8) for _ in range(2))
    alarms = 0
    for i in range(200):
        one, two = swapped(first, second, rng)
        out = compare_detectors([DetectorOutputs("one", "d", one), DetectorOutputs("two", "d", two)],
                                n_resamples=1000, seed=i)
        alarms += any(verdict(c) in ("better", "worse") for c in out)
    assert alarms <= 10, f"{alarms} of 200 null comparisons claimed a difference"


def test_the_detector_that_loses_more_to_typos_is_less_robust_though_it_is_better_clean():
    rng = np.random.default_rng(3)
    world = simulated_world(rng, 400)
    world_easier = {**world, "ease": world["ease"] + 0.5}
    fragile = simulated_checkpoint(world_easier, rng, seed_sd=0.0, shift=-1.5)  # the edits take 2.5x as much
    sturdy = simulated_checkpoint(world, rng, seed_sd=0.0, shift=0.8)
    y = np.asarray(world["y"])
    clean_acc = [np.mean(np.argmax(d["clean"]["clean"], axis=1) == y) for d in (fragile, sturdy)]
    assert clean_acc[0] > clean_acc[1]  # fragile is the better detector on clean memes
    out = compare_detectors([DetectorOutputs("sturdy", "d", sturdy), DetectorOutputs("fragile", "d", fragile)],
                            n_resamples=2000)
    typos = {c.subject.rule: c for c in out if c.subject.condition == "typos (mean of 3)"}
    assert typos["abs_acc"].subject.model == "fragile vs sturdy"
    assert verdict(typos["abs_acc"]) == "worse" and verdict(typos["flip"]) == "worse"
    assert verdict(typos["rel_acc"]) == "worse"
    assert "typos@3" in {c.subject.condition for c in out}
    assert not [c for c in out if c.subject.condition == "clean"]  # clean skill is no robustness question


# --- the command, as a user runs it -------------------------------------------------------------------------------

CONDITIONS = ("clean", "text=typos@1", "text=typos@3", "image=jpeg_compression@2", "text=hotflip@1")


def _baseline(model, cells, digest, seed=0, fingerprint="a" * 64):
    return {"format": FORMAT, "seed": seed, "versions": dict(VERSIONS), "datasets": {"demo": fingerprint},
            "checkpoints": [{"models": {model: digest * 64}, "paths": {model: None}}],
            "run": {"limit": None, "tasks": {model: {"demo": "hate"}}, "cards": {}},
            "results": {model: {"demo": cells}}}


@pytest.fixture
def recipe_files(tmp_path):
    rng = np.random.default_rng(7)
    world = simulated_world(rng, 200, CONDITIONS)
    paths = {}
    for arm, shift in (("plain", 0.0), ("aug", 0.8)):
        for s in range(3):
            path = tmp_path / f"{arm}{s}.json"
            path.write_text(json.dumps(_baseline("minilm", simulated_checkpoint(world, rng, seed_sd=0.02,
                                                                                shift=shift), f"{arm[0]}{s}")))
            paths.setdefault(arm, []).append(str(path))
    return paths


def test_compare_recipe_prints_the_effect_against_the_seeds_spread_and_its_power(recipe_files, capsys, tmp_path):
    code = cli_main(["compare", "--recipe", *recipe_files["plain"], "--recipe", *recipe_files["aug"],
                     "--resamples", "2000", "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert code == 0
    assert "recipe A: 3 checkpoints" in out and "recipe B: 3 checkpoints" in out
    assert "its variance the seeds' spread (pooled, 4 degrees of freedom) plus the memes'" in out
    row = next(line for line in out.splitlines() if line.startswith("B BETTER") and "typos (mean of 2)" in line)
    assert " acc " in row or " flip " in row
    assert "with 3 + 3 seeds this comparison detects, at 80% power, a change of about" in out
    document = json.loads((tmp_path / "r.json").read_text())
    assert document["seeds"] == {"A": 3, "B": 3} and document["control"] == {"spec": "fwer:0.05", "two_sided": True}
    assert any(c["improved"] for c in document["comparisons"])


def test_compare_recipe_refuses_a_checkpoint_in_both_arms_and_warns_below_three_seeds(recipe_files, capsys):
    plain, aug = recipe_files["plain"], recipe_files["aug"]
    assert cli_main(["compare", "--recipe", *plain, "--recipe", plain[0], *aug[1:], "--resamples", "200"]) == 2
    err = capsys.readouterr().err
    assert "both hold a checkpoint of minilm" in err and "each checkpoint is one seed of one recipe" in err
    assert cli_main(["compare", "--recipe", *plain[:2], "--recipe", *aug, "--resamples", "200"]) == 0
    out = capsys.readouterr().out
    assert "warning: recipe A has 2 seeds: the seeds' spread cannot be estimated from fewer than 3" in out
    assert cli_main(["compare", "--recipe", plain[0], "--recipe", *aug, "--resamples", "200"]) == 2
    assert "recipe A holds 1 checkpoint: a recipe is judged over its seeds" in capsys.readouterr().err
    assert cli_main(["compare", "--recipe", *plain, "--resamples", "200"]) == 2
    assert "give it twice, recipe A then recipe B" in capsys.readouterr().err


def test_compare_names_a_candidate_that_is_one_of_the_recipes_own_seeds(recipe_files, tmp_path, capsys):
    plain = recipe_files["plain"]
    merged = tmp_path / "recipe.json"
    from pytest_memerobust.track.baseline import load_baseline, merged_baselines

    data = load_baseline(plain[0])
    for p in plain[1:]:
        data = merged_baselines(data, load_baseline(p))
    merged.write_text(json.dumps(data))
    cli_main(["compare", str(merged), plain[1], "--resamples", "200"])
    assert "B is checkpoint 2 of the 3 in recipe A (the same weights)" in capsys.readouterr().out


@pytest.fixture
def detector_files(tmp_path):
    rng = np.random.default_rng(8)
    world = simulated_world(rng, 300, CONDITIONS)
    files = {}
    for name, shift in (("memeclip", 0.6), ("memeblip2", -1.0)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(_baseline(name, simulated_checkpoint(world, rng, seed_sd=0.0, shift=shift),
                                             name[-1])))
        files[name] = str(path)
    return files


def test_compare_of_two_detectors_says_which_is_more_robust_per_rule(detector_files, capsys):
    assert cli_main(["compare", detector_files["memeclip"], detector_files["memeblip2"], "--resamples", "2000",
                     "--every"]) == 0
    out = capsys.readouterr().out
    assert "detectors: memeclip, memeblip2 on the same 300 memes" in out
    assert any(line.startswith("LESS robust") and "memeblip2 vs memeclip" in line for line in out.splitlines())
    assert "memeblip2 against memeclip: more robust on 0, less robust on" in out
    hotflip = [line for line in out.splitlines() if "hotflip@1" in line and "acc. under attack" in line]
    assert hotflip, "the hotflip condition's accuracy is compared as accuracy under attack"


def test_compare_of_detectors_refuses_other_memes_naming_them(detector_files, tmp_path, capsys):
    other = json.loads(open(detector_files["memeblip2"]).read())
    for cell in other["results"]["memeblip2"]["demo"].values():
        cell["y"][0] = 1 - cell["y"][0]
    (tmp_path / "other.json").write_text(json.dumps(other))
    assert cli_main(["compare", detector_files["memeclip"], str(tmp_path / "other.json"), "--resamples", "200"]) == 2
    err = capsys.readouterr().err
    assert "memeclip and memeblip2" in err and "memes: other meme ids or labels on demo" in err


# --- the leaderboard and the robustness card ----------------------------------------------------------------------

def test_compact_letters_join_exactly_the_entries_not_found_different():
    from pytest_memerobust.judge.leaderboard import compact_letters

    assert compact_letters(3, set()) == ["a", "a", "a"]
    assert compact_letters(3, {(0, 2)}) == ["a", "ab", "b"]
    assert compact_letters(3, {(0, 1), (0, 2), (1, 2)}) == ["a", "b", "c"]
    letters = compact_letters(4, {(0, 2), (0, 3), (1, 3)})
    for i in range(4):
        for j in range(i + 1, 4):
            share = bool(set(letters[i]) & set(letters[j]))
            assert share == ((i, j) not in {(0, 2), (0, 3), (1, 3)}), (i, j, letters)


def test_leaderboard_ranks_the_detector_that_loses_less_first_and_writes_three_forms(detector_files, tmp_path,
                                                                                   capsys):
    out = tmp_path / "board.md"
    code = cli_main(["leaderboard", detector_files["memeblip2"], detector_files["memeclip"], "--out", str(out),
                     "--html", str(tmp_path / "board.html"), "--plot", str(tmp_path / "board.png"),
                     "--resamples", "500"])
    assert code == 0, capsys.readouterr().err
    text = out.read_text()
    ranks = [line for line in text.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert ranks[0].startswith("| 1 | memeclip | a |") and ranks[1].startswith("| 2 | memeblip2 | b |")
    assert "acc. under attack (worst of 1)" in text and "## Pairs that differ beyond noise" in text
    assert "memeclip loses" in text and "less than memeblip2" in text
    assert (tmp_path / "board.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "data:image/png;base64," in (tmp_path / "board.html").read_text()
    assert "protocol " in capsys.readouterr().out


def test_leaderboard_refuses_results_of_two_protocols_naming_the_difference(detector_files, tmp_path, capsys):
    other = json.loads(open(detector_files["memeblip2"]).read())
    other["results"]["memeblip2"]["demo"].pop("text=typos@3")
    (tmp_path / "fewer.json").write_text(json.dumps(other))
    assert cli_main(["leaderboard", detector_files["memeclip"], str(tmp_path / "fewer.json")]) == 2
    err = capsys.readouterr().err
    assert "memeblip2" in err and "was not tested under the protocol of memeclip" in err
    assert "conditions on demo: only in the first text=typos@3; only in the other none" in err
    other = json.loads(open(detector_files["memeblip2"]).read())
    other["seed"] = 3
    (tmp_path / "seed3.json").write_text(json.dumps(other))
    assert cli_main(["leaderboard", detector_files["memeclip"], str(tmp_path / "seed3.json")]) == 2
    assert "seed: 0 against 3" in capsys.readouterr().err


def test_the_robustness_card_reads_back_with_huggingface_hub(detector_files, tmp_path, capsys):
    from huggingface_hub import ModelCard

    card = tmp_path / "README.md"
    assert cli_main(["card", detector_files["memeclip"], "--out", str(card), "--resamples", "500"]) == 0
    loaded = ModelCard.load(card)
    results = {r.metric_name: r for r in loaded.data.eval_results}
    clean = results["clean accuracy"]
    assert clean.metric_type == "accuracy" and clean.dataset_name == "demo" and 0.5 < clean.metric_value < 1
    assert clean.metric_config.startswith("memerobust-protocol-") and clean.source_name.startswith("pytest-memerobust")
    low, high = clean.metric_args["interval"]
    assert low <= clean.metric_value <= high
    assert "typos: mean drop of accuracy" in results and "## Robustness" in loaded.text
    assert cli_main(["card", detector_files["memeclip"], "--out", str(card)]) == 2
    assert "exists" in capsys.readouterr().err


# --- in a pytest run ------------------------------------------------------------------------------------------------

def test_a_run_with_two_detectors_says_which_loses_less_in_its_verdict(pytester, tmp_path):
    import torch  # noqa: F401  (imported once, before pytester runs: see tests/test_plugin.py)

    from test_gate import SUITE
    from test_gate_improved import QUICK

    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    report = tmp_path / "r.json"
    result = pytester.runpytest("--memerobust-model=demo", "--memerobust-model=memeblip2-tda", *QUICK,
                                f"--memerobust-report={report}", ".")
    out = result.stdout.str()
    assert "memerobust detectors: which loses less to the edits, beyond noise" in out
    assert "detectors: demo, memeblip2-tda on the same 60 memes" in out
    assert "memeblip2-tda against demo: more robust on" in out
    section = json.loads(report.read_text())["verdict"]["detectors"]
    assert section["detectors"] == ["demo", "memeblip2-tda"]
    assert {c["verdict"] for c in section["comparisons"]} <= {"better", "worse", "none", "not judged"}
    assert {c["model"] for c in section["comparisons"]} == {"memeblip2-tda vs demo"}
    from pytest_memerobust.report.ci import ci_markdown

    assert "memeblip2-tda against demo: more robust on" in ci_markdown(json.loads(report.read_text()))


def test_a_gated_run_names_its_checkpoint_among_a_two_seed_recipe_and_warns_of_the_spread(pytester, tmp_path):
    """A recipe baseline of two checkpoints, one of them this run's: the run says both."""
    import torch  # noqa: F401

    from test_gate import SUITE
    from test_gate_improved import QUICK

    pytester.makefile(".toml", **{"memerobust-gate": SUITE})
    base = tmp_path / "base.json"
    pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-save-baseline={base}", ".")
    data = json.loads(base.read_text())
    other = {"models": {"demo": "f" * 64}, "paths": {"demo": "other.safetensors"}}
    data["checkpoints"].append(other)
    for by_condition in data["results"]["demo"].values():
        for condition, cell in by_condition.items():
            by_condition[condition] = [cell, cell]
    base.write_text(json.dumps(data))
    result = pytester.runpytest("--memerobust-model=demo", *QUICK, f"--memerobust-baseline={base}", ".")
    out = " ".join(result.stdout.str().split())
    assert "this run's checkpoint is checkpoint 1 of the 2 in the recipe baseline" in out
    assert "warning: 2 checkpoints cannot estimate a recipe's spread" in out


def test_a_recipe_stands_on_the_leaderboard_as_one_entry_of_its_seeds(recipe_files, tmp_path, capsys):
    merged = tmp_path / "plain-recipe.json"
    assert cli_main(["baseline", "merge", str(merged), *recipe_files["plain"]]) == 0
    capsys.readouterr()
    assert cli_main(["leaderboard", str(merged), recipe_files["aug"][0], "--resamples", "300"]) == 0
    out = capsys.readouterr().out
    entry = next(line for line in out.splitlines() if "minilm (recipe, 3 seeds) [plain-recipe.json]" in line)
    assert "| 3 |" in entry  # its seeds
    assert any("| minilm [aug0.json] |" in line and "| 1 |" in line for line in out.splitlines())
