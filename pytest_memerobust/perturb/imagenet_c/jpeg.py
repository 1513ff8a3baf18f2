"""A JPEG encode + decode round trip in torch, batched and on the pictures' own device.

ImageNet-C's jpeg_compression saves each picture with Pillow at a low quality and opens it again. Pillow runs on
the CPU one picture at a time, so on a GPU batch it means a round trip to the host and a Python loop. This module
does the same round trip with tensor operations instead, following what Pillow's libjpeg(-turbo) does by default
step by step, with its integer arithmetic:

* encoder: baseline JPEG; RGB -> YCbCr in 16-bit fixed point (jccolor.c); 4:2:0 chroma by 2x2 averaging with the
  alternating rounding bias 1, 2 (jcsample.c); edges replicated out to whole MCUs, horizontally before the
  chroma downsampling and vertically after it (jcsample.c, jcprepct.c); the "islow" integer DCT (jfdctint.c);
  the IJG tables scaled by quality with force_baseline (jcparam.c); rounding half away from zero (jcdctmgr.c);
* decoder: the "islow" integer inverse DCT (jidctint.c); "fancy" triangular h2v2 chroma upsampling
  (jdsample.c; plain replication when the chroma is at most 2 columns wide, as libjpeg does); YCbCr -> RGB with
  libjpeg's fixed-point tables (jdcolor.c).

Each DCT pass is an integer-valued 8x8 matrix (the butterfly's fixed-point constants, read off by running it on
unit vectors) applied to all blocks as one matmul in float64, where these integer sums are exact, followed by
libjpeg's rounding shift, so the coefficients are libjpeg's own. tests/test_jpeg_torch.py compares with Pillow.
"""
from __future__ import annotations

import functools

import torch

__all__ = ["jpeg_roundtrip", "quantisation_tables"]

# The IJG example tables (JPEG standard, Annex K), in natural (row-major) order, as libjpeg's jcparam.c.
IJG_LUMINANCE_TABLE = (
    16, 11, 10, 16, 24, 40, 51, 61,
    12, 12, 14, 19, 26, 58, 60, 55,
    14, 13, 16, 24, 40, 57, 69, 56,
    14, 17, 22, 29, 51, 87, 80, 62,
    18, 22, 37, 56, 68, 109, 103, 77,
    24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101,
    72, 92, 95, 98, 112, 100, 103, 99,
)
IJG_CHROMINANCE_TABLE = (
    17, 18, 24, 47, 99, 99, 99, 99,
    18, 21, 26, 66, 99, 99, 99, 99,
    24, 26, 56, 99, 99, 99, 99, 99,
    47, 66, 99, 99, 99, 99, 99, 99,
    99, 99, 99, 99, 99, 99, 99, 99,
    99, 99, 99, 99, 99, 99, 99, 99,
    99, 99, 99, 99, 99, 99, 99, 99,
    99, 99, 99, 99, 99, 99, 99, 99,
)

BLOCK = 8  # DCTSIZE
MCU = 16  # 4:2:0: one MCU is 16 x 16 pixels (2 x 2 luma blocks, one block of each chroma plane)
CENTER = 128  # CENTERJSAMPLE
COLOUR_BITS = 16  # SCALEBITS of jccolor.c / jdcolor.c
CONST_BITS, PASS1_BITS = 13, 2  # jfdctint.c / jidctint.c


def _fix(x: float, bits: int) -> int:
    """libjpeg's FIX(): a constant in `bits`-bit fixed point, rounded."""
    return int(x * (1 << bits) + 0.5)


# jfdctint.c / jidctint.c constants (13-bit fixed point)
F_0_298, F_0_390, F_0_541, F_0_765 = (_fix(v, CONST_BITS) for v in (0.298631336, 0.390180644, 0.541196100,
                                                                      0.765366865))
F_0_899, F_1_175, F_1_501, F_1_847 = (_fix(v, CONST_BITS) for v in (0.899976223, 1.175875602, 1.501321110,
                                                                      1.847759065))
F_1_961, F_2_053, F_2_562, F_3_072 = (_fix(v, CONST_BITS) for v in (1.961570560, 2.053119869, 2.562915447,
                                                                      3.072711026))


def quality_scale(quality: int) -> int:
    """libjpeg's jpeg_quality_scaling: the percentage the base tables are scaled by."""
    quality = min(max(int(quality), 1), 100)
    return 5000 // quality if quality < 50 else 200 - 2 * quality


def quantisation_tables(quality: int) -> tuple[list[int], list[int]]:
    """The luminance and chrominance tables libjpeg writes at this quality (jpeg_set_quality, force_baseline)."""
    scale = quality_scale(quality)
    return tuple([min(max((base * scale + 50) // 100, 1), 255) for base in table]  # type: ignore[return-value]
                 for table in (IJG_LUMINANCE_TABLE, IJG_CHROMINANCE_TABLE))


def _forward_butterfly(d: list[int]) -> list[int]:
    """One 1-D pass of jfdctint.c before its rounding shift, every output in 2**CONST_BITS fixed point."""
    tmp0, tmp7 = d[0] + d[7], d[0] - d[7]
    tmp1, tmp6 = d[1] + d[6], d[1] - d[6]
    tmp2, tmp5 = d[2] + d[5], d[2] - d[5]
    tmp3, tmp4 = d[3] + d[4], d[3] - d[4]
    tmp10, tmp13, tmp11, tmp12 = tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2
    out = [0] * 8
    out[0] = (tmp10 + tmp11) << CONST_BITS
    out[4] = (tmp10 - tmp11) << CONST_BITS
    z1 = (tmp12 + tmp13) * F_0_541
    out[2] = z1 + tmp13 * F_0_765
    out[6] = z1 - tmp12 * F_1_847
    z1, z2, z3, z4 = tmp4 + tmp7, tmp5 + tmp6, tmp4 + tmp6, tmp5 + tmp7
    z5 = (z3 + z4) * F_1_175
    tmp4, tmp5, tmp6, tmp7 = tmp4 * F_0_298, tmp5 * F_2_053, tmp6 * F_3_072, tmp7 * F_1_501
    z1, z2, z3, z4 = -z1 * F_0_899, -z2 * F_2_562, -z3 * F_1_961 + z5, -z4 * F_0_390 + z5
    out[7], out[5], out[3], out[1] = tmp4 + z1 + z3, tmp5 + z2 + z4, tmp6 + z2 + z3, tmp7 + z1 + z4
    return out


def _inverse_butterfly(c: list[int]) -> list[int]:
    """One 1-D pass of jidctint.c before its rounding shift, every output in 2**CONST_BITS fixed point."""
    z1 = (c[2] + c[6]) * F_0_541
    tmp2, tmp3 = z1 - c[6] * F_1_847, z1 + c[2] * F_0_765
    tmp0, tmp1 = (c[0] + c[4]) << CONST_BITS, (c[0] - c[4]) << CONST_BITS
    tmp10, tmp13, tmp11, tmp12 = tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2
    tmp0, tmp1, tmp2, tmp3 = c[7], c[5], c[3], c[1]
    z1, z2, z3, z4 = tmp0 + tmp3, tmp1 + tmp2, tmp0 + tmp2, tmp1 + tmp3
    z5 = (z3 + z4) * F_1_175
    tmp0, tmp1, tmp2, tmp3 = tmp0 * F_0_298, tmp1 * F_2_053, tmp2 * F_3_072, tmp3 * F_1_501
    z1, z2, z3, z4 = -z1 * F_0_899, -z2 * F_2_562, -z3 * F_1_961 + z5, -z4 * F_0_390 + z5
    tmp0, tmp1, tmp2, tmp3 = tmp0 + z1 + z3, tmp1 + z2 + z4, tmp2 + z2 + z3, tmp3 + z1 + z4
    return [tmp10 + tmp3, tmp11 + tmp2, tmp12 + tmp1, tmp13 + tmp0,
            tmp13 - tmp0, tmp12 - tmp1, tmp11 - tmp2, tmp10 - tmp3]


def _matrix_of(butterfly) -> list[list[int]]:
    """The integer 8x8 matrix of a linear 1-D pass: row k holds output k's weights on the 8 inputs."""
    columns = [butterfly([int(i == j) for i in range(BLOCK)]) for j in range(BLOCK)]
    return [[columns[j][k] for j in range(BLOCK)] for k in range(BLOCK)]


@functools.lru_cache(maxsize=64)
def _constants(quality: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """For one quality on one device: the quantisation tables (8 x 8, natural order) and the four DCT passes as
    matrices already divided by their pass's 2**shift (dyadic, so still exact in float64)."""
    luminance, chrominance = quantisation_tables(quality)
    as_tensor = functools.partial(torch.tensor, device=device, dtype=dtype)
    forward, inverse = as_tensor(_matrix_of(_forward_butterfly)), as_tensor(_matrix_of(_inverse_butterfly))
    return {"forward_rows": forward.T / 2 ** (CONST_BITS - PASS1_BITS),  # right-multiplies: acts along rows
            "forward_columns": forward / 2 ** (CONST_BITS + PASS1_BITS),  # left-multiplies: acts down columns
            "inverse_columns": inverse / 2 ** (CONST_BITS - PASS1_BITS),
            "inverse_rows": inverse.T / 2 ** (CONST_BITS + PASS1_BITS + 3),
            "luminance": as_tensor(luminance).reshape(BLOCK, BLOCK),
            "chrominance": as_tensor(chrominance).reshape(BLOCK, BLOCK)}


def _descaled(x: torch.Tensor) -> torch.Tensor:
    """libjpeg's DESCALE after a pass whose matrix already divided by 2**shift: round half up, in place."""
    return x.add_(0.5).floor_()


def _replicate_edges(planes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Grow the last two dimensions to height x width by repeating the last row and column."""
    h, w = planes.shape[-2:]
    if height > h:
        planes = torch.cat([planes, planes[..., -1:, :].expand(*planes.shape[:-2], height - h, w)], dim=-2)
    if width > w:
        planes = torch.cat([planes, planes[..., -1:].expand(*planes.shape[:-1], width - w)], dim=-1)
    return planes


def _rgb_to_ycbcr(rgb: torch.Tensor) -> torch.Tensor:
    """jccolor.c rgb_ycc_convert: B x 3 x H x W int32 RGB -> YCbCr, 16-bit fixed point, rounded."""
    r, g, b = rgb.unbind(1)
    half, offset = 1 << (COLOUR_BITS - 1), CENTER << COLOUR_BITS
    y = _fix(0.29900, COLOUR_BITS) * r + _fix(0.58700, COLOUR_BITS) * g + _fix(0.11400, COLOUR_BITS) * b + half
    cb = (-_fix(0.16874, COLOUR_BITS) * r - _fix(0.33126, COLOUR_BITS) * g + _fix(0.5, COLOUR_BITS) * b
          + offset + half - 1)
    cr = (_fix(0.5, COLOUR_BITS) * r - _fix(0.41869, COLOUR_BITS) * g - _fix(0.08131, COLOUR_BITS) * b
          + offset + half - 1)
    return torch.stack([y, cb, cr], 1) >> COLOUR_BITS


def _ycbcr_to_rgb(ycc: torch.Tensor) -> torch.Tensor:
    """jdcolor.c ycc_rgb_convert: B x 3 x H x W int32 YCbCr -> RGB with libjpeg's fixed-point tables, clamped."""
    y, cb, cr = ycc[:, 0], ycc[:, 1] - CENTER, ycc[:, 2] - CENTER
    half = 1 << (COLOUR_BITS - 1)
    r = y + ((_fix(1.40200, COLOUR_BITS) * cr + half) >> COLOUR_BITS)
    g = y + ((-_fix(0.34414, COLOUR_BITS) * cb + half - _fix(0.71414, COLOUR_BITS) * cr) >> COLOUR_BITS)
    b = y + ((_fix(1.77200, COLOUR_BITS) * cb + half) >> COLOUR_BITS)
    return torch.stack([r, g, b], 1).clamp_(0, 255)


def _downsample_chroma(chroma: torch.Tensor) -> torch.Tensor:
    """jcsample.c h2v2_downsample: the mean of each 2x2, rounded with the bias 1, 2, 1, 2, ... along a row."""
    n, c, h, w = chroma.shape
    sums = chroma.reshape(n, c, h // 2, 2, w // 2, 2).sum(dim=(3, 5))
    bias = torch.arange(w // 2, device=chroma.device, dtype=chroma.dtype) % 2 + 1
    return (sums + bias) >> 2


def _upsample_chroma(chroma: torch.Tensor) -> torch.Tensor:
    """jdsample.c h2v2_fancy_upsample: each output is 9/16, 3/16, 3/16, 1/16 of its four nearest chroma samples
    (edges replicated), rounded with the bias 8 then 7; h2v2_upsample (plain 2x2 replication) when the chroma is
    at most two samples wide, as libjpeg chooses."""
    if chroma.shape[-1] <= 2:
        return chroma.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)
    above = torch.cat([chroma[..., :1, :], chroma[..., :-1, :]], dim=-2)
    below = torch.cat([chroma[..., 1:, :], chroma[..., -1:, :]], dim=-2)
    sums = torch.stack([3 * chroma + above, 3 * chroma + below], dim=-2).flatten(-3, -2)  # rows 2i, 2i+1
    left = torch.cat([sums[..., :1], sums[..., :-1]], dim=-1)
    right = torch.cat([sums[..., 1:], sums[..., -1:]], dim=-1)
    return torch.stack([(3 * sums + left + 8) >> 4, (3 * sums + right + 7) >> 4], dim=-1).flatten(-2)


def _compress_planes(planes: torch.Tensor, table: torch.Tensor, k: dict[str, torch.Tensor]) -> torch.Tensor:
    """DCT, quantise, dequantise and inverse-DCT every 8x8 block of `planes` (... x H x W int32 samples, H and W
    multiples of 8), with libjpeg's islow integer DCTs and rounding; returns the decoded samples, clamped."""
    *lead, h, w = planes.shape
    blocks = (planes - CENTER).reshape(-1, h // BLOCK, BLOCK, w // BLOCK, BLOCK).transpose(2, 3).to(table.dtype)
    rows = _descaled(blocks @ k["forward_rows"])  # jfdctint.c pass 1: along each row
    coefficients = _descaled(k["forward_columns"] @ rows)  # pass 2: down each column (scaled by 8)
    # jcdctmgr.c: |coefficient| / (8 q) rounded half up, sign restored; then the decoder's coefficient * q
    quantised = torch.div(coefficients.abs() + table * (BLOCK // 2), table * BLOCK, rounding_mode="floor")
    dequantised = quantised.mul_(table).copysign_(coefficients)
    columns = _descaled(k["inverse_columns"] @ dequantised)  # jidctint.c pass 1: down each column
    samples = _descaled(columns @ k["inverse_rows"]).add_(CENTER).clamp_(0, 255).to(torch.int32)  # pass 2
    return samples.transpose(2, 3).reshape(*lead, h, w)


def jpeg_roundtrip(pictures: torch.Tensor, quality: int) -> torch.Tensor:
    """Pillow's `save(buffer, "JPEG", quality=quality)` then `Image.open(buffer).convert("RGB")`, on a batch.

    `pictures` is a B x 3 x H x W uint8 RGB tensor on any device; returns a tensor of the same shape, dtype and
    device. Each picture is coded on its own (the result does not depend on the rest of the batch).
    """
    if pictures.dim() != 4 or pictures.shape[1] != 3 or pictures.dtype != torch.uint8:
        raise ValueError(f"expected a B x 3 x H x W uint8 tensor, got {tuple(pictures.shape)} {pictures.dtype}")
    n, _, h, w = pictures.shape
    if n == 0 or h == 0 or w == 0:
        return pictures.clone()
    device = pictures.device
    dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64: close, not exact
    k = _constants(int(quality), device, dtype)
    padded_h, padded_w = -(-h // MCU) * MCU, -(-w // MCU) * MCU

    ycc = _rgb_to_ycbcr(pictures.to(torch.int32))
    luma = _replicate_edges(ycc[:, :1], padded_h, padded_w)
    # chroma: columns replicated to whole MCUs and rows to an even count before downsampling (jcsample.c), then
    # the downsampled rows replicated to whole blocks (jcprepct.c)
    chroma = _downsample_chroma(_replicate_edges(ycc[:, 1:], h + h % 2, padded_w))
    chroma = _replicate_edges(chroma, padded_h // 2, padded_w // 2)

    luma = _compress_planes(luma, k["luminance"], k)[..., :h, :w]
    chroma = _compress_planes(chroma, k["chrominance"], k)
    chroma = _upsample_chroma(chroma[..., :(h + 1) // 2, :(w + 1) // 2])[..., :h, :w]
    return _ycbcr_to_rgb(torch.cat([luma, chroma], 1)).to(torch.uint8)
