"""Vision-language models as detectors: any transformers image-text-to-text model (Qwen2/2.5/3-VL, LLaVA,
Idefics3/SmolVLM, Gemma 3), prompted with the meme's picture and caption.

The class probabilities come from one forward pass, never from sampling: the next-token distribution after the
prompt, read at the first token of each class's label word ("No" / "Yes") and renormalised over them, so AUROC,
intervals and the gate work as for every other detector. The share of the next-token mass that falls on no label word
says how much the model wanted to answer something else ("I can't help with that"): below `abstain_below` the answer
is an abstention (`predict_with_abstentions`), which is neither class.

A card with `samples`/`temperature` (detectors/sampling.py) then draws k answers per meme from these probabilities
tempered by T, keyed by meme and condition; an abstention stays one in every sample.

A card names the model in `[backbone]` (`kind = "vlm"`, `name` = a hub id or a folder save_pretrained wrote) and the
prompt in `[params]`:

    [backbone]
    kind = "vlm"
    name = "HuggingFaceTB/SmolVLM-256M-Instruct"
    [params]
    prompt = 'The caption of this meme reads: "{caption}". Is the meme hateful? Answer {options}.'
    system = "You are a content moderator."      # optional
    label_words = ["No", "Yes"]                   # one per class, in the order of `classes`
    adapter = "/path/to/lora"                     # optional: a peft LoRA adapter folder
    abstain_below = 0.5                           # label-word mass below which the answer is an abstention
    picture_cache_mib = 1024                      # vision features kept per distinct picture (0: none)
    readout = "label_words"                       # or "probe": a linear head on the last hidden state

With `readout = "probe"` the answer is a linear probe on the last hidden state at the answer's position (as LMM-RGCL
reads its fine-tuned Qwen2-VL): `memerobust train` fits it on frozen features, and the card names the checkpoint.
A probe always answers: it never abstains.

Each distinct picture goes through the vision tower once: its features are kept (up to `picture_cache_mib`, filled in
the order pictures come and never evicted, since a run revisits its clean pictures in the same cyclic order that
defeats an LRU) and handed to the language model for every prompt and caption edit it is asked with.

White box (`picture_logits`, what perturb/image_attacks.py differentiates): where the image processor's
preprocessing is reproduced in torch (`ProcessorPixels`: the generic resize / centre crop / rescale / normalise of
LLaVA's CLIPImageProcessor and its kin, and Qwen2-VL's smart resize and patches), float 0-255 pictures go through it
to `pixel_values` with their gradient, and the answer's label-word log-probabilities, renormalised over the classes,
come from one forward pass (the picture cache bypassed). Other processors (Idefics3/SmolVLM's LANCZOS resizes, tiles
and padding) are declined with the reason in `no_gradient_reason`: the image attacks reach them by queries alone.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CheckpointError, ConfigError
from .cards import ModelCard, hub_load_options
from .registry import register_architecture

DEFAULT_PROMPT = 'The caption of this meme reads: "{caption}". Is the meme hateful? Answer {options}.'
DEFAULT_LABEL_WORDS = ("No", "Yes")
DEFAULT_ABSTAIN_BELOW = 0.5
PARAMS = ("prompt", "system", "label_words", "adapter", "abstain_below", "max_caption_chars", "picture_cache_mib",
          "readout")
READOUTS = ("label_words", "probe")
PROBE_FORMAT = "pytest-memerobust-vlm-probe/1"
DEFAULT_PICTURE_CACHE_MIB = 1024
MAX_CAPTION_CHARS = 2000  # a caption longer than this is cut: a prompt must not outgrow the model's context


@dataclass(frozen=True)
class Prompt:
    """How a meme is asked about: the instruction (with `{caption}`, and `{options}`: the label words joined by
    " or "), an optional system message, and one label word per class."""

    instruction: str = DEFAULT_PROMPT
    system: str | None = None
    label_words: tuple[str, ...] = DEFAULT_LABEL_WORDS

    def text(self, caption: str) -> str:
        options = " or ".join(self.label_words)
        return self.instruction.replace("{options}", options).replace("{caption}", caption)

    def conversation(self, caption: str) -> list[dict]:
        """One chat: the system message, then the picture and the instruction as the user's turn."""
        user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": self.text(caption)}]}
        if not self.system:
            return [user]
        return [{"role": "system", "content": [{"type": "text", "text": self.system}]}, user]


def card_prompt(card: ModelCard) -> tuple[Prompt, dict]:
    """The card's prompt and the rest of its `[params]`, each value checked: a wrong one names its key."""
    params = dict(card.network.params)
    where = f"model card {card.path or card.name!r}: [params]"
    unknown = set(params) - set(PARAMS)
    if unknown:
        from .sampling import misplaced

        raise ConfigError(f"{where} unknown key(s) {sorted(unknown)}{misplaced(unknown)}; a vlm card takes "
                          f"{', '.join(PARAMS)}")
    instruction = params.pop("prompt", DEFAULT_PROMPT)
    if not isinstance(instruction, str) or "{caption}" not in instruction:
        raise ConfigError(f"{where} prompt must be a string with {{caption}} where the caption goes, got "
                          f"{instruction!r}")
    system = params.pop("system", None)
    if system is not None and not isinstance(system, str):
        raise ConfigError(f"{where} system must be a string, got {system!r}")
    words = params.pop("label_words", list(DEFAULT_LABEL_WORDS))
    if (not isinstance(words, list) or len(words) != len(card.classes)
            or not all(isinstance(w, str) and w.strip() for w in words) or len(set(words)) != len(words)):
        raise ConfigError(f"{where} label_words must be {len(card.classes)} distinct words, one per class "
                          f"({', '.join(card.classes)}), got {words!r}")
    abstain = params.setdefault("abstain_below", DEFAULT_ABSTAIN_BELOW)
    if isinstance(abstain, bool) or not isinstance(abstain, (int, float)) or not 0 <= abstain < 1:
        raise ConfigError(f"{where} abstain_below must be a number in [0, 1), got {abstain!r}")
    cache = params.setdefault("picture_cache_mib", DEFAULT_PICTURE_CACHE_MIB)
    if isinstance(cache, bool) or not isinstance(cache, (int, float)) or cache < 0:
        raise ConfigError(f"{where} picture_cache_mib must be a number of MiB >= 0, got {cache!r}")
    if params.setdefault("readout", "label_words") not in READOUTS:
        raise ConfigError(f"{where} readout must be one of {', '.join(READOUTS)}, got {params['readout']!r}")
    adapter = params.get("adapter")
    if adapter is not None and not (isinstance(adapter, str) and Path(adapter).expanduser().is_dir()):
        raise ConfigError(f"{where} adapter {adapter!r}: no such folder (a peft adapter folder: "
                          f"adapter_config.json and its weights)")
    return Prompt(instruction, system, tuple(words)), params


def load_pretrained(card: ModelCard, model_class, what: str, device: str, adapt=None):
    """(processor, frozen model in eval mode on `device`) of the model `[backbone] name` names, a hub id or a folder;
    bf16 on a GPU. A model that is not here is said before torch and transformers load (seconds)."""
    name = str(card.network.backbone.get("name", ""))
    if not name:
        raise ConfigError(f"model card {card.path or card.name!r}: [backbone] name must name the model (a hub id or "
                          f"a folder)")
    options = hub_load_options(name, f"card {card.name!r}: {what}")
    import torch
    from transformers import AutoProcessor

    from .backbones import _from_pretrained

    processor = _from_pretrained(AutoProcessor, name, f"{what} processor", options)
    dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    model = _from_pretrained(model_class, name, what, {**options, "dtype": dtype})
    if adapt is not None:
        model = adapt(model)
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return processor, model


def label_token_ids(tokenizer, words) -> list[list[int]]:
    """Per label word, the ids of the tokens an answer may start it with: the word alone and after a space, each
    only where the tokenizer makes it one token's start. Two classes sharing a first token cannot be told apart."""
    ids = []
    for word in words:
        starts = []
        for variant in (word, " " + word):
            tokens = tokenizer.encode(variant, add_special_tokens=False)
            if tokens and tokens[0] not in starts:
                starts.append(tokens[0])
        ids.append(starts)
    first = [i for starts in ids for i in starts]
    if len(set(first)) != len(first):
        raise ConfigError(f"label words {list(words)} start with the same token for this tokenizer: choose words "
                          f"whose first tokens differ")
    return ids


class VlmDetector:
    """A prompted vision-language model as a black-box detector of the card's classes."""

    takes_pictures = "tensor"
    modalities = ("image", "text")

    def __init__(self, card: ModelCard, device: str = "cpu", checkpoint=None):
        self.card, self.classes, self.device = card, tuple(card.classes), device
        self.prompt, params = card_prompt(card)
        self.readout = params["readout"]
        self.abstain_below = float(params["abstain_below"])
        self.max_caption_chars = int(params.get("max_caption_chars", MAX_CAPTION_CHARS))
        from transformers import AutoModelForImageTextToText

        adapter = params.get("adapter")
        self.processor, self.model = load_pretrained(
            card, AutoModelForImageTextToText, "vision-language model", device,
            adapt=(lambda model: _with_adapter(model, str(adapter))) if adapter else None)
        self.tokenizer = getattr(self.processor, "tokenizer", self.processor)
        self.tokenizer.padding_side = "left"  # every prompt ends at the last position, where its answer starts
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.label_ids = label_token_ids(self.tokenizer, self.prompt.label_words)
        self.pictures = PictureFeatures(self.model, int(float(params["picture_cache_mib"]) * 2**20))
        self.pixels = ProcessorPixels(getattr(self.processor, "image_processor", None))
        self.no_gradient_reason = self.pixels.declined  # None where picture_logits differentiates the picture
        if self.readout == "probe":
            import torch

            hidden = self.model.config.get_text_config().hidden_size
            self.head_module = torch.nn.Linear(hidden, len(self.classes)).to(device).eval()
            if checkpoint is not None:
                self.load_probe(checkpoint)

    # --- the linear probe (readout = "probe") ---------------------------------------------------------------------

    def load_probe(self, path) -> None:
        from .checkpoints import check_weights, load_state_dict

        state, metadata = load_state_dict(path)
        if metadata.get("format", PROBE_FORMAT) != PROBE_FORMAT:
            raise CheckpointError(f"{path}: a {metadata.get('format')!r} checkpoint, not a probe of a "
                                  f"vision-language model ({PROBE_FORMAT})")
        expected = {f"head.{k}": v for k, v in self.head_module.state_dict().items()}
        wrong = sorted(k for k in set(state) | set(expected)
                       if k not in state or k not in expected or state[k].shape != expected[k].shape)
        if wrong:
            raise CheckpointError(f"{path} does not fit this model's probe ({len(self.classes)} classes on a "
                                  f"{expected['head.weight'].shape[1]}-wide hidden state): {wrong[:4]}")
        check_weights(state, expected, str(path))
        self.head_module.load_state_dict({k.removeprefix("head."): v for k, v in state.items()})

    def encode_pairs(self, images, texts):
        """The last layer's hidden state at the answer's position [N, hidden] (float32): what the probe reads."""
        return self._forward(images, texts, hidden=True).hidden_states[-1][:, -1, :].float()

    def logits(self, pair_features, _unused=None):
        return self.head_module(pair_features)

    def shipped_state(self) -> dict:
        return {f"head.{k}": v for k, v in self.head_module.state_dict().items()}

    def checkpoint_metadata(self) -> dict:
        return {"format": PROBE_FORMAT, "backbone": str(self.card.network.backbone.get("name")),
                "prompt": self.prompt.instruction}

    def with_prompt(self, prompt: Prompt) -> "VlmDetector":
        """This model asked with another prompt (the prompt-invariance view): the weights and the pictures' vision
        features are shared, not copied."""
        import copy

        view = copy.copy(self)
        view.prompt = prompt
        view.label_ids = label_token_ids(self.tokenizer, prompt.label_words)
        return view

    def prompts(self, texts) -> list[str]:
        """The chat-formatted prompt of each caption, ending where the model's answer starts."""
        return [self.processor.apply_chat_template(self.prompt.conversation(t[: self.max_caption_chars]),
                                                   add_generation_prompt=True, tokenize=False) for t in texts]

    def next_token_logits(self, images, texts):
        """The logits of the token after each prompt [N, vocab], in one forward pass over the batch."""
        return self._forward(images, texts).logits[:, -1, :].float()

    def _forward(self, images, texts, hidden: bool = False):
        import torch

        batch = self._inputs(images, texts)
        with torch.inference_mode():
            return self._answer(self.pictures.encoded(images, batch), hidden)

    def _inputs(self, images, texts) -> dict:
        """The processor's batch of pictures and prompts, on the model's device (floats in its dtype)."""
        import torch

        batch = self.processor(images=[[picture] for picture in images], text=self.prompts(texts), padding=True,
                               return_tensors="pt")
        return {k: (v.to(self.device, self.model.dtype) if torch.is_floating_point(v) else v.to(self.device))
                for k, v in batch.items()}

    def _answer(self, batch: dict, hidden: bool = False):
        """The model's output at the answer's position (and the hidden states, if asked) for a processor's batch."""
        if hidden:
            batch = {**batch, "output_hidden_states": True}
        try:
            return self.model(**batch, logits_to_keep=1)
        except TypeError:  # an architecture without logits_to_keep computes every position
            return self.model(**batch)

    def class_log_proba(self, next_token_logits):
        """(log class probabilities [N, C], log label-word mass [N]) of next-token logits: per class the log of
        its label words' summed probability, renormalised over the classes."""
        import torch

        log_p = torch.log_softmax(next_token_logits.float(), dim=-1)
        per_class = torch.stack([torch.logsumexp(log_p[:, ids], dim=1) for ids in self.label_ids], dim=1)
        log_mass = torch.logsumexp(per_class, dim=1)
        return per_class - log_mass[:, None], log_mass

    def picture_logits(self, values, caption: str):
        """Class logits [N, C] of float 0-255 pictures `values` [N, 3, H, W] (one size) asked with `caption`,
        differentiable with respect to `values`: the processor's preprocessing reproduced in torch
        (ProcessorPixels), one forward pass, the label words' log-probabilities renormalised (the probe's logits
        for readout = "probe"). A processor that is not reproduced raises NoGradient naming why."""
        import torch

        if self.no_gradient_reason:
            from ..perturb.image_attacks import NoGradient

            raise NoGradient(self.no_gradient_reason)
        values = values.to(self.device).float()
        rounded = values.detach().round().clamp(0, 255).to(torch.uint8)
        batch = self._inputs(list(rounded), [caption] * len(values))  # the prompt's tokens for pictures this size
        pixels = self.pixels(values)
        for key, tensor in pixels.items():
            if tuple(batch[key].shape) != tuple(tensor.shape):
                raise RuntimeError(f"the torch preprocessing of {self.pixels.name} gave {key} of shape "
                                   f"{tuple(tensor.shape)}, the processor {tuple(batch[key].shape)}")
            batch[key] = tensor.to(self.device, batch[key].dtype)
        output = self._answer(batch, hidden=self.readout == "probe")
        if self.readout == "probe":
            return self.logits(output.hidden_states[-1][:, -1, :].float())
        return self.class_log_proba(output.logits[:, -1, :])[0]

    def predict_with_abstentions(self, images, texts) -> tuple[np.ndarray, np.ndarray]:
        """(class probabilities [N, C], abstained [N]): the label words' next-token probabilities renormalised, and
        whether their mass fell below `abstain_below` (the model meant to say something else)."""
        import torch

        if self.readout == "probe":
            with torch.inference_mode():
                proba = torch.softmax(self.logits(self.encode_pairs(images, texts)), dim=-1).cpu().numpy()
            return proba, np.zeros(len(proba), dtype=bool)
        log_proba, log_mass = self.class_log_proba(self.next_token_logits(images, texts))
        return log_proba.exp().cpu().numpy(), (log_mass.exp() < self.abstain_below).cpu().numpy()

    def predict_proba(self, images, texts) -> np.ndarray:
        return self.predict_with_abstentions(images, texts)[0]


class ProcessorPixels:
    """A transformers image processor's preprocessing reproduced in torch on float 0-255 pictures [N, 3, H, W], so
    `pixel_values` keep the pictures' gradient. Every size, mean, std and factor is read off the processor, and its
    own crop, rescale-and-normalise and patchify methods are called; only the resize is ours: the processor resizes
    uint8, which torch does on a CPU in two passes (columns, then rows), each clamped to 0-255 and rounded, and on
    a GPU (or for bilinear without AVX2) as float in one pass, clamped and rounded (torchvision's resize_image). Here
    the same passes are clamped, not rounded (the gradient), which keeps `pixel_values` within a pixel level of the
    processor's own (measured on a CPU, per channel: at most 0.67-0.93 levels on demo memes and a 300 x 420 picture,
    LLaVA's and Qwen2-VL's processors, against 5-13 levels for the processor run on float values).

    Reproduced: the generic torchvision pipeline (resize to a shortest edge or a fixed size, centre crop, rescale,
    normalise: CLIPImageProcessor, as LLaVA uses, and its kin) and Qwen2-VL's (smart resize to multiples of
    patch x merge, rescale, normalise, patches), with a bicubic or bilinear resample. Declined, with the reason in
    `declined`: a processor with its own pipeline (Idefics3/SmolVLM: LANCZOS resizes to the longest edge then to
    tiles, splitting and padding), a PIL backend, or another resample."""

    RESAMPLES = {2: "bilinear", 3: "bicubic"}  # PIL's numbers, as processors store them

    def __init__(self, image_processor):
        self.processor = image_processor
        self.name = type(image_processor).__name__
        self.kind, self.declined = self._kind(image_processor)

    def _kind(self, ip) -> tuple[str | None, str | None]:
        try:
            import transformers.image_processing_backends  # noqa: F401
        except ImportError as err:  # an older transformers: its processors are not the ones checked here
            return None, f"this transformers has no torchvision image processors to reproduce ({err})"
        # the processor's own bases, by name: a module imported twice (a reload, pytest's in-process runs) makes a
        # second class of the same name that isinstance would not recognise
        bases = {c.__name__: c for c in type(ip).__mro__}
        backend, qwen2_vl = bases.get("TorchvisionBackend"), bases.get("Qwen2VLImageProcessor")
        why = f"{self.name}'s preprocessing is not reproduced in torch"
        if backend is None:
            return None, f"{why} (not a torchvision-backend image processor); attack it with 'square'"
        resample = getattr(ip, "resample", None)
        if getattr(ip, "do_resize", False) and resample not in self.RESAMPLES:
            from transformers.image_utils import PILImageResampling

            named = PILImageResampling(resample).name if resample in set(PILImageResampling) else resample
            return None, (f"{why} (resample {named}: only BICUBIC and BILINEAR are "
                          f"modelled); the image attacks reach it by queries alone ('square', 'strongest_image')")
        cls = type(ip)
        if qwen2_vl is not None and cls._preprocess is qwen2_vl._preprocess and cls.resize is qwen2_vl.resize:
            return "qwen2_vl", None
        size = ip.size
        generic = (cls._preprocess is backend._preprocess and cls.resize is backend.resize
                   and not getattr(ip, "do_pad", False))
        if generic and (not ip.do_resize or (size.shortest_edge and not size.longest_edge)
                        or (size.height and size.width)):
            return "generic", None
        return None, (f"{why}: it has a pipeline of its own (tiles, padding, LANCZOS or a size rule other than a "
                      f"shortest edge or a fixed size, as Idefics3/SmolVLM); the image attacks reach it by queries "
                      f"alone ('square', 'strongest_image')")

    def resize(self, values, height: int, width: int):
        """The processor's uint8 resize of float values, clamped as its passes are (see the class)."""
        import torch.nn.functional as F

        from torchvision.transforms.v2.functional import InterpolationMode
        from torchvision.transforms.v2.functional._geometry import _do_native_uint8_resize_on_cpu

        mode = self.RESAMPLES[self.processor.resample]
        if (height, width) == tuple(values.shape[-2:]):
            return values
        two_passes = values.device.type == "cpu" and _do_native_uint8_resize_on_cpu(InterpolationMode(mode))
        if not two_passes:  # torchvision resizes uint8 as float here, in one pass
            return F.interpolate(values, size=(height, width), mode=mode, antialias=True).clamp(0, 255)
        columns = F.interpolate(values, size=(values.shape[-2], width), mode=mode, antialias=True).clamp(0, 255)
        return F.interpolate(columns, size=(height, width), mode=mode, antialias=True).clamp(0, 255)

    def normalised(self, values):
        ip = self.processor
        return ip.rescale_and_normalize(values, ip.do_rescale, ip.rescale_factor, ip.do_normalize,
                                        tuple(ip.image_mean), tuple(ip.image_std))

    def __call__(self, values) -> dict:
        """The processor's tensors for pictures `values` [N, 3, H, W] (float 0-255): `pixel_values` (and
        Qwen2-VL's `image_grid_thw`)."""
        import torch

        if self.declined:
            from ..perturb.image_attacks import NoGradient

            raise NoGradient(self.declined)
        ip, (height, width) = self.processor, tuple(values.shape[-2:])
        if self.kind == "qwen2_vl":
            from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

            if ip.do_resize:
                height, width = smart_resize(height, width, factor=ip.patch_size * ip.merge_size,
                                             min_pixels=ip.size.shortest_edge, max_pixels=ip.size.longest_edge)
                values = self.resize(values, height, width)
            patches, grid_h, grid_w = ip.patchify(self.normalised(values), patch_size=ip.patch_size,
                                                  merge_size=ip.merge_size, temporal_patch_size=ip.temporal_patch_size)
            grid = torch.tensor([[1, grid_h, grid_w]] * len(values), dtype=torch.long, device=values.device)
            return {"pixel_values": patches.reshape(-1, patches.shape[-1]), "image_grid_thw": grid}
        if ip.do_resize:
            if ip.size.shortest_edge:
                from transformers.image_transforms import get_resize_output_image_size

                height, width = get_resize_output_image_size(values[0], size=ip.size.shortest_edge,
                                                             default_to_square=False,
                                                             input_data_format="channels_first")
            else:
                height, width = ip.size.height, ip.size.width
            values = self.resize(values, height, width)
        if getattr(ip, "do_center_crop", False):
            values = ip.center_crop(values, ip.crop_size)
        return {"pixel_values": self.normalised(values)}


_TEXT_INPUTS = frozenset({"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"})
_REUSED_INPUTS = frozenset({"pixel_values", "pixel_attention_mask"})  # what the vision tower alone reads


def picture_digest(picture) -> bytes:
    """What identifies a picture to the vision tower: its values, shape and dtype."""
    import hashlib

    import torch

    values = picture.detach().contiguous().cpu() if isinstance(picture, torch.Tensor) else np.ascontiguousarray(picture)
    digest = hashlib.blake2b(str((tuple(values.shape), str(values.dtype))).encode(), digest_size=16)
    digest.update(values.numpy().tobytes() if isinstance(values, torch.Tensor) else values.tobytes())
    return digest.digest()


class PictureFeatures:
    """The vision tower's output per distinct picture, so a picture asked with many prompts and caption edits is
    encoded once. Works where the architecture takes precomputed features (`get_image_features` and the forward's
    `mm_encoder_outputs`: Qwen2-VL, LLaVA, Idefics3 in transformers 5); elsewhere every batch is encoded in full."""

    def __init__(self, model, limit_bytes: int):
        import inspect

        self.model, self.limit_bytes, self.held_bytes = model, limit_bytes, 0
        self.features: dict[bytes, object] = {}
        self.pictures_encoded = 0  # how many pictures went through the vision tower
        self.supported = (limit_bytes > 0 and hasattr(model, "get_image_features")
                          and "mm_encoder_outputs" in inspect.signature(model.forward).parameters)

    def encoded(self, images, batch: dict) -> dict:
        """`batch` with the pictures' vision features in place of their pixels: those held are reused, and a batch
        with any picture not held is encoded whole (one vision forward; batches are all-new or all-held in a run)."""
        if not self.supported:
            self.pictures_encoded += len(images)
            return batch
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        keys = [picture_digest(p) for p in images]
        if all(k in self.features for k in keys):
            per_picture = [self.features[k] for k in keys]
        else:
            vision = {k: v for k, v in batch.items() if k not in _TEXT_INPUTS}
            per_picture = list(self.model.get_image_features(**vision, return_dict=True).pooler_output)
            if len(per_picture) != len(keys):  # an architecture that splits a picture into several: not reused
                self.supported = False
                self.pictures_encoded += len(images)
                return batch
            self.pictures_encoded += len(images)
            for key, features in zip(keys, per_picture):
                size = features.numel() * features.element_size()
                if key not in self.features and self.held_bytes + size <= self.limit_bytes:
                    self.features[key], self.held_bytes = features, self.held_bytes + size
        text = {k: v for k, v in batch.items() if k not in _REUSED_INPUTS}
        return {**text, "mm_encoder_outputs": {"image": BaseModelOutputWithPooling(pooler_output=per_picture)}}


def _with_adapter(model, folder: str):
    """`model` with the peft LoRA adapter in `folder` merged in (inference only, so merging costs nothing later)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise ConfigError(f"adapter {folder!r} needs peft: pip install peft") from None
    return PeftModel.from_pretrained(model, folder).merge_and_unload()


@register_architecture("vlm")
def build_vlm(card: ModelCard, checkpoint, device: str) -> VlmDetector:
    if checkpoint is not None and card.network.params.get("readout") != "probe":
        raise ConfigError(f"model card {card.name!r}: a vision-language model takes its weights from [backbone] "
                          f"name (and a LoRA from [params] adapter), not a checkpoint file ({checkpoint}); only a "
                          f"probe (readout = \"probe\") has one")
    if card.network.backbone.get("kind") != "vlm":
        raise ConfigError(f"model card {card.name!r}: architecture 'vlm' needs [backbone] kind = \"vlm\"")
    return VlmDetector(card, device, checkpoint)
