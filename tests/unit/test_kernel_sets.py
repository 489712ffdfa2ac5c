"""Tests of the runtime's choice between a model's two kernel sets (runtime_ext/src/kernel_sets.h):
its team of threads ("wide") or one thread ("narrow"), driven here with launch times of the
test's choosing through graphengine._runtime.KernelSetChoice (a loaded model's times are the
machine's: test_runtime_exec.py covers the model's side of it).
"""

from __future__ import annotations

from graphengine import _runtime as rt

MS = 1_000_000


class Driver:
    """Launches alone, one after another, each taking the time its set is given."""

    def __init__(self) -> None:
        self.choice = rt.KernelSetChoice()
        self.now = 10**12

    def launch(self, wide_ns: int, narrow_ns: int) -> tuple[bool, bool, bool]:
        narrow, warmup, probe = self.choice.pick(self.now)
        took = narrow_ns if narrow else wide_ns
        self.choice.record(narrow, warmup, probe, took)
        self.now += took
        return narrow, warmup, probe


def _settled(wide_ns: int = 35 * MS, narrow_ns: int = 60 * MS) -> Driver:
    """A ResNet-50 at batch 1 on two threads: its first launch (untimed), the narrow set's
    probe (a warm-up, then a timed launch), then the team's launches filling the window."""
    d = Driver()
    assert d.launch(wide_ns, narrow_ns) == (False, False, False)  # first: not timed
    assert d.launch(wide_ns, narrow_ns) == (True, True, False)  # the probe's warm-up
    assert d.launch(wide_ns, narrow_ns) == (True, False, True)  # ... and its timed launch
    for _ in range(rt.KernelSetChoice.window):
        assert d.launch(wide_ns, narrow_ns)[0] is False
    assert d.choice.time_ns(False) == wide_ns and d.choice.time_ns(True) == narrow_ns
    assert not d.choice.prefers_narrow
    return d


def test_one_stretched_team_launch_keeps_the_team():
    # A passing process stretched one launch of the team 8.5 times (its helper lost a few
    # timeslices). A moving average with weight 1/8 went to 35 * 7/8 + 300/8 = 68 ms, past
    # the single thread's 60: the model ran on one thread for over 2 s (until the next
    # probe of the team). The median of the last five launches does not move.
    d = _settled()
    assert d.launch(300 * MS, 60 * MS)[0] is False
    assert not d.choice.prefers_narrow
    assert d.choice.time_ns(False) == 35 * MS
    for _ in range(20):
        assert d.launch(35 * MS, 60 * MS)[0] is False


def test_a_load_that_stays_moves_to_one_thread_within_half_a_window():
    d = _settled()
    picks = [d.launch(300 * MS, 60 * MS)[0] for _ in range(4)]
    # the third slow launch makes the median slow: the fourth runs on one thread
    assert picks == [False, False, False, True]
    assert d.choice.prefers_narrow and d.choice.time_ns(False) == 300 * MS


def test_a_fast_probe_of_the_team_switches_back_at_once():
    d = _settled()
    for _ in range(3):
        d.launch(300 * MS, 60 * MS)
    assert d.choice.prefers_narrow
    # the load went away: the team's next probe comes after kProbeMin launches and 16 times
    # two of its (slow) launches; its timed launch alone brings the model back to the team
    seen = []
    for _ in range(400):
        seen.append(d.launch(35 * MS, 60 * MS))
        if seen[-1][2]:
            break
    assert seen[-1] == (False, False, True), seen[-3:]
    assert seen[-2] == (False, True, False)  # its untimed warm-up
    assert not d.choice.prefers_narrow and d.choice.time_ns(False) == 35 * MS
    assert d.launch(35 * MS, 60 * MS)[0] is False


def test_a_slow_early_team_launch_is_outvoted_by_the_next_two():
    # A heavy model's first 16 launches run the team before its single-threaded set is built
    # (their times are recorded without a pick). One of them stretched by a passing process
    # (300 ms among 35s) still weighed 75 ms in a moving average after the other 14, past the
    # single thread's 60 ms: the model went to one thread on its first probe.
    c = rt.KernelSetChoice()
    c.record(False, False, False, 40 * MS)  # the first launch: not timed
    c.record(False, False, False, 300 * MS)
    c.record(False, False, False, 35 * MS)
    assert c.time_ns(False) == 35 * MS  # the lower middle of two
    for _ in range(13):
        c.record(False, False, False, 35 * MS)
    assert c.time_ns(False) == 35 * MS
    assert c.pick(0) == (True, True, False)  # the narrow set's warm-up
    c.record(True, True, False, 70 * MS)
    assert c.pick(0) == (True, False, True)  # its timed launch
    c.record(True, False, True, 60 * MS)
    assert c.time_ns(True) == 60 * MS
    assert not c.prefers_narrow
    assert c.pick(0)[0] is False


def test_the_probe_interval_doubles_while_the_choice_holds():
    d = _settled()
    first = d.choice.probe_every
    probes = 0
    for _ in range(2000):
        probes += d.launch(35 * MS, 60 * MS)[2]
    assert probes >= 2
    assert d.choice.probe_every >= first * 4


def test_the_first_team_launch_after_the_narrow_probe_is_not_its_time():
    # efficientnet_b0 at batch 1: the team ~7 ms once warm, one thread ~14 ms. At start the
    # narrow set's probe ran launches 2 and 3; the team's next launch paid for waking its
    # helper and cold caches (40-70 ms). Timed, that one launch was the team's whole window,
    # the single thread looked faster, and the team's next probe came 16 launches and 32
    # times the slow launch later: a benchmark's latency round ran on one thread.
    d = Driver()
    d.launch(70 * MS, 14 * MS)  # first: not timed
    assert d.launch(70 * MS, 14 * MS) == (True, True, False)
    assert d.launch(70 * MS, 14 * MS) == (True, False, True)
    assert d.launch(50 * MS, 14 * MS) == (False, True, False)  # back on the team: untimed
    assert d.launch(7 * MS, 14 * MS) == (False, False, False)
    assert d.choice.time_ns(False) == 7 * MS and not d.choice.prefers_narrow
    for _ in range(30):
        assert d.launch(7 * MS, 14 * MS)[0] is False


def test_a_switch_to_the_single_thread_times_from_its_second_launch():
    d = _settled()
    for _ in range(3):
        d.launch(300 * MS, 60 * MS)
    assert d.choice.prefers_narrow
    assert d.launch(300 * MS, 90 * MS) == (True, True, False)  # the switch's first: untimed
    assert d.launch(300 * MS, 60 * MS) == (True, False, False)
    assert d.choice.time_ns(True) == 60 * MS
