"""What device code a built CUDA library holds: the fatbins inside it and their
architectures, read from the bytes alone (no driver, no CUDA tools).

A fatbin starts with a 16-byte header: u32 magic 0xBA55ED50 (bytes `50 ed 55 ba`),
u16 version, u16 header size, u64 size of the entries that follow. Each entry has its
own header: u16 kind (1 PTX, 2 ELF/SASS), u16 version, u32 header size, u64 payload
size, and at byte 28 the SM number (90 for sm_90). Byte 40 holds flags: bit 20 marks
an architecture-specific target (`sm_90a`), bit 21 a family-specific one (`sm_120f`);
checked against what nvcc 13 writes for sm_80, sm_90, sm_90a, sm_100a and sm_120f.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = bytes.fromhex("50ed55ba")
_HEADER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQ")
_SM_AT, _FLAGS_AT = 28, 40
_ARCH_SPECIFIC, _FAMILY_SPECIFIC = 1 << 20, 1 << 21
KINDS = {1: "ptx", 2: "sass"}


@dataclass(frozen=True)
class FatbinEntry:
    """One image in a fatbin: `kind` ("sass" or "ptx") and `arch` ("sm_90a")."""

    kind: str
    arch: str


def entries(data: bytes) -> list[FatbinEntry]:
    """Every image of every fatbin found in `data` (a library file's bytes), in order."""
    found: list[FatbinEntry] = []
    at = data.find(MAGIC)
    while at >= 0:
        found += _fatbin_entries(data, at)
        at = data.find(MAGIC, at + len(MAGIC))
    return found


def _fatbin_entries(data: bytes, at: int) -> list[FatbinEntry]:
    if at + _HEADER.size > len(data):
        return []
    _, _, header_size, size = _HEADER.unpack_from(data, at)
    pos, end = at + header_size, min(len(data), at + header_size + size)
    out = []
    while pos + _FLAGS_AT + 4 <= end:
        kind, _, entry_header, payload = _ENTRY.unpack_from(data, pos)
        if kind not in KINDS or entry_header < _FLAGS_AT + 4:
            break  # not an entry header: the magic bytes occurred by chance
        sm = struct.unpack_from("<I", data, pos + _SM_AT)[0]
        flags = struct.unpack_from("<I", data, pos + _FLAGS_AT)[0]
        suffix = "a" if flags & _ARCH_SPECIFIC else "f" if flags & _FAMILY_SPECIFIC else ""
        out.append(FatbinEntry(KINDS[kind], f"sm_{sm}{suffix}"))
        pos += entry_header + payload
    return out


def library_entries(path: str) -> list[FatbinEntry]:
    """The fatbin images inside the library file at `path`."""
    with open(path, "rb") as f:
        return entries(f.read())


def fatbins(data: bytes) -> list[bytes]:
    """Every fatbin found in `data`, carved out whole (header and payload), in order:
    what `cuobjdump` reads."""
    out, at = [], data.find(MAGIC)
    while at >= 0:
        if _fatbin_entries(data, at):
            _, _, header_size, size = _HEADER.unpack_from(data, at)
            out.append(data[at:at + header_size + size])
        at = data.find(MAGIC, at + len(MAGIC))
    return out
