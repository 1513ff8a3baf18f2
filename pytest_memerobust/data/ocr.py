"""Reading a meme's caption off its picture, for datasets that give none (8.5% of FigMemes has no text) and for runs
that evaluate image perturbations end to end (picture -> OCR -> caption -> detector), as a deployed moderation
pipeline that OCRs uploads would see them.

The backend is `rapidocr-onnxruntime` (`pip install "pytest-memerobust[ocr]"`): it ships its ONNX detection and
recognition models inside the wheel, so it runs offline. Results are cached by picture content, in memory and as
small JSON files under the cache directory, written atomically.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import numpy as np

from ..atomic import atomic_write_text
from ..determinism import RESULT_THREADS, fixed_threads
from ..errors import BackendMissing
from .digests import input_digest
from .meme import Dataset
from .text_boxes import TEXT_BOXES, Detection, TextBox, caption_blocks, joined_text, reading_order
from .words import split_run_together

OCR_BACKENDS = ("rapidocr",)
SCENE_TEXT = "scene_text"  # Meme.meta key: the text OCR read off the picture that is not its caption
MIN_SIDE = 384  # smaller pictures are upscaled first: the detector misses text only a few pixels high
# A cached reading is used only when written by this version of the reading: 2 = lines grouped by overlap
# (text_boxes.reading_order) and run-together words split (words.py); 3 = split by word frequencies; 4 = panels side
# by side read one by one (`panel_cuts`), boxes cut X-Y (text_boxes.text_regions); 5 = scene text told from the
# caption (`scene_text`); entries of another version are read again.
CACHE_VERSION = 6
# Panels side by side: a plain rule runs top to bottom between them, a band of columns that vary less than
# PANEL_RULE_STD (in 0-255 levels, any channel) from the top of the picture to its bottom, at least PANEL_RULE_WIDTH
# pixels wide, with at least PANEL_SHARE of the picture's width on either side (no panel narrower; the picture's own
# margins are no rules), and panels that are pictures: at most PANEL_PLAIN of each panel's columns plain too (a band of
# white between the words of a note written on a white ground is no rule). No caption crosses such a band: text drawn
# over both panels leaves none.
PANEL_RULE_STD = 6.0
PANEL_RULE_WIDTH = 3
PANEL_SHARE = 0.2
PANEL_PLAIN = 0.1
# Caption and scene text. A meme's caption is set in white strokes ringed by a black outline; a T-shirt's, a sign's or
# a watermark's text is not. A box is set in the caption's style when at least CAPTION_WHITE of it (grown by 2 px) is
# neutral white (every channel at least 225, within 30 of each other), its white is letters (at most CAPTION_GROUND of
# it in shapes wider than twice the box's height: dark text on a white sign has white ground) and at least
# CAPTION_RINGED of the pixels within 2 px around those letters are black (every channel at most 70). Where a picture
# has boxes in the caption's style, its other boxes are scene text, but for those in a caption block with some in the
# style and as tall; where it has none (black text on a white band, a screenshot), all its text is caption.
CAPTION_WHITE = 0.05
CAPTION_GROUND = 0.3
CAPTION_RINGED = 0.5


class OcrBackend(Protocol):
    """Reads a picture (a tensor 3 x H x W or an array H x W x 3). `read_boxes` is optional: a backend without it
    serves captions, not the typographic edits that need to know where the text sits."""

    name: str

    def read(self, image) -> str: ...


class RapidOcr:
    """rapidocr-onnxruntime: text boxes in reading order (text_boxes.reading_order), the words it ran together split
    again (words.py), joined by single spaces."""

    name = "rapidocr"

    def __init__(self, cache_dir: Path | None = None, use_cuda: bool = False):
        """`use_cuda`: run detection, orientation and recognition on onnxruntime's CUDA provider (needs
        onnxruntime-gpu; see `gpu_available`)."""
        try:
            from rapidocr_onnxruntime import RapidOCR
        except ImportError:
            raise BackendMissing("OCR needs rapidocr-onnxruntime: pip install \"pytest-memerobust[ocr]\"") from None
        self.use_cuda = use_cuda
        cuda = {"det_use_cuda": True, "cls_use_cuda": True, "rec_use_cuda": True} if use_cuda else {}
        # readings that do not depend on the machine's cores (determinism.py); rapidocr's default is one thread per core
        self._engine = RapidOCR(intra_op_num_threads=RESULT_THREADS, inter_op_num_threads=RESULT_THREADS, **cuda)
        self.cache_dir = Path(cache_dir) / "ocr" if cache_dir is not None else None
        self._memory: dict[str, tuple[TextBox, ...]] = {}
        self.read_elsewhere = None  # `read(pictures, here)` that reads many pictures at once (read_all), or None

    def read(self, image) -> str:
        """The text on a picture, cached by its content."""
        return joined_text(self.read_boxes(image))

    def read_boxes(self, image) -> tuple[TextBox, ...]:
        """The text boxes on a picture, in reading order and in its own pixels, cached by its content."""
        key = input_digest(image)
        boxes = self._cached(key)
        return boxes if boxes is not None else self._keep(key, self.reading(image))

    def read_all(self, images: list) -> list[str]:
        """The text on each picture (`read`), those not in the cache read by `read_elsewhere(pictures, here)` when
        it is set (run/session.py: the worker pool's `ocr_readings`), each distinct picture once."""
        if self.read_elsewhere is None:
            return [self.read(image) for image in images]
        keys = [input_digest(image) for image in images]
        unread = {key: image for key, image in zip(keys, images) if self._cached(key) is None}
        for key, boxes in zip(unread, self.read_elsewhere(list(unread.values()), self.reading)):
            self._keep(key, boxes)
        return [joined_text(self._memory[key]) for key in keys]

    def reading(self, image) -> tuple[TextBox, ...]:
        """The text boxes on a picture, read now (uncached): panels side by side (`panel_cuts`) each read on its own,
        so that the reader never runs a line of one into the next panel's, in reading order, run-together words
        split."""
        image = _as_array(image)
        edges = [0, *panel_cuts(image), image.shape[1]]
        if len(edges) == 2:
            boxes = [split_run_together(d) for d in self.detections(image)]
        else:
            boxes = [split_run_together(d).shifted(left, k) for k, (left, right) in enumerate(zip(edges, edges[1:]))
                     for d in self.detections(np.ascontiguousarray(image[:, left:right]))]
        return reading_order(scene_text(image, boxes))

    def _entry_path(self, key: str) -> Path | None:
        return self.cache_dir / key[:2] / f"{key}.json" if self.cache_dir is not None else None

    def _cached(self, key: str) -> tuple[TextBox, ...] | None:
        """A picture's boxes from memory, else from its cache file (then held in memory); None when unread."""
        if key not in self._memory:
            boxes = _read_entry(self._entry_path(key), self.name)
            if boxes is None:
                return None
            self._memory[key] = boxes
        return self._memory[key]

    def _keep(self, key: str, boxes: tuple[TextBox, ...]) -> tuple[TextBox, ...]:
        """A reading held in memory and written to the cache, once."""
        path = self._entry_path(key)
        if path is not None:
            entry = {"backend": self.name, "version": CACHE_VERSION, "text": joined_text(boxes),
                     "boxes": [b.to_json() for b in boxes]}
            try:
                atomic_write_text(path, json.dumps(entry))
            except OSError:  # a read-only cache costs time, not the run
                pass
        self._memory[key] = boxes
        return boxes

    def detections(self, image) -> list[Detection]:
        """What the reader finds on a picture, uncached, in its own order, with each character's place."""
        image = _as_array(image)
        upscaled = _upscaled(image)
        with fixed_threads():  # OpenCV, which reads and crops for the models (determinism.py)
            found, _ = self._engine(upscaled, return_word_box=True)
        back = image.shape[0] / upscaled.shape[0]
        return [_detection(item, back) for item in found or [] if str(item[1]).strip()]


def _detection(item, back: float) -> Detection:
    """A Detection from one of rapidocr's results, scaled by `back`. With `return_word_box` rapidocr 1.4.4 adds one
    box per character of Latin text (its CTC column, as wide as an average character) and those characters."""
    corners, text, score = item[:3]
    box = TextBox(tuple((float(x), float(y)) for x, y in corners), str(text), float(score)).scaled(back)
    char_boxes, chars = (item[3], item[4]) if len(item) >= 5 else ((), ())
    if not char_boxes or "".join(chars) != box.text or len(char_boxes) != len(chars):
        return Detection(replace(box, text=box.text.strip()))
    (x0, y0), (x1, y1) = box.corners[0], box.corners[1]
    length = max(1e-6, ((x1 - x0) ** 2 + (y1 - y0) ** 2) ** 0.5)
    ux, uy = (x1 - x0) / length, (y1 - y0) / length  # along the box's top edge

    def along(cell) -> float:
        cx, cy = (sum(p[0] for p in cell) / len(cell) * back, sum(p[1] for p in cell) / len(cell) * back)
        return (cx - x0) * ux + (cy - y0) * uy

    return Detection(box, tuple(along(cell) for cell in char_boxes))


def _read_entry(path: Path | None, backend: str) -> tuple[TextBox, ...] | None:
    """A cached reading, or None when absent, damaged or from another version of the reading (CACHE_VERSION; then
    the picture is read again)."""
    if path is None or not path.is_file():
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if not (isinstance(entry, dict) and entry.get("backend") == backend and isinstance(entry.get("boxes"), list)
                and entry.get("version") == CACHE_VERSION):
            return None
        return tuple(TextBox.from_json(box) for box in entry["boxes"])
    except (OSError, ValueError):
        return None


def _as_array(image) -> np.ndarray:
    """A picture as the OCR engine reads it: an H x W x 3 uint8 array (a tensor converted here, at the edge)."""
    if not isinstance(image, np.ndarray):
        from .pictures import to_array

        image = to_array(image)
    return np.asarray(image, dtype=np.uint8)


def panel_cuts(image: np.ndarray) -> list[int]:
    """The x of the middle of each plain rule between panels side by side (PANEL_RULE_STD above); [] for one panel."""
    h, w = image.shape[:2]
    if h < 2 or w < 2 * PANEL_RULE_WIDTH / PANEL_SHARE:
        return []
    spread = image.astype(np.float32).std(axis=0)  # per column (and channel): how much it varies top to bottom
    plain = (spread.max(axis=-1) if spread.ndim == 2 else spread) < PANEL_RULE_STD
    cuts, x = [], 0
    while x < w:
        if not plain[x]:
            x += 1
            continue
        start = x
        while x < w and plain[x]:
            x += 1
        if x - start >= PANEL_RULE_WIDTH and start >= PANEL_SHARE * w and x <= (1 - PANEL_SHARE) * w and (
                not cuts or start - cuts[-1][1] >= PANEL_SHARE * w):
            cuts.append((start, x))
    edges = [0, *(edge for band in cuts for edge in band), w]
    panels = [plain[left:right] for left, right in zip(edges[::2], edges[1::2])]
    if any(panel.mean() > PANEL_PLAIN for panel in panels):  # a plain ground with text on it, not two pictures
        return []
    return [(start + end) // 2 for start, end in cuts]


def caption_styled(image: np.ndarray, box: TextBox) -> bool:
    """Whether a box's text is set as a meme's caption is: white letters ringed by a black outline (CAPTION_WHITE
    above)."""
    import cv2  # rapidocr's

    left, top, right, bottom = box.bounds
    h, w = image.shape[:2]
    crop = image[max(0, top - 2) : min(h, bottom + 2), max(0, left - 2) : min(w, right + 2)].astype(np.int16)
    if crop.size == 0:
        return False
    white = (crop.min(axis=2) >= 225) & (crop.max(axis=2) - crop.min(axis=2) <= 30)
    if white.mean() < CAPTION_WHITE:
        return False
    count, labels, stats, _ = cv2.connectedComponentsWithStats(white.astype(np.uint8), connectivity=8)
    ground = np.zeros(count, bool)
    ground[1:] = stats[1:, cv2.CC_STAT_WIDTH] > 2 * box.height  # white wider than letters: a sign's, a band's
    if stats[1:, cv2.CC_STAT_AREA][ground[1:]].sum() > CAPTION_GROUND * white.sum():
        return False
    letters = white & ~ground[labels]
    ring = cv2.dilate(letters.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool) & ~letters
    return bool(ring.any()) and float((crop.max(axis=2) <= 70)[ring].mean()) >= CAPTION_RINGED


def scene_text(image: np.ndarray, boxes: list[TextBox]) -> list[TextBox]:
    """The boxes, those not in the caption's style marked as scene text (TextBox.scene) where some are in it; a box
    in a caption block (text_boxes.caption_blocks) with boxes in the caption's style, and as tall as their median or
    taller, is caption (a short word over white ground shows too little of its outline to tell; scene text beside a
    caption is smaller)."""
    styled = {id(box) for box in boxes if caption_styled(image, box)}
    if not styled or len(styled) == len(boxes):
        return boxes
    in_caption = set(styled)
    for block in caption_blocks(boxes):
        heights = sorted(box.height for line in block for box in line if id(box) in styled)
        if heights:  # as tall as the block's caption lines, or taller: its own
            in_caption |= {id(box) for line in block for box in line if box.height >= heights[len(heights) // 2]}
    return [box if id(box) in in_caption else replace(box, scene=True) for box in boxes]


def _upscaled(image: np.ndarray) -> np.ndarray:
    h, w = image.shape[:2]
    scale = MIN_SIDE / min(h, w)
    if scale <= 1:
        return image
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((round(w * scale), round(h * scale)), Image.BICUBIC))


def gpu_available() -> bool:
    """Whether onnxruntime can run the OCR models on a GPU (onnxruntime-gpu with CUDA present)."""
    try:
        import onnxruntime
    except ImportError:
        return False
    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def ocr_backend(name: str, cache_dir: Path | None = None, device: str = "cpu") -> OcrBackend:
    """The backend by name; on a CUDA `device` it runs there when onnxruntime can (else on the CPU, as it must)."""
    if name != "rapidocr":
        raise ValueError(f"unknown OCR backend {name!r}; known: {', '.join(OCR_BACKENDS)}")
    return RapidOcr(cache_dir, use_cuda=str(device).startswith("cuda") and gpu_available())


OCR_PREFETCH = 64  # memes whose missing captions fill_missing_captions reads at once


def read_texts(ocr: OcrBackend, pictures: list) -> list[str]:
    """The text on each picture: all at once where the backend can (`read_all`: on the worker pool when the run
    has one), else one by one."""
    read_all = getattr(ocr, "read_all", None)
    return read_all(list(pictures)) if callable(read_all) else [ocr.read(picture) for picture in pictures]


def fill_missing_captions(dataset: Dataset, ocr: OcrBackend) -> Dataset:
    """The dataset with every empty caption read off its picture; those memes get meta["caption_source"] = the
    backend's name, and its text boxes (meta[TEXT_BOXES]) when the backend gives them, with the scene text kept out
    of the caption noted (meta[SCENE_TEXT]). A backend that reads many
    pictures at once (`read_all`: on the run's worker pool) reads them OCR_PREFETCH at a time first."""
    memes, read_all = [], getattr(ocr, "read_all", None)
    for k, meme in enumerate(dataset.memes):
        if callable(read_all) and k % OCR_PREFETCH == 0:  # a bounded number of decoded pictures at a time
            read_all([m.image for m in dataset.memes[k : k + OCR_PREFETCH] if not m.text.strip()])
        if meme.text.strip():
            memes.append(meme)
            continue
        meta = {**meme.meta, "caption_source": ocr.name}
        if hasattr(ocr, "read_boxes"):
            boxes = ocr.read_boxes(meme.image)
            text, meta[TEXT_BOXES] = joined_text(boxes), boxes
            if any(box.scene for box in boxes):
                meta[SCENE_TEXT] = joined_text(boxes, scene=True)
        else:
            text = ocr.read(meme.image)
        memes.append(replace(meme, text=text, meta=meta))
    return replace(dataset, memes=memes)
