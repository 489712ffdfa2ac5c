"""Check every $GE_UNSEEN_DIR/*/model.onnx through GraphEngine against ONNX Runtime.

Works for either set: build.py's or fresh.py's, whichever GE_UNSEEN_DIR holds.

python check.py            -> all models, each in its own subprocess (300 s timeout)
python check.py NAME ...   -> only those models
python check.py --one NAME -> (internal) run one model, print a RESULT json line
"""

import glob
import json
import os
import subprocess
import sys
import time
import traceback

ROOT = os.path.expanduser(os.environ.get("GE_UNSEEN_DIR", "~/.cache/graphengine/unseen"))
PY = "/work/main/.venv/bin/python"
RTOL, ATOL = 1e-3, 1e-4
TIMEOUT = 300


def diff_stats(a, b):
    import numpy as np

    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ad = np.abs(a64 - b64)
    rd = ad / np.maximum(np.abs(b64), 1e-12)
    return float(ad.max()) if ad.size else 0.0, float(rd.max()) if rd.size else 0.0


def one(name):
    import numpy as np
    import onnxruntime as ort

    path = os.path.join(ROOT, name, "model.onnx")
    base = dict(np.load(os.path.join(ROOT, name, "inputs.npz")))
    res = {"name": name, "status": "PASS", "details": []}
    stage = "import"
    try:
        import graphengine
        from graphengine.engine.runtime import default_device

        sess_ort = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        s = graphengine.Session(device=default_device(2))
        ort_b1 = None
        for batch in (1, 4):
            feeds = {k: np.ascontiguousarray(np.repeat(v, batch, axis=0)) for k, v in base.items()}
            stage = f"ort b{batch}"
            names = [o.name for o in sess_ort.get_outputs()]
            ref = dict(zip(names, sess_ort.run(None, feeds)))
            if batch == 1:
                ort_b1 = ref
            else:  # sanity: ORT batch-4 rows should equal ORT batch-1
                for n in names:
                    ad, _ = diff_stats(ref[n], np.repeat(ort_b1[n], batch, axis=0))
                    if ad > 1e-4:
                        res["details"].append(f"note: ORT b4 vs ORT b1 differ on {n}: {ad:.3g}")
            stage = f"engine add_graph b{batch}"
            t0 = time.time()
            gid = s.add_graph(path)
            stage = f"engine compile_graph b{batch}"
            s.compile_graph(gid, {k: v.shape for k, v in feeds.items()})
            stage = f"engine run_graph b{batch}"
            outs = s.run_graph(gid, feeds)
            dt = time.time() - t0
            stage = f"compare b{batch}"
            for n in names:
                if n not in outs:
                    res["status"] = "FAIL"
                    res["details"].append(
                        f"b{batch} {n}: missing from engine outputs {sorted(outs)}"
                    )
                    continue
                got, exp = np.asarray(outs[n]), ref[n]
                if got.shape != exp.shape:
                    res["status"] = "FAIL"
                    res["details"].append(f"b{batch} {n}: shape {got.shape} != ORT {exp.shape}")
                    continue
                if got.dtype != exp.dtype:
                    res["details"].append(f"b{batch} {n}: dtype {got.dtype} vs ORT {exp.dtype}")
                ad, rd = diff_stats(got, exp)
                try:
                    np.testing.assert_allclose(got, exp, rtol=RTOL, atol=ATOL)
                    ok = "ok"
                except AssertionError as e:
                    res["status"] = "FAIL"
                    ok = "MISMATCH " + " ".join(str(e).split("\n")[3:4]).strip()
                res["details"].append(f"b{batch} {n}: max_abs {ad:.3g} max_rel {rd:.3g} {ok}")
            res["details"].append(f"b{batch} engine add+compile+run {dt:.1f}s")
    except Exception as e:
        res["status"] = "ERROR"
        res["stage"] = stage
        res["error"] = f"{type(e).__name__}: {e}"
        res["traceback"] = traceback.format_exc()[-3000:]
    print("RESULT " + json.dumps(res))


def main(names):
    results = []
    for name in names:
        t0 = time.time()
        try:
            p = subprocess.run(
                ["nice", "-n", "19", PY, os.path.abspath(__file__), "--one", name],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
            )
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if lines:
                r = json.loads(lines[-1][7:])
            else:
                tail = "\n".join((p.stderr or p.stdout).strip().splitlines()[-15:])
                r = {
                    "name": name,
                    "status": "ERROR",
                    "stage": "subprocess",
                    "error": f"child exited rc={p.returncode} without result: {tail}",
                }
        except subprocess.TimeoutExpired:
            r = {
                "name": name,
                "status": "ERROR",
                "stage": "subprocess",
                "error": f"timeout after {TIMEOUT}s",
            }
        r["seconds"] = round(time.time() - t0, 1)
        results.append(r)
        if r["status"] == "ERROR":
            msg = f"[{r.get('stage')}] " + " | ".join(r["error"].strip().splitlines()[:3])[:500]
        else:
            worst = [d for d in r["details"] if "max_abs" in d]
            msg = (
                "; ".join(
                    d for d in r["details"] if "MISMATCH" in d or "missing" in d or "shape" in d
                )
                if r["status"] == "FAIL"
                else "max_abs "
                + f"{max(float(d.split('max_abs ')[1].split()[0]) for d in worst):.3g}"
            )
        print(f"{name:20s} {r['status']:5s} {msg}", flush=True)
    with open(os.path.join(ROOT, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    return results


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        one(sys.argv[2])
    else:
        names = sys.argv[1:] or sorted(
            os.path.basename(os.path.dirname(p))
            for p in glob.glob(os.path.join(ROOT, "*", "model.onnx"))
        )
        main(names)
