"""`memerobust train` checks every number it is given before anything loads (issue 62), an adaptation's sizes against
the card's backbone config too: a bad one is one line naming the flag or the card's line and the valid range, exit
code 2, nothing encoded and nothing written; before, each of these encoded every input and then ended in a
traceback."""
from __future__ import annotations

import pytest

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.detectors import find_card
from pytest_memerobust.run import training
from pytest_memerobust.run.training import hyperparameters
from minilm_model import require_minilm
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


def _train(*args) -> int:
    return cli_main(["train", "demo", "--data", "demo", "--epochs", "1", "--no-cache", "--quiet", *args])


def test_out_that_is_a_folder_is_refused_before_anything_loads(tmp_path, capsys, never_loads):
    assert _train("--out", str(tmp_path)) == 2
    assert capsys.readouterr().err.strip() == (f"memerobust: error: --out {tmp_path} is a folder: name the checkpoint "
                                               f"file in it, e.g. --out {tmp_path / 'model.safetensors'}")


def test_out_in_a_folder_that_cannot_be_written_is_refused_before_anything_loads(tmp_path, capsys, never_loads):
    """A folder made read-only by chmod (root ignores that, so the test makes the folder a file's path instead when
    it runs as root: either way the write check is what refuses)."""
    import os

    if os.geteuid() == 0:
        blocker = tmp_path / "a-file"
        blocker.write_text("not a folder")
        out = blocker / "m.safetensors"
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        out = locked / "m.safetensors"
    assert _train("--out", str(out)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"memerobust: error: --out {out}: cannot write in ") and "Traceback" not in err
    assert err.strip().endswith("name a checkpoint in a folder you can write")


def test_a_finished_checkpoint_is_replaced_only_with_force(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _train("--out", "m.safetensors", "--lr", "3e-3") == 0
    capsys.readouterr()
    written = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert set(written) == {"m.safetensors", "m.metrics.json", "m.card.toml"}
    assert _train("--out", "m.safetensors", "--lr", "1e-3") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("memerobust: error: --out m.safetensors is a finished checkpoint (best epoch 1, val AUROC ")
    assert "lr 0.003" in err and err.endswith("name another --out, or pass --force to replace it, its metrics and card")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == written  # nothing touched
    assert _train("--out", "m.safetensors", "--lr", "1e-3", "--force") == 0
    metrics = (tmp_path / "m.metrics.json").read_text()
    assert '"lr": 0.001' in metrics


def _interrupted(tmp_path, monkeypatch, *args) -> None:
    """A run of `args` stopped after its epochs, before its checkpoint was written: its resume state is left."""
    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(training, "save_head", stopped)
    assert _train("--out", str(tmp_path / "m.safetensors"), *args) == 130  # "memerobust train: interrupted"
    monkeypatch.undo()
    assert (tmp_path / "m.train-state.pt").is_file() and not (tmp_path / "m.safetensors").exists()


def test_a_resume_of_another_command_is_refused_naming_what_differs(tmp_path, capsys, monkeypatch):
    _interrupted(tmp_path, monkeypatch, "--lr", "3e-3", "--augment", "typos@1:0.5")
    capsys.readouterr()
    assert _train("--out", str(tmp_path / "m.safetensors"), "--lr", "1e-3", "--resume") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"memerobust: error: --resume: the interrupted run at {tmp_path / 'm.train-state.pt'} was "
                          f"another command (augment typos@1:0.5 then, none now; lr 0.003 then, 0.001 now): ")
    assert not (tmp_path / "m.safetensors").exists()
    # the same command resumes, and finishes
    assert _train("--out", str(tmp_path / "m.safetensors"), "--lr", "3e-3", "--augment", "typos@1:0.5",
                  "--resume") == 0
    assert (tmp_path / "m.safetensors").is_file() and not (tmp_path / "m.train-state.pt").exists()


def test_a_damaged_resume_state_names_the_file_and_the_fix(tmp_path, capsys, monkeypatch):
    _interrupted(tmp_path, monkeypatch, "--lr", "3e-3")
    state = tmp_path / "m.train-state.pt"
    state.write_bytes(state.read_bytes()[:100])
    capsys.readouterr()
    assert _train("--out", str(tmp_path / "m.safetensors"), "--lr", "3e-3", "--resume") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"memerobust: error: --resume: {state} cannot be read (")
    assert err.endswith("it is damaged or not a training state: delete it, or run without --resume, to train from "
                        "the start") and "Traceback" not in err


def test_a_run_that_diverges_at_once_says_where_and_writes_nothing(tmp_path, capsys):
    assert _train("--out", str(tmp_path / "m.safetensors"), "--lr", "1e30", "--epochs", "2") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("memerobust: error: training diverged at epoch 1, ")
    assert err.endswith("before any epoch could be kept: nothing written; try a lower --lr (this run's: 1e+30)")
    assert [p.name for p in tmp_path.iterdir()] == ["m.train-state.pt"] or list(tmp_path.iterdir()) == []


def test_a_run_that_diverges_later_keeps_its_best_epoch_and_says_where_it_stopped():
    import torch

    from pytest_memerobust.data import demo_dataset
    from pytest_memerobust.detectors import load_detector
    from pytest_memerobust.run.training.loop import train_head

    torch.manual_seed(0)
    detector = load_detector(find_card("demo"))
    params = [p for p in detector.head_module.parameters() if p.requires_grad]

    def poison(row):  # after epoch 1: the weights become NaN, as a too-large step makes them
        if row["epoch"] == 1:
            with torch.no_grad():
                params[0].fill_(float("nan"))

    result = train_head(detector, demo_dataset("train").head(64), demo_dataset("val").head(32), epochs=3, lr=1e-3,
                        progress=poison)
    assert result.diverged == {"epoch": 2, "batch": 1, "loss": pytest.approx(float("nan"), nan_ok=True)}
    assert result.best_epoch == 1 and len(result.history) == 1
    assert all(torch.isfinite(p).all() for p in params)  # epoch 1's weights are back


def test_init_from_another_cards_checkpoint_is_refused_naming_both(tmp_path, capsys, never_loads):
    """memeblip2-tda's head (a BLIP-2 backbone) given to the caption-only memeblip2-minilm card: before, it trained
    the checkpoint's picture-reading model and wrote a card saying MiniLM."""
    shipped = find_card("memeblip2-tda").checkpoint_path()
    assert cli_main(["train", "memeblip2-minilm", "--data", "demo", "--out", str(tmp_path / "m.safetensors"),
                     "--init", str(shipped), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"memerobust: error: --init {shipped} is a checkpoint of another detector (trained from card "
                   f"'memeblip2-tda'; its backbone is hf-blip2 (inline config), the card's minilm; its map_dim is 32, "
                   f"the card's 256) than card "
                   f"'memeblip2-minilm' describes: start from a checkpoint of 'memeblip2-minilm', or train "
                   f"'memeblip2-tda'")
    assert list(tmp_path.iterdir()) == []


def test_init_from_the_same_cards_checkpoint_is_taken_and_a_missing_or_foreign_file_is_named(tmp_path):
    from pytest_memerobust.errors import MemeRobustError
    from pytest_memerobust.run.training import (MemeSource, OutputTarget, StartingPoint, TrainingRequest,
                                                plan_training)

    def request(init) -> TrainingRequest:
        return TrainingRequest(card="memeblip2-tda", demo=True, memes=MemeSource(data="demo"),
                               start=StartingPoint(init=str(init)),
                               output=OutputTarget(out=str(tmp_path / "m.safetensors")))

    shipped = find_card("memeblip2-tda").checkpoint_path()
    plan = plan_training(request(shipped))
    assert plan.card.name == "memeblip2-tda"
    with pytest.raises(MemeRobustError, match="--init .*nothing.safetensors: no such checkpoint file"):
        plan_training(request(tmp_path / "nothing.safetensors"))
    foreign = tmp_path / "notes.safetensors"
    foreign.write_text("not a checkpoint")
    with pytest.raises(MemeRobustError, match=r"cannot be read as a checkpoint \("):
        plan_training(request(foreign))


MINILM_TEXT = "the backbone's text encoder (kind 'minilm')"


@pytest.mark.parametrize(("card", "adaptation", "said"), [
    ("memeblip2-minilm", "prompt:tokens=100000", f"tokens = 100000 is more prompt tokens than {MINILM_TEXT} takes: "
     "valid 1..384 (its 512 positions less 128 for the longest caption)"),
    ("memeblip2-minilm", "lora:rank=385", f"rank = 385 is more than the layer width of {MINILM_TEXT}: valid 1..384"),
    ("memeblip2-minilm", "adapter:reduction=385", f"reduction = 385 is more than the layer width of {MINILM_TEXT} (its "
     "bottleneck, width // reduction, would be empty): valid 1..384"),
    ("memeblip2-minilm", "compacter:phm=5", "phm = 5 Kronecker factors must divide both the layer width 384 and its "
     f"bottleneck 24 (width // reduction 16) of {MINILM_TEXT}: valid phm 1, 2, 3, 4, 6, 8, 12, 24"),
    ("memeblip2", "prompt:tokens=65", "tokens = 65 is more prompt tokens than the backbone's text encoder (kind "
     "'hf-blip2') takes: valid 1..64 (the Q-Former's 64 positions)"),
    ("memeclip", "lora:rank=33", "rank = 33 is more than the layer width of the backbone's text encoder (kind "
     "'hf-clip'): valid 1..32"),
])
def test_an_adaptation_size_beyond_the_backbone_is_one_line_before_anything_loads(card, adaptation, said, tmp_path,
                                                                                 capsys, monkeypatch, never_loads):
    """Before, `prompt:tokens=100000` encoded with 100,013 positions of MiniLM's 512 and ended in a traceback. The
    card's backbone config is read (MiniLM's config.json, the demo's inline BLIP-2 and CLIP configs), no weights;
    the line comes first, even before the missing --out."""
    if card == "memeblip2-minilm":
        require_minilm()
    monkeypatch.chdir(tmp_path)
    assert cli_main(["train", card, "--demo", "--adaptation", adaptation]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [f"memerobust: error: --adaptation {adaptation}: {said}"]
    assert "Traceback" not in captured.out + captured.err
    assert list(tmp_path.iterdir()) == []


def test_a_cards_adaptation_beyond_its_backbone_names_the_cards_line(tmp_path, capsys, never_loads):
    path = tmp_path / "tiny.toml"
    path.write_text(card_toml("hf-blip2") + '\n[training]\nadaptation = "prompt:tokens=65"\n')
    assert cli_main(["train", str(path), "--data", "demo", "--out", str(tmp_path / "m.safetensors")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "memerobust: error: card tiny-hf-blip2 [training] adaptation: tokens = 65 is more prompt tokens than the "
        "backbone's text encoder (kind 'hf-blip2') takes: valid 1..64 (the Q-Former's 64 positions)"]


def test_the_sizes_at_the_limits_are_taken_and_the_prompt_limit_is_minilms_own(tmp_path):
    """The largest sizes pass the plan; on a BERT sentence encoder (MiniLM's code, 512 positions) the largest prompt
    encodes a caption cut at 128 tokens, one more token is refused before adapting, where the encoder would fail."""
    import torch

    from pytest_memerobust.detectors import ModelCard, Network, load_detector
    from pytest_memerobust.detectors.training.adaptation import adapt
    from pytest_memerobust.detectors.training.adaptation_methods import parse_adaptation
    from pytest_memerobust.detectors.training.limits import tower_limits
    from pytest_memerobust.errors import ConfigError
    from pytest_memerobust.run.training import MemeSource, OutputTarget, RecipeFlags, TrainingRequest, plan_training
    from tiny_backbones import BLIP2_TINY, save_tiny_bert

    for adaptation in ("prompt:tokens=64", "lora:rank=32", "compacter:reduction=4,phm=8"):
        plan = plan_training(TrainingRequest(card="memeblip2", demo=True, memes=MemeSource(data="demo"),
                                             recipe=RecipeFlags(adaptation=adaptation),
                                             output=OutputTarget(out=str(tmp_path / "m.safetensors"))))
        assert plan.recipe.adaptation == parse_adaptation(adaptation)
    text, vision = tower_limits({"kind": "hf-blip2", "config": BLIP2_TINY}, ["text", "vision"], "backbone")
    assert (text.width, text.prompt, vision.width, vision.prompt) == (32, 64, 32, 65)  # 64 / 8 = 8 x 8 patches + 1
    folder = save_tiny_bert(tmp_path / "bert")
    card = ModelCard(name="tiny", architecture="memeblip2", classes=("non-hateful", "hateful"),
                     network=Network(params={"map_dim": 32}, backbone={"kind": "minilm", "name": str(folder)}))
    detector = load_detector(card)
    with pytest.raises(ConfigError, match=r"^adaptation 'prompt': tokens = 385 is more prompt tokens than the "
                                          r"backbone's text encoder \(kind 'minilm'\) takes: valid 1..384 "):
        adapt(detector, parse_adaptation("prompt:tokens=385"))
    adapt(detector, parse_adaptation("prompt:tokens=384"))
    longest = " ".join(f"word{i}" for i in range(300))  # cut at 128 tokens: 384 + 128 = all 512 positions
    with torch.no_grad():
        assert detector.text_backbone.encode_texts([longest, "short"]).shape == (2, 32)
