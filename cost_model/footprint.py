"""Data footprints of a loop nest, from interval bounds of index expressions.

For a store under loops l0 (outermost) .. l{n-1}, the footprint at level L is the number
of distinct elements each buffer touches while loops L..n-1 run and the outer loops stay
fixed: per dimension, the interval of the index when those loops range over
[0, extent-1], made a box. Given a cache of S bytes, the outermost level whose summed
footprint fits in S is the level where data stays resident; everything above it
re-fetches that footprint once per iteration, so

    traffic(S) = (iterations of loops above L) * footprint_bytes(L).

This is the classic reuse estimate (as in the tiling literature): cheap, monotone in the
tile sizes and good enough to rank schedules, not to predict absolute time.
"""
from __future__ import annotations

from .ir_walk import Access, Loop


def interval(tree, his: dict) -> tuple[int, int] | None:
    """Bounds of an index tree when loop `id` ranges over [0, his[id]] (0 if absent);
    None when the tree cannot be bounded."""
    op = tree[0]
    if op == "c":
        return tree[1], tree[1]
    if op == "v":
        return 0, his.get(tree[1], 0)
    if op == "?":
        return None
    a = interval(tree[1], his)
    b = interval(tree[2], his)
    if a is None or b is None:
        return None
    if op == "+":
        return a[0] + b[0], a[1] + b[1]
    if op == "-":
        return a[0] - b[1], a[1] - b[0]
    if op == "*":
        prods = (a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1])
        return min(prods), max(prods)
    if op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    if b[0] != b[1] or b[0] <= 0:  # division by a non-constant: give up
        return None
    c = b[0]
    if op == "//":
        return a[0] // c, a[1] // c
    if a[1] - a[0] + 1 >= c or a[0] // c != a[1] // c:  # "%" that wraps around
        return 0, c - 1
    return a[0] % c, a[1] % c


def access_box(acc: Access, his: dict) -> list[tuple[int, int]]:
    """Per-dimension [lo, hi] touched by one access (unknown -> the whole dimension)."""
    box = []
    for tree, dim in zip(acc.indices, acc.buffer.shape):
        iv = interval(tree, his)
        if iv is None:
            iv = (0, dim - 1)
        box.append((max(iv[0], 0), min(iv[1], max(dim - 1, 0))))
    return box


def _box_union(a: list, b: list) -> list:
    return [(min(x[0], y[0]), max(x[1], y[1])) for x, y in zip(a, b)]


def _box_elems(box: list) -> int:
    n = 1
    for lo, hi in box:
        n *= max(hi - lo + 1, 1)
    return n


def buffer_footprints(accesses: list[Access], his: dict) -> dict[str, int]:
    """Bytes touched per buffer (bounding box over its accesses) for the varying loops."""
    boxes: dict[str, tuple] = {}
    for acc in accesses:
        box = access_box(acc, his)
        name = acc.buffer.name
        boxes[name] = (_box_union(boxes[name][0], box), acc.buffer) if name in boxes else (box, acc.buffer)
    return {name: _box_elems(box) * buf.bytes_per_elem for name, (box, buf) in boxes.items()}


def level_footprints(loops: tuple[Loop, ...], accesses: list[Access]) -> list[int]:
    """Total bytes touched by loops L..n-1, for L = 0..n (n: a single iteration)."""
    out = []
    for level in range(len(loops) + 1):
        his = {lp.id: lp.extent - 1 for lp in loops[level:]}
        out.append(sum(buffer_footprints(accesses, his).values()))
    return out


def traffic(loops: tuple[Loop, ...], footprints: list[int], capacity: int) -> float:
    """Bytes moved into a cache of `capacity` bytes over the whole loop nest."""
    level = next((lv for lv, fp in enumerate(footprints) if fp <= capacity), len(loops))
    trips = 1
    for lp in loops[:level]:
        trips *= lp.extent
    return float(trips) * footprints[level]


def flat_stride(acc: Access, loop_id: int) -> int | None:
    """Elements between the addresses of consecutive iterations of `loop_id` (row-major),
    None when unknown."""
    base, step = 0, 0
    mult = 1
    for tree, dim in reversed(list(zip(acc.indices, acc.buffer.shape))):
        lo = interval(tree, {})
        hi = _point(tree, loop_id)
        if lo is None or hi is None:
            return None
        base += lo[0] * mult
        step += hi * mult
        mult *= max(dim, 1)
    return abs(step - base)


def _point(tree, loop_id: int) -> int | None:
    """Value of the tree with loop `loop_id` = 1 and every other loop at 0."""
    iv = interval(_substitute(tree, loop_id), {})
    return None if iv is None else iv[0]


def _substitute(tree, loop_id: int):
    if tree[0] == "v":
        return ("c", 1) if tree[1] == loop_id else ("c", 0)
    if tree[0] in ("c", "?"):
        return tree
    return (tree[0], _substitute(tree[1], loop_id), _substitute(tree[2], loop_id))


def alloc_bytes(stores, name: str, scope: str) -> int:
    """Compacted size of an allocated buffer: the box its accesses cover below the
    deepest loop enclosing all of them. Shared memory is per thread block, so
    thread-bound loops vary; local memory is per thread, so they do not."""
    uses = [(st.loops, acc) for st in stores for acc in st.accesses if acc.buffer.name == name]
    if not uses:
        return 0
    common = _common_prefix([loops for loops, _ in uses])
    box = None
    for loops, acc in uses:
        his = {lp.id: lp.extent - 1 for depth, lp in enumerate(loops)
               if _varies_in_alloc(lp, depth >= common, scope)}
        b = access_box(acc, his)
        box = b if box is None else _box_union(box, b)
    return _box_elems(box) * uses[0][1].buffer.bytes_per_elem


def _varies_in_alloc(lp: Loop, below_lca: bool, scope: str) -> bool:
    if lp.tag.startswith("blockIdx"):
        return False
    if lp.tag:
        return scope.startswith("shared")
    return below_lca


def _common_prefix(stacks: list[tuple]) -> int:
    n = min(len(s) for s in stacks)
    depth = 0
    while depth < n and all(s[depth].id == stacks[0][depth].id for s in stacks):
        depth += 1
    return depth
