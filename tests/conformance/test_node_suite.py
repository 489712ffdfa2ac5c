"""The ONNX backend node test suite through the full pipeline, held by a ratchet.

Every case listed in passing.txt must pass; the test names each one that fails and why.
Cases that pass but are not listed are reported (as a warning) so they get added with
`python -m tests.conformance.run --update`. All cases run in this one process.
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest

from . import ratchet
from .cases import case_names, ensure_cases
from .harness import Ran, Result, classify, compare
from .run import run_suite
from .summary import failure_class, summarize


def test_listed_cases_pass_and_new_passes_are_reported() -> None:
    root = ensure_cases()
    names = case_names(root)
    listed = ratchet.read()
    assert listed, "passing.txt is empty: run `python -m tests.conformance.run --update`"
    unknown = sorted(set(listed) - set(names))
    assert not unknown, (f"passing.txt lists {len(unknown)} cases the generated suite "
                         f"(onnx at {root}) does not have: {unknown[:10]}")
    start = time.perf_counter()
    results = run_suite(root, names)
    summary = summarize(results, time.perf_counter() - start)
    by_name = {r.name: r for r in results}
    regressed = [by_name[n] for n in sorted(listed) if not by_name[n].passed]
    fresh = sorted(n for n, r in by_name.items() if r.passed and n not in set(listed))
    if fresh:
        warnings.warn(f"{len(fresh)} node test cases now pass but are not in passing.txt "
                      f"(e.g. {', '.join(fresh[:5])}): add them with "
                      f"`python -m tests.conformance.run --update`", stacklevel=1)
    if regressed:
        pytest.fail(f"{len(regressed)} cases listed in passing.txt fail "
                    f"({summary['passed']}/{summary['total']} pass):\n"
                    + "\n".join(f"  {r.name}: {r.error}" for r in regressed), pytrace=False)


# ---- the harness's own pieces ---------------------------------------------------------------
def test_ratchet_never_drops_a_name_unless_asked() -> None:
    assert ratchet.updated({"a", "b"}, {"b", "c"}) == {"a", "b", "c"}
    assert ratchet.updated({"a", "b"}, {"b", "c"}, allow_drop=True) == {"b", "c"}


def test_ratchet_round_trips_and_ignores_comments(tmp_path) -> None:
    path = tmp_path / "passing.txt"
    ratchet.write(["test_b", "test_a", "test_a"], path)
    assert path.read_text().startswith("#")
    assert ratchet.read(path) == ["test_a", "test_b"]
    assert ratchet.read(tmp_path / "missing.txt") == []


def test_compare_checks_shape_dtype_values_and_sequences() -> None:
    x = np.array([1.0, 2.0], np.float32)
    compare([x], [x + 1e-6], "ok")
    with pytest.raises(AssertionError, match="dtype"):
        compare([x], [x.astype(np.float64)], "dtype")
    with pytest.raises(AssertionError, match="shape"):
        compare([x], [x.reshape(2, 1)], "shape")
    with pytest.raises(AssertionError):
        compare([x], [x * 1.01], "values")
    with pytest.raises(AssertionError, match="outputs"):
        compare([x, x], [x], "count")
    with pytest.raises(AssertionError, match="sequence"):
        compare([[x, x]], [[x]], "sequence")
    strings = np.array(["a", "b"], dtype=object)
    compare([strings], [strings.copy()], "strings")
    with pytest.raises(AssertionError):
        compare([strings], [np.array(["a", "c"], dtype=object)], "strings")


def test_classify_names_the_least_native_engine() -> None:
    assert classify([("Add", "device"), ("Mul", "device")]) is Ran.DEVICE
    assert classify([("Add", "device"), ("Mul", "host")]) is Ran.HOST
    assert classify([("Add", "host"), ("X", "reference")]) is Ran.REFERENCE
    assert classify([]) is Ran.FOLDED


def test_summary_counts_engines_ops_and_failure_classes() -> None:
    results = [
        Result("t1", True, 0.1, ran=Ran.DEVICE, placements=[("Add", "device")]),
        Result("t2", True, 0.1, ran=Ran.HOST, placements=[("Add", "device"), ("Mul", "host")]),
        Result("t3", False, 0.1, error="InvalidGraph: [stage validate] node 'n1' bad"),
        Result("t4", False, 0.1, error="InvalidGraph: [stage validate] node 'n2' bad"),
    ]
    s = summarize(results, 1.0)
    assert (s["total"], s["passed"]) == (4, 2)
    assert s["by_engine"] == {"device": 1, "host": 1, "reference": 0, "folded": 0}
    assert s["ops"]["Add"] == {"cases": 2, "device": 2, "host": 0, "reference": 0}
    assert s["failure_classes"] == {failure_class("InvalidGraph: node '_' bad"): 2}
