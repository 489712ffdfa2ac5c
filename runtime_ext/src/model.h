// Model: a loaded, executable graph on a Device, with N instances.
//
// Loading validates the spec (tensor layout and formats, indices, every node against its
// op's rules), takes the weight region (borrowed or copied once), binds the variables the
// spec names (their bytes are read and written in place by every run), prepares every kernel
// once on a lane of the width that will run it (oneDNN primitives, reordered weights),
// plans which inputs and outputs bind zero-copy (io_plan.h), and creates the instances:
// each has its own arena, stream workspaces, events and stream runs; kernels and weights
// are shared.
//
// execute() takes a free instance (or waits for one: requests beyond N queue), binds the
// inputs, submits every stream of the instance to the Device's lanes, waits, and returns
// the outputs. With iterations > 1 (sink mode) one launch runs the whole graph that many
// times back to back over a queue of inputs; every stream of the instance finishes an
// iteration before any starts the next.
//
// A failing task fails only its launch: later tasks are skipped, parked streams wake,
// execute() returns the failure naming the node, and the instance is reusable at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "buffer.h"
#include "device.h"
#include "event.h"
#include "io_plan.h"
#include "kernel.h"
#include "kernel_sets.h"
#include "spec.h"
#include "status.h"
#include "tensor.h"
#include "variable.h"

namespace ge {

// One input array. `data` is borrowed for the duration of the call and must be
// C-contiguous in native byte order. `dtype` is empty when the caller's type has no
// DType (e.g. complex); `type_name` is then used in the error message.
struct HostTensor {
  std::optional<DType> dtype;
  std::string type_name;
  Shape shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// One output array; the buffer is transferred to the caller.
struct HostResult {
  DType dtype;
  Shape shape;
  AlignedBuffer data;
};

struct ExecRequest {
  // inputs[i]: the inputs of iteration i. A single list is used by every iteration.
  std::vector<std::vector<HostTensor>> inputs;
  int64_t iterations = 1;
  // Return the outputs of every iteration, not only of the last.
  bool return_all = false;
  // Bytes the caller already copied to make the inputs usable (counted in the stats).
  uint64_t converted_bytes = 0;
  // The caller's limits while the launch waits for a free instance (a launch that has
  // started runs to its end): its deadline, and a flag it sets to cancel. Either ends the
  // wait with DeadlineExceeded / Cancelled, and nothing of the launch runs.
  bool has_deadline = false;
  std::chrono::steady_clock::time_point deadline{};
  const std::atomic<bool>* cancel = nullptr;
  // Out: nanoseconds the launch waited for an instance (the request's queue time).
  uint64_t* queue_ns = nullptr;
};

struct ModelStats {
  uint64_t runs = 0;        // successful launches
  uint64_t iterations = 0;  // iterations of successful launches
  uint64_t failures = 0;    // failed launches
  double seconds = 0;       // wall time of successful launches (bind to outputs)
  std::vector<double> stream_seconds;  // busy time of each stream's kernels, all instances
  uint64_t bytes_copied = 0;     // inputs/outputs copied (not bound zero-copy) + copy tasks
  uint64_t bytes_zero_copy = 0;  // input and output bytes bound to caller buffers
  size_t arena_bytes = 0;        // all instances
  size_t weight_bytes = 0;       // the weight region (shared)
  size_t prepared_bytes = 0;     // kernel-owned constants (reordered weights; shared)
  size_t prepared_borrowed_bytes = 0;  // of those, prepared by other live models of the device
  size_t workspace_bytes = 0;    // all instances and streams
  int instances = 0;
  int streams = 0;
  int threads_per_stream = 0;
  size_t tasks = 0;
  uint64_t peak_waiting = 0;  // most callers ever queued for an instance
  // successful launches that ran the single-threaded kernel set: beside another launch, or
  // alone because it was the faster set lately (contention; pick_narrow)
  uint64_t narrow_runs = 0;
  uint64_t probe_warmups = 0;  // untimed first launches of a probe (pick_narrow)
  // successful launches of a multi-stream program of one-thread lanes that ran its streams
  // one after another (Model::has_serial_): beside another launch, or alone because that
  // was the faster lately (pick_narrow)
  uint64_t serial_runs = 0;
  // whether that set has been built: on the first launch that wants it (the second launch
  // alone, or one beside another), not at load (Model::ensure_narrow)
  bool narrow_built = false;
};

class Model {
 public:
  // Blocks (prepares every kernel on the device's lanes). `device` is retained. `spec`
  // is borrowed for the call; the weights are copied unless spec.weights_borrowed (then
  // they must outlive the model and stay unchanged). Returns InvalidArgument for any
  // invalid spec, with a message naming the tensor or node ("node 'conv1' (Conv): ..."),
  // Internal on allocation failure.
  static Status load(std::shared_ptr<const Device> device, const ModelSpec& spec, int instances,
                     std::unique_ptr<Model>* out);

  // Blocks until no execute() is in flight. Call only when no caller will start one.
  ~Model();

  // Blocks until the launch is over (and, first, until an instance is free).
  // Thread-safe: up to `instances` launches run at once. Returns InvalidArgument for
  // inputs of the wrong count, dtype or shape and for bad data found by a kernel (e.g. an
  // out-of-range Gather index); Internal otherwise. On success `outputs` holds one list
  // per returned iteration; on failure it is empty and the model stays usable.
  Status execute(const ExecRequest& req, std::vector<std::vector<HostResult>>* outputs);

  // Non-blocking (brief locks). Thread-safe.
  ModelStats stats() const;

  // Time spent in each task (kernels, copies) over all successful and failed runs, in
  // program order. Non-blocking. Thread-safe.
  struct TaskProfile {
    std::string name, op, impl;
    int stream;
    uint64_t calls;
    double seconds;
    double build_seconds;  // making its kernel at load (oneDNN primitive creation, JIT, weight reorders)
  };
  std::vector<TaskProfile> profile() const;

  const std::string& name() const { return name_; }
  size_t num_tasks() const { return tasks_.size(); }
  int num_streams() const { return num_streams_; }
  int instances() const { return static_cast<int>(instances_.size()); }
  int threads_per_stream() const { return width_; }
  // Borrowed; valid for the model's lifetime.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const IoPlan& io_plan() const { return io_; }
  const std::vector<const TensorInfo*>& inputs() const { return inputs_; }
  const std::vector<const TensorInfo*>& outputs() const { return outputs_; }
  bool explicit_formats() const { return explicit_formats_; }

 private:
  // kLabel ... kSliceCopy: control flow on the device (model_control.cc).
  enum class Kind { kKernel, kRecord, kWait, kCopy, kLabel, kGoto, kSwitch, kIncrement, kSliceCopy };
  enum class Test { kTrue, kFalse, kGreaterEqual };  // when a switch jumps
  struct Task {
    Kind kind = Kind::kKernel;
    std::string name;
    uint64_t build_ns = 0;  // making `kernel` (not `narrow`), for profile()
    std::string op;  // for messages: the op of a kernel, else the kind
    int stream = 0;
    std::unique_ptr<Kernel> kernel;  // runs with width_ threads
    std::unique_ptr<Kernel> narrow;  // the same node with 1 thread (models with instances > 1)
    int event = -1;
    uint64_t seq = 0;  // record: ordinal of this record; wait: ordinal waited for
    const TensorInfo* src = nullptr;  // copy, slice_copy
    const TensorInfo* dst = nullptr;
    // Control flow (model_control.cc). goto / switch: the label's position in the stream's
    // task order; a backward goto's counter (index into StreamRun::jumps_) and how often it
    // may jump in one iteration of a launch.
    int label = -1;
    uint32_t target = 0;
    int jump = -1;
    uint64_t limit = 0;
    Test test = Test::kTrue;
    const TensorInfo* lhs = nullptr;  // switch: predicate or counter; increment; slice index
    const TensorInfo* rhs = nullptr;  // switch kGreaterEqual: the bound
    bool write = false;               // slice_copy: into slice `index` of dst (else out of src)
    bool reverse = false;             // slice_copy: slice count - 1 - index
    size_t outer = 0, count = 0, inner = 0;  // slice_copy: the stacked tensor as [outer, count, inner bytes]
  };
  struct Launch;
  struct Instance;
  class StreamRun;

  Model() = default;
  void load_impl(const ModelSpec& spec, int instances);  // throws Error
  void load_tensors(const ModelSpec& spec);
  // Validates every task; fills `kernel_args` (one per task) for the kernels. Throws.
  void load_tasks(const ModelSpec& spec, std::vector<KernelArgs>* kernel_args);
  // Builds every kernel on a lane of `width` into Task::kernel (or Task::narrow) (blocks).
  // Throws the first failure in program order.
  void build_kernels(std::vector<KernelArgs>* kernel_args, int width, bool narrow);
  // Caller side (never on a lane: it waits for the lanes of width 1): builds the narrow
  // kernel set once, when a launch first wants it. A failure leaves the model without one.
  void ensure_narrow();
  // Kernel::set_instances, its library errors named by the task. Throws.
  void set_kernel_instances(Kernel& k, const Task& t, int instances) const;
  // Control-flow tasks (model_control.cc). load_control_task fills `t` from a label, goto,
  // switch, increment or slice_copy spec and returns true (false: not one of those kinds);
  // link_control_flow then resolves labels in each stream and checks the jumps. Throw.
  bool load_control_task(const TaskSpec& ts, Task& t);
  void link_control_flow();
  const TensorInfo* tensor_at(int64_t index, const std::string& what) const;
  Status check_inputs(const std::vector<HostTensor>& inputs) const;

  // Binds `l` to the free instance `in` and submits its streams (caller or lane side).
  // Internal if the bindings cannot be allocated (nothing is shared then).
  Status start(Launch& l, Instance& in);
  // start(), or on failure: passes `in` on (release) and completes `l` with the error.
  void begin(Launch& l, Instance& in);
  // Hands `in` to the next queued launch (begin) or returns it to the free list.
  void release(Instance& in);
  // Caller side, for a queued launch with a deadline or a cancel flag: waits until it has
  // started (Ok: it then runs to its end) or leaves the queue when the deadline passes or
  // the flag is set (DeadlineExceeded / Cancelled: nothing of it ran).
  Status wait_in_queue(Launch& l, const ExecRequest& req);
  // Lane side. Makes the launch fail with `status` (first failure wins), wakes waiters.
  void fail(Instance& in, const Status& status);
  // Lane side: the last stream of an iteration (other than the last) finished it.
  void between_iterations(Instance& in, int64_t iteration);
  // Lane side: the last stream of the launch finished. Copies its outputs out, hands the
  // instance to the next queued launch (or frees it), then wakes the launch's caller.
  void complete(Instance& in);
  void copy_in(Instance& in, int64_t iteration);

  std::shared_ptr<const Device> device_;
  std::string name_;
  int num_streams_ = 1;
  int width_ = 1;        // OpenMP threads per stream (the lanes' width)
  bool spin_wait_ = false;
  // A second kernel set of single-threaded kernels (every model of width > 1): concurrent
  // launches run them side by side rather than queue for the lanes of width_, and a launch
  // alone runs them when they have been the faster set lately (contention, see
  // pick_narrow()).
  bool has_narrow_ = false;
  // A program of several streams on one-thread lanes (a batch split into one chunk per
  // core, or parallel branches) has no narrow set: its kernels are single-threaded already.
  // Its fallback for a busy machine is to run the streams one after another (a serial
  // launch: each stream starts when the one before it waits or ends), chosen like the
  // narrow set (mode_). Two one-thread streams beside a process holding a core share the
  // other core in time slices, and the launch waits for the slower of them.
  bool has_serial_ = false;
  // That set is built lazily (ensure_narrow): at load it would double the kernel
  // preparation (oneDNN primitive creation, its JIT) that compile+load pays, for a set the
  // first launch never runs. The kernel arguments are kept for it, their attributes copied
  // (the spec is borrowed for the load only). narrow_ready_ is stored (release) once every
  // Task::narrow and workspace_bytes_ hold the set: a launch reads them only if it saw it
  // set when it started (Launch::narrow_ok).
  std::vector<KernelArgs> narrow_args_;
  std::vector<Attrs> narrow_attrs_;
  std::mutex narrow_mu_;  // one build at a time
  std::atomic<bool> narrow_ready_{false};
  // The serial mode may be probed (set once, like narrow_ready_: from the second launch, or
  // the kProbeMin-th where launches and their work are long).
  std::atomic<bool> serial_ready_{false};
  bool narrow_failed_ = false;  // guarded by narrow_mu_
  bool explicit_formats_ = false;
  size_t arena_bytes_ = 0;
  // The weight region's segments: start in the region, base address, size; owned copies
  // of the segments that were not borrowed.
  struct Segment {
    size_t start = 0;
    const uint8_t* base = nullptr;
    size_t size = 0;
  };
  std::vector<Segment> segments_;
  std::vector<AlignedBuffer> owned_weights_;  // device memory
  size_t weight_size_ = 0;
  // The variables tensors of Region::kVariable live in (retained: the model writes them),
  // bound to slots variable_slot_ + k of every launch.
  std::vector<std::shared_ptr<Variable>> variables_;
  uint32_t variable_slot_ = 0;
  std::vector<TensorInfo> tensors_;
  std::vector<const TensorInfo*> inputs_;
  std::vector<const TensorInfo*> outputs_;
  IoPlan io_;
  std::unique_ptr<SharedConstants> prepared_;  // prepared weights, shared by the kernel sets
  int num_events_ = 0;
  std::vector<Task> tasks_;
  std::vector<std::vector<uint32_t>> stream_tasks_;  // task indices of each stream, in order
  std::vector<size_t> stream_jumps_;                 // backward gotos of each stream
  std::vector<size_t> workspace_bytes_;              // per stream
  std::vector<std::unique_ptr<Instance>> instances_;

  std::mutex pool_mu_;
  std::condition_variable pool_cv_;
  std::vector<Instance*> free_;  // guarded by pool_mu_ (LIFO: the warmest instance first)
  std::deque<Launch*> queued_;   // guarded by pool_mu_: launches waiting for an instance

  mutable std::mutex stats_mu_;
  ModelStats stats_;  // guarded by stats_mu_ (except stream_ns_)
  std::unique_ptr<std::atomic<uint64_t>[]> stream_ns_;
  std::atomic<uint64_t> launch_ns_{0};  // moving average of launch time per iteration
  // Which kernel set a launch alone runs (kernel_sets.h): pick_narrow sets the launch's
  // narrow/probe/warmup flags, record_mode feeds back its time.
  bool pick_narrow(Launch& l);
  void record_mode(const Launch& l, uint64_t took_ns);
  std::mutex mode_mu_;
  KernelSetChoice mode_;  // guarded by mode_mu_
  std::atomic<int> in_flight_{0};        // launches started and not yet completed
  uint64_t work_flops_ = 0;  // of one launch (ModelSpec.work_flops); 0: unknown
  std::atomic<uint32_t> launches_seen_{0};  // launches asked for while the narrow set or serial mode is not ready
  std::unique_ptr<std::atomic<uint64_t>[]> task_ns_;     // per task
  std::unique_ptr<std::atomic<uint64_t>[]> task_calls_;  // per task
};

}  // namespace ge
