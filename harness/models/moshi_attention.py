"""Moshi's LM attention with one mask a step (issue 24, item 4; both attentions) and over the filled slots
of its ring KV cache (item 1): ``attention="flex"``.

Moshi's LM (moshi 0.2.13, ``moshi/modules/transformer.py``) attends every step over its whole
ring KV cache (``RingKVCache``: ``context_steps`` slots, 3,000 in the 7B config) with a boolean
mask, although a row that has run ``n`` steps since its last reset has filled only the slots
``[0, min(n, capacity))``. :func:`use_flex_attention` turns the LM transformer's
``StreamingMultiheadAttention`` modules into :class:`FlexStreamingAttention`: upstream's forward
with its ``scaled_dot_product_attention`` replaced by ``torch.nn.attention.flex_attention`` over
a block mask (:func:`filled_attention`)

* whose blocks of :data:`BLOCK` slots are, per row, those below the row's filled length, read from
  the ring's own per-row counter (``RingKVCache.end_offset``) on the device: no host sync, and
  every tensor has the same shape at every step, as capture in a CUDA graph needs;
* whose mask within those blocks is upstream's own predicate over the positions the ring returns
  (``pos_k >= 0`` and ``0 <= pos_q - pos_k < context``): positions, the context window
  (``set_attention_context``, ``context_steps`` including ``auto``), per-row resets and exec masks
  keep their meaning.

The mask is the same for every layer of a step (they hold equal per-row offsets and ring counters), so
the first attention makes it and the others read it (:class:`_StepPlan`) and only write their keys and
values (:func:`_write`), for flex's block mask and for upstream's boolean one alike
(:class:`SharedStepAttention`; :func:`share_step_masks` makes the default, dense, attention
:class:`DenseStreamingAttention`, upstream's output bit for bit): with the 7B's 32 layers about 620-650
fewer computing operations a step (docs/models.md, "One mask a step").

Exact: ``RingKVCache.complete`` gives every slot at or past the row's ``end_offset`` (after this
step's write) position -1, which the predicate drops, so the blocks skipped hold no slot the mask
keeps, and the output is SDPA's over the same mask up to float rounding. The one difference: a row
whose mask keeps nothing (only a row outside the LM's exec mask at its first position; the adapter
never sets one) gets zeros where SDPA gives NaN.

Compiled (``torch.compile``, static shapes) the kernel reads only the listed blocks; that is the
form for CUDA. Eager, flex_attention is its unfused reference: every slot scored, then the
predicate applied (exact, not faster), the form the CPU tests use for exactness.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from importlib.metadata import version

import torch
import torch.nn.functional as F
from einops import rearrange
from moshi.modules.transformer import RingKVCache, StreamingMultiheadAttention
from torch.nn.attention.flex_attention import BlockMask, flex_attention

MOSHI_VERSION = "0.2.13"
# upstream code FlexStreamingAttention mirrors (forward) or relies on (complete's positions): sha256 of
# its source (first 16 hex digits) in moshi 0.2.13
UPSTREAM = {"StreamingMultiheadAttention.forward": (StreamingMultiheadAttention.forward, "a8c043a35c11dabe"),
            "RingKVCache.complete": (RingKVCache.complete, "dcc8258a6e553665")}
BLOCK = 128  # slots per block of the block mask (flex_attention's default sparse block)


def _digest(fn) -> str:
    return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]


@functools.cache
def _flex(compiled: bool):
    return torch.compile(flex_attention, dynamic=False) if compiled else flex_attention


def filled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offset: torch.Tensor, pos_k: torch.Tensor,
                     filled: torch.Tensor, context: int | None, compiled: bool) -> torch.Tensor:
    """Causal attention of ``q`` over a ring's slots that reads only the blocks below each row's filled length.

    Args:
        q: ``[B, H, T, D]`` queries at positions ``offset[b] + t``.
        k, v: ``[B, H, S, D]`` the ring's slots (same dtype as ``q``).
        offset, pos_k, filled, context: the rows' positions and lengths (:func:`filled_mask`).
        compiled: run flex_attention compiled (reads only the listed blocks; the CUDA form) or eager.

    Returns:
        ``[B, H, T, D]`` in ``q``'s dtype: softmax(q k^T / sqrt(D)) v over the slots with
        ``pos_k >= 0`` and ``0 <= pos_q - pos_k < context``; zeros for a query that sees none.
    """
    mask = filled_mask(offset, pos_k, filled, context, q.shape[2], k.shape[2])
    return _flex(compiled)(q, k, v, block_mask=mask)


def filled_mask(offset: torch.Tensor, pos_k: torch.Tensor, filled: torch.Tensor, context: int | None, steps: int,
                slots: int) -> BlockMask:
    """The block mask of :func:`filled_attention`: for ``steps`` queries over a ring of ``slots``, per row
    the blocks of :data:`BLOCK` slots below its filled length, and within them upstream's predicate.

    Args:
        offset: ``int64[B]`` position of each row's first query (read when the mask is used: pass a copy
            of a counter that changes in place).
        pos_k: ``int64[B, S]`` position held in each slot, -1 where the slot holds none
            (``RingKVCache.complete``'s positions).
        filled: ``int64[B]`` slots written per row since its reset (``RingKVCache.end_offset`` after
            the write; may pass ``S``): every slot at or past it has ``pos_k == -1``.
        context: a query at position ``p`` sees positions ``(p - context, p]`` (None: ``[0, p]``).
        steps, slots: ``T`` queries a row, ``S`` slots in the ring.
    """
    rows = pos_k.shape[0]

    def keep(b, h, q_idx, kv_idx):  # moshi's attn_bias (StreamingMultiheadAttention.forward), per element
        pos = pos_k[b, kv_idx]
        delta = offset[b] + q_idx - pos
        kept = (pos >= 0) & (delta >= 0)
        return kept if context is None else kept & (delta < context)

    q_blocks, kv_blocks = -(-steps // BLOCK), -(-slots // BLOCK)
    count = (filled.clamp(max=slots) + BLOCK - 1) // BLOCK  # blocks holding a filled slot, per row
    num = count.to(torch.int32).view(rows, 1, 1).expand(rows, 1, q_blocks).contiguous()
    indices = torch.arange(kv_blocks, device=pos_k.device, dtype=torch.int32).expand(rows, 1, q_blocks, kv_blocks)
    return BlockMask.from_kv_blocks(num, indices.contiguous(), BLOCK_SIZE=BLOCK, mask_mod=keep,
                                    seq_lengths=(steps, slots), compute_q_blocks=False)


def _write(ring: RingKVCache, k: torch.Tensor, v: torch.Tensor,
           exec_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``RingKVCache.complete``'s write and counter (moshi 0.2.13, ``respect_exec_mask``) without its
    positions: ``k``, ``v`` ``[B, H, T, D]`` into each row's next slots; the row's counter advances where
    ``exec_mask``. Returns the ring's keys and values ``[B, H, S, D]``."""
    rows, heads, steps, dim = k.shape
    slots = (torch.arange(steps, device=ring.end_offset.device, dtype=ring.end_offset.dtype)
             + ring.end_offset.view(-1, 1)) % ring.capacity
    slots = slots.view(rows, 1, steps, 1).expand(-1, heads, steps, dim)
    ring.cache[0].scatter_(2, slots, k)
    ring.cache[1].scatter_(2, slots, v)
    ring.end_offset[:] = torch.where(exec_mask, ring.end_offset + steps, ring.end_offset)
    return ring.cache[0], ring.cache[1]


class _StepPlan:
    """What every attention of the LM reads alike in a step: the mask, made by the first
    (:class:`SharedStepAttention` ``leads``). The layers hold equal per-row offsets, ring counters
    and contexts (the same resets, exec masks and ``set_attention_context`` reach all of them), so one
    mask serves all, and the others only write their keys and values (issue 24, item 4)."""

    mask: BlockMask | torch.Tensor | None = None


class SharedStepAttention(StreamingMultiheadAttention):
    """moshi 0.2.13's ``StreamingMultiheadAttention`` (a causal self-attention, one set of weights, no
    repeated KV heads) whose streaming forward is upstream's, except that the transformer's first attention
    (``leads``) makes the step's mask from its ring's positions and the others (after it in every step)
    read it from ``plan`` and only write their keys and values (:func:`_write`). Made by
    :func:`share_step_masks` / :func:`use_flex_attention`, never constructed; outside streaming it is
    upstream's forward. Subclasses say which mask and which attention."""

    leads: bool = True
    plan: _StepPlan

    def _mask(self, offset: torch.Tensor, pos_k: torch.Tensor, filled: torch.Tensor, steps: int, slots: int):
        raise NotImplementedError

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """``query`` ``[B, T, embed_dim]`` -> ``[B, T, embed_dim]`` (``key`` and ``value`` are ``query``:
        a self-attention)."""
        state = self._streaming_state
        if state is None:
            return super().forward(query, key, value)
        steps = query.shape[1]
        q, k, v = rearrange(self.in_projs[0](query), "b t (p h d) -> p b h t d", p=3, h=self.num_heads)
        if self.rope:
            q, k = self.rope(q, k, state.offset, time_before_heads=False)
        if self.leads:
            k, v, pos_k = state.kv_cache.complete(k, v, state.exec_mask)
            self.plan.mask = self._mask(state.offset, pos_k, state.kv_cache.end_offset, steps, k.shape[2])
        else:
            k, v = _write(state.kv_cache, k, v, state.exec_mask)
        x = self._attend(q, k, v, self.plan.mask)
        x = self.out_projs[0](rearrange(x, "b h t d -> b t (h d)"))
        state.offset[:] = torch.where(state.exec_mask, state.offset + steps, state.offset)
        state.offset_cpu += steps
        return x


class DenseStreamingAttention(SharedStepAttention):
    """``attention="dense"``: upstream's boolean mask (``StreamingMultiheadAttention.forward``'s
    ``attn_bias``, made once a step) and its ``scaled_dot_product_attention`` over every slot: upstream's
    output bit for bit."""

    def _mask(self, offset, pos_k, filled, steps, slots):
        pos_k = pos_k[:, None]
        pos_q = offset.view(-1, 1, 1) + torch.arange(steps, device=offset.device, dtype=torch.long).view(-1, 1)
        delta = pos_q - pos_k
        bias = (pos_k >= 0) & (delta >= 0)
        if self.context is not None:
            bias = bias & (delta < self.context)
        return bias[:, None]

    def _attend(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, mask, dropout_p=0.0)


class FlexStreamingAttention(SharedStepAttention):
    """``attention="flex"``: ``flex_attention`` over the step's :func:`filled_mask` (the filled slots only).
    ``compiled``: run flex_attention compiled."""

    compiled: bool = False

    def _mask(self, offset, pos_k, filled, steps, slots):
        # the mask reads offset when it is used: a copy, as the leader advances it before the others attend
        return filled_mask(offset.clone(), pos_k, filled, self.context, steps, slots)

    def _attend(self, q, k, v, mask):
        return _flex(self.compiled)(q, k, v, block_mask=mask)


def use_flex_attention(transformer: torch.nn.Module, compiled: bool) -> int:
    """Make every attention of ``transformer`` (Moshi's LM transformer, ``lm.transformer``; not Mimi's,
    not the depformer's) a :class:`FlexStreamingAttention`, in place, before any stream opens.

    Args:
        transformer: a module holding moshi ``StreamingMultiheadAttention`` modules.
        compiled: run flex_attention compiled (CUDA) or eager (CPU).

    Returns:
        The number of attention modules changed.

    Raises:
        RuntimeError: the installed moshi's code that this mirrors differs from moshi 0.2.13's (the
            message names both versions); or ``transformer`` has no attention, or one that is not a
            causal self-attention with one set of weights and no repeated KV heads, or attentions with
            different contexts.
    """
    changed = _share(_mirrorable(transformer, "flex"), FlexStreamingAttention)
    for module in changed:
        module.compiled = compiled
    return len(changed)


def share_step_masks(transformer: torch.nn.Module) -> int:
    """``attention="dense"``: make every attention of ``transformer`` (Moshi's LM transformer) a
    :class:`DenseStreamingAttention` (upstream's attention, its mask made once a step), in place, before any
    stream opens. Where that cannot be (the installed moshi's code is not the code this mirrors, or its
    source cannot be read; an attention of another kind; attentions with different contexts) upstream's
    modules stay: the same output, a mask a layer.

    Returns:
        The number of attention modules changed (0: upstream's kept).
    """
    try:
        found = _mirrorable(transformer, "dense")
    except (RuntimeError, OSError):
        return 0
    return len(_share(found, DenseStreamingAttention))


def _mirrorable(transformer: torch.nn.Module, name: str) -> list[StreamingMultiheadAttention]:
    """The attentions of ``transformer``, in the order it runs them, if one step mask can serve them all with
    the code mirrored here; else RuntimeError (OSError where moshi's source cannot be read)."""
    for part, (fn, digest) in UPSTREAM.items():
        if _digest(fn) != digest:
            raise RuntimeError(f"moshi attention '{name}' mirrors moshi {MOSHI_VERSION}'s {part}, whose code differs "
                               f"in the installed moshi {version('moshi')}: use attention 'dense', or port "
                               "harness/models/moshi_attention.py to it")
    found = [m for m in transformer.modules() if isinstance(m, StreamingMultiheadAttention)]
    odd = [m for m in found if m.cross_attention or not m.causal or m.weights_per_step or m.kv_repeat != 1]
    if not found or odd:
        raise RuntimeError(f"moshi attention '{name}' takes causal self-attentions with one set of weights and no "
                           f"repeated KV heads (moshi {MOSHI_VERSION}'s LM): found {len(found)}, {len(odd)} of "
                           "another kind")
    if len({m.context for m in found}) != 1:  # the first's mask serves all (_StepPlan)
        raise RuntimeError(f"moshi attention '{name}' shares one mask between the attentions of a transformer, "
                           f"which needs one context for all; found {sorted({str(m.context) for m in found})}")
    return found


def _share(found: list[StreamingMultiheadAttention], cls: type[SharedStepAttention]) -> list[SharedStepAttention]:
    """``found`` made ``cls``, the first leading, one :class:`_StepPlan` between them. (One context for all
    is checked here; a later ``set_attention_context`` on some of them only would go unseen: moshi and the
    adapter set it on the whole transformer.)"""
    plan = _StepPlan()
    for i, module in enumerate(found):  # in the order the transformer runs them
        module.__class__ = cls
        module.leads, module.plan = i == 0, plan
    return found
