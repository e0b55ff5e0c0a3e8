"""Resampling with torchaudio (spec: torchaudio for resampling).

Two entry points: :func:`resample` for whole signals, and :func:`resample_blocks`, which cuts
a signal into fixed blocks and resamples each one on its own. The VAD uses the block form
both online (block by block as the model speaks) and offline (all blocks at once), so both
see identical 16 kHz samples.
"""

from __future__ import annotations

import numpy as np
import torch
import torchaudio.functional as AF


def resample(x: np.ndarray, orig_rate: int, new_rate: int) -> np.ndarray:
    """Resample ``float32[..., n]`` from ``orig_rate`` to ``new_rate`` Hz (windowed sinc)."""
    if orig_rate == new_rate:
        return np.asarray(x, dtype=np.float32)
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return AF.resample(t, orig_rate, new_rate).numpy()


def block_sizes(orig_rate: int, new_rate: int, block_s: float) -> tuple[int, int]:
    """``(block_in, block_out)`` samples of one ``block_s`` block; raises ValueError if not integral."""
    bi, bo = block_s * orig_rate, block_s * new_rate
    if abs(bi - round(bi)) > 1e-9 or abs(bo - round(bo)) > 1e-9:
        raise ValueError(f"a {block_s} s block is not a whole number of samples at {orig_rate} and {new_rate} Hz")
    return round(bi), round(bo)


def resample_blocks(x: np.ndarray, orig_rate: int, new_rate: int, block_s: float) -> np.ndarray:
    """Resample ``float32[B, k * block_in]`` block by block -> ``float32[B, k * block_out]``.

    Raises ValueError when the length is not a whole number of blocks.
    """
    bi, bo = block_sizes(orig_rate, new_rate, block_s)
    b, n = x.shape
    if n % bi:
        raise ValueError(f"length {n} is not a multiple of the {bi}-sample block")
    if orig_rate == new_rate or n == 0:
        return np.asarray(x, dtype=np.float32).reshape(b, n // bi * bo)
    return resample(x.reshape(b * (n // bi), bi), orig_rate, new_rate).reshape(b, n // bi * bo)
