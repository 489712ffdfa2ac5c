"""Stream assignment: independent branches on separate streams, events on cut edges.

Input: the steps of a device partition in program order, each with the earlier steps it
reads from, and a cost estimate. A step continues a chain (the stream whose last step is
one of its producers, the least loaded if several) when it can, else it starts on the
least loaded stream; at most `max_streams` streams are used. Every cross-stream data edge
gets an event (record after the producer, wait before the consumer) unless the consumer's
stream already knows the producer finished: vector clocks prune redundant waits.

The same vector clocks answer `happens_before(u, v)`, which the memory planner uses to
decide whether two buffers may share bytes when their steps run on different streams.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

START = -1  # the copy-in of partition inputs: before every step


@dataclasses.dataclass
class StreamSchedule:
    stream: list[int]
    position: list[int]  # index of the step within its stream
    waits: list[list[int]]  # events to wait for before the step
    records: list[list[int]]  # events to record after the step
    clock: list[tuple[int, ...]]  # steps of each stream known complete when the step starts
    num_streams: int
    num_events: int

    @property
    def end(self) -> int:
        """The copy-out of partition outputs: after every step."""
        return len(self.stream)

    def happens_before(self, u: int, v: int) -> bool:
        """True when step u is complete before step v starts, whatever the interleaving."""
        if u == START or v == self.end:
            return u != v
        if v == START or u == self.end or u == v:
            return False
        su = self.stream[u]
        if self.stream[v] == su:
            return self.position[u] < self.position[v]
        return self.clock[v][su] > self.position[u]


def assign_streams(deps: Sequence[Sequence[int]], costs: Sequence[float],
                   max_streams: int = 1,
                   hints: Sequence[int | None] | None = None) -> StreamSchedule:
    """`hints[step]`, when given and not None, is the step's stream (mod max_streams)."""
    n = len(deps)
    max_streams = max(1, max_streams)
    load = [0.0] * max_streams
    count = [0] * max_streams
    tail = [-1] * max_streams  # last step on each stream
    clocks = [[0] * max_streams for _ in range(max_streams)]  # clocks[s][t]
    sched = StreamSchedule([], [], [], [], [], 0, 0)
    event_at: dict[tuple[int, int], int] = {}  # (stream, completed count) -> event id
    pending_records: dict[int, list[int]] = {}
    for step in range(n):
        producers = sorted({d for d in deps[step] if d != START})
        # Continue a chain: a stream whose last step is one of our producers. At a fork
        # the first consumer continues the chain and the others start on the least
        # loaded streams.
        chains = {sched.stream[p] for p in producers if tail[sched.stream[p]] == p}
        pool = chains or range(max_streams)
        s = min(pool, key=lambda t: (load[t], t))
        if hints is not None and hints[step] is not None:
            s = hints[step] % max_streams
        # Per producing stream only its latest producer matters: in-order streams.
        latest: dict[int, int] = {}
        for p in producers:
            sp = sched.stream[p]
            if sp not in latest or sched.position[p] > sched.position[latest[sp]]:
                latest[sp] = p
        waits = []
        for sp, p in sorted(latest.items()):
            need = sched.position[p] + 1
            if sp == s or clocks[s][sp] >= need:
                continue  # same stream (in order) or already known complete
            key = (sp, need)
            if key not in event_at:
                event_at[key] = sched.num_events
                pending_records.setdefault(p, []).append(sched.num_events)
                sched.num_events += 1
            waits.append(event_at[key])
            # what the recording stream knew at the record is now known here too
            rec_clock = sched.clock[p]
            for t in range(max_streams):
                clocks[s][t] = max(clocks[s][t], rec_clock[t] if t != sp else need)
        clocks[s][s] = count[s]
        sched.stream.append(s)
        sched.position.append(count[s])
        sched.waits.append(waits)
        sched.records.append([])
        sched.clock.append(tuple(clocks[s]))
        count[s] += 1
        tail[s] = step
        load[s] += costs[step]
    for p, events in pending_records.items():
        sched.records[p] = events
    sched.num_streams = sum(1 for c in count if c) or 1
    return sched
