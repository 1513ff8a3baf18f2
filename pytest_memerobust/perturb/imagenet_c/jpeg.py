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

Each 1-D DCT pass is an integer-valued 8x8 matrix (the butterfly's fixed-point constants, read off by running it
on unit vectors) applied to every block at once as a matmul in float64, where these integer sums are exact,
followed by libjpeg's rounding shift; so coefficients and samples are libjpeg's own, and with Pillow's bundled
libjpeg-turbo the result is bit for bit Pillow's (tests/test_jpeg_torch.py). The passes work in the planes' own
layout (along rows: one matmul over every run of 8 samples; down columns: a batched matmul per strip of 8 rows),
so no blocks are gathered. On MPS, which has no float64, the same runs in float32: close, not exact.
"""
from __future__ import annotations

import functools
import math
from typing import Callable

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

# jccolor.c's RGB -> YCbCr weights (rows Y, Cb, Cr)
RGB_TO_YCBCR = ((0.29900, 0.58700, 0.11400), (-0.16874, -0.33126, 0.50000), (0.50000, -0.41869, -0.08131))

BLOCK = 8  # DCTSIZE
MCU = 16  # 4:2:0: one MCU is 16 x 16 pixels (2 x 2 luma blocks, one block of each chroma plane)
CENTER = 128  # CENTERJSAMPLE
COLOUR_BITS = 16  # SCALEBITS of jccolor.c / jdcolor.c
CONST_BITS, PASS1_BITS = 13, 2  # jfdctint.c / jidctint.c
CPU_CHUNK_PIXELS = 1 << 19  # pixels per pass on the CPU: two pictures of 512 x 512 (see jpeg_roundtrip)
DEVICE_CHUNK_PIXELS = 1 << 26  # elsewhere: 256 pictures of 512 x 512, a few GiB of float64 working buffers


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
    luminance, chrominance = ([min(max((base * scale + 50) // 100, 1), 255) for base in table]
                              for table in (IJG_LUMINANCE_TABLE, IJG_CHROMINANCE_TABLE))
    return luminance, chrominance


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


def _matrix_of(butterfly: Callable[[list[int]], list[int]]) -> list[list[int]]:
    """The integer 8x8 matrix of a linear 1-D pass: row k holds output k's weights on the 8 inputs."""
    columns = [butterfly([int(i == j) for i in range(BLOCK)]) for j in range(BLOCK)]
    return [[columns[j][k] for j in range(BLOCK)] for k in range(BLOCK)]


@functools.lru_cache(maxsize=64)
def _constants(quality: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """For one quality on one device: the four DCT passes as matrices already divided by their pass's 2**shift
    (dyadic, so the sums stay exact in float64), the rounding offsets that go with them, and the quantisation
    tables shaped 8 x 1 x 8 (vertical frequency, -, horizontal frequency) to broadcast over a row of blocks."""
    luminance, chrominance = quantisation_tables(quality)
    as_tensor = functools.partial(torch.tensor, device=device, dtype=dtype)
    forward, inverse = as_tensor(_matrix_of(_forward_butterfly)), as_tensor(_matrix_of(_inverse_butterfly))
    # pass 1 acts on samples - 128: that only moves its DC output, by 128 * 8 samples * 2**PASS1_BITS
    level_shift = torch.zeros(BLOCK, device=device, dtype=dtype)
    level_shift[0] = -CENTER * BLOCK * (1 << PASS1_BITS)
    return {"forward_rows": forward.T / 2 ** (CONST_BITS - PASS1_BITS),  # right-multiplies: acts along rows
            "forward_rows_offset": level_shift + 0.5,  # + 0.5 then floor: DESCALE's rounding
            "forward_columns": forward / 2 ** (CONST_BITS + PASS1_BITS),  # left-multiplies: acts down columns
            "inverse_columns": inverse / 2 ** (CONST_BITS - PASS1_BITS),
            "inverse_rows": inverse.T / 2 ** (CONST_BITS + PASS1_BITS + 3),
            "inverse_rows_offset": as_tensor(CENTER + 0.5),  # the level shift back, and DESCALE's rounding
            "half": as_tensor(0.5),
            "luminance": as_tensor(luminance).reshape(BLOCK, 1, BLOCK),
            "chrominance": as_tensor(chrominance).reshape(BLOCK, 1, BLOCK)}


def _replicate_edges(planes: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Grow the last two dimensions to height x width by repeating the last row and column."""
    h, w = planes.shape[-2:]
    if height > h:
        planes = torch.cat([planes, planes[..., -1:, :].expand(*planes.shape[:-2], height - h, w)], dim=-2)
    if width > w:
        planes = torch.cat([planes, planes[..., -1:].expand(*planes.shape[:-1], width - w)], dim=-1)
    return planes


def _rgb_to_ycbcr(rgb: torch.Tensor) -> torch.Tensor:
    """jccolor.c rgb_ycc_convert: B x 3 x H x W int32 RGB -> YCbCr in 16-bit fixed point, rounded (Y half up,
    Cb and Cr with ONE_HALF - 1)."""
    half = 1 << (COLOUR_BITS - 1)
    offsets = (half, (CENTER << COLOUR_BITS) + half - 1, (CENTER << COLOUR_BITS) + half - 1)
    r, g, b = rgb.unbind(1)
    ycc = torch.empty_like(rgb)
    for out, weights, offset in zip(ycc.unbind(1), RGB_TO_YCBCR, offsets):
        w_r, w_g, w_b = (int(math.copysign(_fix(abs(v), COLOUR_BITS), v)) for v in weights)
        torch.mul(r, w_r, out=out).add_(g, alpha=w_g).add_(b, alpha=w_b).add_(offset)
    return ycc.bitwise_right_shift_(COLOUR_BITS)


def _ycbcr_to_rgb(ycc: torch.Tensor) -> torch.Tensor:
    """jdcolor.c ycc_rgb_convert: B x 3 x H x W int32 YCbCr -> uint8 RGB with libjpeg's fixed-point tables.
    Overwrites `ycc`'s chroma."""
    y, cb, cr = ycc.sub_(torch.tensor([0, CENTER, CENTER], dtype=ycc.dtype, device=ycc.device)[:, None, None]
                         ).unbind(1)
    half = 1 << (COLOUR_BITS - 1)
    r = (cr * _fix(1.40200, COLOUR_BITS)).add_(half).bitwise_right_shift_(COLOUR_BITS).add_(y)
    g = (cb * -_fix(0.34414, COLOUR_BITS)).add_(cr, alpha=-_fix(0.71414, COLOUR_BITS)).add_(half)
    g = g.bitwise_right_shift_(COLOUR_BITS).add_(y)
    b = (cb * _fix(1.77200, COLOUR_BITS)).add_(half).bitwise_right_shift_(COLOUR_BITS).add_(y)
    return torch.stack([r, g, b], 1).clamp_(0, 255).to(torch.uint8)


def _downsample_chroma(chroma: torch.Tensor) -> torch.Tensor:
    """jcsample.c h2v2_downsample: the mean of each 2x2 (even H and W), rounded with the bias 1, 2, 1, 2, ...
    along a row."""
    rows = chroma[..., 0::2, :] + chroma[..., 1::2, :]
    sums = rows[..., 0::2] + rows[..., 1::2]
    sums.view(*sums.shape[:-1], -1, 2).add_(torch.tensor([1, 2], dtype=sums.dtype, device=sums.device))
    return sums.bitwise_right_shift_(2)


def _upsample_chroma(chroma: torch.Tensor) -> torch.Tensor:
    """jdsample.c h2v2_fancy_upsample: each output is 9/16, 3/16, 3/16, 1/16 of its four nearest chroma samples
    (edges replicated), rounded with the bias 8 then 7; h2v2_upsample (plain 2x2 replication) when the chroma is
    at most two samples wide, as libjpeg chooses."""
    if chroma.shape[-1] <= 2:
        return chroma.repeat_interleave(2, dim=-2).repeat_interleave(2, dim=-1)
    *lead, h, w = chroma.shape
    # vertically: 3 * nearest row + the next nearest (the row above for even output rows, below for odd ones)
    sums = (3 * chroma).unsqueeze(-2).repeat(*([1] * len(lead)), 1, 2, 1)  # ... x h x 2 x w
    sums[..., 1:, 0, :] += chroma[..., :-1, :]
    sums[..., 0, 0, :] += chroma[..., 0, :]
    sums[..., :-1, 1, :] += chroma[..., 1:, :]
    sums[..., -1, 1, :] += chroma[..., -1, :]
    sums = sums.view(*lead, 2 * h, w)
    # horizontally the same, on those sums, with the rounding bias 8 (even columns) and 7 (odd ones)
    out = (3 * sums).unsqueeze(-1).repeat(*([1] * len(lead)), 1, 1, 2)  # ... x 2h x w x 2
    out.add_(torch.tensor([8, 7], dtype=out.dtype, device=out.device))
    out[..., 1:, 0] += sums[..., :-1]
    out[..., 0, 0] += sums[..., 0]
    out[..., :-1, 1] += sums[..., 1:]
    out[..., -1, 1] += sums[..., -1]
    return out.bitwise_right_shift_(4).view(*lead, 2 * h, 2 * w)


def _compress_planes(planes: torch.Tensor, table: torch.Tensor, k: dict[str, torch.Tensor]) -> torch.Tensor:
    """DCT, quantise, dequantise and inverse-DCT every 8x8 block of `planes` (... x H x W int32 samples, H and W
    multiples of 8) with libjpeg's islow integer DCTs and rounding, in place in the planes' own layout; returns
    the decoded int32 samples, clamped to 0..255."""
    *lead, h, w = planes.shape
    block_rows = planes.numel() // (BLOCK * w)
    row_blocks = planes.to(table.dtype).reshape(-1, BLOCK)  # every 8 samples of a row within one block
    # jfdctint.c: pass 1 along each block's rows, pass 2 down its columns; coefficients come out scaled by 8
    rows = torch.addmm(k["forward_rows_offset"], row_blocks, k["forward_rows"]).floor_()
    coefficients = torch.baddbmm(k["half"], k["forward_columns"].expand(block_rows, BLOCK, BLOCK),
                                 rows.view(block_rows, BLOCK, w)).floor_()
    coefficients = coefficients.view(block_rows, BLOCK, w // BLOCK, BLOCK)  # v, block column, u
    # jcdctmgr.c: |coefficient| / (8 q) rounded half up, the sign restored; then the decoder's coefficient * q
    quantised = coefficients.abs().add_(table * (BLOCK // 2)).div_(table * BLOCK).floor_()
    dequantised = quantised.mul_(table).copysign_(coefficients).view(block_rows, BLOCK, w)
    # jidctint.c: pass 1 down each block's columns, pass 2 along its rows, then + 128
    columns = torch.baddbmm(k["half"], k["inverse_columns"].expand(block_rows, BLOCK, BLOCK), dequantised).floor_()
    decoded = torch.addmm(k["inverse_rows_offset"], columns.view(-1, BLOCK), k["inverse_rows"]).floor_()
    return decoded.clamp_(0, 255).to(torch.int32).view(*lead, h, w)


def _roundtrip(pictures: torch.Tensor, k: dict[str, torch.Tensor]) -> torch.Tensor:
    """The round trip of B x 3 x H x W uint8 pictures with one quality's constants `k`."""
    h, w = pictures.shape[-2:]
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
    return _ycbcr_to_rgb(torch.cat([luma, chroma], 1))


def jpeg_roundtrip(pictures: torch.Tensor, quality: int) -> torch.Tensor:
    """Pillow's `save(buffer, "JPEG", quality=quality)` then `Image.open(buffer).convert("RGB")`, on a batch.

    `pictures` is a B x 3 x H x W uint8 RGB tensor on any device; returns a tensor of the same shape, dtype and
    device. Each picture is coded on its own, so the result does not depend on the rest of the batch (which is
    why it can be cut into chunks: on the CPU small ones stay in cache and out of the allocator's page-faulting
    path for big blocks, which makes them about twice as fast; elsewhere chunks only bound the memory).
    """
    if pictures.dim() != 4 or pictures.shape[1] != 3 or pictures.dtype != torch.uint8:
        raise ValueError(f"expected a B x 3 x H x W uint8 tensor, got {tuple(pictures.shape)} {pictures.dtype}")
    n, _, h, w = pictures.shape
    if n == 0 or h == 0 or w == 0:
        return pictures.clone()
    device = pictures.device
    dtype = torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64: close, not exact
    k = _constants(int(quality), device, dtype)
    chunk_pixels = CPU_CHUNK_PIXELS if device.type == "cpu" else DEVICE_CHUNK_PIXELS
    per_chunk = max(1, chunk_pixels // (-(-h // MCU) * MCU * -(-w // MCU) * MCU))
    if per_chunk >= n:
        return _roundtrip(pictures, k)
    return torch.cat([_roundtrip(chunk, k) for chunk in pictures.split(per_chunk)])
