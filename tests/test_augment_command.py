"""`memerobust augment` (issue 53, item 1): an augmented training set as a `datasets` parquet set, each meme with N
copies drawn as `memerobust train --augment` draws its epochs (copy k is epoch k), the recipe in its card and
recipe.json, the same bytes from the same command, caption-only data without an image column, and every bad input
one error before any work with nothing written."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from pytest_memerobust import __version__
from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.data.digests import input_digest
from pytest_memerobust.data.pictures import to_array
from pytest_memerobust.detectors.training import augmentation
from pytest_memerobust.detectors.training.augmentation import augment_memes, parse_augmentations
from pytest_memerobust.track.export import PARQUET_FILE

from test_caption_only import caption_rows, write_csv
from tiny_backbones import card_toml

datasets = pytest.importorskip("datasets")

RECIPE = ["--augment", "typos@1-3:0.5", "--augment", "gaussian_noise@2:0.5"]
SEED = 3


def _augment(out, *extra, data="demo:train"):
    return cli_main(["augment", "--data", data, "--out", str(out), "--quiet", *extra])


@pytest.fixture(scope="module")
def augmented(tmp_path_factory):
    """The demo's training memes, two augmented copies and the clean one of each."""
    out = tmp_path_factory.mktemp("augment") / "set"
    assert _augment(out, *RECIPE, "--copies", "2", "--seed", str(SEED)) == 0
    return out


def _rows(out):
    return datasets.load_dataset("parquet", data_dir=str(out))["train"]


def test_the_set_loads_with_datasets_holding_each_meme_clean_and_twice_augmented(augmented):
    rows = _rows(augmented)
    memes = demo_dataset("train").memes
    assert rows.num_rows == 3 * len(memes)
    assert rows.column_names == ["image", "id", "meme_id", "copy", "caption", "labels", "split", "applied",
                                 "picture_digest"]
    assert rows.features["labels"]["hate"].names == ["non-hateful", "hateful"]
    assert rows["copy"] == [0] * len(memes) + [1] * len(memes) + [2] * len(memes)
    assert rows["id"][:2] == [f"{memes[0].id}#0", f"{memes[1].id}#0"] and rows["id"][len(memes)] == f"{memes[0].id}#1"
    assert rows["meme_id"] == [m.id for m in memes] * 3
    assert rows["labels"] == [{"hate": m.labels["hate"]} for m in memes] * 3
    assert set(rows["split"]) == {"train"}
    clean = rows.select(range(len(memes)))
    assert clean["caption"] == [m.text for m in memes] and clean["applied"] == [[]] * len(memes)
    for meme, row in zip(memes[:20], clean):
        assert np.array_equal(np.asarray(row["image"]), meme.image)


@pytest.mark.parametrize("copy", [1, 2])
def test_copy_k_is_what_augment_memes_draws_at_epoch_k(augmented, copy):
    memes = list(demo_dataset("train").memes)
    captions, pictures, applied = augment_memes(memes, parse_augmentations(RECIPE[1::2]), SEED, copy)
    rows = _rows(augmented).filter(lambda row: row["copy"] == copy)
    assert rows["caption"] == captions and rows["applied"] == applied
    assert 0 < sum("typos" in " ".join(a) for a in applied) < len(memes)  # p 0.5: some edited, some not
    assert rows["picture_digest"] == [input_digest(to_array(p)) for p in pictures]
    for row, picture in zip(rows.select(range(30)), pictures):
        assert np.array_equal(np.asarray(row["image"]), to_array(picture))  # PNG: the very pixels


def test_memerobust_train_with_the_same_recipe_trains_on_copy_k_at_epoch_k(augmented, tmp_path, monkeypatch):
    from pytest_memerobust.run.training import loop

    seen = {}
    epoch_features = loop._epoch_features

    def recording(detector, captions, pictures, store, clean, augmented, what, *rest):
        seen[int(what.rsplit(" ", 1)[1])] = (list(captions), [input_digest(to_array(p)) for p in pictures])
        return epoch_features(detector, captions, pictures, store, clean, augmented, what, *rest)

    monkeypatch.setattr(loop, "_epoch_features", recording)
    card = tmp_path / "tiny.toml"
    card.write_text(card_toml("hf-clip"), encoding="utf-8")
    assert cli_main(["train", str(card), "--data", "demo", "--out", str(tmp_path / "m.safetensors"), "--epochs", "2",
                     "--seed", str(SEED), "--no-cache", "--quiet", *RECIPE]) == 0
    rows = _rows(augmented)
    assert sorted(seen) == [1, 2]
    for epoch, (captions, digests) in seen.items():
        copy = rows.filter(lambda row: row["copy"] == epoch)
        assert captions == copy["caption"] and digests == copy["picture_digest"]


def test_the_card_and_recipe_json_say_the_recipe(augmented):
    recipe = json.loads((augmented / "recipe.json").read_text(encoding="utf-8"))
    assert recipe["augment"] == ["typos@1-3:0.5", "gaussian_noise@2:0.5"]
    assert (recipe["copies"], recipe["seed"], recipe["with_clean"], recipe["rows"]) == (2, SEED, True, 1440)
    assert recipe["data"]["spec"] == "demo:train" and recipe["data"]["memes"] == 480
    assert recipe["data"]["fingerprint"] == demo_dataset("train").fingerprint()
    assert recipe["version"] == __version__ and recipe["format"] == "pytest-memerobust-augment/1"
    assert set(recipe["perturbations"]) == {"typos", "gaussian_noise"}
    assert recipe["perturbations"]["gaussian_noise"]["modality"] == "image"
    rows = _rows(augmented)
    typos = sum(any(a.startswith("typos@") for a in applied) for applied in rows["applied"])
    assert recipe["rows_edited"]["typos@1-3:0.5"] == typos
    assert sorted(recipe["files"]) == sorted([PARQUET_FILE, "README.md", "recipe.json"])
    card = (augmented / "README.md").read_text(encoding="utf-8")
    header = card.split("---\n")[1]
    assert "pretty_name: augmented memes (pytest-memerobust)" in header and "path: data/*.parquet" in header
    assert ("memerobust augment --data demo:train --augment typos@1-3:0.5 --augment gaussian_noise@2:0.5 "
            f"--copies 2 --seed {SEED}") in card
    assert f"--augment typos@1-3:0.5 --augment gaussian_noise@2:0.5 --seed {SEED} --epochs 2` trains on copy k" in card
    assert datasets.load_dataset(str(augmented))["train"].num_rows == 1440  # the card's configs find the rows


def test_the_same_command_writes_the_same_parquet_bytes(augmented, tmp_path):
    again = tmp_path / "again"
    assert _augment(again, *RECIPE, "--copies", "2", "--seed", str(SEED)) == 0

    def digest(path):
        return hashlib.sha256(path.read_bytes()).hexdigest()

    assert digest(again / PARQUET_FILE) == digest(augmented / PARQUET_FILE)
    assert (again / "recipe.json").read_bytes() == (augmented / "recipe.json").read_bytes()
    assert _augment(tmp_path / "other", *RECIPE, "--copies", "2", "--seed", str(SEED + 1)) == 0
    assert digest(tmp_path / "other" / PARQUET_FILE) != digest(augmented / PARQUET_FILE)


@pytest.fixture
def captions_csv(tmp_path):
    return write_csv(tmp_path / "memes.csv", caption_rows({"train": [0, 1] * 6, "test": [0, 1] * 2}))


def test_caption_only_data_gives_rows_without_an_image_column(captions_csv, tmp_path, capsys):
    out = tmp_path / "captions"
    assert _augment(out, "--augment", "typos@3:1", "--copies", "3", "--no-with-clean",
                    data=f"csv:{captions_csv}:train") == 0
    assert "36 rows (12 memes x 3 copies; typos@3:1 edited 36 of the 36)" in capsys.readouterr().out
    rows = _rows(out)
    assert rows.column_names == ["id", "meme_id", "copy", "caption", "labels", "split", "applied"]
    assert rows["copy"] == [1] * 12 + [2] * 12 + [3] * 12 and rows["labels"][:2] == [{"label": 0}, {"label": 1}]
    assert all(applied == ["typos@3"] for applied in rows["applied"])
    assert rows["caption"][0] != "love wins every time 0"
    recipe = json.loads((out / "recipe.json").read_text(encoding="utf-8"))
    assert recipe["data"]["pictures"] is False and "image" not in recipe["columns"]


def test_an_imagefolder_writes_each_picture_as_a_file(tmp_path):
    out = tmp_path / "folder"
    assert _augment(out, "--augment", "jpeg_compression@3:1", "--copies", "1", "--format", "imagefolder",
                    data="demo:val") == 0
    rows = datasets.load_dataset("imagefolder", data_dir=str(out))["train"]
    assert rows.num_rows == 320 and rows["applied"][160:] == [["jpeg_compression@3"]] * 160
    assert np.array_equal(np.asarray(rows[0]["image"]), demo_dataset("val").memes[0].image)


@pytest.mark.parametrize("flags, data, culprit", [
    (["--augment", "tpyos@1", "--copies", "2"], "demo", "tpyos"),                 # unknown perturbation
    (["--augment", "typos@7", "--copies", "2"], "demo", "out of range"),          # severity out of range
    (["--augment", "typos@1:1.5", "--copies", "2"], "demo", "not a number in 0..1"),  # probability
    (["--augment", "hotflip@1", "--copies", "2"], "demo", "--adversarial hotflip"),  # a model-aware attack
    (["--augment", "typos@1", "--copies", "0"], "demo", "--copies 0"),
    (["--augment", "typos@1", "--copies", "100000000"], "demo", "--copies 100000000: give the number of augmented "
     "copies of each meme, 1 to 1000 (copy k is what training's epoch k sees)"),
    (["--augment", "typos@1", "--copies", "1", "--split", "dev"], "demo", "--split dev: demo has the splits"),
    (["--augment", "typos@1", "--augment", "typos@2", "--copies", "1"], "demo", "typos named more than once"),
    # the PrideMM-Aug recipe without back-translation's MarianMT models here
    (["--augment", "back_translation:1", "--augment", "augmix@1-5:1", "--copies", "2"], "demo",
     "back-translation needs MarianMT models"),
    (["--augment", "augmix@1:1", "--copies", "1"], "captions", "augmix@1:1 edits pictures, and 12 of the 12 memes"),
    (["--augment", "typos@1", "--copies", "1", "--format", "imagefolder"], "captions", "use --format parquet"),
    (["--augment", "typos@1", "--copies", "1"], "pridemm:/nonexistent/PrideMM", "nonexistent"),
])
def test_bad_input_is_one_error_before_any_work_and_nothing_is_written(flags, data, culprit, captions_csv, tmp_path,
                                                                      capsys, monkeypatch):
    monkeypatch.setattr(augmentation, "augment_memes", lambda *a, **k: pytest.fail("augmented before the checks"))
    before = sorted(p.name for p in tmp_path.iterdir())
    data = f"csv:{captions_csv}:train" if data == "captions" else data
    assert _augment(tmp_path / "out", *flags, data=data) == 2
    err = capsys.readouterr().err
    assert err.startswith("memerobust: error: ") and culprit in err and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no folder, no staging folder left


def test_a_folder_that_is_not_empty_is_refused_and_left_alone(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(augmentation, "augment_memes", lambda *a, **k: pytest.fail("augmented before the checks"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    assert _augment(out, "--augment", "typos@1", "--copies", "1") == 2
    assert "is not empty" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_the_help_says_copy_k_is_epoch_k_and_gives_the_pridemm_aug_recipe(capsys):
    with pytest.raises(SystemExit):
        cli_main(["augment", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "Copy k uses the draws of epoch k of training" in shown
    assert "--augment back_translation:1 --augment augmix@1-5:1" in shown and "--copies 2 --no-with-clean" in shown


def test_data_without_a_split_gives_its_training_split_and_says_so_first(tmp_path, capsys):
    """`--data demo` used to write the demo's test split while its closing line named a training command: a user
    building a fine-tuning set this way trained on test memes. Now the training split, said before any row."""
    out = tmp_path / "set"
    assert cli_main(["augment", "--data", "demo", "--out", str(out), "--augment", "typos@1:1", "--copies", "1"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0].startswith("writing 960 rows of demo:train (480 memes), about ")
    recipe = json.loads((out / "recipe.json").read_text(encoding="utf-8"))
    assert recipe["data"]["spec"] == "demo:train" and recipe["data"]["memes"] == 480
    assert "memerobust train CARD --train demo:train --val VAL" in captured.out
    # --split all: the loader's own default (the demo's test split), named as given
    assert _augment(tmp_path / "all", "--augment", "typos@1:1", "--copies", "1", "--split", "all", data="demo") == 0
    assert json.loads((tmp_path / "all" / "recipe.json").read_text())["data"]["memes"] == 160
