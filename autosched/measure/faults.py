"""Whose fault is a failed build: the candidate's, or the machine's?

A candidate's own failure is recorded (and never measured again); a fault of the
machine must not be, or one broken linker poisons every candidate it touched. The
verdict comes from evidence, in this order:

1. The build folder: missing, not a folder, not writable or out of space is the
   machine's fault, whatever the compiler said.
2. What the build worker reported: no C/C++ compiler to link with, an OSError on the
   output or the compiler, a filesystem refusal in the linker's output ("No space left
   on device", "File too large", "File size limit exceeded", "Read-only file system").
3. Where it failed: lowering and code generation on the CPU (`compile`) happen inside
   TVM and depend on the candidate; linking (`export`) and a worker that died are
   `UNSURE`, and so are compile failures on targets whose compile step runs an outside
   toolchain (nvcc, NVRTC). The builder then builds the task's default candidate the
   same way: when that fails too, it is the machine.
"""
from __future__ import annotations

import errno
import os
import tempfile
from dataclasses import dataclass

CANDIDATE, MACHINE, UNSURE = "candidate", "machine", "unsure"

# errno values that say the output could not be written, whoever asked
FILESYSTEM_ERRNOS = {errno.ENOSPC: "no space left on the device",
                     errno.EDQUOT: "disk quota exceeded",
                     errno.EFBIG: "file size limit exceeded",
                     errno.EROFS: "read-only filesystem",
                     errno.EACCES: "permission denied",
                     errno.EPERM: "operation not permitted",
                     errno.ENOENT: "no such file or directory",
                     errno.ENOTDIR: "a path component is not a folder"}
# what linkers and LLVM print when the filesystem refuses a write (lower case)
FILESYSTEM_SIGNS = ("no space left on device", "disk quota exceeded", "file too large",
                    "file size limit exceeded", "read-only file system",
                    "cannot open output file", "io failure on output stream")
# targets whose compile step runs no outside program: a compile error is the candidate's
IN_PROCESS_COMPILE = ("llvm",)
COMPILER_REMEDY = ("install a C/C++ compiler (TVM links every CPU library with the first "
                   "of g++, gcc, clang++, clang, c++, cc on PATH, or $CXX), then rerun")


@dataclass(frozen=True)
class Verdict:
    """Whose fault (CANDIDATE, MACHINE or UNSURE) and, for MACHINE, what to tell the user."""

    side: str
    cause: str = ""
    remedy: str = ""


def folder_fault(folder: str) -> Verdict | None:
    """MACHINE when `folder` cannot take a new library; None when it can."""
    remedy = f"make {folder} a writable folder with free space, then rerun"
    if not os.path.exists(folder):
        return Verdict(MACHINE, f"the build folder {folder} is missing (removed while this "
                                "run was building?)", remedy)
    if not os.path.isdir(folder):
        return Verdict(MACHINE, f"the build folder {folder} is not a folder", remedy)
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-") as f:
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        what = FILESYSTEM_ERRNOS.get(e.errno, e.strerror)
        return Verdict(MACHINE, f"cannot write to the build folder {folder}: {what}", remedy)
    try:
        if os.statvfs(folder).f_bavail == 0:
            return Verdict(MACHINE, f"no space left on the filesystem of {folder}", remedy)
    except OSError:
        pass
    return None


def judge_reply(reply: dict, folder: str, target_kind: str) -> Verdict:
    """The verdict on a build worker's failure reply (see `builder.build_job`)."""
    stage, text = reply.get("stage", "compile"), str(reply.get("error", ""))
    if stage == "compile" and target_kind in IN_PROCESS_COMPILE:
        return Verdict(CANDIDATE)
    bad_folder = folder_fault(folder)
    if bad_folder is not None:
        return bad_folder
    if stage == "export" and not reply.get("compiler"):
        return Verdict(MACHINE, "no C/C++ compiler found to link the built library",
                       COMPILER_REMEDY)
    code, filename = reply.get("errno"), reply.get("filename")
    if code in FILESYSTEM_ERRNOS:
        if filename and filename == reply.get("compiler"):
            return Verdict(MACHINE, f"cannot run the C/C++ compiler {filename}: "
                                    f"{FILESYSTEM_ERRNOS[code]}", COMPILER_REMEDY)
        return Verdict(MACHINE, f"cannot write {filename or 'the library'}: "
                                f"{FILESYSTEM_ERRNOS[code]}", _space_remedy(folder))
    return judge_text(text, folder)


def judge_death(message: str, folder: str) -> Verdict:
    """The verdict on a build worker that died mid-build (`message`: how, and its log)."""
    return folder_fault(folder) or judge_text(message, folder)


def judge_text(text: str, folder: str) -> Verdict:
    """MACHINE when the text shows a filesystem refusal, else UNSURE."""
    low = text.lower()
    if "signal 25" in low or "sigxfsz" in low:
        low += " file size limit exceeded"
    for sign in FILESYSTEM_SIGNS:
        if sign in low:
            return Verdict(MACHINE, f"the filesystem refused to store a built library "
                                    f"({sign}): {_short(text)}", _space_remedy(folder))
    return Verdict(UNSURE)


def judge_probe(failure: str, stage: str, target_kind: str) -> Verdict:
    """The verdict when the task's default candidate failed to build too."""
    if stage == "export":
        return Verdict(MACHINE, f"even the task's default candidate fails to link: "
                                f"{_short(failure)}",
                       "check the C/C++ compiler and linker TVM calls (the first of g++, "
                       "gcc, clang++, clang, c++, cc on PATH, or $CXX), then rerun")
    return Verdict(MACHINE, f"even the task's default candidate fails to build for "
                            f"{target_kind}: {_short(failure)}",
                   f"check the TVM installation and the {target_kind} toolchain (for cuda: "
                   "nvcc or NVRTC, and the driver), then rerun")


def _space_remedy(folder: str) -> str:
    return (f"free space on the filesystem of {folder} (or raise the file-size limit, "
            "`ulimit -f`), then rerun")


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
