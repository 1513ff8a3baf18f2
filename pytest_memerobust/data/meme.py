"""The one record every loader produces and every later stage reads."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import DataError


# The most pixels a picture may have: 8000 x 8000, above the 48-50 megapixels of the largest phone cameras and below
# PIL's decompression-bomb warning (89.5 megapixels). Decoded, such a picture is 192 MB, and a perturbed copy several
# times that (a 144-megapixel picture asked 6.9 GB in every case). Loaders refuse larger ones from the header, before
# any case; a conftest.py may raise it for a dataset of larger pictures (it is read at each check).
MAX_PICTURE_PIXELS = 64_000_000


def load_rgb(path: Path) -> np.ndarray:
    """Read an image file as an RGB uint8 array, naming the file when it is missing, unreadable or too large to
    decode (more than MAX_PICTURE_PIXELS); 16-bit pictures are scaled to 8 bits, not clipped."""
    from PIL import Image, UnidentifiedImageError

    try:
        with _opened(path) as img:
            _refuse_large(path, img.size)
            return _rgb8(img)
    except FileNotFoundError:
        raise DataError(f"image file not found: {path}") from None
    except Image.DecompressionBombError as exc:  # over twice PIL's limit: PIL refuses before the size is known
        raise DataError(f"image {path} is too large to decode: {exc}") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as exc:
        raise DataError(f"unreadable image {path}: {exc}") from None


def check_picture_size(path: Path) -> None:
    """Refuse a picture whose header declares more than MAX_PICTURE_PIXELS, reading only the header: for decoders
    (nvjpeg) that would otherwise allocate it. Other problems are left to the decoder."""
    from PIL import Image

    try:
        with _opened(path) as img:
            size = img.size
    except Image.DecompressionBombError as exc:
        raise DataError(f"image {path} is too large to decode: {exc}") from None
    except Exception:  # noqa: BLE001  (unreadable here: the decoder, then PIL, name the problem)
        return
    _refuse_large(path, size)


def check_picture_file(path: Path) -> None:
    """Refuse, before any case and mostly without decoding, a picture file the decoder would refuse: one PIL cannot
    identify (a text file named .png), one of more than MAX_PICTURE_PIXELS (from its header), a PNG cut short or
    damaged (its chunks' lengths and CRCs, PIL's verify), a JPEG cut short (it must end with the end-of-image marker,
    or else decode at 1/8 scale). Other formats are decoded. Measured on the 800 demo memes as files (96 px PNG,
    512 px JPEG): 50-130 us per picture, where a full decode takes 0.3-7 ms. A PNG whose compressed pixels alone
    are damaged (CRCs intact) still passes: its decode names it."""
    from PIL import Image, UnidentifiedImageError

    try:
        with _opened(path) as img:
            _refuse_large(path, img.size)
            if img.format == "PNG":
                img.verify()
            elif img.format not in ("JPEG", "MPO") or not _ends_with_jpeg_eoi(path):
                if img.format in ("JPEG", "MPO"):
                    img.draft("RGB", (max(1, img.size[0] // 8), max(1, img.size[1] // 8)))
                img.load()
    except DataError:
        raise
    except Image.DecompressionBombError as exc:  # over twice PIL's limit: PIL refuses before the size is known
        raise DataError(f"image {path} is too large to decode: {exc}") from None
    except UnidentifiedImageError:
        raise DataError(f"unreadable image {path}: not a picture (no image format recognises its contents)") from None
    except Exception as exc:  # noqa: BLE001  (whatever a damaged file makes PIL raise, it is that file's fault)
        detail = " ".join(str(exc).split())[:120] or type(exc).__name__
        raise DataError(f"unreadable image {path}: {detail}") from None


def _opened(path: Path):
    """PIL's lazy image (header read, nothing decoded), without its decompression-bomb warning: the callers check
    the size themselves against the lower MAX_PICTURE_PIXELS."""
    import warnings

    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        return Image.open(path)


def _refuse_large(path: Path, size: tuple[int, int]) -> None:
    width, height = size
    if width * height > MAX_PICTURE_PIXELS:
        raise DataError(f"image {path} is too large to decode: {width} x {height} pixels ({width * height / 1e6:.0f} "
                        f"megapixels), above the limit of {MAX_PICTURE_PIXELS / 1e6:g} megapixels (MAX_PICTURE_PIXELS "
                        f"in pytest_memerobust.data.meme)")


def _ends_with_jpeg_eoi(path: Path) -> bool:
    """Whether a JPEG file ends with its end-of-image marker, as a whole one does. A cut one cannot: the marker never
    occurs inside compressed data, and a file cut right after an embedded thumbnail's marker has no picture header
    for PIL to open. Files with bytes after the marker are decoded to decide."""
    with open(path, "rb") as f:
        f.seek(-2, 2)
        return f.read(2) == b"\xff\xd9"


def _rgb8(img) -> np.ndarray:
    """An H x W x 3 uint8 array of a PIL image. PIL's convert("RGB") clips 16-bit greys (modes I;16*, and I as PNG
    reads them) to 255; they are scaled instead, keeping the high byte, as PIL itself reads 16-bit colour PNGs."""
    if img.mode.startswith("I;16") or (img.mode == "I" and img.format == "PNG"):
        grey = (np.clip(np.asarray(img, dtype=np.int64), 0, 65535) >> 8).astype(np.uint8)
        return np.repeat(grey[:, :, None], 3, axis=2)
    return np.asarray(img.convert("RGB"), dtype=np.uint8).copy()


@dataclass(frozen=True)
class Meme:
    """A meme: an RGB picture (loaded lazily from `image_path`, or given as an array) and its caption.

    `labels` maps a task name (e.g. "hate") to a class index; `meta` holds the rest (split, target group...).
    """

    id: str
    text: str
    labels: Mapping[str, int]
    image_path: Path | None = None
    image_array: np.ndarray | None = field(default=None, repr=False, compare=False)
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def has_picture(self) -> bool:
        """Whether the meme comes with a picture (caption-only data has none)."""
        return self.image_path is not None or self.image_array is not None

    @property
    def image(self) -> np.ndarray:
        """The picture as an H x W x 3 array (the edges: OCR, thumbnails, fingerprints)."""
        if self.image_array is not None:
            return self.image_array
        if self.image_path is None:
            raise DataError(f"meme {self.id!r} has no image")
        return load_rgb(self.image_path)

    def picture(self, device="cpu"):
        """The picture as a uint8 tensor 3 x H x W on `device`, decoded there where it can be (pictures.py)."""
        from ..pictures import as_picture, decode

        if self.image_array is not None:
            return as_picture(self.image_array, device)
        if self.image_path is None:
            raise DataError(f"meme {self.id!r} has no image")
        return decode(self.image_path, device)


@dataclass(frozen=True)
class Dataset:
    """An ordered, named collection of memes with the class names of each task.

    A task is binary or multi-class (a meme's label is one class index) or, when named in `multilabel`, multi-label
    (a meme's label is a tuple of 0/1, one per class name, as FigMemes' six figurative-language labels)."""

    name: str
    memes: Sequence[Meme]
    classes: Mapping[str, Sequence[str]]
    source: str = ""
    multilabel: frozenset[str] = frozenset()

    def __len__(self) -> int:
        return len(self.memes)

    def labels(self, task: str) -> np.ndarray:
        """[N] class indices, or [N, K] 0/1 for a multi-label task."""
        return np.array([m.labels[task] for m in self.memes], dtype=np.int64)

    def labelled(self, task: str) -> "Dataset":
        """The memes that have a label for `task` (PrideMM's target and ToxicTags' stage II label only some)."""
        if all(task in m.labels for m in self.memes):
            return self
        return replace(self, name=f"{self.name}[{task}]", memes=[m for m in self.memes if task in m.labels])

    def head(self, n: int | None) -> "Dataset":
        """The first `n` memes (all when n is None): what `--memerobust-limit` selects."""
        if n is None or n >= len(self.memes):
            return self
        return replace(self, memes=list(self.memes[:n]))

    def fingerprint(self) -> str:
        """Content digest of the memes used: ids, captions, labels and image bytes."""
        h = hashlib.sha256()
        for m in self.memes:
            h.update(m.id.encode() + b"\0" + m.text.encode() + b"\0")
            h.update(repr(sorted(m.labels.items())).encode())
            if not m.has_picture:  # caption-only data
                h.update(b"no picture")
                continue
            img = m.image
            h.update(repr(img.shape).encode() + img.tobytes())
        return h.hexdigest()
