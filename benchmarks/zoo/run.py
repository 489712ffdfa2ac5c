"""``make zoo``: every built zoo model through GraphEngine, compared with its references.

    python benchmarks/zoo/run.py [--only a,b] [--fast] [--timeout S] [--out FILE]

One subprocess per model (benchmarks/zoo/check.py) with a timeout, so a crash or a hang is a
verdict, not the end of the run. Prints a table (model, verdict, max difference in units of the
output's scale, device / host nodes, fusions) and writes the results as JSON
(default: benchmarks/results/zoo-<timestamp>.json). Exits non-zero unless every model passes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import catalog  # noqa: E402


def run_one(name: str, timeout: float) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = Path(f.name)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(HERE / "check.py"), name, "--json", str(out)],
                              capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONFAULTHANDLER": "1"})
        text = out.read_text() if out.stat().st_size else ""
        if text:
            result = json.loads(text)
        else:
            result = {"name": name, "verdict": "crash",
                      "message": f"exit code {proc.returncode}: {proc.stderr.strip()[-800:]}"}
    except subprocess.TimeoutExpired:
        result = {"name": name, "verdict": "timeout", "message": f"no result in {timeout:.0f} s"}
    finally:
        out.unlink(missing_ok=True)
    result["seconds"] = round(time.perf_counter() - t0, 2)
    return result


def _row(r: dict) -> str:
    plain = r.get("plain", {})
    stats = plain.get("stats") or r.get("gears", {}).get("stats") or {}
    diffs = [r.get(m, {}).get("max_diff") for m in ("plain", "gears")]
    diff = max((d for d in diffs if d is not None), default=None)
    gears = r.get("gears", {}).get("verdict", "-")
    host = ",".join(stats.get("host_ops", []))
    return (f"{r['name']:26s} {r['verdict']:8s} {plain.get('verdict', '-'):8s} {gears:8s} "
            f"{'-' if diff is None else f'{diff:.1e}':>8s} {stats.get('device_nodes', '-'):>6} "
            f"{stats.get('host_nodes', '-'):>5} {stats.get('fusions', '-'):>6} "
            f"{r.get('seconds', 0):6.1f}  {host[:40]}")


def _problem(r: dict) -> str:
    for mode in ("plain", "gears"):
        m = r.get(mode, {})
        if m.get("verdict") in ("error", "wrong"):
            return f"{mode}: " + (m.get("message") or "; ".join(m.get("problems", [])[:3]))
        if m.get("verdict") == "refused":
            return f"{mode} refused: {m.get('message')}"
    return r.get("message", "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    ap.add_argument("--fast", action="store_true", help="only the fast subset")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per model")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if not args.only:
        import models  # noqa: F401  (registers every builder)

    built = sorted(p.parent.name for p in catalog.zoo_dir().glob("*/meta.json"))
    names = [n for n in args.only.split(",") if n] or [
        n for n, e in catalog.REGISTRY.items() if e.fast or not args.fast]
    names += [n for n in built if not args.only and n not in names and not args.fast]
    missing = [n for n in names if not (catalog.model_dir(n) / "meta.json").exists()]
    if missing:
        print(f"not built (run benchmarks/zoo/build.py): {', '.join(missing)}")
    print(f"{'model':26s} {'verdict':8s} {'plain':8s} {'gears':8s} {'maxdiff':>8s} "
          f"{'device':>6} {'host':>5} {'fused':>6} {'sec':>6}  host ops", flush=True)
    results = []
    for name in names:
        if name in missing:
            results.append({"name": name, "verdict": "missing"})
            continue
        r = run_one(name, args.timeout)
        results.append(r)
        print(_row(r), flush=True)
    bad = [r for r in results if r["verdict"] != "pass"]
    for r in bad:
        print(f"  {r['name']}: {r['verdict']}: {_problem(r)}")
    refused = [r for r in results if r.get("gears", {}).get("verdict") == "refused"]
    for r in refused:
        print(f"  {r['name']}: gears refused: {r['gears'].get('message')}")
    passed = len(results) - len(bad)
    print(f"{passed} of {len(results)} models pass")
    out = Path(args.out) if args.out else (
        HERE.parent / "results" / f"zoo-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"passed": passed, "total": len(results), "results": results},
                              indent=1, default=str))
    print(f"results: {out}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
