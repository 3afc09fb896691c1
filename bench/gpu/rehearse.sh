#!/usr/bin/env bash
# The two transfers of bench/gpu/stage.py rehearsed on this machine, from a clean folder,
# under Python 3.12 with only what the GPU machine has that the tuner needs (numpy, scipy,
# typing_extensions; stage.DEVICE_HAS): pack here, copy what each call would ship (the
# tree: tracked + untracked non-ignored files, and that call's carry), unpack the
# compiler, assemble the environment, then import the whole tuner, tune a small matmul
# on the CPU and dry-run a tensor-core matmul for sm_90a with nvcc and the stand-in
# driver.
#
#     bash bench/gpu/rehearse.sh        # from the repository root, with .venv built
#
# REHEARSE_ROOT, REHEARSE_VENV and REHEARSE_WORK override the folders under /tmp.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
R=${REHEARSE_ROOT:-/tmp/rehearse-root}
V=${REHEARSE_VENV:-/tmp/rehearse-venv}
W=${REHEARSE_WORK:-/tmp/rehearse-work}
step() { printf '\n== %s\n' "$*"; }
clock() { local t0=$SECONDS; "$@"; echo "   ($((SECONDS - t0)) s)"; }

step "pack (here, .venv)"
clock "$repo/.venv/bin/python" "$repo/bench/gpu/stage.py" pack

step "the device's Python: 3.12 venv with numpy, scipy, typing_extensions only ($V)"
if [ ! -x "$V/bin/python" ]; then
    PYENV_VERSION=3.12.1 python -m venv "$V"
    "$V/bin/pip" install -q numpy scipy typing_extensions
fi
PY="$V/bin/python"
"$PY" -c 'import sys; print(sys.version.split()[0])'
"$PY" -m pip list --format=freeze 2>/dev/null | tr '\n' ' '; echo
if "$PY" -c 'import tvm' 2>/dev/null || "$PY" -c 'import xgboost' 2>/dev/null; then
    echo "rehearse.sh: $V already has tvm or xgboost; use a fresh REHEARSE_VENV" >&2; exit 1
fi

ship_tree() {   # what every call ships: tracked files + untracked files git does not ignore
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard \
        | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -xf - -C "$R"
}

step "transfer 1: tree + bench/gpu/stage1, then unpack-compiler"
rm -rf "$R" "$W" && mkdir -p "$R" "$W"
ship_tree
cp -r "$repo/bench/gpu/stage1" "$R/bench/gpu/stage1"
du -sm --apparent-size "$R" | awk '{print "   shipped " $1 " MiB"}'
clock bash -c "cd '$R' && '$PY' bench/gpu/stage.py unpack-compiler"

step "transfer 2: tree + bench/gpu/stage2 (stage1 and site stay), then env"
rm -rf "$R/bench/gpu/stage1"        # not carried this time (the device keeps it; unused)
ship_tree
cp -r "$repo/bench/gpu/stage2" "$R/bench/gpu/stage2"
cd "$R"
clock bash -c "'$PY' bench/gpu/stage.py env > '$W/env.sh'"
cat "$W/env.sh"
staged() { "$PY" bench/gpu/stage.py run -- "$PY" "$@"; }   # as the device call runs it

step "the whole tuner imports, TVM with its compiler, from the staged site"
clock staged - <<'EOF'
import numpy, scipy, tvm, tvm_ffi, xgboost
from tvm import te
import autosched, autosched.cli, autosched.tuner, cost_model, search_space
for mod in (tvm, tvm_ffi, xgboost, autosched):
    print(f"   {mod.__name__} {mod.__version__} from {mod.__file__}")
a = te.placeholder((4,), name="a")
b = te.compute((4,), lambda i: a[i] + 1, name="b")
tvm.compile(te.create_prim_func([a, b]), target="llvm")
print("   tvm.compile for llvm works (the compiler library loaded)")
EOF

step "autosched tune examples/matmul.py --target llvm --trials 8 (128^3)"
clock staged -m autosched.cli tune examples/matmul.py --target llvm --trials 8 \
    --arg M=128 --arg N=128 --arg K=128 --work-dir "$W/llvm"

step "autosched tune examples/mixed_precision.py matmul_mp 256^3 for sm_90a --dry-run"
clock staged -m autosched.cli tune examples/mixed_precision.py --workload matmul_mp \
    --arg M=256 --arg N=256 --arg K=256 --target '{"kind":"cuda","arch":"sm_90a"}' \
    --dry-run --trials 4 --work-dir "$W/cuda"

step "MetaSchedule imports from the staged site (psutil, cloudpickle carried)"
clock staged -c 'import tvm.s_tir.meta_schedule as ms, psutil, cloudpickle; print("   meta_schedule", ms.__name__)'

step "closed_loop.py (call 2's command) stages itself and stops at the missing GPU (exit 3)"
set +e
"$PY" bench/gpu/closed_loop.py --out "$W/out" --no-runtime-plans
rc=$?
set -e
[ "$rc" = 3 ] || { echo "rehearse.sh: closed_loop.py exited $rc, expected 3" >&2; exit 1; }

step "rehearsal passed"
