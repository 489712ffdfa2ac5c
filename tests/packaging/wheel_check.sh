#!/usr/bin/env bash
# The wheel as a user gets it (`make test-wheel`; PYTHON=python3.10 ... for another Python):
#  1. `pip wheel .` with build isolation (the declared build requirements) in a clean build dir;
#  2. a fresh venv: `pip install WHEEL "tritonclient[grpc,http]"` from PyPI, `pip check`,
#     then tests/packaging/check_wheel.py (both imported in one process, an in-process server
#     called with tritonclient.grpc, reflection, the bundled oneDNN);
#  3. a fresh venv with protobuf, grpcio and grpcio's health and reflection packages at the
#     minimums the wheel declares: the same check, graphengine's own stubs as the client;
#  4. `pip install --target DIR WHEEL`, imported by the bare interpreter from PYTHONPATH=DIR,
#     and one graph run there.
# Nothing from the source tree is importable during the checks (they run from OUT), and
# LD_LIBRARY_PATH is cleared: the wheel must find its own libraries.
set -euo pipefail
PYTHON=${1:-python3}
OUT=$(realpath -m "${2:-build/wheel}")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
unset LD_LIBRARY_PATH PYTHONPATH

rm -rf "$OUT"
mkdir -p "$OUT"
echo "== $("$PYTHON" --version) ($PYTHON); output in $OUT"

# 1. Build. A venv only for a current pip; the build itself is isolated.
"$PYTHON" -m venv "$OUT/tools"
"$OUT/tools/bin/python" -m pip install -q --upgrade pip
start=$(date +%s)
(cd "$SRC" && "$OUT/tools/bin/python" -m pip wheel . --no-deps -q -w "$OUT/dist" \
    -C build-dir="$OUT/cmake")
WHEEL=$(ls "$OUT"/dist/graphengine-*.whl)
echo "== built $(basename "$WHEEL") ($(du -m "$WHEEL" | cut -f1) MB) in $(( $(date +%s) - start )) s"

# 2. A fresh venv with tritonclient beside it.
"$PYTHON" -m venv "$OUT/venv"
V="$OUT/venv/bin"
"$V/python" -m pip install -q --upgrade pip
"$V/python" -m pip install -q "$WHEEL" "tritonclient[grpc,http]"
"$V/python" -m pip check
cd "$OUT"
"$V/graphengine" --version
"$V/python" "$SRC/tests/packaging/check_wheel.py"

# 3. The declared minimums of the packages the generated stubs check (protobuf, grpcio) and
#    of grpcio's health and reflection packages, read from the wheel's own metadata.
MINIMUMS=$("$V/python" -c '
import importlib.metadata, re
for req in importlib.metadata.requires("graphengine"):
    m = re.fullmatch(r"(protobuf|grpcio(?:-health-checking|-reflection)?)\b([^;]*)", req)
    low = m and re.search(r">=\s*([\d.]+)", m[2])
    if low:
        print(f"{m[1]}=={low[1]}")
')
echo "== declared minimums: $(echo $MINIMUMS)"
"$PYTHON" -m venv "$OUT/venv-min"
"$OUT/venv-min/bin/python" -m pip install -q --upgrade pip
"$OUT/venv-min/bin/python" -m pip install -q "$WHEEL" $MINIMUMS
"$OUT/venv-min/bin/python" -m pip check
"$OUT/venv-min/bin/python" "$SRC/tests/packaging/check_wheel.py" --minimums

# 4. --target: a folder on PYTHONPATH, no venv, no data files outside it.
# (with the build venv's pip: the check venv's would compare the folder with its own packages)
"$OUT/tools/bin/python" -m pip install -q --target "$OUT/target" "$WHEEL"
PYTHONPATH="$OUT/target" "$PYTHON" -s -c '
import numpy as np
import graphengine, graphengine._runtime
from graphengine import ops
g = graphengine.Graph("relu")
x = g.input("x", "float32", [2, 3])
g.output(ops.Relu(x), name="y")
a = np.array([[-1, 0, 2], [3, -4, 5]], np.float32)
with graphengine.Session() as s:
    y = s.run_graph(s.add_graph(g), {"x": a})["y"]
assert (y == np.maximum(a, 0)).all(), y
print("ok: --target install runs a graph;", graphengine._runtime.__file__)
'
echo "wheel check: all passed ($(basename "$WHEEL"))"
