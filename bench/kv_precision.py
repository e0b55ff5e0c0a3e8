"""How the tiny Moshi's greedy tokens move when its LM's K/V are stored at lower precision (issue 24, item 3).

The issue asks for 8-bit K/V "where it keeps tokens equal on the tiny model". This stores every key and
value the LM's attentions write into their ring (moshi's ``RingKVCache.complete``; not the depformer's,
not Mimi's) through a lossy round trip, streams the tiny Moshi (greedy, float32, CPU) through the
attention tests' stream (3 rows refilled at different steps, teacher forcing, 20 steps:
``tests/fixtures/moshi_attention.stream_with_refills``), and counts the generated tokens that differ from
the same stream with exact K/V, the first step where one does, and the largest text-logit difference
before it (the format's own error; after it the streams' inputs differ). Round trips: bfloat16 (the
released weights' own K/V dtype), float8 e4m3 and e5m2 unscaled, and e4m3 scaled per vector (each
row, head and step to its largest magnitude). A random model's logits are near-tied, so this measures
how chaotic the tiny model is as much as the format: what it can show is whether "tokens equal" is a
criterion any lossy format can meet here. The last line is one JSON object.

    .venv/bin/python bench/kv_precision.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _scaled(fmt: torch.dtype):
    def round_trip(x: torch.Tensor) -> torch.Tensor:
        scale = torch.finfo(fmt).max / x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12)
        return (x * scale).to(fmt).to(x.dtype) / scale
    return round_trip


ROUND_TRIPS = {
    "bfloat16": lambda x: x.to(torch.bfloat16).to(x.dtype),
    "float8_e4m3fn": lambda x: x.to(torch.float8_e4m3fn).to(x.dtype),
    "float8_e5m2": lambda x: x.to(torch.float8_e5m2).to(x.dtype),
    "float8_e4m3fn scaled per vector": _scaled(torch.float8_e4m3fn),
}


def stream(round_trip=None) -> tuple[np.ndarray, np.ndarray]:
    """The tiny Moshi's tokens and text logits over the attention tests' stream, its LM's K/V through
    ``round_trip`` (None: exact)."""
    from moshi.modules.transformer import RingKVCache

    from harness.models.moshi import TINY_LM
    from tests.fixtures.moshi_attention import stream_with_refills
    from tests.fixtures.moshi_forcing import tiny_moshi

    exact = RingKVCache.complete

    def complete(self, k, v, exec_mask):
        if self.capacity == TINY_LM["context"]:  # the LM's rings (the depformer's and Mimi's are other sizes)
            k, v = round_trip(k), round_trip(v)
        return exact(self, k, v, exec_mask)

    if round_trip is not None:
        RingKVCache.complete = complete
    try:
        return stream_with_refills(tiny_moshi())
    finally:
        RingKVCache.complete = exact


def main() -> int:
    os.environ["NO_TORCH_COMPILE"] = "1"
    tokens, logits = stream()
    generated = tokens >= 0
    out = {"tokens": int(generated.sum()), "round_trips": {}}
    for name, fn in ROUND_TRIPS.items():
        got_tokens, got_logits = stream(fn)
        differ = int(((got_tokens != tokens) & generated).sum())
        first = np.argwhere(((got_tokens != tokens) & generated).any(axis=(1, 2)))
        first = int(first[0, 0]) if len(first) else len(tokens)
        # the logits of the steps whose inputs are still the same tokens: the format's own error
        before = float(np.abs(got_logits[:first] - logits[:first]).max()) if first else 0.0
        out["round_trips"][name] = r = {"tokens_differing": differ, "first_step_differing": first,
                                        "text_logit_max_diff_before": round(before, 5),
                                        "text_logit_max_diff": round(float(np.abs(got_logits - logits).max()), 4)}
        print(f"K/V through {name:32s}: {differ:4d} of {out['tokens']} generated tokens differ, the first at step "
              f"{first}; text logits up to {r['text_logit_max_diff_before']} apart before it "
              f"({r['text_logit_max_diff']} after)", flush=True)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
