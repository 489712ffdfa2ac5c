"""Finish the Python stubs protoc generated from proto/ (run by CMake after grpc_tools.protoc).

`proto_stubs.py OUT`: OUT holds protoc's output (OUT/graphengine/...). Each `*_pb2.py` is
made to add its file to graphengine's own descriptor pool (`graphengine._pool.POOL`, copied
here from stub_pool.py) instead of protobuf's default pool and to build its classes with
`graphengine._pool.build`, which registers nothing in protobuf's default symbol database;
every folder below graphengine/ becomes a package.

Why: proto/graphengine/kserve/v2 declares package `inference` with the KServe v2 protocol's
names, as every KServe client's copy does (tritonclient's among them), because gRPC paths
(`/inference.GRPCInferenceService/ModelInfer`) carry the package. The default pool holds one
definition of a symbol per process, so two copies in it cannot both be imported ("duplicate
symbol 'inference.DataType'"). In a pool of our own they never meet; the message classes and
the wire format are the same.

The rewrite is exact: each stub must contain each pattern once, or the build fails here,
naming the file (a new protoc whose output differs must be looked at, not patched blindly).
"""

from __future__ import annotations

import pathlib
import shutil
import sys

POOL_MODULE = pathlib.Path(__file__).with_name("stub_pool.py")  # -> graphengine/_pool.py

# (what protoc writes, what it becomes); each occurs exactly once in a *_pb2.py.
REWRITES = (
    ("from google.protobuf.internal import builder as _builder\n",
     "from google.protobuf.internal import builder as _builder\n"
     "from graphengine._pool import POOL as _ge_pool\n"
     "from graphengine._pool import build as _ge_build\n"),
    ("DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile(",
     "DESCRIPTOR = _ge_pool.AddSerializedFile("),
    ("_builder.BuildTopDescriptorsAndMessages(", "_ge_build("),
)


def rewrite(text: str, where: str) -> str:
    for old, new in REWRITES:
        count = text.count(old)
        if count != 1:
            raise SystemExit(f"proto_stubs: {where}: expected 1 of {old.strip()!r}, "
                             f"found {count}")
        text = text.replace(old, new)
    return text


def main(out: pathlib.Path) -> None:
    root = out / "graphengine"
    stubs = sorted(root.rglob("*_pb2.py"))
    if not stubs:
        raise SystemExit(f"proto_stubs: no *_pb2.py under {root}")
    for path in stubs:
        path.write_text(rewrite(path.read_text(encoding="utf-8"), str(path)), encoding="utf-8")
    # Not graphengine/ itself: the package's __init__.py is runtime_ext/python/graphengine's.
    for folder in (d for d in root.rglob("*") if d.is_dir()):
        (folder / "__init__.py").touch()
    shutil.copyfile(POOL_MODULE, root / "_pool.py")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: proto_stubs.py OUT")
    main(pathlib.Path(sys.argv[1]))
