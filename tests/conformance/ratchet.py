"""The ratchet: `passing.txt` lists the node test cases that must pass; it only grows."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

PASSING_FILE = Path(__file__).with_name("passing.txt")

HEADER = """\
# ONNX backend node test cases that pass through GraphEngine's full pipeline
# (import_onnx -> compile_graph -> runtime.load -> execute). The list may only grow:
# tests/conformance/test_node_suite.py fails when a listed case fails. Regenerate with
#   python -m tests.conformance.run --update        (adds newly passing cases)
#   python -m tests.conformance.run --update --allow-drop   (also drops failing ones)
"""


def read(path: Path = PASSING_FILE) -> list[str]:
    if not path.exists():
        return []
    names = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line)
    return names


def write(names: Iterable[str], path: Path = PASSING_FILE) -> None:
    path.write_text(HEADER + "".join(f"{n}\n" for n in sorted(set(names))))


def updated(listed: Iterable[str], passing: Iterable[str], allow_drop: bool = False
            ) -> set[str]:
    """The new list: every passing case, plus (unless dropping) every listed one."""
    new = set(passing)
    if not allow_drop:
        new |= set(listed)
    return new
