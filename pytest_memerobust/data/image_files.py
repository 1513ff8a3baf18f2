"""Image files as the loaders and the decoders read them, with PIL and nothing heavier: the size limit, a cheap check
of a file's header and structure before any case, and the RGB array of a whole file. pictures.py decodes them into
tensors; meme.py's Meme reads its picture through here."""
from __future__ import annotations

from pathlib import Path

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
                        f"in pytest_memerobust.data.image_files)")


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
