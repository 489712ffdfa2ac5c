"""Hypothesis profiles for the fuzz tests, and the session they share.

`ci` (the default, what `make test` runs): few examples per test, derandomized (the same
examples every run, no example database), so the bounded run is deterministic and takes
well under a minute. `long` (`make fuzz`, GE_FUZZ_PROFILE=long): random seeds and
GE_FUZZ_SCALE (40) times the examples, ~10 minutes in all (596 s measured). Each test asks
for its bounded count with `examples(n)`; the long profile multiplies it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, settings

import graphengine

PROFILE = os.environ.get("GE_FUZZ_PROFILE", "ci")

_COMMON = dict(
    deadline=30_000,  # ms per example: a compile takes ~0.1 s, a hang is caught by the alarm
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
    database=None,
    print_blob=True,
)
# GE_FUZZ_TRIAGE=1: no shrinking (a failure is reported as found, at once), for listing many
# failures in one run; combine with either profile.
if os.environ.get("GE_FUZZ_TRIAGE"):
    _COMMON["phases"] = [Phase.explicit, Phase.generate]
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.register_profile("long", derandomize=False, **_COMMON)
settings.load_profile(PROFILE)


# The quota a deployment gives a session. A mutated graph may ask for gigabytes (an Expand
# to 2**25 rows): with a quota that is refused right after shape inference; without one it
# is a valid request this machine can run, slowly, which is not what is tested here.
MEMORY_LIMIT = 1 << 30


@pytest.fixture(scope="module")
def session() -> Iterator[graphengine.Session]:
    with graphengine.Session({"memory_limit_bytes": MEMORY_LIMIT}) as s:
        yield s
