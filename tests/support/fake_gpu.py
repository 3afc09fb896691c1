"""A pretend NVIDIA GPU for tests of how the tuner reads one: an `nvidia-smi` executable
that answers `--query-gpu` from a table (and logs the arguments it was given), and a
`libcuda.so.1` whose cuInit / cuDeviceGet / cuDeviceGetAttribute / cuDeviceGetName /
cuDeviceTotalMem_v2 report given values. Both go into a folder: put it first on PATH and
on LD_LIBRARY_PATH of a child process.
"""
from __future__ import annotations

import os
import shlex
import subprocess

# nvidia-smi: `-i ID` picks the row whose index or UUID is ID; prints its CSV fields
SMI = """#!/bin/sh
echo "$@" >> {log}
id=0
while [ $# -gt 0 ]; do
  case "$1" in -i) id="$2"; shift;; esac
  shift
done
case "$id" in
{cases}
  *) echo "No devices were found" >&2; exit 6;;
esac
"""

DRIVER = r"""
#include <string.h>
typedef int CUresult;
static const int attribute_numbers[] = {%(numbers)s};
static const int attribute_values[] = {%(values)s};
CUresult cuInit(unsigned flags) { return 0; }
CUresult cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return ordinal == 0 ? 0 : 101; }
CUresult cuDeviceGetAttribute(int *value, int attribute, int dev) {
    for (unsigned i = 0; i < sizeof attribute_numbers / sizeof *attribute_numbers; ++i)
        if (attribute_numbers[i] == attribute) { *value = attribute_values[i]; return 0; }
    return 1;
}
CUresult cuDeviceGetName(char *name, int len, int dev) {
    strncpy(name, "%(name)s", len); return 0; }
CUresult cuDeviceTotalMem_v2(unsigned long *bytes, int dev) {
    *bytes = %(memory)dUL; return 0; }
"""


def write_smi(folder: str, rows: list[tuple[str, str, str]]) -> str:
    """An `nvidia-smi` in `folder` for GPUs given as (index, uuid, csv fields); returns
    the log file where each call's arguments are appended."""
    log = os.path.join(folder, "nvidia-smi.log")
    cases = "\n".join(f"  {shlex.quote(index)}|{shlex.quote(uuid)}) echo {shlex.quote(csv)};;"
                      for index, uuid, csv in rows)
    path = os.path.join(folder, "nvidia-smi")
    with open(path, "w") as f:
        f.write(SMI.format(log=shlex.quote(log), cases=cases))
    os.chmod(path, 0o755)
    return log


def build_driver(folder: str, name: str, memory: int, attributes: dict[int, int]) -> None:
    """A `libcuda.so.1` in `folder` reporting one device with these attribute numbers."""
    src = os.path.join(folder, "fake_cuda.c")
    with open(src, "w") as f:
        f.write(DRIVER % {"numbers": ", ".join(str(k) for k in attributes),
                          "values": ", ".join(str(v) for v in attributes.values()),
                          "name": name, "memory": memory})
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
                    os.path.join(folder, "libcuda.so.1"), src], check=True,
                   capture_output=True)
