"""TVM's compiler library as independently compressed xz pieces (x86 branch filter), and
which of them travel in transfer 1 beside the repository tree and which in transfer 2:
the part of bench/gpu/stage.py that decides sizes and places bytes."""
from __future__ import annotations

import hashlib
import json
import lzma
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from stage_site import COMPILER, MANIFEST, MiB

LIMIT_BYTES = 60 * MiB          # per transfer, the repository tree included (hard limit 64)
PIECE_BYTES = 32 * MiB          # compiler bytes per independently compressed piece


def split_pieces(sizes: list[int], tree: int, limit: int = LIMIT_BYTES,
                 reserve: int = 8 * 1024) -> int:
    """How many leading compiler pieces (compressed sizes, in order) transfer 1 carries:
    as many as fit beside the tree and `reserve` bytes for its manifest."""
    used, count = tree + reserve, 0
    for size in sizes:
        if used + size > limit:
            break
        used, count = used + size, count + 1
    return count


def _filters(piece_bytes: int) -> list[dict]:
    return [{"id": lzma.FILTER_X86},
            {"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME,
             "dict_size": max(piece_bytes, 4096)}]


def compress_pieces(src: Path, out: Path, piece_bytes: int = PIECE_BYTES) -> dict:
    """`src` as independent xz pieces `<name>.NNN.xz` in `out` (in parallel); returns the
    compiler section of the manifest: size, sha256 and each piece's offset and length."""
    data = src.read_bytes()
    out.mkdir(parents=True, exist_ok=True)
    offsets = list(range(0, len(data), piece_bytes)) or [0]

    def one(index: int) -> dict:
        start = offsets[index]
        chunk = data[start:start + piece_bytes]
        name = f"{src.name}.{index:03d}.xz"
        (out / name).write_bytes(lzma.compress(chunk, format=lzma.FORMAT_XZ,
                                               filters=_filters(piece_bytes)))
        return {"file": name, "offset": start, "length": len(chunk)}

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        pieces = list(pool.map(one, range(len(offsets))))
    return {"name": src.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "source": source_stamp(src), "pieces": pieces}


def source_stamp(src: Path) -> list:
    st = src.stat()
    return [str(src), st.st_size, st.st_mtime_ns]


# ---- pack (here) -----------------------------------------------------------------------

def place_pieces(section: dict, s1: Path, s2: Path, first: int) -> None:
    """The first `first` pieces into stage1 (with its manifest), the rest into stage2;
    pieces of an older pack are removed."""
    pieces = [p["file"] for p in section["pieces"]]
    s1.mkdir(parents=True, exist_ok=True)
    s2.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(pieces):
        dest, other = (s1, s2) if i < first else (s2, s1)
        piece_file(name, s1, s2).rename(dest / name)
        (other / name).unlink(missing_ok=True)      # an older pack's copy on the other side
    for stale in list(s1.glob(f"{COMPILER}.*.xz")) + list(s2.glob(f"{COMPILER}.*.xz")):
        if stale.name not in pieces:
            stale.unlink()
    (s1 / MANIFEST).write_text(json.dumps({"compiler": section}, indent=1))


def piece_file(name: str, s1: Path, s2: Path) -> Path:
    return s1 / name if (s1 / name).is_file() else s2 / name


def compiler_pieces(src: Path, s1: Path, s2: Path, piece_bytes: int) -> dict:
    """The compressed pieces, made again only when the library changed since the last
    pack (its path, size and mtime are recorded in stage1's manifest)."""
    old = s1 / MANIFEST
    if old.is_file():
        section = json.loads(old.read_text())["compiler"]
        if section.get("source") == source_stamp(src) and all(
                p["length"] <= piece_bytes for p in section["pieces"]) and all(
                piece_file(p["file"], s1, s2).is_file() for p in section["pieces"]):
            return section
    return compress_pieces(src, s1, piece_bytes)
