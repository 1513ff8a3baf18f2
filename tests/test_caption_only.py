"""Caption-only data and training that fails fast: a dataset may lack pictures when the detector reads only captions
(MiniLM), `memerobust train` matches the data's task to the card's and checks both splits before any encoding, and
the card it writes names the task it trained."""
from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.data import load_dataset
from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.errors import DataError
from pytest_memerobust.detectors.training import check_training_data, training_task
from minilm_model import require_minilm

REAL_PRIDEMM = Path(__file__).resolve().parents[2] / "shared" / "data" / "pridemm" / "PrideMM.csv"
CAPTIONS = ["love wins every time", "they should not exist", "happy pride month friends", "go back to the closet",
            "my two dads are the best", "nobody wants to see that", "rainbow cake for everyone", "disgusting freaks"]


def write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def caption_rows(split_labels: dict[str, list[int]]) -> list[dict]:
    """id, text, label, split rows: no image column, as a caption-only export has."""
    rows, k = [], 0
    for split, labels in split_labels.items():
        for label in labels:
            rows.append({"id": f"m{k}", "text": f"{CAPTIONS[k % len(CAPTIONS)]} {k}", "label": label, "split": split})
            k += 1
    return rows


@pytest.fixture
def captions_csv(tmp_path):
    return write_csv(tmp_path / "memes.csv", caption_rows({"train": [0, 1] * 8, "val": [0, 1] * 4, "test": [0, 1] * 4}))


def test_a_caption_only_dataset_loads_without_pictures_only_when_asked(captions_csv):
    with pytest.raises(DataError, match="missing column 'image'"):
        load_dataset(f"csv:{captions_csv}:train")
    train = load_dataset(f"csv:{captions_csv}:train", require_images=False)
    assert len(train) == 16 and all(m.image_path is None for m in train.memes)
    assert train.memes[0].text == "love wins every time 0"


def test_the_data_s_single_task_serves_the_card_s_unless_one_was_asked_for(captions_csv):
    train = load_dataset(f"csv:{captions_csv}:train", require_images=False)
    val = load_dataset(f"csv:{captions_csv}:val", require_images=False)
    assert training_task("hate", train, val) == "label"
    assert training_task("label", train, val, explicit=True) == "label"
    with pytest.raises(DataError, match=r"no task 'hate'; its tasks: label \(pass --task\)"):
        training_task("hate", train, val, explicit=True)
    demo = demo_dataset("train")  # a named dataset's task is never swapped for another one
    with pytest.raises(DataError, match="no task 'stance'; its tasks: hate"):
        training_task("stance", demo, demo)


@pytest.mark.parametrize("val_labels, message", [
    ([0] * 8, r"val\]?: task 'label' has 1 class\(es\) present \(non-hateful: 8, hateful: 0\); AUROC"),
    ([0, 1, 2, 0], r"task 'label' has 3 classes \(0, 1, 2\); the card has 2"),
])
def test_a_validation_split_that_cannot_pick_an_epoch_is_refused(tmp_path, val_labels, message):
    rows = caption_rows({"train": [0, 1] * 8, "val": val_labels})
    path = write_csv(tmp_path / "memes.csv", rows)
    train = load_dataset(f"csv:{path}:train", require_images=False)
    val = load_dataset(f"csv:{path}:val", require_images=False)
    with pytest.raises(DataError, match=message):
        check_training_data(train, val, "label", ["non-hateful", "hateful"])


def test_memes_in_both_splits_are_refused(captions_csv):
    train = load_dataset(f"csv:{captions_csv}:train", require_images=False)
    with pytest.raises(DataError, match="16 memes are in both"):
        check_training_data(train, train, "label", ["non-hateful", "hateful"])


def test_train_fails_before_encoding_and_names_the_culprit(tmp_path, capsys, monkeypatch):
    """A one-class validation split used to cost minutes of encoding, then a TypeError."""
    path = write_csv(tmp_path / "memes.csv", caption_rows({"train": [0, 1] * 8, "val": [1] * 6}))
    card = write_card(tmp_path)
    from pytest_memerobust.run.training import loop

    monkeypatch.setattr(loop, "_features", lambda *a: pytest.fail("encoded before checking the data"))
    code = cli_main(["train", str(card), "--no-cache", "--train", f"csv:{path}:train", "--val", f"csv:{path}:val",
                     "--out", str(tmp_path / "m.safetensors"), "--quiet"])
    assert code != 0
    err = capsys.readouterr().err
    assert "csv:val" in err and "1 class(es) present" in err and "hateful: 6" in err
    assert not (tmp_path / "m.safetensors").exists()


def write_card(folder: Path) -> Path:
    """A caption-only card: the MemeBLIP2 head (TDA) on MiniLM, width 32 (the test asking for it skips where the
    MiniLM model is not installed)."""
    require_minilm()
    card = folder / "minilm.toml"
    card.write_text('name = "tiny-minilm"\narchitecture = "memeblip2"\ntask = "hate"\n'
                    'classes = ["non-hateful", "hateful"]\n\n[params]\nmap_dim = 32\ntda = true\n\n'
                    '[backbone]\nkind = "minilm"\n')
    return card


def test_train_and_run_on_caption_only_data_with_the_data_s_task(tmp_path, captions_csv, pytester):
    """No placeholder pictures and no --task: training picks the file's `label` task, the card it writes says so,
    and the suites run on that card with the image cases skipped and one line saying the data has no pictures."""
    card = write_card(tmp_path)
    out = tmp_path / "minilm.safetensors"
    assert cli_main(["train", str(card), "--no-cache", "--data", f"csv:{captions_csv}", "--out", str(out),
                     "--epochs", "2",
                     "--quiet"]) == 0
    written = out.with_suffix(".card.toml").read_text()
    assert 'task = "label"' in written

    def run_suites(*extra):
        # in this process: a fresh one per run cost two interpreter starts and two MiniLM imports (20 s of CPU in
        # all), and nothing here is about processes. Batches of 8, the 8 test memes: the store fills a batch up to
        # its size
        result = pytester.runpytest("-p", "no:cacheprovider", "-q",
                                    f"--memerobust-model={out.with_suffix('.card.toml')}",
                                    f"--memerobust-data=csv:{captions_csv}:test", "--memerobust-no-cache",
                                    "--memerobust-batch-size=8",
                                    "-k", "(rainbow and (clean or typos or gaussian_noise or augmix)) or channel",
                                    *extra)
        return result.ret, result.stdout.str(), result.stderr.str()

    code, stdout, stderr = run_suites(f"--memerobust-save-baseline={tmp_path / 'base.json'}")
    assert code in (0, 1), stdout[-3000:] + stderr[-3000:]
    assert "8 of 8 memes have no picture; the models of this run read only captions" in stdout
    assert "does not read the image" in stdout or "skipped" in stdout
    assert "error" not in stdout.splitlines()[-1]
    # gated against its own baseline, with the channel ablation's `:image` cases (which skip) in the run: no
    # usage error for the mode a caption-only detector does not have, and nothing regressed
    code, stdout, stderr = run_suites(f"--memerobust-baseline={tmp_path / 'base.json'}",
                                      "--memerobust-gate=regressions")
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    regressed = r"\b0 of \d+ conditions (and 0 of \d+ family means? )?regressed"
    assert re.search(regressed, stdout), stdout[-3000:]


def test_real_pridemm_captions_train_a_caption_only_card_without_pictures(tmp_path):
    if not REAL_PRIDEMM.is_file():
        pytest.skip("../shared/data/pridemm/PrideMM.csv not found: the real PrideMM captions live beside the repo")
    train = load_dataset(f"pridemm:{REAL_PRIDEMM.parent}:train", require_images=False)
    val = load_dataset(f"pridemm:{REAL_PRIDEMM.parent}:val", require_images=False)
    assert training_task("hate", train, val) == "hate"
    check_training_data(train, val, "hate", ["non-hateful", "hateful"])  # real splits pass the checks
    assert all(m.image_path is None for m in train.memes) and len(train) > 3000


def test_training_reports_macro_f1_and_says_when_the_one_off_encoding_is_done(captions_csv):
    """The progress bar times the epochs alone (it restarts when encoding ends), and every epoch's row, hence
    `*.metrics.json`, carries the validation macro-F1 next to AUROC and accuracy."""
    import torch

    from pytest_memerobust.detectors import ModelCard, Network, load_detector
    from pytest_memerobust.judge.metrics import macro_f1
    from pytest_memerobust.run.training.loop import train_head

    require_minilm()
    train = load_dataset(f"csv:{captions_csv}:train", require_images=False)
    val = load_dataset(f"csv:{captions_csv}:val", require_images=False)
    torch.manual_seed(0)
    detector = load_detector(ModelCard(name="m", architecture="memeblip2", classes=("no", "yes"),
                                       network=Network(params={"map_dim": 32}, backbone={"kind": "minilm"})))
    events = []
    result = train_head(detector, train, val, task="label", epochs=1, lr=3e-3,
                        on_encoded=lambda: events.append("encoded"), progress=lambda row: events.append(row["epoch"]))
    assert events == ["encoded", 1]
    proba = detector.predict_proba([None] * len(val), [m.text for m in val.memes])  # epoch 1's kept weights
    assert result.history[0]["val_macro_f1"] == pytest.approx(macro_f1(val.labels("label"), proba.argmax(1)))



def test_a_second_head_on_the_same_backbone_reads_its_features_from_the_cache(tmp_path, captions_csv, capsys):
    """`memerobust train` keeps features by backbone: a second head (another seed) encodes nothing."""
    card, cache = write_card(tmp_path), tmp_path / "cache"
    for seed, out in ((0, "first"), (1, "second")):
        assert cli_main(["train", str(card), "--data", f"csv:{captions_csv}",
                         "--out", str(tmp_path / f"{out}.safetensors"), "--epochs", "1", "--seed", str(seed),
                         "--cache-dir", str(cache), "--quiet"]) == 0
    first, second = [line for line in capsys.readouterr().out.splitlines() if line.startswith("encoded ")]
    counts = [tuple(int(n) for n in re.match(r"encoded (\d+) inputs and read (\d+)", line).groups())
              for line in (first, second)]
    assert counts[0][0] > 0 and counts[0][1] == 0  # the first head encodes every caption...
    assert counts[1] == (0, counts[0][0])  # ...the second reads them all back
    assert str(cache) in second


@pytest.mark.parametrize("data, culprit", [
    ("captions", "meme 'm0' has none (caption-only data)"),
    ("demo", "this detector reads only text"),
])
def test_a_picture_augmentation_without_pictures_to_edit_is_refused_before_encoding(tmp_path, captions_csv, capsys,
                                                                                    monkeypatch, data, culprit):
    """Caption-only data, or a detector that reads only captions: `--augment augmix` would fail mid-run on a missing
    picture, or train epochs that change nothing the detector sees. Said first, naming the augmentation."""
    from pytest_memerobust.run.training import loop

    monkeypatch.setattr(loop, "_features", lambda *a: pytest.fail("encoded before checking the augmentation"))
    out = tmp_path / "m.safetensors"
    spec = "demo" if data == "demo" else f"csv:{captions_csv}"
    code = cli_main(["train", str(write_card(tmp_path)), "--no-cache", "--data", spec, "--out", str(out), "--quiet",
                     "--augment", "typos@1:0.5", "--augment", "augmix@1-2:0.5"])
    err = capsys.readouterr().err
    assert code != 0
    assert "--augment augmix@1-2:0.5 edits pictures" in err and culprit in err
    assert "typos" not in err  # the caption augmentation is fine and not named
    assert not list(tmp_path.glob("m.*"))
