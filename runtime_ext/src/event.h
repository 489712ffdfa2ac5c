// Event: cross-stream ordering, modelled as a timeline semaphore.
//
// An event's value only grows. A value packs the run generation in its high bits and the
// ordinal of a record task within that run in its low kEventSeqBits bits, so a new run
// never needs to reset its events: every value of run g+1 is larger than any of run g.
// A "record" task signals the value of that record; a "wait" task waits for the value of
// the most recent record of the event before it in program order.
//
// Failure is sticky per run: abort(g) wakes every waiter of generation <= g and makes
// every later wait of that generation return false immediately.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace ge {

constexpr int kEventSeqBits = 24;

inline uint64_t event_value(uint64_t generation, uint64_t seq) {
  return (generation << kEventSeqBits) | seq;
}

class Event {
 public:
  // Non-blocking. Raises the timeline to `value` (no-op if already higher) and wakes the
  // waiters it satisfies.
  void signal(uint64_t value);

  // Blocks until the timeline reaches `value` (returns true) or the run generation of
  // `value` is aborted (returns false). Never blocks after an abort of that generation.
  bool wait(uint64_t value);

  // Non-blocking. Fails every current and future wait of generation <= `generation`.
  void abort(uint64_t generation);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t value_ = 0;  // guarded by mu_; mirrored in the atomics for spinning
  uint64_t aborted_generation_ = 0;
  std::atomic<uint64_t> value_fast_{0};
  std::atomic<uint64_t> aborted_fast_{0};
};

}  // namespace ge
