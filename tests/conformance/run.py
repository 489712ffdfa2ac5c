"""Run the ONNX node test suite through GraphEngine and summarize it by engine.

    python -m tests.conformance.run [PREFIX ...] [--json PATH] [--failures]
                                    [--update [--allow-drop]]

Prints how many cases pass and on which engines their nodes ran, per-op placement counts
and the failure classes; writes the same as JSON. `--update` rewrites the ratchet file
tests/conformance/passing.txt with the newly passing cases added (a listed case that now
fails stays listed, and so fails the test, unless `--allow-drop`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import ratchet
from .cases import case_names, ensure_cases
from .harness import Result, run_named
from .summary import render, summarize

DEFAULT_JSON = Path(__file__).resolve().parents[2] / "build" / "conformance" / "node_suite.json"


def run_suite(root: Path, names: Sequence[str] | None = None,
              progress: Callable[[int, int], None] | None = None) -> list[Result]:
    """Run the named cases (default: all) in this process, in name order."""
    names = list(names) if names is not None else case_names(root)
    results = []
    for i, name in enumerate(names):
        results.append(run_named(root, name))
        if progress is not None:
            progress(i + 1, len(names))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.conformance.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("prefixes", nargs="*", help="run only cases whose names start with these")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help="summary JSON path")
    p.add_argument("--failures", action="store_true", help="list every failing case")
    p.add_argument("--no-ops", action="store_true", help="leave out the per-op table")
    p.add_argument("--update", action="store_true", help="rewrite passing.txt")
    p.add_argument("--allow-drop", action="store_true",
                   help="with --update, also drop listed cases that fail")
    args = p.parse_args(argv)
    if args.allow_drop and not args.update:
        p.error("--allow-drop only goes with --update")
    if args.update and args.prefixes:
        p.error("--update needs the whole suite: give no prefixes")

    root = ensure_cases()
    names = case_names(root)
    if args.prefixes:
        names = [n for n in names if n.startswith(tuple(args.prefixes))]
    start = time.perf_counter()
    results = run_suite(root, names, _progress if sys.stderr.isatty() else None)
    summary = summarize(results, time.perf_counter() - start)
    print(render(summary, per_op=not args.no_ops))
    if args.failures:
        print("\n  failing cases:")
        print("\n".join(f"  {n}: {e}" for n, e in summary["failures"].items()))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"\nsummary written to {args.json}")

    listed = ratchet.read()
    passing = {r.name for r in results if r.passed}
    known = set(names)
    regressed = sorted(n for n in listed if n in known and n not in passing)
    fresh = sorted(passing - set(listed))
    if args.update:
        new = ratchet.updated(listed, passing, args.allow_drop)
        ratchet.write(new)
        print(f"{ratchet.PASSING_FILE}: {len(new)} cases ({len(fresh)} added, "
              f"{len(set(listed) - new)} dropped)")
    elif fresh:
        print(f"{len(fresh)} passing cases are not in passing.txt; add them with "
              f"`python -m tests.conformance.run --update`")
    if regressed:
        print(f"{len(regressed)} cases listed in passing.txt fail: {', '.join(regressed[:20])}")
    return 1 if regressed and not (args.update and args.allow_drop) else 0


def _progress(done: int, total: int) -> None:
    if done % 50 == 0 or done == total:
        print(f"\r  {done}/{total} cases", end="\n" if done == total else "",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
