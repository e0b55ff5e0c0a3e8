"""GPU memory of full-size Moshi's streaming state per row, counted from the real code on the meta device.

Builds the 7B LM (``moshi.models.loaders._lm_kwargs``) and Mimi (``_mimi_config``) with moshi's own
loaders on ``torch.device("meta")`` (shapes and dtypes, no memory, no weights), opens the streaming state
the adapter opens (``LMGen`` over the LM, Mimi and its teacher-forcing twin, ``harness.models.moshi``) for
``--rows``, and adds up the bytes of every tensor those states hold: the LM's ring KV caches (sized by
``--contexts``, moshi's ``set_attention_context`` as ``MoshiModel(context_steps=...)`` sets it), the
depformer's, LMGen's token cache, Mimi's; with ``--kv-pools``, also for ``attention="paged"`` (the LM's K/V
in one pool of pages for all rows, ``MoshiModel(kv_pool=...)``: the pool is what is allocated, whatever the
rows hold). Per context it prints the bytes per row (the slope between the
row counts), the weights, and how many rows fit beside the weights in 80 and 141 GB with a headroom
(issue 24: at most 0.75 GiB a row, 128 rows or more). Activations, the CUDA context, CUDA graphs' pools
and the allocator's fragmentation are not counted: a measured peak (``bench/gpu_throughput.py``) is higher.
The last line is one JSON object.

    .venv/bin/python bench/moshi_memory.py                         # rings of 3000, 2000, 1500, 1000 steps
    .venv/bin/python bench/moshi_memory.py --contexts 3000 --rows 1,128
    .venv/bin/python bench/moshi_memory.py --contexts 3000 --kv-pools 1,0.5,0.4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GIB = 2**30
GPUS_GB = {"80 GB": 80e9, "141 GB": 141e9}  # the H100's and the H200's memory, as sold (decimal)
HEADROOM = 0.95  # fragmentation, the CUDA context (tests/unit/test_model_memory.py's)


def state_bytes(modules: list[torch.nn.Module]) -> int:
    """Bytes of the tensors held by the streaming states of ``modules`` and their submodules (each tensor
    once; a state's attributes and the lists, tuples and objects they hold, three levels down)."""
    seen: set[int] = set()

    def walk(obj, depth: int) -> int:
        if isinstance(obj, torch.Tensor):
            if id(obj) in seen:
                return 0
            seen.add(id(obj))
            return obj.numel() * obj.element_size()
        if depth == 0:
            return 0
        if isinstance(obj, (list, tuple)):
            return sum(walk(x, depth - 1) for x in obj)
        return sum(walk(x, depth - 1) for x in vars(obj).values()) if hasattr(obj, "__dict__") else 0

    states = {id(s): s for m in modules for sub in m.modules() if (s := getattr(sub, "_streaming_state", None))}
    return sum(walk(s, 3) for s in states.values())


def build():
    """Full-size LM (bfloat16, as released), its LMGen, Mimi and Mimi's twin, on the meta device."""
    from moshi.models import loaders
    from moshi.models.lm import LMGen

    from harness.models.moshi import mimi_twin

    lm = loaders.get_moshi_lm(None, lm_kwargs=dict(loaders._lm_kwargs), device="meta", dtype=torch.bfloat16)
    mimi = loaders.get_mimi(None, mimi_config=dict(loaders._mimi_config), device="meta")
    return lm, LMGen(lm, support_out_of_sync=True), mimi, mimi_twin(mimi)


def account(contexts: list[int], rows: list[int], kv_pool: float | None = None) -> dict:
    """Streaming-state bytes at each of ``rows`` for each of ``contexts`` (steps of 80 ms); with ``kv_pool``,
    of ``attention="paged"`` with a pool of that many full rings a row."""
    from harness.models.moshi import _set_context
    from harness.models.moshi_attention import use_paged_attention

    lm, gen, mimi, twin = build()
    if kv_pool is not None:
        use_paged_attention(lm.transformer, compiled=False, pool=kv_pool)
    weights = sum(p.numel() * 2 for p in lm.parameters()) + sum(p.numel() * 4 for p in mimi.parameters())
    out = {"weights_gib": round(weights / GIB, 3), "kv_pool": kv_pool, "contexts": []}
    for context in contexts:
        _set_context(lm, context)
        held = {}
        for r in rows:
            with gen.streaming(r), mimi.streaming(r), twin.streaming(r):
                held[r] = state_bytes([gen, mimi, twin])
        per_row = (held[rows[-1]] - held[rows[0]]) / (rows[-1] - rows[0])
        fit = {gpu: int((HEADROOM * size - weights - (held[rows[0]] - per_row * rows[0])) // per_row)
               for gpu, size in GPUS_GB.items()}
        out["contexts"].append({"context_steps": context, "context_s": context * 0.08,
                                "state_gib": {r: round(b / GIB, 4) for r, b in held.items()},
                                "per_row_gib": round(per_row / GIB, 4), "rows_that_fit": fit})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="3000,2000,1500,1000", help="ring sizes in steps of 80 ms, comma-separated")
    ap.add_argument("--rows", default="1,64", help="row counts to open (at least two; the slope is per row)")
    ap.add_argument("--kv-pools", default="", help="also attention=paged with these pools, in full rings a row "
                                                   "(MoshiModel kv_pool), comma-separated")
    args = ap.parse_args(argv)
    rows = sorted(int(r) for r in args.rows.split(","))
    if len(rows) < 2 or rows[0] < 1:
        ap.error("--rows needs two or more positive row counts")
    t0 = time.perf_counter()
    contexts = [int(c) for c in args.contexts.split(",")]
    results = [account(contexts, rows, pool) for pool in [None, *(float(p) for p in args.kv_pools.split(",") if p)]]
    print(f"full-size Moshi on the meta device: weights {results[0]['weights_gib']} GiB (the LM in bfloat16, Mimi in "
          "float32)")
    for res in results:
        kind = "dense/flex rings" if res["kv_pool"] is None else f"paged, kv_pool {res['kv_pool']:g}"
        for c in res["contexts"]:
            fits = ", ".join(f"{n} rows in {gpu}" for gpu, n in c["rows_that_fit"].items())
            print(f"  {kind}, ring {c['context_steps']:5d} steps ({c['context_s']:6.1f} s): {c['per_row_gib']:.4f} GiB "
                  f"a row; {fits} (state and weights only, {HEADROOM:.0%} of the memory)")
    out = {**results[0], "paged": results[1:], "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
