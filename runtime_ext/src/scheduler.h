// Scheduler: the Device's fixed pool of worker threads ("lanes") and its core budget.
//
// Every model loaded on a Device runs its streams on these lanes; no model owns a thread.
// Kernels are multi-threaded through OpenMP (oneDNN's runtime), and an OpenMP team
// belongs to the thread that starts it, so lanes come in width classes: a lane of width
// w runs every kernel with a team of w threads (itself + w-1 OpenMP helpers). For each
// width in use there are max(1, budget / w) lanes, created on first use.
//
// Two rules keep the process at the budget:
//   * core tokens: a kernel task holds `width` of the budget's tokens while it runs, so
//     lanes of different widths together never run more than `budget` threads;
//   * libgomp stops spinning between parallel regions (every oneDNN call then pays a
//     thread wake-up) once the threads of all teams in the process outnumber the cores:
//     lanes live as long as the Device, so each width class adds its helpers once,
//     however many models and instances run on it.
//
// Work is a Runnable: typically one stream of one model instance for one launch. It runs
// on a lane until it finishes or parks on an event; whoever unblocks it submits it again.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ge {

constexpr int kMaxWidth = 64;

// A backend's execution context on one lane (host: a oneDNN CPU stream), made by the
// Device for each lane as it starts and used only on that lane. Kernels of a backend
// whose work completes asynchronously enqueue on it; synchronize() blocks until what was
// enqueued is done (the runtime calls it before a record signals and before a run ends).
class LaneStream {
 public:
  virtual ~LaneStream() = default;
  virtual void synchronize() {}
};

// What work sees while it runs on a lane. Borrowed from the lane; valid during the call.
struct LaneContext {
  LaneStream& stream;  // the lane's backend stream
  int width;           // OpenMP threads of this lane's parallel regions
};

// Work for the lanes. A Runnable is in at most one place at a time: queued, running on
// one lane, parked (held by an Event) or idle (held by its owner).
class Runnable {
 public:
  virtual ~Runnable() = default;
  // Runs on a lane until the work is done or parked. Must not throw.
  virtual void run(LaneContext& lane) = 0;
};

class Scheduler {
 public:
  // Non-blocking. `budget` >= 1 cores; lanes are created on first use of each width,
  // each with a stream from `make_stream` (called on the lane's thread).
  Scheduler(std::function<std::unique_ptr<LaneStream>()> make_stream, int budget);
  // Blocks: joins every lane. No work may be queued or running.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  int budget() const { return budget_; }
  // The width lanes actually use for a request of `threads` (clamped to [1, budget]).
  int clamp_width(int threads) const;
  // Lanes of `width` (clamped) that exist or will exist.
  int lanes(int width) const;

  // Non-blocking: queues `r` for a lane of `width` (FIFO per width). `r` is borrowed
  // until it runs. Throws std::system_error only if a lane thread cannot be started.
  void submit(int width, Runnable* r);

  // Blocks until `n` core tokens are free and takes them (FIFO among waiters).
  void acquire(int n);
  // Non-blocking: takes `n` tokens if they are free and nobody waits for tokens.
  bool try_acquire(int n);
  // Non-blocking: returns `n` tokens.
  void release(int n);

  // Blocks: runs each function on a lane of `width` (concurrently when there are
  // several lanes) and waits for all. Each holds `width` tokens while it runs. Used at
  // load to prepare kernels on the kind of thread that will run them. The functions must
  // not throw.
  void run_on_lanes(int width, const std::vector<std::function<void(LaneContext&)>>& fns);

  // Lane threads started so far (for tests and statistics).
  int threads_started() const;

 private:
  struct Group;
  Group& group(int width);
  void lane_main(Group& g);

  const std::function<std::unique_ptr<LaneStream>()> make_stream_;
  const int budget_;

  mutable std::mutex groups_mu_;
  std::unique_ptr<Group> groups_[kMaxWidth + 1];
  std::atomic<Group*> fast_groups_[kMaxWidth + 1] = {};

  // Core tokens.
  std::atomic<int> free_tokens_;
  std::atomic<int> token_waiters_{0};
  std::mutex token_mu_;
  std::condition_variable token_cv_;
  uint64_t ticket_head_ = 0;  // guarded by token_mu_
  uint64_t ticket_tail_ = 0;
};

}  // namespace ge
