"""One decode step of one attention layer over a ring KV cache: masked dense vs length-aware (issue 24, item 1).

Moshi's LM attends every step over its whole ring (``RingKVCache``: 3,000 slots of 32 heads x 128 in
the 7B config) with a boolean mask (``pos_k >= 0``: a slot is filled; within the context), so a row
whose stream has filled ``n`` slots still reads all 3,000, and the mask keeps SDPA off its flash
kernel. This measures, for ``--rows`` rows whose filled lengths are drawn uniformly from
``[1, --slots]`` (a shard's rows at different points of their streams):

* ``dense``: ``F.scaled_dot_product_attention`` with moshi's boolean mask over every slot (today);
* ``flex``: the adapter's ``attention="flex"`` (``harness.models.moshi_attention.filled_attention``:
  ``torch.nn.attention.flex_attention`` with a block mask from the per-row lengths, device tensors, no
  host sync; compiled on CUDA, where the blocks past a row's length are skipped), over the positions
  a ring of ``--slots`` steps holds;
* ``prefix``: dense SDPA over the slots ``[0, max length)`` only (what slicing the ring to its
  longest stream would read; needs that length on the host).

Per variant: ms per call (median of ``--iters`` after warm-up), the bytes of K and V it must read at
least (filled slots only, the floor), and the largest difference from ``dense``. The last line is one
JSON object. On CPU it checks exactness at a small size (the test suite can run it with ``--smoke``).

    .venv/bin/python bench/attention_layer.py --rows 64            # on a GPU: full size, bf16
    .venv/bin/python bench/attention_layer.py --smoke              # CPU, float32, small
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def inputs(rows: int, heads: int, slots: int, dim: int, dtype, device, seed: int = 0):
    """``q [R, H, 1, D]``, ``k, v [R, H, S, D]`` and per-row filled lengths ``int64[R]`` in ``[1, S]``."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(rows, heads, 1, dim, generator=g).to(device, dtype)
    k = torch.randn(rows, heads, slots, dim, generator=g).to(device, dtype)
    v = torch.randn(rows, heads, slots, dim, generator=g).to(device, dtype)
    lengths = torch.randint(1, slots + 1, (rows,), generator=g).to(device)
    return q, k, v, lengths


def dense(q, k, v, lengths):
    """moshi's attention: every slot, a boolean mask of the filled ones ([R, 1, 1, S])."""
    mask = torch.arange(k.shape[2], device=k.device)[None, :] < lengths[:, None]
    return F.scaled_dot_product_attention(q, k, v, mask[:, None, None, :])


def flex_variant(compiled: bool):
    from harness.models.moshi_attention import filled_attention

    def flex(q, k, v, lengths):
        """The adapter's attention at each row's position ``length - 1``: slot ``i`` holds position ``i``
        below the length, none past it (``RingKVCache.complete`` before the ring wraps)."""
        slots = torch.arange(k.shape[2], device=k.device)
        pos_k = torch.where(slots[None, :] < lengths[:, None], slots[None, :], -1)
        return filled_attention(q, k, v, lengths - 1, pos_k, lengths, k.shape[2], compiled)

    return flex


def prefix(q, k, v, lengths):
    n = int(lengths.max())  # a host sync: the longest stream's length
    mask = torch.arange(n, device=k.device)[None, :] < lengths[:, None]
    return F.scaled_dot_product_attention(q, k[:, :, :n], v[:, :, :n], mask[:, None, None, :])


def timed(fn, args, iters: int, device: str) -> float:
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(iters):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--slots", type=int, default=3000, help="ring capacity (the 7B config: 3,000 steps)")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--device", default=None)
    ap.add_argument("--smoke", action="store_true", help="CPU, float32, 4 rows x 2 heads x 300 slots x 16")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rows, args.heads, args.slots, args.dim, args.iters, args.device = 4, 2, 300, 16, 3, "cpu"
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    q, k, v, lengths = inputs(args.rows, args.heads, args.slots, args.dim, dtype, device)
    with torch.no_grad():
        ref = dense(q, k, v, lengths)
        item = torch.finfo(dtype).bits // 8
        floor_mb = 2 * args.heads * args.dim * item * int(lengths.sum()) / 1e6
        dense_mb = 2 * args.heads * args.dim * item * args.rows * args.slots / 1e6
        out = {"rows": args.rows, "heads": args.heads, "slots": args.slots, "dim": args.dim, "device": device,
               "dtype": str(dtype).removeprefix("torch."), "filled_share": round(int(lengths.sum()) /
                                                                               (args.rows * args.slots), 3),
               "kv_floor_mb": round(floor_mb, 1), "kv_dense_mb": round(dense_mb, 1), "variants": {}}
        variants = {"dense": dense, "flex": flex_variant(device == "cuda"), "prefix": prefix}
        for name, fn in variants.items():
            y = fn(q, k, v, lengths)
            diff = float((y.float() - ref.float()).abs().max())
            ms = timed(fn, (q, k, v, lengths), args.iters, device)
            out["variants"][name] = {"ms": round(ms, 3), "max_abs_diff": diff}
            print(f"{name:>7}: {ms:8.3f} ms a call, max |diff| from dense {diff:.3g}", flush=True)
    print(f"K and V at least {floor_mb:.1f} MB (filled slots, {100 * out['filled_share']:.0f} %), dense reads "
          f"{dense_mb:.1f} MB", flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
