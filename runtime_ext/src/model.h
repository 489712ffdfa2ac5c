// Model: a loaded, executable graph on a Device.
//
// Loading validates the spec (tensor layout, indices, every node against its op's rules),
// allocates the activation arena and the weight region, copies the weights in, prepares
// every kernel (oneDNN primitives, reordered weights) and starts one worker per stream.
// Executing binds inputs into the arena, pushes every task to its stream, waits for all
// streams and copies the outputs out. A failing task fails only its run: later tasks of
// that run are skipped, event waiters wake, execute() returns the failure naming the node,
// and the next execute() starts clean.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "buffer.h"
#include "device.h"
#include "event.h"
#include "kernel.h"
#include "spec.h"
#include "status.h"
#include "stream.h"
#include "tensor.h"

namespace ge {

// One input of execute(). `data` is borrowed for the duration of the call and must be
// C-contiguous. `dtype` is empty when the caller's type has no DType (e.g. complex);
// `type_name` is then used in the error message.
struct HostTensor {
  std::optional<DType> dtype;
  std::string type_name;
  Shape shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// One output of execute(); the buffer is transferred to the caller.
struct HostResult {
  DType dtype;
  Shape shape;
  AlignedBuffer data;
};

struct ModelStats {
  uint64_t runs = 0;          // successful executions
  double seconds = 0;         // wall time of successful executions
  size_t arena_bytes = 0;
  size_t weight_bytes = 0;
  uint64_t bytes_copied = 0;  // host<->arena copies of inputs/outputs + copy tasks
  int streams = 0;
  size_t tasks = 0;
};

class Model {
 public:
  // Blocks (prepares every kernel). `device` is retained. `spec` is borrowed for the
  // call; the weights are copied. Returns InvalidArgument for any invalid spec, with a
  // message naming the tensor or node ("node 'conv1' (Conv): ..."), Internal on
  // allocation failure.
  static Status load(std::shared_ptr<const Device> device, const ModelSpec& spec,
                     std::unique_ptr<Model>* out);

  // Blocks: joins the stream workers.
  ~Model();

  // Blocks until the run is over. Thread-safe: concurrent calls are serialised (one
  // arena). Returns InvalidArgument for inputs of the wrong count, dtype or shape and for
  // bad data found by a kernel (e.g. an out-of-range Gather index); Internal otherwise.
  // On failure `outputs` is left empty and the model stays usable.
  Status execute(const std::vector<HostTensor>& inputs, std::vector<HostResult>* outputs);

  // Non-blocking (brief lock). Thread-safe.
  ModelStats stats() const;

  const std::string& name() const { return name_; }
  size_t num_tasks() const { return tasks_.size(); }
  int num_streams() const { return static_cast<int>(streams_.size()); }
  // Borrowed; valid for the model's lifetime.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

 private:
  enum class Kind { kKernel, kRecord, kWait, kCopy };
  struct Task {
    Kind kind = Kind::kKernel;
    std::string name;
    std::string op;  // for messages: the op of a kernel, else the kind
    int stream = 0;
    std::unique_ptr<Kernel> kernel;
    Event* event = nullptr;
    uint64_t seq = 0;  // record: ordinal of this record; wait: ordinal waited for
    const TensorInfo* src = nullptr;  // copy
    const TensorInfo* dst = nullptr;
  };

  Model() = default;
  void load_impl(const ModelSpec& spec);  // throws Error
  void load_tensors(const ModelSpec& spec);
  // Validates every task; fills `kernel_args` (one per task) for the kernels. Throws.
  void load_tasks(const ModelSpec& spec, std::vector<KernelArgs>* kernel_args);
  // Builds every kernel on its stream's worker (blocks). Throws the first failure in
  // program order.
  void build_kernels(std::vector<KernelArgs>* kernel_args);
  // Stream item body of build_kernels: builds the kernels of `stream` in program order,
  // recording each outcome in `status`; stops at the first failure. Never throws.
  void build_stream_kernels(int stream, std::vector<KernelArgs>* args, std::vector<Status>* status,
                            ExecContext& ec);
  const TensorInfo* tensor_at(int64_t index, const std::string& what) const;

  // Stream::Fn: runs task `index` of the current run on a stream worker. Never throws.
  static void run_task(void* model, uint32_t index, ExecContext& ec);
  Status run_one(Task& t, ExecContext& ec);
  // Makes the current run fail with `status` (first failure wins) and wakes all waiters.
  void fail(const Status& status);

  std::shared_ptr<const Device> device_;
  std::string name_;
  AlignedBuffer arena_;
  AlignedBuffer weights_;
  std::vector<TensorInfo> tensors_;
  std::vector<const TensorInfo*> inputs_;
  std::vector<const TensorInfo*> outputs_;
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<Task> tasks_;  // kernels are destroyed after the streams (declared first)
  std::vector<std::vector<Stream::Item>> stream_items_;
  std::vector<std::unique_ptr<Stream>> streams_;

  std::mutex run_mu_;  // serialises execute()
  uint64_t generation_ = 0;
  std::atomic<bool> run_failed_{false};
  std::mutex fail_mu_;
  Status run_status_;
  std::atomic<uint64_t> task_bytes_copied_{0};

  mutable std::mutex stats_mu_;
  ModelStats stats_;
};

}  // namespace ge
