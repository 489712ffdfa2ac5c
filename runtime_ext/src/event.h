// Event: cross-stream ordering, modelled as a timeline semaphore.
//
// An event's value only grows. A value packs a run generation in its high bits and the
// ordinal of a record task within that generation in its low kEventSeqBits bits, so a new
// run never needs to reset its events: every value of generation g+1 is larger than any
// of generation g. A "record" task signals the value of that record; a "wait" task waits
// for the value of the most recent record of the event before it in program order. Each
// iteration of a launch is its own generation.
//
// A wait never blocks a lane: a stream that would wait parks on the event, and the
// signal (or abort) that satisfies it submits the stream to the scheduler again.
//
// Failure is sticky per generation: abort(g) releases every waiter of generation <= g
// and makes every later wait of such a generation succeed at once (the caller checks its
// run's failure flag and skips the rest).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "scheduler.h"

namespace ge {

constexpr int kEventSeqBits = 24;

inline uint64_t event_value(uint64_t generation, uint64_t seq) {
  return (generation << kEventSeqBits) | seq;
}

class Event {
 public:
  // Non-blocking. Raises the timeline to `value` (no-op if already there) and submits
  // the parked runnables it satisfies.
  void signal(uint64_t value, Scheduler& sched);

  // Returns true when the timeline has reached `value` or its generation was aborted.
  // Otherwise polls briefly, then parks `r`: returns false, and `r` is submitted (at
  // `width`) once the value is reached or aborted; `r` then calls wait() again.
  bool wait_or_park(uint64_t value, Runnable* r, int width);

  // Non-blocking. Releases every current and future wait of generation <= `generation`.
  void abort(uint64_t generation, Scheduler& sched);

  // Non-blocking check.
  bool reached(uint64_t value) const {
    return value_fast_.load(std::memory_order_acquire) >= value ||
           aborted_fast_.load(std::memory_order_acquire) >= (value >> kEventSeqBits);
  }

 private:
  struct Waiter {
    uint64_t value;
    Runnable* runnable;
    int width;
  };
  // Moves the waiters that `value_`/`aborted_` now satisfy into `out`. Caller holds mu_.
  void collect(std::vector<Waiter>* out);

  std::mutex mu_;
  uint64_t value_ = 0;  // guarded by mu_; mirrored in the atomics for polling
  uint64_t aborted_ = 0;
  std::vector<Waiter> waiters_;
  std::atomic<uint64_t> value_fast_{0};
  std::atomic<uint64_t> aborted_fast_{0};
};

}  // namespace ge
