"""Training recipes (issue 53): augmentation with registered perturbations, adversarial training with the project's
attacks, the checks said before any training, and the same checkpoint bytes from the same command."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tomllib

import numpy as np
import pytest

from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.data.demo import demo_dataset
from pytest_memerobust.detectors.training.adversarial import parse_adversarial
from pytest_memerobust.detectors.training.augmentation import augment_memes, parse_augmentation, parse_augmentations
from pytest_memerobust.errors import ConfigError

from tiny_backbones import card_toml


# --- specs: one clear error before anything loads -------------------------------------------------------------

def test_an_augmentation_spec_reads_name_severity_range_and_probability():
    aug = parse_augmentation("typos@1-5:0.5")
    assert (aug.name, aug.modality, aug.severities, aug.probability) == ("typos", "text", (1, 2, 3, 4, 5), 0.5)
    assert aug.spec == "typos@1-5:0.5"
    assert parse_augmentation("augmix@3").severities == (3,) and parse_augmentation("augmix@3").modality == "image"
    assert parse_augmentation("gaussian_noise").severities == (1, 2, 3, 4, 5)
    assert parse_augmentation("back_translation:0.3").severities == ()


@pytest.mark.parametrize("spec, culprit", [
    ("tpyos@1", "tpyos"),                      # unknown perturbation
    ("typos@6", "out of range"),               # severity out of range
    ("typos@3-1", "out of range"),
    ("typos@1:1.5", "'1.5' is not a number in 0..1"),
    ("typos@1:-0.1", "0..1"),
    ("typos@1:half", "0..1"),
    ("hotflip@1", "--adversarial hotflip@SEVERITY"),  # a model-aware attack under --augment
    ("back_translation@2", "no severities"),
    ("typos@", "expected NAME"),
])
def test_a_bad_augmentation_is_one_error_naming_it(spec, culprit):
    with pytest.raises(ConfigError) as caught:
        parse_augmentation(spec)
    assert culprit in str(caught.value) and spec in str(caught.value)


def test_a_perturbation_named_twice_is_refused():
    with pytest.raises(ConfigError, match="typos named more than once"):
        parse_augmentations(["typos@1:0.5", "typos@3:0.2"])


def test_an_adversarial_spec_reads_attack_severity_share_and_loss():
    adv = parse_adversarial("hotflip@1")
    assert (adv.name, adv.modality, adv.severity, adv.keep_clean, adv.loss_spec) == ("hotflip", "text", 1, 0.0, "ce")
    adv = parse_adversarial("pgd_linf@2:0.5", "trades")
    assert (adv.modality, adv.keep_clean, adv.loss, adv.beta, adv.spec) == ("image", 0.5, "trades", 6.0,
                                                                           "pgd_linf@2:0.5")
    assert parse_adversarial("hotflip@1", "trades:2").beta == 2.0
    assert parse_adversarial("co_attack@1").rewrites_caption


@pytest.mark.parametrize("spec, loss, culprit", [
    ("typos@1", None, "--augment typos@1"),             # not an attack
    ("hotflip", None, "expected ATTACK@SEVERITY"),
    ("hotflip@9", None, "severities are 1, 2, 3, 4, 5"),
    ("hotflip@1:1", None, "0..1"),
    ("universal_trigger@1", None, "refitting"),
    ("hotflip@1", "kl", "expected ce or trades"),
    ("hotflip@1", "trades:0", "positive"),
    ("nosuch@1", None, "nosuch"),
])
def test_a_bad_adversarial_spec_is_one_error_naming_it(spec, loss, culprit):
    with pytest.raises(ConfigError, match=culprit.replace("(", r"\(")):
        parse_adversarial(spec, loss)


# --- keyed draws ------------------------------------------------------------------------------------------

def test_augmentation_draws_are_keyed_by_seed_epoch_and_meme_not_by_order():
    memes = list(demo_dataset("train").memes[:40])
    augs = parse_augmentations(["typos@1-5:0.5", "leetspeak@2:0.3"])
    captions, _, applied = augment_memes(memes, augs, seed=3, epoch=1)
    again, _, _ = augment_memes(memes[::-1], augs, seed=3, epoch=1)
    assert again[::-1] == captions  # the same edit of each meme, whatever the order
    edited = sum(bool(a) for a in applied)
    assert 0 < edited < len(memes)  # about 1 - 0.5 * 0.7 of them
    assert all(c != m.text for c, m, a in zip(captions, memes, applied) if "typos@" in " ".join(a))
    next_epoch, _, _ = augment_memes(memes, augs, seed=3, epoch=2)
    other_seed, _, _ = augment_memes(memes, augs, seed=4, epoch=1)
    assert next_epoch != captions and other_seed != captions
    untouched = [c == m.text for c, m, a in zip(captions, memes, applied) if not a]
    assert all(untouched)


def test_a_probability_of_one_edits_every_picture_and_zero_none():
    memes = list(demo_dataset("train").memes[:6])
    _, pictures, applied = augment_memes(memes, parse_augmentations(["gaussian_noise@3:1"]), seed=0, epoch=1)
    assert all(a == ["gaussian_noise@3"] for a in applied)
    assert all(not np.array_equal(np.asarray(p.cpu()), np.asarray(m.picture().cpu())) for p, m in zip(pictures, memes))
    captions, pictures, applied = augment_memes(memes, parse_augmentations(["typos@1:0"]), seed=0, epoch=1)
    assert pictures is None and not any(applied) and captions == [m.text for m in memes]


# --- the command ------------------------------------------------------------------------------------------

@pytest.fixture
def tiny_card(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(card_toml("hf-clip"), encoding="utf-8")
    return path


def _train(card, out, *extra, threads: int | None = None, data=("--data", "demo")):
    """`memerobust train` in a fresh process (its own thread count), on the demo memes or the `data` given."""
    import os

    env = {**os.environ}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    code = ("import sys, torch; from pytest_memerobust.cli import main; "
            f"torch.set_num_threads({threads or 2}); sys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, "train", str(card), *data, "--out", str(out),
                           "--epochs", "2", "--no-cache", "--quiet", *extra],
                          capture_output=True, text=True, env=env, timeout=600)


TRAIN_MEMES, VAL_MEMES = 48, 16
ENCODE_ROWS = 16  # rows of an encoder batch where the pool's share of the batches is the point (default 64)


def _few_demo_memes(folder) -> list[str]:
    """The first TRAIN_MEMES of the demo's train split and VAL_MEMES of its val split (of 480 and 160), as a Hateful
    Memes folder (task hate, like the demo): the `--train` and `--val` arguments that train on them."""
    import json as _json

    from PIL import Image

    (folder / "img").mkdir(parents=True)
    for split, name, n in (("train", "train", TRAIN_MEMES), ("val", "dev_seen", VAL_MEMES)):
        rows = []
        for meme in demo_dataset(split).head(n).memes:
            Image.fromarray(meme.image).save(folder / "img" / f"{meme.id}.png")
            rows.append(_json.dumps({"id": meme.id, "img": f"img/{meme.id}.png", "text": meme.text,
                                     "label": meme.labels["hate"]}))
        (folder / f"{name}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return ["--train", f"hateful_memes:{folder}:train", "--val", f"hateful_memes:{folder}:dev_seen"]


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_same_augmented_adversarial_command_writes_the_same_bytes_twice_and_at_1_and_2_threads(tiny_card,
                                                                                                  tmp_path):
    """On TRAIN_MEMES + VAL_MEMES demo memes: once in a fresh process at 1 thread, again in this process at 2 (one
    fresh interpreter's start, not two: the second run's thread count is set here), then without the recipe."""
    from pytest_memerobust.determinism import fixed_threads

    data = _few_demo_memes(tmp_path / "memes")
    recipe = ["--augment", "typos@1-3:0.5", "--augment", "gaussian_noise@2:0.5", "--adversarial", "hotflip@1:0.5",
              "--adversarial-loss", "trades:6"]
    out = tmp_path / "a" / "m.safetensors"
    run = _train(tiny_card, out, *recipe, threads=1, data=data)
    assert run.returncode == 0, run.stderr[-2000:]
    again = tmp_path / "again" / "m.safetensors"  # a second time, in this process, at 2 threads
    with fixed_threads(2):
        assert cli_main(["train", str(tiny_card), *data, "--out", str(again), "--epochs", "2", "--no-cache",
                         "--quiet", *recipe]) == 0
    assert _digest(again) == _digest(out)
    card = tomllib.loads(out.with_suffix(".card.toml").read_text(encoding="utf-8"))
    assert card["training"]["augment"] == ["typos@1-3:0.5", "gaussian_noise@2:0.5"]
    assert (card["training"]["adversarial"], card["training"]["adversarial_loss"]) == ("hotflip@1:0.5", "trades:6")
    metrics = json.loads(out.with_suffix(".metrics.json").read_text(encoding="utf-8"))
    assert metrics["augment"] == ["typos@1-3:0.5", "gaussian_noise@2:0.5"] and metrics["adaptation"] == "head"
    assert metrics["trainable_parameters"] > 0 and "adaptation head" in run.stdout
    plain = tmp_path / "plain" / "m.safetensors"
    assert cli_main(["train", str(tiny_card), *data, "--out", str(plain), "--epochs", "2", "--no-cache",
                     "--quiet"]) == 0
    assert _digest(plain) != _digest(out)  # the recipe changed what was trained


def test_the_encoding_on_two_worker_processes_writes_the_same_checkpoint_bytes(tiny_card, tmp_path, monkeypatch):
    """Issue 61: `memerobust train` encodes on the evaluation's worker pool (--workers); every fixed-shape batch's
    rows are the same bytes in any process, so the checkpoint is the same at 1 and 2 workers. On TRAIN_MEMES +
    VAL_MEMES demo memes in encoder batches of ENCODE_ROWS (the default 64 would leave the training pictures one
    batch, which stays here): the pictures and the captions both go to the pool in several batches."""
    from pytest_memerobust.run.training import loop
    from pytest_memerobust.engine import executors

    monkeypatch.setattr(executors, "POOL_START_S", 0)  # every batch to the pool at once
    monkeypatch.setattr(loop, "ENCODE_BATCH_SIZE", ENCODE_ROWS)  # the workers get it with each batch
    data = _few_demo_memes(tmp_path / "memes")
    outs = {workers: tmp_path / f"w{workers}" / "m.safetensors" for workers in (1, 2)}
    for workers, out in outs.items():
        assert cli_main(["train", str(tiny_card), *data, "--out", str(out), "--epochs", "2", "--no-cache",
                         "--quiet", "--workers", str(workers), "--augment", "typos@2:0.5"]) == 0
    assert _digest(outs[1]) == _digest(outs[2])
    metrics = {w: json.loads(out.with_suffix(".metrics.json").read_text(encoding="utf-8")) for w, out in outs.items()}
    assert metrics[1]["encoding_workers"] == 1 and metrics[2]["encoding_workers"] == 2
    assert metrics[1]["feature_cache"]["encoded"] == metrics[2]["feature_cache"]["encoded"]


def test_a_rerun_of_an_augmented_command_encodes_nothing(tiny_card, tmp_path):
    """On TRAIN_MEMES + VAL_MEMES demo memes."""
    cache, data = tmp_path / "cache", _few_demo_memes(tmp_path / "memes")
    first = cli_main(["train", str(tiny_card), *data, "--out", str(tmp_path / "a.safetensors"),
                      "--epochs", "2", "--quiet", "--cache-dir", str(cache), "--augment", "typos@2:0.5"])
    assert first == 0
    metrics = json.loads((tmp_path / "a.metrics.json").read_text(encoding="utf-8"))
    assert sum(metrics["feature_cache"]["encoded"].values()) > 0
    assert cli_main(["train", str(tiny_card), *data, "--out", str(tmp_path / "b.safetensors"),
                     "--epochs", "2", "--quiet", "--cache-dir", str(cache), "--augment", "typos@2:0.5"]) == 0
    again = json.loads((tmp_path / "b.metrics.json").read_text(encoding="utf-8"))
    assert sum(again["feature_cache"]["encoded"].values()) == 0
    assert again["feature_cache"]["disk_hits"]["text"] > 0
    assert _digest(tmp_path / "a.safetensors") == _digest(tmp_path / "b.safetensors")


@pytest.mark.parametrize("flags, culprit", [
    (["--augment", "typos@7"], "out of range"),
    (["--augment", "typos@1:2"], "0..1"),
    (["--augment", "nosuch@1"], "nosuch"),
    (["--augment", "pgd_linf@1"], "--adversarial pgd_linf"),
    (["--adversarial", "typos@1"], "--augment typos@1"),
    (["--adversarial-loss", "trades"], "name the attack"),
    (["--augment", "back_translation:0.3"], "MarianMT"),
    (["--adaptation", "prompt"], "hf-clip"),         # a method the backbone kind cannot take
    (["--adaptation", "lora:rank=0"], "rank"),
    (["--adaptation", "finetune"], "finetune"),
])
def test_bad_recipes_fail_before_any_training_and_write_nothing(tiny_card, tmp_path, capsys, monkeypatch, flags,
                                                               culprit):
    from pytest_memerobust.run.training import loop

    monkeypatch.setattr(loop, "_features", lambda *a: pytest.fail("encoded before checking the recipe"))
    out = tmp_path / "m.safetensors"
    code = cli_main(["train", str(tiny_card), "--data", "demo", "--out", str(out), "--quiet", "--no-cache", *flags])
    assert code != 0
    assert culprit in capsys.readouterr().err
    assert not list(tmp_path.glob("m.*"))


def test_adversarial_training_is_refused_for_a_detector_without_a_gradient_path():
    from pytest_memerobust.detectors.training.adversarial import check_gradient_path

    class Hosted:  # a detector behind an endpoint: no head to train, no gradients
        modalities = ("image", "text")

    with pytest.raises(ConfigError, match="no trainable head"):
        check_gradient_path(parse_adversarial("hotflip@1"), Hosted())

    class Sampled:
        head_module = object()
        modalities = ("image", "text")
        no_gradient_reason = "its answers are sampled"

        def picture_logits(self, values, features):
            raise AssertionError

    with pytest.raises(ConfigError, match="no differentiable image path: its answers are sampled"):
        check_gradient_path(parse_adversarial("pgd_linf@1"), Sampled())


# --- adaptation through the training loop ----------------------------------------------------------------

@pytest.mark.parametrize("method", ["lora:rank=4", "compacter:reduction=4,phm=4", "prompt:tokens=4", "full"])
def test_an_adapted_checkpoint_reloads_with_the_predictions_it_ended_training_with(method, tmp_path):
    """`memerobust train --adaptation` on a tiny BERT caption encoder (encoders in the loop): the checkpoint and the
    card written beside it load back and predict the validation memes exactly as the trained detector did."""
    from pytest_memerobust.detectors import find_card, load_detector
    from pytest_memerobust.run.training import (MemeSource, OutputTarget, RecipeFlags, TrainingRequest, fit_head,
                                                load_training, plan_training, save_head)

    from tiny_backbones import save_tiny_bert

    folder = save_tiny_bert(tmp_path / "bert", seed=0)
    card = tmp_path / "tiny.toml"
    card.write_text('name = "tiny-bert"\narchitecture = "memeblip2"\ntask = "hate"\n'
                    'classes = ["non-hateful", "hateful"]\n[params]\nmap_dim = 32\n'
                    f'[backbone]\nkind = "minilm"\nname = "{folder}"\n', encoding="utf-8")
    out = tmp_path / "m.safetensors"
    request = TrainingRequest(card=str(card), output=OutputTarget(out=str(out)), memes=MemeSource(data="demo"),
                              recipe=RecipeFlags(adaptation=method), flags={"epochs": 2})
    plan = plan_training(request)
    data = load_training(plan, request, say=lambda _: None)
    result = fit_head(plan, request, data)
    save_head(plan, request, data, result)
    val = [m.text for m in data.val.memes]
    ended = data.detector.head(np.zeros((len(val), 0), dtype=np.float32), data.detector.encode_texts(val))
    assert result.cost.encoders_in_loop and result.recipe.adaptation == method.split(":")[0]
    reloaded = load_detector(find_card(str(out.with_suffix(".card.toml"))))
    again = reloaded.head(np.zeros((len(val), 0), dtype=np.float32), reloaded.encode_texts(val))
    assert np.array_equal(ended, again)
    base = load_detector(find_card(str(card)))  # the base encoder alone predicts otherwise: training moved it
    assert not np.array_equal(base.encode_texts(val), reloaded.encode_texts(val))
