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

``attention="paged"`` (item 3, :func:`use_paged_attention`) is flex over one pool of K/V pages for all
rows instead of a ring a row: :class:`KVPages` (the host's ledger of which page holds which row's ring
block, and the device tables), :class:`PagedRing` (a layer's pool, RingKVCache's counter and positions),
:func:`paged_mask` (the pages a row holds, and upstream's predicate on the ring slots they hold). Its
output is dense's up to float rounding for finite keys and values; eager, a non-finite value anywhere in
the pool reaches every row (every slot is scored, weight 0 times NaN), compiled only the rows that read it.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
from collections.abc import Iterable
from importlib.metadata import version

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from moshi.modules.transformer import RingKVCache, StreamingMultiheadAttention, _MHAState
from torch.nn.attention.flex_attention import BlockMask, flex_attention

MOSHI_VERSION = "0.2.13"
# upstream code FlexStreamingAttention mirrors (forward) or relies on (complete's positions): sha256 of
# its source (first 16 hex digits) in moshi 0.2.13
UPSTREAM = {"StreamingMultiheadAttention.forward": (StreamingMultiheadAttention.forward, "a8c043a35c11dabe"),
            "RingKVCache.complete": (RingKVCache.complete, "dcc8258a6e553665"),
            "StreamingMultiheadAttention._init_streaming_state": (StreamingMultiheadAttention._init_streaming_state,
                                                                  "031bf8a077ce4b73")}
BLOCK = 128  # slots per block of the block mask (flex_attention's default sparse block)


def _digest(fn) -> str:
    return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]


@functools.cache
def _flex(compiled: bool):
    return torch.compile(flex_attention, dynamic=False) if compiled else flex_attention


def _attn_bias(pos_q: torch.Tensor, pos_k: torch.Tensor, context: int | None) -> torch.Tensor:
    """moshi 0.2.13's ``attn_bias`` (``StreamingMultiheadAttention.forward``): a query at position ``pos_q``
    sees a slot holding position ``pos_k`` when it holds one (``>= 0``), not later, and within ``context``
    (broadcast; per element in a flex mask)."""
    delta = pos_q - pos_k
    kept = (pos_k >= 0) & (delta >= 0)
    return kept if context is None else kept & (delta < context)


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

    def keep(b, h, q_idx, kv_idx):
        return _attn_bias(offset[b] + q_idx, pos_k[b, kv_idx], context)

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
    mask serves all, and the others only write their keys and values (issue 24, item 4). With
    ``attention="paged"`` also the pages each row holds (:class:`KVPages`, one for the streaming state,
    made by the first attention's ``_init_streaming_state``), the pool's size in full rings a row, and
    the page size."""

    mask: BlockMask | torch.Tensor | None = None
    pages: KVPages | None = None
    pool: float = 1.0
    page: int = BLOCK


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
        elif isinstance(state.kv_cache, PagedRing):
            k, v = state.kv_cache.write(k, v, state.exec_mask)
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
        pos_q = offset.view(-1, 1, 1) + torch.arange(steps, device=offset.device, dtype=torch.long).view(-1, 1)
        return _attn_bias(pos_q, pos_k[:, None], self.context)[:, None]

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


class KVPages:
    """Which pages of the LM's K/V pool each row holds (``attention="paged"``, issue 24, item 3): the host's
    bookkeeping and the device tables the attentions read. One per streaming state, shared by every paged
    attention of the transformer (they hold the same rows, resets and counters: :class:`_StepPlan`).

    A row's ring of ``capacity`` slots is ``blocks = ceil(capacity / page)`` logical blocks; block ``j`` of
    row ``b`` lives in page ``table[b, j]`` of every layer's pool (:class:`PagedRing`: ``pages`` pages of
    ``page`` slots, then one scratch page). An open row (one holding a stream) takes a page from the free
    list just before the step that first writes into each block (:meth:`before_step`) and keeps it until
    its stream ends, so it holds pages for what it has written, at most its ring; a ``whole`` row (a stream
    run again after it was given back) takes its whole ring at its first step and is given back only if
    nothing else frees enough. A row that holds no stream (never opened, closed, padding) holds no page: it
    writes into the scratch page, which no mask keeps, and attends to nothing (its output is dropped). A page's
    values are zeroed when it is taken, so what its last owner left in the slots not yet written (masked,
    weight 0) cannot reach the new owner as 0 x NaN. Every count is the host's: ``written`` mirrors the rings'
    ``end_offset`` (:meth:`after_step`), so no device value is read back.

    Args:
        rows: ``R``, the streaming state's batch.
        capacity: slots of a row's ring (the attention's context, in steps).
        pool: the pool's size in full rings a row: ``pages = max(blocks, ceil(pool * rows * blocks))``.
            1.0 or more: every row can fill its ring and :meth:`before_step` never gives a stream back; less
            overcommits the memory (a row holds pages only for what it has written).
        page: slots a page (flex_attention's key/value block: a multiple of 16 where it runs compiled).
        device: where the attentions run (on CUDA the host tables are pinned, their copies do not block).

    Raises:
        ValueError: ``pool`` is not positive or ``page`` is below 1.
    """

    def __init__(self, rows: int, capacity: int, pool: float, page: int, device: torch.device | str):
        if not pool > 0 or page < 1:
            raise ValueError(f"a K/V pool needs a positive size and page, got pool {pool} and page {page}")
        self.rows, self.capacity, self.page = rows, capacity, page
        self.blocks = -(-capacity // page)
        self.pages = max(self.blocks, math.ceil(pool * rows * self.blocks))
        self.scratch = self.pages  # the page after the pool: where rows without a page write
        pinned = torch.device(device).type == "cuda"

        def table(shape: tuple[int, ...], fill: int, dev: torch.Tensor | None = None):
            host = torch.full(shape, fill, dtype=torch.int32, pin_memory=pinned)
            if dev is None:
                dev = torch.full(shape, fill, dtype=torch.int32, device=device)
            self._copies.append((host, dev))
            return host.numpy(), dev

        # host tables (numpy views of host tensors, copied to the device by before_step) and their device
        # copies, which keep their storage (a CUDA graph reads them where they were at capture)
        self._copies: list[tuple[torch.Tensor, torch.Tensor]] = []
        # the block mask's kv indices [R, 1, 1, pages + 1]: each row's page of each of its blocks, padded to the
        # pool's pages (flex compiled takes them all); the first `blocks` are the table
        self.indices_dev = torch.full((rows, 1, 1, self.pages + 1), self.scratch, dtype=torch.int32, device=device)
        self.sizes_dev = torch.tensor(page, device=device), torch.tensor(capacity, device=device)  # (paged_mask)
        self.table, _ = table((rows, self.blocks), self.scratch, self.indices_dev[:, 0, 0, :self.blocks])
        self.owner, self.owner_dev = table((self.pages + 1,), -1)  # page -> the row holding it, or -1
        self.block, self.block_dev = table((self.pages + 1,), -1)  # page -> its block in that row
        self.held, self.held_dev = table((rows,), 0)  # pages a row holds: its first blocks
        # the pages taken by a step, to zero (a pinned buffer and its device copy, the first n of them used)
        self._taken = torch.zeros(self.pages, dtype=torch.int64, pin_memory=pinned)
        self._taken_dev = torch.zeros(self.pages, dtype=torch.int64, device=device)
        self.rings: list[PagedRing] = []  # every layer's pool (PagedRing registers itself)
        self.written = np.zeros(rows, np.int64)  # slots written since the row's reset (its rings' end_offset)
        self.open = np.zeros(rows, bool)  # rows holding a stream
        self.whole = np.zeros(rows, bool)  # open rows that take their whole ring at once (reruns)
        self.free = list(range(self.pages - 1, -1, -1))  # pop() takes the lowest page
        self._dirty = True

    def reset(self, rows: Iterable[int], whole: Iterable[int] = ()) -> None:
        """``rows`` start a fresh stream (their rings are reset in the same step): no page yet, open; those also
        in ``whole`` take their whole ring at the next :meth:`before_step`."""
        whole = set(whole)
        for b in rows:
            self.release(b)
            self.open[b], self.whole[b] = True, b in whole

    def release(self, b: int) -> None:
        """Row ``b`` holds no stream (its stream ended, or it is padding): its pages go back to the pool."""
        held = self.table[b, :self.held[b]].copy()
        self.owner[held], self.block[held] = -1, -1
        self.free.extend(held[::-1].tolist())
        self.table[b], self.held[b], self.written[b], self.open[b], self.whole[b] = self.scratch, 0, 0, False, False
        self._dirty = True

    def before_step(self) -> dict[int, int]:
        """Before a step: a page for every open row whose next write enters a block it does not hold (a whole
        row: every page of its ring it lacks), pages taken zeroed, and the tables to the device. When the free
        pages do not cover them, open rows give theirs back until they do: the youngest first (fewest slots
        written; of equals the higher row), whole rows last (the oldest can always go on: the pool holds at
        least one ring). Returns ``{row: slots written}`` of the rows given back, which are no longer open:
        their stream's output from this step on is meaningless, the caller ends it."""
        want = (self.open & ((self.written % self.capacity) // self.page >= self.held)).astype(np.int64)
        want = np.where(self.whole & self.open, self.blocks - self.held, want)
        given: dict[int, int] = {}
        if want.sum() > len(self.free):
            order = sorted(np.flatnonzero(self.open).tolist(), key=lambda b: (self.whole[b], self.written[b], -b))
            for b in order:
                if want.sum() <= len(self.free):
                    break
                given[b] = int(self.written[b])
                want[b] = 0
                self.release(b)
        taken = []
        for b in np.flatnonzero(want).tolist():
            for _ in range(want[b]):
                page, j = self.free.pop(), self.held[b]
                self.table[b, j], self.owner[page], self.block[page] = page, b, j
                self.held[b] += 1
                taken.append(page)
        if taken:  # zero their values, outside the step (and any CUDA graph), in each layer's pool
            n = len(taken)
            self._taken[:n] = torch.tensor(taken)
            self._taken_dev[:n].copy_(self._taken[:n], non_blocking=True)
            for ring in self.rings:
                ring.pages_of(1).index_fill_(1, self._taken_dev[:n], 0)
            self._dirty = True
        if self._dirty:
            for host, dev in self._copies:  # pinned on CUDA; rewritten only after the step's output copy waited
                dev.copy_(host, non_blocking=True)
            self._dirty = False
        return given

    def begin_step(self, fresh: Iterable[int], holding: Iterable[int], whole: Iterable[int] = ()) -> dict[int, int]:
        """A model's step's page work, before it runs: ``fresh`` rows were reset (their rings too): those
        ``holding`` a stream start with no page (those in ``whole`` take their whole ring), the others hold
        none; then :meth:`before_step`, whose rows given back this returns."""
        fresh, holding = set(fresh), set(holding)
        self.reset(sorted(fresh & holding), whole)
        for b in sorted(fresh - holding):
            self.release(b)
        return self.before_step()

    def admits(self, opening: Iterable[int], whole: Iterable[int]) -> bool:
        """May one more stream open, beside the rows ``opening`` since the last step (each takes a page at its
        first step; those in ``whole``, reruns, their whole ring)? While the free pages hold a whole ring
        beside them, so the stream can take its whole ring at once if it is a rerun."""
        whole = set(whole)
        return len(self.free) - sum(self.blocks if b in whole else 1 for b in opening) >= self.blocks

    def after_step(self, ran: np.ndarray | None = None, steps: int = 1) -> None:
        """After a step of ``steps`` positions: the rows in ``ran`` (``bool[R]``, the attentions' exec mask;
        default all) wrote them."""
        self.written += steps if ran is None else np.where(ran, steps, 0)


class PagedRing:
    """One attention's keys and values in the pages of a :class:`KVPages` (``attention="paged"``): moshi
    0.2.13's ``RingKVCache`` (its per-row counter ``end_offset``, reset, write slot and slot positions), over
    a pool ``[2, 1, H, (pages + 1) * page, D]`` for all rows instead of ``[2, B, H, capacity, D]``."""

    def __init__(self, pages: KVPages, heads: int, dim: int, device: torch.device, dtype: torch.dtype):
        self.pages, self.capacity = pages, pages.capacity
        self.cache = torch.zeros((2, 1, heads, (pages.pages + 1) * pages.page, dim), device=device, dtype=dtype)
        self.end_offset = torch.zeros(pages.rows, device=device, dtype=torch.long)
        pages.rings.append(self)

    def pages_of(self, kv: int) -> torch.Tensor:
        """The keys (``kv`` 0) or values (1) as ``[H, pages + 1, page, D]`` (a view)."""
        heads, dim = self.cache.shape[2], self.cache.shape[4]
        return self.cache[kv, 0].view(heads, self.pages.pages + 1, self.pages.page, dim)

    def reset(self, reset_mask: torch.Tensor) -> None:
        self.end_offset[:] = torch.where(reset_mask, torch.zeros_like(self.end_offset), self.end_offset)

    def write(self, k: torch.Tensor, v: torch.Tensor, exec_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``k``, ``v`` ``[B, H, T, D]`` into each row's next ring slots, in the pages holding them (a row
        without pages: the scratch page); the counter advances where ``exec_mask``. Returns the pool's keys
        and values ``[1, H, S, D]``."""
        rows, heads, steps, dim = k.shape
        page = self.pages.page
        slot = (torch.arange(steps, device=k.device, dtype=torch.long) + self.end_offset.view(-1, 1)) % self.capacity
        where = (self.pages.indices_dev[:, 0, 0].gather(1, slot // page).long() * page + slot % page).view(-1)
        self.cache[0, 0].index_copy_(1, where, k.transpose(0, 1).reshape(heads, rows * steps, dim))
        self.cache[1, 0].index_copy_(1, where, v.transpose(0, 1).reshape(heads, rows * steps, dim))
        self.end_offset[:] = torch.where(exec_mask, self.end_offset + steps, self.end_offset)
        return self.cache[0], self.cache[1]

    def complete(self, k: torch.Tensor, v: torch.Tensor,
                 exec_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`write`, and the position each row's ring slot holds, ``int64[B, capacity]``, -1 where none:
        ``RingKVCache.complete``'s positions."""
        slots = torch.arange(self.capacity, device=k.device, dtype=torch.long)
        last = self.end_offset.view(-1, 1) + k.shape[2] - 1
        delta = slots - last % self.capacity
        positions = torch.where(delta <= 0, last + delta, last + delta - self.capacity)
        keys, values = self.write(k, v, exec_mask)
        return keys, values, torch.where(slots >= self.end_offset.view(-1, 1), -1, positions)


def paged_mask(offset: torch.Tensor, pos_k: torch.Tensor, pages: KVPages, context: int | None,
               steps: int) -> BlockMask:
    """:func:`filled_mask` over a :class:`KVPages` pool: per row the pages it holds (the blocks of its
    filled slots), and within them upstream's predicate on the positions of the ring slots they hold.

    Args:
        offset: ``int64[B]`` position of each row's first query (a copy: read when the mask is used).
        pos_k: ``int64[B, capacity]`` position held in each ring slot, -1 where none (:meth:`PagedRing.complete`).
        pages: the pool's tables.
        context, steps: as :func:`filled_mask`.
    """
    rows, page = pos_k.shape[0], pages.page
    owner, block = pages.owner_dev, pages.block_dev
    # the page's and the ring's sizes as tensors: flex runs its mask through dynamo even eager, which makes an
    # int that changed between calls symbolic, and vmap then fails to multiply by it (torch 2.9.1)
    page_t, capacity_t = pages.sizes_dev

    def keep(b, h, q_idx, kv_idx):  # a pool slot -> its row's ring slot, then moshi's attn_bias
        j = torch.where(owner[kv_idx // page_t] == b, block[kv_idx // page_t], -1)
        slot = j * page_t + kv_idx % page_t
        pos = pos_k[b, torch.minimum(slot.clamp(min=0), capacity_t - 1)]
        return (j >= 0) & (slot < capacity_t) & _attn_bias(offset[b] + q_idx, pos, context)

    q_blocks = -(-steps // page)
    num = pages.held_dev.view(rows, 1, 1).expand(rows, 1, q_blocks).contiguous()
    indices = pages.indices_dev.expand(rows, 1, q_blocks, pages.pages + 1).contiguous()
    return BlockMask.from_kv_blocks(num, indices, BLOCK_SIZE=page, mask_mod=keep,
                                    seq_lengths=(steps, (pages.pages + 1) * page), compute_q_blocks=False)


class PagedStreamingAttention(FlexStreamingAttention):
    """``attention="paged"``: :class:`FlexStreamingAttention` over a :class:`PagedRing` (the rows' keys and
    values in pages of one pool, :class:`KVPages`) instead of moshi's ``RingKVCache``: the same output up to
    float rounding, memory for the pool's pages rather than a ring a row."""

    def _init_streaming_state(self, batch_size: int) -> _MHAState:
        """moshi 0.2.13's state of a causal self-attention over ``nn.Linear`` weights, its ring a
        :class:`PagedRing`; the first attention makes the state's :class:`KVPages` (streaming starts the
        transformer's modules in the order they run)."""
        weight = self.in_projs[0].weight
        if self.leads:
            self.plan.pages = KVPages(batch_size, self.context, self.plan.pool, self.plan.page, weight.device)
        pages = self.plan.pages
        ring = PagedRing(pages, self.num_heads, self.embed_dim // self.num_heads, weight.device, weight.dtype)
        return _MHAState(batch_size, weight.device, ring,
                         offset=torch.zeros(batch_size, device=weight.device, dtype=torch.long), offset_cpu=0)

    def _mask(self, offset, pos_k, filled, steps, slots):
        return paged_mask(offset.clone(), pos_k, self.plan.pages, self.context, steps)


def use_paged_attention(transformer: torch.nn.Module, compiled: bool, pool: float = 1.0,
                        page: int | None = None) -> int:
    """Make every attention of ``transformer`` (Moshi's LM transformer) a :class:`PagedStreamingAttention`,
    in place, before any stream opens: each streaming state then holds one :class:`KVPages` of ``pool``
    full rings a row in pages of ``page`` slots (default :data:`BLOCK`) (:func:`kv_pages`).

    Returns:
        The number of attention modules changed.

    Raises:
        RuntimeError: as :func:`use_flex_attention`; or an attention without a context (no ring size) or
            whose input projection is not an ``nn.Linear`` (LoRA, quantised).
        (:class:`KVPages` checks ``pool`` and ``page`` when a streaming state opens.)
    """
    page = BLOCK if page is None else page
    found = _mirrorable(transformer, "paged")
    if found[0].context is None or any(type(m.in_projs[0]) is not torch.nn.Linear for m in found):
        raise RuntimeError("moshi attention 'paged' takes attentions with a context and nn.Linear projections "
                           f"(moshi {MOSHI_VERSION}'s LM)")
    changed = _share(found, PagedStreamingAttention)
    changed[0].plan.pool, changed[0].plan.page = pool, page
    for module in changed:
        module.compiled = compiled
    return len(changed)


def kv_pages(transformer: torch.nn.Module) -> KVPages | None:
    """The :class:`KVPages` of ``transformer``'s paged attentions in their current streaming state (None:
    not paged, or not streaming)."""
    module = next((m for m in transformer.modules() if isinstance(m, PagedStreamingAttention)), None)
    return None if module is None or module._streaming_state is None else module.plan.pages


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
