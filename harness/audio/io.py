"""Audio I/O with soundfile (spec: soundfile for I/O; torchaudio >= 2.9 cannot load files).

Waveforms in the harness are mono ``float32[n]`` arrays in [-1, 1]. They are stored as
16-bit PCM (WAV or FLAC) with one fixed scaling, :data:`PCM_SCALE`, so that
``read(write(quantize(x))) == quantize(x)`` exactly: the online detector sees the same
samples the offline stage reads back.
"""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf
from numba import njit

PCM_SCALE = 32767.0


class AudioError(ValueError):
    """A waveform is unusable: wrong shape, non-finite samples, or an unreadable file."""


def check_waveform(x: np.ndarray, what: str = "waveform") -> np.ndarray:
    """Return ``x`` as ``float32[n]``; raise :class:`AudioError` if not 1-D or not finite."""
    x = np.asarray(x)
    if x.ndim != 1:
        raise AudioError(f"{what}: expected a mono 1-D array, got shape {x.shape}")
    if not np.issubdtype(x.dtype, np.floating):
        raise AudioError(f"{what}: expected float samples, got {x.dtype}")
    if not np.all(np.isfinite(x)):
        raise AudioError(f"{what}: contains NaN or Inf samples")
    return x.astype(np.float32, copy=False)


def pcm_steps(x: np.ndarray) -> np.ndarray:
    """The 16-bit steps of float samples (clipped to [-1, 1]): integer-valued floats in
    ``[-PCM_SCALE, PCM_SCALE]``, same shape; :func:`quantize` is ``steps / PCM_SCALE``, and the
    cast of the steps to int16 is exact."""
    return np.round(np.clip(x, -1.0, 1.0) * PCM_SCALE)


@njit(cache=True, nogil=True)
def _quantize_rows(x, q, stage, col, skip):  # pragma: no cover
    scale = np.float32(PCM_SCALE)
    lo, hi = np.float32(-1.0), np.float32(1.0)
    for b in range(x.shape[0]):
        for j in range(x.shape[1]):
            v = x[b, j]
            if v < lo:
                v = lo
            elif v > hi:
                v = hi
            k = np.rint(v * scale)
            q[b, j] = k / scale
            if j >= skip:
                stage[b, col + j - skip] = np.int16(k)


def quantize_rows(x: np.ndarray, stage: np.ndarray, col: int, skip: int = 0) -> np.ndarray:
    """:func:`quantize` of ``float32[R, n]`` (finite) in one pass, also writing the 16-bit steps of columns
    ``skip:`` into ``stage[:, col:col + n - skip]`` (int16): ``pcm_steps(x)[:, skip:].astype(int16)``,
    bit for bit (the same float32 clip, product and round half to even)."""
    x = np.asarray(x)
    if x.dtype != np.float32 or x.ndim != 2 or stage.dtype != np.int16 or stage.shape[0] != x.shape[0] \
            or not 0 <= col <= stage.shape[1] - max(0, x.shape[1] - skip):
        raise ValueError(f"expected float32[R, n] and room in int16[R, m], got {x.dtype} {x.shape}, "
                         f"{stage.dtype} {stage.shape} at column {col}")
    q = np.empty(x.shape, np.float32)
    _quantize_rows(x, q, stage, col, skip)
    return q


def quantize(x: np.ndarray) -> np.ndarray:
    """Round float samples to the 16-bit grid used for storage (clips to [-1, 1])."""
    return (pcm_steps(x) / PCM_SCALE).astype(np.float32)


def flac_rate_problem(sample_rate: int) -> str | None:
    """Why FLAC cannot store audio at ``sample_rate`` Hz so that it reads back, or None. A FLAC
    frame header codes rates above 65,535 Hz only in tens of Hz, and at most 655,350 Hz:
    libsndfile writes other rates into files it cannot open again."""
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int | np.integer) or sample_rate <= 0:
        return f"a sample rate must be a positive integer (Hz), got {sample_rate!r}"
    if sample_rate > 655_350 or (sample_rate > 65_535 and sample_rate % 10):
        return (f"FLAC cannot store {sample_rate} Hz (above 65,535 Hz only multiples of 10 Hz, at most "
                "655,350 Hz): the file would not read back")
    return None


def encode(x: np.ndarray, sample_rate: int, fmt: str = "FLAC") -> bytes:
    """Encode a mono float waveform as 16-bit ``fmt`` (``"FLAC"`` or ``"WAV"``) bytes.

    Raises:
        AudioError: the waveform is not mono finite floats, or FLAC cannot store ``sample_rate``
            so that it reads back (:func:`flac_rate_problem`).
    """
    if fmt.upper() == "FLAC" and (problem := flac_rate_problem(sample_rate)):
        raise AudioError(problem)
    pcm = np.round(np.clip(check_waveform(x), -1.0, 1.0) * PCM_SCALE).astype(np.int16)
    buf = io.BytesIO()
    sf.write(buf, pcm, sample_rate, format=fmt, subtype="PCM_16")
    return buf.getvalue()


def decode(data: bytes, expected_rate: int | None = None) -> tuple[np.ndarray, int]:
    """Decode WAV/FLAC bytes -> ``(float32[n] mono, sample_rate)``.

    Raises:
        AudioError: unreadable data, more than one channel, or a sample rate other than
            ``expected_rate`` when given.
    """
    try:
        pcm, sr = sf.read(io.BytesIO(data), dtype="int16", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise AudioError(f"cannot decode audio: {e}") from None
    if pcm.shape[1] != 1:
        raise AudioError(f"expected mono audio, got {pcm.shape[1]} channels")
    if expected_rate is not None and sr != expected_rate:
        raise AudioError(f"expected {expected_rate} Hz audio, got {sr} Hz")
    return (pcm[:, 0].astype(np.float32) / PCM_SCALE), int(sr)
