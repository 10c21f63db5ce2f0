"""Deterministic splits of a vector: its rows over R ranks × M micro-batches (``--partition``),
its vocabulary over K ranks (``--shard-vocab``).

A row partition is a tuple over ranks of tuples over micro-batches of row indices; every slot
holds at least one row, since a data loader never yields an empty micro-batch. Its kinds:

- ``even``: slots of equal row counts and equal token counts where the vector allows it (the
  one split where a per-micro-batch mean is exact), else rows in order, as equal as they go;
- ``uneven``: rows sorted by their token count (longest first) before the same split, so that
  the micro-batches' token counts spread as far as the vector allows;
- ``empty``: every row without an unmasked token in rank 0's last micro-batch, the other rows
  evenly over the other slots (only for vectors that have such rows);
- ``short-rank``: the last rank gets one row per micro-batch, the others share the rest.

A kind that the vector cannot produce, or that repeats an earlier kind's split, is left out.
A vocabulary split is a tuple of (start, end) ranges: ``even``; ``uneven`` (the last shard a
single token); ``neg-inf`` (one shard holds only −inf logits of some row, where a contiguous
split can isolate such a run).
"""
from __future__ import annotations

import re

import numpy as np

ROW_KINDS = ("even", "uneven", "empty", "short-rank")
VOCAB_KINDS = ("even", "uneven", "neg-inf")
_SPEC = re.compile(r"^([1-9][0-9]*)x([1-9][0-9]*)(?::([a-z-]+))?$")
_VOCAB = re.compile(r"^([1-9][0-9]*)(?::([a-z-]+))?$")
MAX_RANKS = 8


def parse_partition(text: str) -> tuple[int, int, str | None]:
    """``RxM`` or ``RxM:kind`` -> (R, M, kind or None); ValueError with the reason."""
    m = _SPEC.match(text.strip())
    if not m:
        raise ValueError(f"expected RxM or RxM:KIND (ranks × micro-batches, e.g. 2x2 or 2x2:uneven), got {text!r}")
    r, mb, kind = int(m.group(1)), int(m.group(2)), m.group(3)
    if kind is not None and kind not in ROW_KINDS:
        raise ValueError(f"unknown partition kind {kind!r}; kinds: {', '.join(ROW_KINDS)}")
    if r > MAX_RANKS:
        raise ValueError(f"at most {MAX_RANKS} ranks, got {r}")
    return r, mb, kind


def parse_shards(text: str) -> tuple[int, str | None]:
    """``K`` or ``K:kind`` -> (K, kind or None)."""
    m = _VOCAB.match(text.strip())
    if not m:
        raise ValueError(f"expected K or K:KIND (vocabulary shards, e.g. 2 or 2:neg-inf), got {text!r}")
    k, kind = int(m.group(1)), m.group(2)
    if kind is not None and kind not in VOCAB_KINDS:
        raise ValueError(f"unknown shard kind {kind!r}; kinds: {', '.join(VOCAB_KINDS)}")
    if not 2 <= k <= MAX_RANKS:
        raise ValueError(f"K must be between 2 and {MAX_RANKS}, got {k}")
    return k, kind


def _slots(order, n_slots: int) -> list[list[int]]:
    return [list(map(int, c)) for c in np.array_split(np.asarray(order, dtype=int), n_slots)]


def _balanced(counts: np.ndarray, n_slots: int, budget: int = 20000) -> list[list[int]] | None:
    """Slots of equal row counts *and* equal token counts, if the rows allow them (a depth-first
    search, longest rows first, bounded by ``budget`` steps); None otherwise. Where every row has
    the same count, the contiguous split already is one."""
    b, total = len(counts), int(counts.sum())
    if b % n_slots or total % n_slots:
        return None
    if len(set(counts.tolist())) == 1:
        return _slots(range(b), n_slots)
    size, target = b // n_slots, total // n_slots
    order = sorted(range(b), key=lambda i: (-counts[i], i))
    slots = [[] for _ in range(n_slots)]
    sums = [0] * n_slots
    steps = [0]

    def place(k: int) -> bool:
        if k == b:
            return True
        steps[0] += 1
        if steps[0] > budget:
            return False
        i, tried = order[k], set()
        for j in range(n_slots):
            key = (len(slots[j]), sums[j])
            if key in tried or len(slots[j]) == size or sums[j] + counts[i] > target:
                continue
            tried.add(key)   # slots in the same state are interchangeable
            slots[j].append(i)
            sums[j] += int(counts[i])
            if place(k + 1):
                return True
            slots[j].pop()
            sums[j] -= int(counts[i])
        return False

    return slots if place(0) else None


def _by_rank(slots: list[list[int]], ranks: int, micro: int) -> tuple:
    return tuple(tuple(tuple(sorted(slots[r * micro + m])) for m in range(micro)) for r in range(ranks))


def row_partitions(counts, ranks: int, micro: int) -> dict[str, tuple]:
    """{kind: partition} for a vector whose rows have these token counts (1 per row where the
    objective has no tokens)."""
    counts = np.asarray(counts, dtype=int)
    b, s = len(counts), ranks * micro
    out: dict[str, tuple] = {}
    if b < s:
        return out
    balanced = _balanced(counts, s)
    out["even"] = _by_rank(balanced if balanced else _slots(range(b), s), ranks, micro)
    out["uneven"] = _by_rank(_slots(np.argsort(-counts, kind="stable"), s), ranks, micro)
    empty = [i for i in range(b) if counts[i] == 0]
    full = [i for i in range(b) if counts[i] > 0]
    if empty and len(full) >= s - 1 and s > 1:
        slots = _slots(full, s - 1)
        slots.insert(micro - 1, empty)
        out["empty"] = _by_rank(slots, ranks, micro)
    if ranks > 1 and b - micro >= (ranks - 1) * micro + 1:
        slots = _slots(range(b - micro), s - micro) + [[i] for i in range(b - micro, b)]
        out["short-rank"] = _by_rank(slots, ranks, micro)
    seen, unique = set(), {}
    for kind, part in out.items():
        if part not in seen:
            seen.add(part)
            unique[kind] = part
    return unique


def describe(partition: tuple, counts) -> str:
    """``r0[0,1 (7 tok) | 2 (3 tok)] r1[...]``: rows and token counts of every micro-batch."""
    counts = np.asarray(counts, dtype=int)
    return " ".join(f"r{r}[" + " | ".join(f"{','.join(map(str, mb))} ({int(counts[list(mb)].sum())})" for mb in mbs)
                    + "]" for r, mbs in enumerate(partition))


def vocab_shards(neg_inf_rows: list, vocab: int, k: int) -> dict[str, tuple]:
    """{kind: ((start, end), ...)} for a vocabulary of ``vocab`` tokens over ``k`` shards;
    ``neg_inf_rows``: for each row of the student and of the teacher, the boolean −inf mask."""
    out: dict[str, tuple] = {}
    if vocab < k:
        return out

    def ranges(cuts):
        edges = [0] + sorted(cuts) + [vocab]
        return tuple((edges[i], edges[i + 1]) for i in range(len(edges) - 1))

    def fill(cuts: set) -> tuple | None:
        """Split the widest shard until there are k; None if there are already more."""
        cuts = set(cuts)
        while len(cuts) < k - 1:
            lo, hi = max(ranges(cuts), key=lambda r: r[1] - r[0])
            if hi - lo < 2:
                return None
            cuts.add((lo + hi) // 2)
        return ranges(cuts) if len(cuts) == k - 1 else None

    out["even"] = tuple((int(c[0]), int(c[-1]) + 1) for c in np.array_split(np.arange(vocab), k))
    if vocab > k:
        out["uneven"] = fill({vocab - 1})
    for row in neg_inf_rows:
        row = np.asarray(row, dtype=bool)
        start = None
        for j in range(vocab + 1):
            if j < vocab and row[j] and start is None:
                start = j
            elif (j == vocab or not row[j]) and start is not None:
                shards = fill({c for c in (start, j) if 0 < c < vocab})
                if shards is not None and (start, j) in shards:
                    out["neg-inf"] = shards
                    break
                start = None
        if "neg-inf" in out:
            break
    unique: dict[str, tuple] = {}
    for kind, split in out.items():
        if split is not None and split not in unique.values():
            unique[kind] = split
    return unique
