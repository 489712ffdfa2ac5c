"""What a run of the node suite shows: counts by engine, per-op placements, failure classes."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence

import onnx

from .harness import Ran, Result

RAN_LABELS = {
    Ran.DEVICE: "every node on the device engine (native kernels)",
    Ran.HOST: "some nodes on the host engine (numpy reference kernels)",
    Ran.REFERENCE: "some nodes on the last-resort engine (onnx.reference)",
    Ran.FOLDED: "no node left to run: folded or removed at compile time",
}
ENGINES = ("device", "host", "reference")


def failure_class(error: str) -> str:
    """An error message with the case-specific parts (names, numbers, arrays) taken out."""
    text = re.sub(r"^(\w+): \[[^\]]*\] ", r"\1: ", error)
    text = re.sub(r"(?<!op type )'[^']*'", "'_'", text)  # the op type says what is missing
    text = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", text)
    return text.split(" ACTUAL:")[0].split(" Mismatch")[0][:110]


def summarize(results: Sequence[Result], seconds: float) -> dict:
    passed = [r for r in results if r.passed]
    by_engine = Counter(r.ran.value for r in passed if r.ran is not None)
    ops: dict[str, Counter] = defaultdict(Counter)
    for r in passed:
        for op in {op for op, _ in r.placements}:
            ops[op]["cases"] += 1
        for op, engine in r.placements:
            ops[op][engine] += 1
    failures = {r.name: r.error for r in results if not r.passed}
    classes = Counter(failure_class(e) for e in failures.values())
    return {
        "onnx_version": onnx.__version__,
        "total": len(results),
        "passed": len(passed),
        "seconds": round(seconds, 2),
        "by_engine": {ran.value: by_engine.get(ran.value, 0) for ran in Ran},
        "ops": {op: {k: c.get(k, 0) for k in ("cases", *ENGINES)} for op, c in sorted(ops.items())},
        "failure_classes": dict(classes.most_common()),
        "failures": dict(sorted(failures.items())),
        "cases": {r.name: {"passed": r.passed, "ran": r.ran.value if r.ran else None,
                           "seconds": round(r.seconds, 4)} for r in results},
    }


def render(summary: dict, per_op: bool = True) -> str:
    s = summary
    lines = [f"ONNX node test suite (onnx {s['onnx_version']}): {s['passed']} of {s['total']} "
             f"cases pass through the full pipeline in {s['seconds']:.1f} s", "",
             f"  {'ran on':<10} {'cases':>6}"]
    for ran in Ran:
        lines.append(f"  {ran.value:<10} {s['by_engine'][ran.value]:>6}  {RAN_LABELS[ran]}")
    lines.append(f"  {'failed':<10} {s['total'] - s['passed']:>6}")
    if per_op and s["ops"]:
        lines += ["", "  nodes per op in passing cases, by the engine that ran them:",
                  f"  {'op':<36} {'cases':>6} {'device':>7} {'host':>6} {'reference':>9}"]
        for op, c in s["ops"].items():
            lines.append(f"  {op:<36} {c['cases']:>6} {c['device']:>7} {c['host']:>6} "
                         f"{c['reference']:>9}")
    if s["failure_classes"]:
        lines += ["", "  failure classes:"]
        lines += [f"  {n:>5}  {cls}" for cls, n in s["failure_classes"].items()]
    return "\n".join(lines)
