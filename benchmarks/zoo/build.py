"""Build the zoo into the model cache, with ONNX Runtime's (and torch's) reference outputs.

    python benchmarks/zoo/build.py [--only a,b] [--fast] [--force] [--list]

A model already built (its meta.json present) is skipped unless ``--force``. Every reference is
checked for a real scale: an output whose values are all (nearly) equal checks nothing, so the
build fails for it instead of recording it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import catalog
import models  # noqa: F401  (registers every builder)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import ort_run


def _scale_problem(name: str, out: np.ndarray) -> str | None:
    if out.dtype.kind != "f" or out.size < 2:
        return None
    if not np.all(np.isfinite(out)):
        return f"output '{name}' has non-finite values"
    if float(np.std(out.astype(np.float64))) < 1e-6 * max(1.0, float(np.abs(out).max())):
        return f"output '{name}' is constant ({out.ravel()[0]!r}): it would check nothing"
    return None


def build_one(entry: catalog.ZooEntry, force: bool = False) -> str:
    folder = catalog.model_dir(entry.name)
    if (folder / "meta.json").exists() and not force:
        return "cached"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    built = entry.build(folder)
    model_file = folder / "model.onnx"
    model = onnx.load(str(model_file), load_external_data=False)
    batches = catalog.BATCHES if entry.batched else (1,)
    problems = []
    for b in batches:
        feeds = built.inputs(b, 1000 + b)
        outs = ort_run(model_file, feeds)
        arrays = {f"input:{k}": v for k, v in feeds.items()}
        arrays.update({f"output:{k}": v for k, v in outs.items()})
        for k, v in outs.items():
            p = _scale_problem(k, v)
            if p:
                problems.append(f"batch {b}: {p}")
        if built.torch_outputs is not None:
            ref = built.torch_outputs(feeds)
            arrays.update({f"torch:{k}": np.asarray(v) for k, v in ref.items()})
        np.savez(folder / f"ref_b{b}.npz", **arrays)
    if problems:
        raise RuntimeError("; ".join(problems))
    opsets = {d.domain or "ai.onnx": d.version for d in model.opset_import}
    catalog.write_meta(entry, {
        "batches": list(batches),
        "producer": built.producer or f"{model.producer_name} {model.producer_version}".strip(),
        "opset": opsets.get("ai.onnx"),
        "ir_version": model.ir_version,
        "nodes": len(model.graph.node),
        "op_types": sorted({n.op_type for n in model.graph.node}),
        "build_seconds": round(time.perf_counter() - t0, 2),
    })
    return "built"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--fast", action="store_true", help="only the fast subset")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(catalog.REGISTRY)
    failed = 0
    for name in names:
        entry = catalog.REGISTRY.get(name)
        if entry is None:
            print(f"{name}: not in the zoo")
            failed += 1
            continue
        if args.fast and not entry.fast:
            continue
        if args.list:
            print(f"{name:28s} {entry.family:13s} {entry.source:6s} {'fast' if entry.fast else ''}")
            continue
        try:
            print(f"{name}: {build_one(entry, args.force)}", flush=True)
        except Exception as e:  # a broken builder is a result; the others still build
            failed += 1
            print(f"{name}: FAILED {type(e).__name__}: {e}", flush=True)
            traceback.print_exc(limit=3)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
