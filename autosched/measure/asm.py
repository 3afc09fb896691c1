"""Register spills in the hot loop of a built CPU kernel (x86-64, AT&T syntax).

A register tile that does not fit the vector registers makes LLVM spill
accumulators to the stack: the hot loop then loads and stores through `(%rsp)`
(or `(%rbp)` in a function that keeps a frame pointer). This module gets a
module's assembly from LLVM, finds its loops (a backward branch to a label of the
same function), keeps the innermost ones, picks the micro-kernel's reduction loop
and counts its stack operands. That loop broadcasts elements of the data against
vectors (`vbroadcastss` from memory, or an FMA's `{1toN}` operand); a fused epilogue
(GELU's polynomials) may hold more FMAs, but it broadcasts only constants from the
constant pool (`(%rip)`) and runs once per tile, not once per reduction step. Without
such a loop (a row reduction's exp), the loop with the most FMAs is the hot one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_LABEL = re.compile(r"^(\.?[\w$.]+):")
_BRANCH = re.compile(r"^\s+j\w+\s+(\.?[\w$.]+)\s*$")
_FRAME = re.compile(r"^\s+movq?\s+%rsp,\s*%rbp\s*$")
_FMA = re.compile(r"^\s+v?fn?m(add|sub)\w*\s")
_BROADCAST = re.compile(r"^\s+vbroadcasts[sd]\s+[^%]*\(|\{1to\d+\}")


@dataclass(frozen=True)
class LoopReport:
    """One innermost loop: where it is, its FMAs and its stack loads / stores."""

    function: str
    label: str
    instructions: int
    fmas: int
    stack_loads: int
    stack_stores: int
    data_broadcasts: int   # broadcasts of a value from memory other than constants

    @property
    def spills(self) -> int:
        return self.stack_loads + self.stack_stores


def kernel_asm(mod, target) -> str:
    """The assembly LLVM makes of a scheduled IRModule for a CPU target (a TargetSpec)."""
    import tvm

    return tvm.compile(mod, target=target.tvm()).jit().inspect_source("asm")


def _functions(asm: str) -> dict[str, list[str]]:
    """Instruction lines by function (a label that does not start with a dot)."""
    out, name = {}, None
    for line in asm.splitlines():
        label = _LABEL.match(line)
        if label and not label.group(1).startswith("."):
            name = label.group(1)
            out[name] = []
        if name is not None:
            out[name].append(line)
    return out


def _is_instruction(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and line[:1] in " \t" and not stripped.startswith((".", "#"))


def _stack_operand(operand: str, frame: bool) -> bool:
    return "(%rsp" in operand or (frame and "(%rbp" in operand)


def _count_stack(lines: list[str], frame: bool) -> tuple[int, int]:
    """Stack loads and stores among the instructions: an AT&T instruction writes its
    last operand, so a stack address there is a store, anywhere else a load."""
    loads = stores = 0
    for line in lines:
        parts = line.strip().split(None, 1)
        if len(parts) < 2 or "%r" not in parts[1]:
            continue
        operands = re.split(r",\s*(?![^()]*\))", parts[1].split("#")[0].strip())
        if _stack_operand(operands[-1], frame) and parts[0].startswith(("vmov", "mov")):
            stores += 1
        elif any(_stack_operand(o, frame) for o in operands[:-1] if o):
            loads += 1
    return loads, stores


def _is_data_broadcast(line: str) -> bool:
    return bool(_BROADCAST.search(line)) and "(%rip)" not in line


def _loops(name: str, lines: list[str]) -> list[LoopReport]:
    frame = any(_FRAME.match(line) for line in lines)
    where = {}
    spans = []
    for n, line in enumerate(lines):
        label = _LABEL.match(line)
        if label:
            where[label.group(1)] = n
        branch = _BRANCH.match(line)
        if branch and branch.group(1) in where:
            spans.append((where[branch.group(1)], n, branch.group(1)))
    inner = [s for s in spans
             if not any(o is not s and s[0] <= o[0] and o[1] <= s[1] for o in spans)]
    out = []
    for start, end, label in inner:
        body = [x for x in lines[start:end + 1] if _is_instruction(x)]
        loads, stores = _count_stack(body, frame)
        out.append(LoopReport(name, label, len(body), sum(bool(_FMA.match(x)) for x in body),
                              loads, stores, sum(_is_data_broadcast(x) for x in body)))
    return out


def innermost_loops(asm: str) -> list[LoopReport]:
    """Every innermost loop of every function in the assembly."""
    return [loop for name, lines in _functions(asm).items() for loop in _loops(name, lines)]


def hot_loop(asm: str) -> LoopReport | None:
    """The reduction loop of a register tile: the innermost loop with the most FMAs
    among those broadcasting data, else among all (None when no loop has any FMA)."""
    loops = [lp for lp in innermost_loops(asm) if lp.fmas]
    return max(loops, key=lambda lp: (lp.data_broadcasts > 0, lp.fmas, -lp.instructions),
               default=None)
