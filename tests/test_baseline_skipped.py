"""A case that skips is no planned condition a recipe baseline misses (issue 62): `--memerobust-baseline-add` with the
documented `-k "rainbow and (clean or typos)"` on a caption-only detector, whose three picture cases skip, adds the
checkpoint, and gives what `memerobust baseline merge` gives."""
import json

import pytest
import torch  # noqa: F401  (imported once, before pytester runs: see tests/test_plugin.py)

from pytest_memerobust.cli import main as cli_main

from test_caption_only import caption_rows, write_card, write_csv

SELECTED = "rainbow and (clean or typos)"


@pytest.fixture(scope="module")
def caption_recipe(tmp_path_factory):
    """Two checkpoints (seeds 1 and 2) of a tiny caption-only card (MiniLM, width 32), and caption-only data."""
    root = tmp_path_factory.mktemp("caption-recipe")
    data = write_csv(root / "memes.csv", caption_rows({"train": [0, 1] * 8, "val": [0, 1] * 4, "test": [0, 1] * 4}))
    card = write_card(root)
    cards = []
    for seed in (1, 2):
        out = root / f"s{seed}" / "m.safetensors"
        assert cli_main(["train", str(card), "--data", f"csv:{data}", "--epochs", "1", "--seed", str(seed),
                         "--cache-dir", str(root / "cache"), "--out", str(out), "--quiet"]) == 0
        cards.append(out.with_suffix(".card.toml"))
    return data, cards


def test_a_recipe_baseline_adds_a_caption_only_checkpoint_whose_picture_cases_skip(pytester, caption_recipe, capsys):
    data, (first, second) = caption_recipe
    recipe, b1, b2 = (pytester.path / name for name in ("recipe.json", "b1.json", "b2.json"))

    def run(card, *args):
        return pytester.runpytest(f"--memerobust-model={card}", f"--memerobust-data=csv:{data}:test", "-k", SELECTED,
                                  "--memerobust-bootstrap=20", "--memerobust-batch-size=8", "--memerobust-workers=1",
                                  "-p", "no:cacheprovider", *args)

    def ran(result) -> tuple[int, int]:
        """(cases that ran, cases skipped): clean and typos@1-5 run (pass or fail their thresholds); typos@3 with
        uap, imagenet_c or augmix skip, the detector reading no picture."""
        assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stderr.str()[-2000:]
        counts = result.parseoutcomes()
        return counts.get("passed", 0) + counts.get("failed", 0), counts.get("skipped", 0)

    assert ran(run(first, f"--memerobust-save-baseline={b1}")) == (6, 3)
    recipe.write_text(b1.read_text())
    assert ran(run(second, f"--memerobust-save-baseline={b2}")) == (6, 3)
    added = run(second, f"--memerobust-save-baseline={recipe}", "--memerobust-baseline-add")
    assert ran(added) == (6, 3)  # before: a usage error, "this run plans 3 conditions the other does not"
    added.stdout.fnmatch_lines([f"memerobust: this run's checkpoint added to the baseline {recipe}: 6 conditions of 1 "
                                "model (m) on csv:*memes.csv:test (8 memes), seed 0; 2 checkpoints of one recipe"])
    merged = pytester.path / "merged.json"
    assert cli_main(["baseline", "merge", str(merged), str(b1), str(b2)]) == 0
    capsys.readouterr()
    held = json.loads(recipe.read_text())
    assert held == json.loads(merged.read_text())
    assert sorted(held["results"]["m"][f"csv:{data}:test"]) == ["clean"] + [f"text=typos@{k}" for k in range(1, 6)]
