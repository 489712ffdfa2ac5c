"""Check one built zoo model against its references, in this process.

    python benchmarks/zoo/check.py NAME [--json FILE]

Runs the model through ``graphengine.Session`` at every recorded batch size, once plain (a
signature compiled per batch) and once with gears (catalog.GEARS: batch 3 runs padded to 4),
and compares every output with ONNX Runtime's: floats within rtol 1e-3 and atol 1e-4 of the
output's scale (its largest magnitude; float16 outputs within 4 of their own steps, outputs
of a model that quantizes its activations to 8 bits at run time within 4 steps of 2^-8),
integers and booleans exactly. ``make zoo`` runs this in
a subprocess per model, so a crash is a verdict, not the end of the run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import catalog

RTOL, ATOL = 1e-3, 1e-4
# Ops that quantize activations to 8 bits from the data's own range at run time.
REQUANTIZING = {"DynamicQuantizeLinear", "DynamicQuantizeLSTM", "DynamicQuantizeMatMul"}


def compare(name: str, ours: np.ndarray, ref: np.ndarray, requantized: bool = False
            ) -> tuple[float, str | None]:
    """(max difference in units of the output's scale, a problem or None). `requantized`:
    the model quantizes activations to 8 bits at run time (see below)."""
    ours = np.asarray(ours)
    if ours.shape != ref.shape:
        return float("inf"), (f"output '{name}': shape {list(ours.shape)}, expected "
                              f"{list(ref.shape)}")
    if ref.dtype.kind not in "fc":
        both_int = ours.dtype.kind in "iu" and ref.dtype.kind in "iu"
        if ours.dtype.kind != ref.dtype.kind and not both_int:
            return float("inf"), f"output '{name}': dtype {ours.dtype}, expected {ref.dtype}"
        bad = int(np.count_nonzero(ours != ref))
        return float(bad), (f"output '{name}': {bad} of {ref.size} elements differ"
                            if bad else None)
    if ref.size == 0:
        return 0.0, None
    a, b = ours.astype(np.float64), ref.astype(np.float64)
    if not np.all(np.isfinite(a) == np.isfinite(b)) or np.any(
            np.isfinite(b) & (a != b) & ~np.isfinite(a)):
        return float("inf"), f"output '{name}': non-finite values differ from the reference"
    finite = np.isfinite(b)
    a, b = a[finite], b[finite]
    scale = float(np.abs(b).max()) if b.size else 1.0
    scale = scale or 1.0
    # A half-precision network rounds every node's output to 2^-11: one engine fusing a
    # Conv's bias Add and rounding once, another rounding twice, already differ by a step
    # (a float16 CRNN: ONNX Runtime 4.2e-4 from the float32 result, we 1.5e-3). Outputs of
    # such types are held to a few of their own steps instead of float32's tolerance.
    # A model that quantizes its activations to 8 bits from their own range at run time
    # (DynamicQuantizeLinear) turns a 1-ulp difference upstream (one engine's sigmoid against
    # another's) into a whole step of 1/255 of the range, which then travels: ddddocr's old
    # quantized CRNN differs from ONNX Runtime by 0.44% of its logits' scale here, OpenVINO's
    # by 0.35% (and in twice as many elements), with every argmax the same. Its outputs are
    # held to a few 8-bit steps.
    eps = float(np.finfo(ref.dtype).eps) if ref.dtype.itemsize < 4 else 0.0
    if requantized:
        eps = max(eps, 2.0 ** -8)
    rtol, atol = max(RTOL, 4 * eps), max(ATOL, 4 * eps)
    diff = np.abs(a - b)
    worst = float(diff.max() / scale) if diff.size else 0.0
    bad = diff > atol * scale + rtol * np.abs(b)
    if np.any(bad):
        i = int(np.argmax(diff - (atol * scale + rtol * np.abs(b))))
        return worst, (f"output '{name}': {int(bad.sum())} of {b.size} elements outside rtol "
                       f"{rtol:.3g} / atol {atol:.3g}x{scale:.3g}; worst {a[i]!r} vs {b[i]!r}")
    return worst, None


def _refs(name: str, batch: int) -> tuple[dict, dict]:
    data = np.load(catalog.model_dir(name) / f"ref_b{batch}.npz")
    feeds = {k[6:]: data[k] for k in data.files if k.startswith("input:")}
    outs = {k[7:]: data[k] for k in data.files if k.startswith("output:")}
    return feeds, outs


def _report_stats(report) -> dict:
    engines: dict[str, int] = {}
    for p in report.placements:
        engines[p.engine] = engines.get(p.engine, 0) + 1
    host = sorted({p.op_type for p in report.placements if p.engine != "device"})
    return {"device_nodes": engines.get("device", 0),
            "host_nodes": sum(v for k, v in engines.items() if k != "device"),
            "host_ops": host, "partitions": len(report.partitions),
            "fusions": len(report.fusions)}


def check_mode(name: str, meta: dict, geared: bool) -> dict:
    import graphengine
    from graphengine.engine.errors import GraphEngineError

    path = catalog.model_dir(name) / "model.onnx"
    result: dict = {"verdict": "pass", "max_diff": 0.0, "problems": [], "batches": {}}
    with graphengine.Session() as sess:
        t0 = time.perf_counter()
        try:
            gid = sess.add_graph(str(path), gears=catalog.GEARS if geared else None)
            if geared:
                result["stats"] = _report_stats(sess.compile_graph(gid))
        except GraphEngineError as exc:
            if geared:  # gears may be refused, with a clear error, where they cannot apply
                result.update(verdict="refused", message=str(exc)[:400])
                return result
            raise
        result["compile_seconds"] = round(time.perf_counter() - t0, 3)
        for batch in meta["batches"]:
            feeds, refs = _refs(name, batch)
            if not geared:
                report = sess.compile_graph(gid, {k: v.shape for k, v in feeds.items()})
                result["stats"] = _report_stats(report)
            t1 = time.perf_counter()
            outs = sess.run_graph(gid, feeds)
            result["batches"][batch] = {"run_seconds": round(time.perf_counter() - t1, 4)}
            for key, ref in refs.items():
                if key not in outs:
                    result["problems"].append(f"batch {batch}: output '{key}' missing")
                    continue
                diff, problem = compare(key, outs[key], ref,
                                        bool(REQUANTIZING & set(meta.get("op_types", ()))))
                result["max_diff"] = max(result["max_diff"], diff)
                if problem:
                    result["problems"].append(f"batch {batch}: {problem}")
    if result["problems"]:
        result["verdict"] = "wrong"
    return result


def check(name: str) -> dict:
    meta = catalog.read_meta(name)
    out: dict = {"name": name, "family": meta["family"], "source": meta["source"],
                 "opset": meta.get("opset"), "producer": meta.get("producer", "")}
    modes = [("plain", False)] + ([("gears", True)] if meta.get("batched") else [])
    for mode, geared in modes:
        try:
            out[mode] = check_mode(name, meta, geared)
        except Exception as exc:  # a compile or run failure is this mode's verdict
            out[mode] = {"verdict": "error", "message": f"{type(exc).__name__}: {exc}"[:600],
                         "trace": traceback.format_exc(limit=6)[-1500:]}
    verdicts = [out[m]["verdict"] for m, _ in modes]
    out["verdict"] = ("pass" if all(v in ("pass", "refused") for v in verdicts)
                      else next(v for v in verdicts if v not in ("pass", "refused")))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name")
    ap.add_argument("--json", default=None, help="write the result here")
    args = ap.parse_args(argv)
    result = check(args.name)
    text = json.dumps(result, indent=1, default=str)
    if args.json:
        Path(args.json).write_text(text)
    else:
        print(text)
    return 0 if result["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
