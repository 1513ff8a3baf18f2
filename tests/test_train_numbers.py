"""`memerobust train` checks every number it is given before anything loads (issue 62): a bad one is one line naming
the flag or the card's line and the valid range, exit code 2, nothing encoded and nothing written; before, each of
these encoded every input and then ended in a traceback."""
from __future__ import annotations

import pytest

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.detectors import find_card
from pytest_memerobust.run import training
from pytest_memerobust.run.training import hyperparameters
from tiny_backbones import card_toml


@pytest.fixture
def never_loads(monkeypatch):
    """Fails the test if the run gets as far as loading the detector and the memes (the start of the encoding)."""
    def loaded(*args, **kwargs):
        raise AssertionError("the run loaded the detector and memes before refusing its numbers")

    monkeypatch.setattr(training, "load_training", loaded)


@pytest.mark.parametrize(("flags", "said"), [
    (["--epochs", "0"], "--epochs 0: epochs must be a whole number >= 1"),
    (["--epochs", "-1"], "--epochs -1: epochs must be a whole number >= 1"),
    (["--batch-size", "0"], "--batch-size 0: batch size must be a whole number >= 1"),
    (["--lr", "nan"], "--lr nan: lr must be a finite number > 0"),
    (["--lr", "inf"], "--lr inf: lr must be a finite number > 0"),
    (["--lr", "0"], "--lr 0.0: lr must be a finite number > 0"),
    (["--weight-decay", "-0.1"], "--weight-decay -0.1: weight decay must be a finite number >= 0"),
])
def test_a_number_out_of_range_is_one_line_before_anything_loads(flags, said, tmp_path, capsys, monkeypatch,
                                                                  never_loads):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["train", "demo", "--data", "demo", "--out", "mine.safetensors", "--quiet", *flags]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [f"memerobust: error: {said}"]
    assert "Traceback" not in captured.out + captured.err
    assert list(tmp_path.iterdir()) == []


def test_a_cards_training_number_out_of_range_names_the_cards_line(tmp_path, capsys, monkeypatch, never_loads):
    path = tmp_path / "tiny.toml"
    path.write_text(card_toml("hf-clip") + "\n[training]\nepochs = 0\nlr = 1e-3\n")
    monkeypatch.chdir(tmp_path)
    assert cli_main(["train", str(path), "--data", "demo", "--out", "mine.safetensors", "--quiet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "memerobust: error: card tiny-hf-clip [training] epochs = 0: epochs must be a whole number >= 1"]
    # a flag given is what the run uses: the card's bad line is then never used, nor refused
    assert hyperparameters(find_card(str(path)), {"epochs": 2})["epochs"] == 2


def test_whole_numbers_written_as_floats_in_a_card_are_used_as_whole_numbers():
    card = find_card("demo")
    hyper = hyperparameters(card, {"epochs": 3, "batch_size": 8, "lr": 1e-3, "weight_decay": 0.0})
    assert hyper == {**hyper, "epochs": 3, "batch_size": 8, "lr": 1e-3, "weight_decay": 0.0}
    assert all(isinstance(hyper[k], int) for k in ("epochs", "batch_size"))
