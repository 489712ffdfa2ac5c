// Model internals shared by model.cc (load) and model_exec.cc (execute): an instance's
// run state, a launch, and the Runnable that runs one stream of one instance.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "model.h"

namespace ge {

std::string node_prefix(const std::string& name, const std::string& op);

// A model whose launches take longer than this builds (and first probes) its narrow set
// only after kProbeMin launches, not on its second: a probe is two launches of the narrow set
// (each about `width` times a wide one), which on a 300 ms batch-8 segmentation net made
// the first few requests 2-4 times slower; 16 launches amortize it. Short launches (where
// a loaded machine's barrier waits cost the most, relatively) probe at once. So does a
// launch long only because the machine is loaded: one whose work (ModelSpec.work_flops) is
// below kEarlyProbeFlops a thread (20 ms at 100 GFLOP/s). A 0.3 ms decoder of 27 MFLOP took
// 140-320 ms a launch beside two compiling processes (a barrier per task, each waiting out a
// preempted lane's time slice) and kept that for its first 16 launches, where the narrow
// set, once probed, ran it in 0.3-0.4 ms.
constexpr uint64_t kEarlyProbeNs = 20'000'000;
constexpr uint64_t kEarlyProbeFlops = 2'000'000'000;

// One execute() call: owned by the caller (on its stack) until it returns. It waits in the
// model's queue when every instance is busy; whoever frees an instance (the lane that
// completes a launch, or the caller itself) starts it, binding it to that instance. From
// then on it is read-only for the lanes, except the result buffers they fill and the
// completion fields below.
struct Model::Launch {
  int64_t iterations = 1;
  bool return_all = false;
  bool narrow = false;  // single-threaded kernels on the width-1 lanes (another launch runs)
  // the streams run one after another (Model::has_serial_): only the first is submitted,
  // and each submits the next when it first waits, passes a barrier or ends (hand_off)
  bool serial = false;
  bool probe = false;   // alone, on the kernel set not currently preferred (pick_narrow)
  bool warmup = false;  // its time not kept: a probe's first launch, or the first back on a set
  bool probe_warmup = false;  // ... the former (stats: probe_warmups)
  // the narrow set was built when it started: its kernels may run a task (and the
  // instance's workspaces fit them)
  bool narrow_ok = false;
  int others = 0;       // launches in flight when this one started
  uint64_t first_generation = 0;
  std::vector<std::vector<uint8_t*>> bases;  // per iteration: base of each binding slot
  const ExecRequest* request = nullptr;
  // Result buffers: one list per returned iteration.
  std::vector<std::vector<HostResult>>* results = nullptr;
  uint64_t zero_copy = 0;   // bytes bound in place (set when started)
  uint64_t started_ns = 0;  // when it left the queue

  // Completion: written by the lane that completes the launch before `done`.
  Status status;
  uint64_t copied = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;  // guarded by mu
  std::atomic<bool> done_fast{false};

  // Marks the launch complete and wakes its caller; touches nothing of the launch after.
  void wake() {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    done_fast.store(true, std::memory_order_release);
    cv.notify_all();  // under the lock: once it is released the caller may return
  }
};

struct Model::Instance {
  int index = 0;
  AlignedBuffer arena;
  std::vector<AlignedBuffer> workspaces;  // per stream
  std::vector<std::unique_ptr<Event>> events;
  Event barrier;  // between iterations of a launch
  std::vector<std::unique_ptr<StreamRun>> runs;  // per stream
  uint64_t generation = 0;  // last generation used (launching thread only)

  // Run state of the launch bound to the instance: reset when one starts, then shared
  // with the lanes.
  Launch* launch = nullptr;
  std::atomic<bool> failed{false};
  std::mutex fail_mu;
  Status status;  // guarded by fail_mu
  std::atomic<int> arrive{0};   // streams still to finish the current iteration
  std::atomic<int> pending{0};  // streams still to finish the launch
  std::atomic<uint64_t> copied{0};
};

// One stream of one instance for one launch: runs the stream's tasks in order on the
// lanes, parks on events instead of blocking, and passes the barrier between iterations.
class Model::StreamRun : public Runnable {
 public:
  StreamRun(Model* m, Instance* in, int stream)
      : model_(m), inst_(in), stream_(stream), jumps_(m->stream_jumps_[static_cast<size_t>(stream)], 0) {}
  void reset() {
    pc_ = 0;
    iteration_ = 0;
    arrived_ = false;
    handed_off_ = false;
    std::fill(jumps_.begin(), jumps_.end(), 0);
  }
  void run(LaneContext& lane) override;

 private:
  // True once every stream finished the current iteration; false if parked.
  bool pass_barrier();
  // Reports this stream done; the last one completes the launch. Touches nothing after.
  void finish();
  // A serial launch: submits the next stream, once, before this one may park or end (so
  // every stream is submitted, whatever waits for what, and none ends the launch early).
  void hand_off();
  // Runs control-flow task `t` (model_control.cc). True when it jumped (pc_ set); on a
  // failure it fails the launch and returns false.
  bool control(const Task& t, LaneContext& lane, const ExecContext& ctx);

  Model* model_;
  Instance* inst_;
  int stream_;
  size_t pc_ = 0;
  int64_t iteration_ = 0;
  bool arrived_ = false;  // arrived at the barrier of iteration_, not yet passed
  bool handed_off_ = false;  // hand_off() ran in this launch
  std::vector<uint64_t> jumps_;  // times each backward goto jumped in this iteration
  uint64_t busy_ns_ = 0;
};

}  // namespace ge
