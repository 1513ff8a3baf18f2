"""The open_clip backbone kind on tiny random models: built from an inline config, loaded back from a folder and from
a weights file, its token spans (open_clip's tokenizer has no offsets), and the cards' weight checks."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from pytest_memerobust.detectors.backbones import backbone_weights, build_backbone, word_token_offsets
from pytest_memerobust.errors import ConfigError
from tiny_backbones import OPEN_CLIP_TINY as TINY

open_clip = pytest.importorskip("open_clip", reason="the open_clip backbone kind needs the clip extra")

CAPTIONS = ["When the Wi-Fi drops... 😂 #mood", "hello,   world! don't do it", "ÉCOLE naïve café",
            "word " * 90]


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return build_backbone({"kind": "open_clip", "config": TINY})


@pytest.fixture(scope="module")
def pictures():
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, 256, (3, 96, 80), dtype=torch.uint8, generator=generator) for _ in range(3)]


def test_an_inline_config_builds_a_clip_with_its_dimensions(tiny, pictures):
    assert (tiny.image_size, tiny.image_dim, tiny.text_dim, tiny.vision_width) == (64, 32, 32, 32)
    assert tiny.encode_images(pictures).shape == (3, 32)
    texts = tiny.encode_texts(CAPTIONS)
    assert texts.shape == (4, 32) and not torch.allclose(texts[0], texts[1])


def test_token_spans_cover_each_word_with_its_own_tokens(tiny):
    offsets = tiny.token_offsets(CAPTIONS)
    tokens = tiny.tokenize(CAPTIONS)["text"]
    assert [len(row) for row in offsets] == [tokens.shape[1]] * len(CAPTIONS)
    for caption, spans, row in zip(CAPTIONS, offsets, tokens.tolist()):
        assert spans[0] == (0, 0)  # the start token
        for (start, end), token in zip(spans, row):
            if end > start:  # a body token: its decoded text is part of the word it is traced to
                piece = tiny.tokenizer_fn.decode([token]).strip().replace("</w>", "")
                assert piece and piece in caption[start:end].lower(), (caption[start:end], piece)
    # "Wi-Fi" is three tokens (wi, -, fi), all traced to the same word; padding and the end token get no span
    wifi = CAPTIONS[0].index("Wi-Fi")
    assert offsets[0].count((wifi, wifi + 5)) == 3
    assert offsets[0][-1] == (0, 0)
    # a caption longer than the context keeps the spans of the tokens it kept, and ends on the end token
    assert offsets[3][-1] == (0, 0) and offsets[3][-2] != (0, 0)


def test_a_chunking_that_does_not_reproduce_the_tokens_is_an_error():
    tokens = torch.tensor([[1, 5, 6, 2, 0]])
    with pytest.raises(ValueError, match="word by word"):
        word_token_offsets(["a b"], tokens, lambda chunk: [7])


def test_hotflip_runs_white_box_on_open_clip(tiny):
    """The token spans feed the embedding gradient of every caption word: nothing raises, and every word of
    every caption gets a score."""
    from pytest_memerobust.detectors.meme_models import MemeDetector

    detector = MemeDetector(["non-hateful", "hateful"], tiny, None, {"map_dim": 32})
    image = detector.encode_images([torch.zeros(3, 64, 64, dtype=torch.uint8)] * 2)
    saliency = detector.text_saliency(CAPTIONS[:2], [0, 1], image)
    assert [len(row) for row in saliency] == [len(tiny.tokenize([c])["text"][0].nonzero()) - 2 for c in CAPTIONS[:2]]
    assert all(score > 0 for row in saliency for _, _, score in row)


def _save_folder(model, folder):
    from safetensors.torch import save_file

    folder.mkdir()
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY, "preprocess_cfg": {}}))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "open_clip_model.safetensors"))


def test_a_saved_folder_loads_by_path_with_the_same_weights(tiny, pictures, tmp_path):
    _save_folder(tiny.model, tmp_path / "tiny-clip")
    loaded = build_backbone({"kind": "open_clip", "name": str(tmp_path / "tiny-clip")})
    torch.testing.assert_close(loaded.encode_images(pictures), tiny.encode_images(pictures))
    torch.testing.assert_close(loaded.encode_texts(CAPTIONS), tiny.encode_texts(CAPTIONS))
    assert backbone_weights({"kind": "open_clip", "name": str(tmp_path / "tiny-clip")})[1] is True


def test_a_weights_file_loads_under_a_registered_model_name(tiny, pictures, tmp_path):
    """`name` + `pretrained = FILE`: how a user points a built-in open_clip architecture at weights on disk. The
    tiny architecture is registered under a name first, as open_clip's own configs are."""
    from safetensors.torch import save_file

    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "memerobust-tiny-test.json").write_text(json.dumps(TINY))
    open_clip.add_model_config(tmp_path / "configs")
    weights = tmp_path / "weights.safetensors"
    save_file({k: v.contiguous() for k, v in tiny.model.state_dict().items()}, str(weights))
    spec = {"kind": "open_clip", "name": "memerobust-tiny-test", "pretrained": str(weights)}
    loaded = build_backbone(spec)
    torch.testing.assert_close(loaded.encode_images(pictures), tiny.encode_images(pictures))
    assert backbone_weights(spec) == (f"open_clip memerobust-tiny-test, weights file {weights}", True)
    assert backbone_weights({**spec, "pretrained": str(tmp_path / "missing.safetensors")})[1] is False


def test_a_pretrained_tag_that_is_not_cached_is_a_config_error_naming_the_way_offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="weights file"):
        build_backbone({"kind": "open_clip", "name": "memerobust-no-such-model", "pretrained": "openai"})


def test_weights_in_the_hugging_face_cache_count_as_present(tmp_path, monkeypatch):
    """A hub id is present when the local cache holds it (the layout `huggingface_hub` writes): nothing is fetched."""
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path))
    spec = {"kind": "hf-clip", "name": "openai/clip-vit-large-patch14"}
    assert backbone_weights(spec) == ("hf-clip openai/clip-vit-large-patch14", False)
    repo = tmp_path / "models--openai--clip-vit-large-patch14"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")
    assert backbone_weights(spec)[1] is True
    tag = {"kind": "open_clip", "name": "ViT-B-32", "pretrained": "laion2b_s34b_b79k"}
    assert backbone_weights(tag)[1] is False
    laion = tmp_path / "models--laion--CLIP-ViT-B-32-laion2B-s34B-b79K"
    (laion / "refs").mkdir(parents=True)
    (laion / "refs" / "main").write_text("def456")
    (laion / "snapshots" / "def456").mkdir(parents=True)
    (laion / "snapshots" / "def456" / "open_clip_model.safetensors").write_bytes(b"")
    assert backbone_weights(tag)[1] is True


def test_memerobust_list_names_each_card_with_its_weights_and_whether_they_are_here():
    listed = subprocess.run([sys.executable, "-m", "pytest_memerobust.cli", "list"], capture_output=True, text=True,
                            timeout=300)
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines() if line.startswith("  ")}
    assert "open_clip ViT-L-14 / openai" in lines["memeclip-vit-l-14"]
    assert "hf-blip2 Salesforce/blip2-itm-vit-g" in lines["memeblip2-vit-g"]
    assert "head: none shipped" in lines["memeclip-vit-b-32"]
    assert "demo weights" in lines["memeblip2-tda"] and "on this machine" in lines["memeblip2-tda"]
