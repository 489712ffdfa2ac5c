"""The ONNX backend node test cases, generated from the onnx package and cached outside git.

The onnx wheel no longer ships the generated files, so they are produced here from the
package's own generators (`onnx.backend.test.case.node.collect_testcases`) into the classic
layout, one directory per case: `model.onnx` and `test_data_set_N/{input,output}_K.pb`.
The generators seed numpy per case, so the files are the same on every run. The cache lives
in `$GE_ONNX_NODE_CACHE`, else `~/.cache/graphengine/onnx-node-tests/<onnx version>/`, and
is written once (a complete cache holds a `.complete` marker with the case count).
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

CACHE_ENV = "GE_ONNX_NODE_CACHE"
MARKER = ".complete"


def cache_dir() -> Path:
    """Where the generated cases live (the environment variable wins)."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "graphengine" / "onnx-node-tests" / onnx.__version__


def ensure_cases(root: Path | None = None) -> Path:
    """The cache directory, generating the cases first when it is missing or incomplete.

    Concurrent callers serialize on a lock file; the cases are written to a temporary
    directory and moved into place, so a reader never sees half a cache.
    """
    root = root or cache_dir()
    if (root / MARKER).is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / MARKER).is_file():
            return root
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
        try:
            count = generate(tmp)
            (tmp / MARKER).write_text(f"{count}\n")
            if root.exists():
                shutil.rmtree(root)
            tmp.rename(root)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp)
    return root


def generate(out: Path) -> int:
    """Write every node test case under `out`; returns the number of cases."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # The generators compute expected outputs with overflowing casts and log(0) on
        # purpose; their warnings are noise here.
        warnings.simplefilter("ignore")
        cases = node.collect_testcases(None)
    for case in cases:
        case_dir = out / case.name
        case_dir.mkdir(parents=True)
        (case_dir / "model.onnx").write_bytes(case.model.SerializeToString())
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            ds = case_dir / f"test_data_set_{i}"
            ds.mkdir()
            for j, value in enumerate(inputs):
                proto = _to_proto(value, graph.input[j])
                (ds / f"input_{j}.pb").write_bytes(proto.SerializeToString())
            for j, value in enumerate(outputs):
                proto = _to_proto(value, graph.output[j])
                (ds / f"output_{j}.pb").write_bytes(proto.SerializeToString())
    return len(cases)


def _to_proto(value: Any, info: onnx.ValueInfoProto):
    tp = info.type
    if tp.HasField("sequence_type"):
        return numpy_helper.from_list(value, info.name)
    if tp.HasField("optional_type"):
        return numpy_helper.from_optional(value, info.name)
    if tp.HasField("map_type"):
        return numpy_helper.from_dict(value, info.name)
    if isinstance(value, onnx.TensorProto):
        return value
    return numpy_helper.from_array(np.asarray(value), info.name)


# ---- reading a case back ----------------------------------------------------------------
@dataclasses.dataclass
class DataSet:
    inputs: list[Any]  # one per graph input: an array, a list (sequence) or None (optional)
    outputs: list[Any]


@dataclasses.dataclass
class Case:
    name: str
    path: Path
    model: onnx.ModelProto
    data_sets: list[DataSet]


def case_names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def load_case(root: Path, name: str) -> Case:
    path = root / name
    model = onnx.load(str(path / "model.onnx"), load_external_data=False)
    graph = model.graph
    sets = []
    for ds in sorted(path.glob("test_data_set_*"), key=lambda p: int(p.name.rsplit("_", 1)[1])):
        inputs = [_read(ds / f"input_{j}.pb", vi.type) for j, vi in enumerate(graph.input)
                  if (ds / f"input_{j}.pb").exists()]
        outputs = [_read(ds / f"output_{j}.pb", vi.type) for j, vi in enumerate(graph.output)]
        sets.append(DataSet(inputs, outputs))
    return Case(name, path, model, sets)


def _read(path: Path, tp: onnx.TypeProto) -> Any:
    data = path.read_bytes()
    if tp.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return [_strings(a) for a in numpy_helper.to_list(seq)]
    if tp.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        value = numpy_helper.to_optional(opt)
        if isinstance(value, list):
            return [_strings(a) for a in value]
        return None if value is None else _strings(value)
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    return _strings(numpy_helper.to_array(tensor))


def _strings(arr: np.ndarray) -> np.ndarray:
    """String tensors as object arrays of str, the engine's representation."""
    if arr.dtype.kind in "SU" or arr.dtype == object:
        flat = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in arr.reshape(-1)]
        return np.array(flat, dtype=object).reshape(arr.shape)
    return arr
