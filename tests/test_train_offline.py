"""Weights named by hub id are read from a folder or the local Hugging Face cache; when they are not there, and
downloading was not asked for, `train` says so in one line at once instead of retrying the hub for half a minute
and printing a transformers traceback. The network is cut in these tests (tests/conftest.py)."""
import os
import subprocess
import sys
import time

import pytest
import torch

import huggingface_hub.constants as hub_constants
from pytest_memerobust.cli import main as cli_main
from pytest_memerobust.detectors.backbones import build_backbone
from pytest_memerobust.detectors.cards import DOWNLOAD_ENV, WeightsNotHere, find_card
from pytest_memerobust.detectors.tokenizers import MINILM_TOKENIZER
from pytest_memerobust.errors import ConfigError

BLIP2 = "Salesforce/blip2-itm-vit-g"  # what the memeblip2-tda card names outside its [demo] section


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, downloading not allowed, whatever this machine holds or sets."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.delenv(DOWNLOAD_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    return cache


def test_the_card_trains_its_real_backbone_and_its_demo_section_the_tiny_one():
    """Why `train` reached the hub while the pytest main job did not: the shipped checkpoint's metadata names the
    tiny inline backbone, and `train` builds the card's own backbone unless --demo is given."""
    card = find_card("memeblip2-tda")
    assert card.network.backbone == {"kind": "hf-blip2", "name": BLIP2}
    assert "config" in card.with_demo().network.backbone and "name" not in card.with_demo().network.backbone


@pytest.mark.parametrize("offline", [False, True], ids=["HF_HUB_OFFLINE-unset", "HF_HUB_OFFLINE-set"])
def test_train_without_the_weights_fails_at_once_in_one_line(empty_cache, tmp_path, monkeypatch, capsys, offline):
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", offline)
    out = tmp_path / "tda.safetensors"
    start = time.perf_counter()
    code = cli_main(["train", "memeblip2-tda", "--data", "demo", "--out", str(out), "--no-cache", "--quiet"])
    elapsed = time.perf_counter() - start
    captured = capsys.readouterr()
    assert code == 2 and elapsed < 5, (code, elapsed)
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and captured.out == "" and "Traceback" not in captured.err
    line = lines[0]
    assert line.startswith(f"memerobust: error: card 'memeblip2-tda': hf-blip2 backbone '{BLIP2}' is not on this "
                           f"machine (no folder of that name, not in the Hugging Face cache {empty_cache})")
    assert f"`hf download {BLIP2}`" in line and f"{DOWNLOAD_ENV}=1 (memerobust train --download)" in line
    assert line.endswith("or --demo to train on the card's small demo backbone")
    assert not out.exists()


def test_the_command_itself_answers_within_seconds(tmp_path):
    """The whole process, imports included: the check runs before torch and transformers load."""
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    env.pop(DOWNLOAD_ENV, None)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest_memerobust.cli", "train", "memeblip2-tda", "--data", "demo",
                           "--out", str(tmp_path / "tda.safetensors"), "--quiet"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    elapsed = time.perf_counter() - start
    assert done.returncode == 2 and elapsed < 5, (done.returncode, elapsed, done.stderr[-2000:])
    assert done.stderr.count("\n") == 1 and BLIP2 in done.stderr and done.stdout == ""


@pytest.mark.parametrize("spec, names", [
    ({"kind": "hf-blip2", "name": BLIP2}, BLIP2),
    ({"kind": "hf-clip", "name": "openai/clip-vit-large-patch14"}, "openai/clip-vit-large-patch14"),
    ({"kind": "open_clip", "name": "ViT-B-32", "pretrained": "laion2b_s34b_b79k"},
     "laion/CLIP-ViT-B-32-laion2B-s34B-b79K"),
])
def test_every_backbone_kind_refuses_a_hub_id_that_is_not_here(empty_cache, spec, names):
    if spec["kind"] == "open_clip":
        pytest.importorskip("open_clip")  # its import (seconds) is not what is timed
    start = time.perf_counter()
    with pytest.raises(WeightsNotHere) as info:
        build_backbone(spec)
    assert time.perf_counter() - start < 5
    assert f"{names!r} is not on this machine" in str(info.value) and str(empty_cache) in str(info.value)


def _cache_repo(cache, repo_id, files_from):
    """`files_from`'s files laid out as huggingface_hub caches repository `repo_id`."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    for path in files_from.iterdir():
        (snapshot / path.name).write_bytes(path.read_bytes())
    return snapshot


def test_a_hub_id_in_the_local_cache_loads_without_the_network(empty_cache, tmp_path):
    """The cache is read first (local_files_only): with the network cut, the cached weights load as they are."""
    from transformers import AutoTokenizer, Blip2Config, Blip2ForImageTextRetrieval

    torch.manual_seed(0)
    config = dict(find_card("memeblip2").with_demo().network.backbone["config"])
    model = Blip2ForImageTextRetrieval(Blip2Config(**config)).eval()
    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    AutoTokenizer.from_pretrained(str(MINILM_TOKENIZER)).save_pretrained(saved)
    _cache_repo(empty_cache, "memerobust-test/tiny-blip2", saved)

    backbone = build_backbone({"kind": "hf-blip2", "name": "memerobust-test/tiny-blip2"})
    for name, value in model.state_dict().items():
        torch.testing.assert_close(backbone.model.state_dict()[name], value)
    assert backbone.encode_texts(["a caption"]).shape == (1, config["image_text_hidden_size"])


def test_a_hub_id_only_partly_cached_is_one_error(empty_cache, tmp_path):
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "config.json").write_text('{"model_type": "blip-2"}')
    _cache_repo(empty_cache, BLIP2, tmp_path / "partial")
    with pytest.raises(ConfigError, match=rf"hf-blip2 backbone '{BLIP2}' is only partly in the Hugging Face cache"):
        build_backbone({"kind": "hf-blip2", "name": BLIP2})


def test_a_missing_folder_is_named_as_a_folder(empty_cache, tmp_path):
    with pytest.raises(ConfigError, match="no such folder"):
        build_backbone({"kind": "hf-clip", "name": str(tmp_path / "no-such-clip")})
