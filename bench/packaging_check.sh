#!/usr/bin/env bash
# Does installing autosched keep the torch and xgboost that an environment already holds?
# Builds two stand-in wheels named `torch` and `xgboost` (metadata only, no code) from
# throwaway project folders, installs them into a fresh venv, and asks pip, in dry runs
# that write a JSON report, what `pip install -e REPO[EXTRAS]` would install there:
#   1. torch 2.5.1 + xgboost 2.1.4, plain install: neither is touched (the core needs
#      neither);
#   2. the same with the `torch` extra: torch is replaced, 2.5.1 being below the floor
#      that pyproject.toml states (printed, not a failure);
#   3. torch 2.14.0 + xgboost 2.1.4 with the `torch` and `postgres` extras: neither is
#      touched.
# Nothing is installed but the stand-ins. The resolver reads the metadata of the other
# requirements from the package index, so this needs it.
# Usage: bench/packaging_check.sh [REPO]    (REPO: default, this checkout)
set -euo pipefail
repo=$(cd "${1:-$(dirname "$0")/..}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
find_links=()
[ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)

python3 -m venv "$work/venv"
py="$work/venv/bin/python"
"$py" -m pip --version

standin() {  # NAME VERSION: build a wheel that installs NAME's metadata and nothing else
    local src="$work/src-$1-$2"
    mkdir -p "$src"
    printf '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n[project]\nname = "%s"\nversion = "%s"\n[tool.setuptools]\npackages = []\n' \
        "$1" "$2" > "$src/pyproject.toml"
    "$py" -m pip wheel -q --no-deps -w "$work/wheels" "$src"
    "$py" -m pip install -q --no-deps --no-index --find-links "$work/wheels" "$1==$2"
}

would_install() {  # LABEL PIP-ARGS...: dry run; prints and returns "name==version" lines
    local label=$1
    shift
    local t0=$SECONDS
    # (without the warnings about index folders that lack a package)
    "$py" -m pip install -q --dry-run --report "$work/report.json" "${find_links[@]}" "$@" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
    "$py" - "$work/report.json" > "$work/install.txt" <<'EOF'
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    print(f'{item["metadata"]["name"]}=={item["metadata"]["version"]}')
EOF
    echo "== $label: $((SECONDS - t0)) s; pip would install:"
    sed 's/^/     /' "$work/install.txt"
}

touches() {  # NAME: whether the last dry run installs NAME
    grep -qiE "^$1==" "$work/install.txt"
}

status=0
check() {  # MESSAGE CONDITION...
    local message=$1
    shift
    if "$@"; then echo "ok: $message"; else echo "FAILED: $message"; status=1; fi
}

standin torch 2.5.1
standin xgboost 2.1.4
would_install "torch 2.5.1 + xgboost 2.1.4: pip install -e REPO" -e "$repo"
check "keeps torch 2.5.1" eval '! touches torch'
check "keeps xgboost 2.1.4 and adds no xgboost-cpu" eval '! touches xgboost && ! touches xgboost-cpu'

would_install "torch 2.5.1: pip install -c constraints.txt -e 'REPO[torch]'" \
    -c "$repo/constraints.txt" -e "$repo[torch]"
check "replaces torch 2.5.1 (below the floor) with the pinned CPU build" \
    grep -qx "torch==2.13.0+cpu" "$work/install.txt"

standin torch 2.14.0
would_install "torch 2.14.0 + xgboost 2.1.4: pip install -e 'REPO[torch,postgres]'" \
    -e "$repo[torch,postgres]"
check "keeps torch 2.14.0" eval '! touches torch'
check "keeps xgboost 2.1.4 and adds no xgboost-cpu" eval '! touches xgboost && ! touches xgboost-cpu'
check "adds psycopg for the postgres extra" touches psycopg

"$py" -m pip list --format=freeze | grep -iE '^(torch|xgboost)==' | sed 's/^/installed after the dry runs: /'
exit "$status"
