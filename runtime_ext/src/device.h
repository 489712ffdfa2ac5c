// Device: the backend interface. What the generic runtime (Model, Scheduler, Event, the
// I/O plan, the Python module) asks of a device, with no backend library's type in it.
//
// A backend implements Device and registers a factory under its name (backends.cc):
//   * memory     allocate() gives the blocks that hold a model's arenas, stream workspaces
//                and its copies of weights; host_visible() says whether the runtime may
//                read and write them directly (then caller buffers are bound in place);
//   * streams    make_lane_stream() gives the per-lane execution context its kernels
//                enqueue on (host: a oneDNN CPU stream); LaneStream::synchronize() is
//                called before a stream's work is observed (event records, run ends);
//   * events     cross-stream ordering is the runtime's own timeline Event (event.h),
//                signalled after the recording lane's stream has synchronized;
//   * kernels    find_kernel() is the kernel factory for an op, supported_ops() the
//                list, kernel_info() what placement and layout ask before load,
//                check_formats() the layout rule a loaded task must follow, and
//                make_shared_constants() the per-model store kernels share prepared
//                weights through.
// `host` (host/host_device.h: the CPU through oneDNN) is one implementation. A Device is
// shared (std::shared_ptr) by every Model loaded on it and lives as long as the longest of
// them; its configuration is immutable after construction and it may be used from any
// thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "buffer.h"
#include "kernel.h"
#include "scheduler.h"
#include "status.h"

namespace ge {

struct ModelSpec;  // spec.h
struct TaskSpec;

// Whether the runtime's own AVX-512 kernels (softmax.h, gelu.h, the panel GEMV, transposes,
// conv blocks and heads) may run: the CPU has AVX-512F and they are allowed. Without them
// the oneDNN primitives or the plain kernels run instead. Kernel choices are made when a
// model is built, so a change applies to models built after it.
bool cpu_has_avx512();
// Whether the CPU has AVX-512F, allowed or not.
bool cpu_supports_avx512();
// Allow or forbid the AVX-512 kernels (tests run both paths; GE_NO_AVX512 starts with them
// off). Forbidding them is always possible; allowing them changes nothing on a CPU without.
void set_avx512_allowed(bool allowed);

// What the compiler's Target (engine/target.py) reads of a device besides its kernels.
struct DeviceCaps {
  std::string isa;             // vector ISA of its own kernels ("avx512", "avx2", "" if none)
  std::string blocked_format;  // blocked activation format its convolutions prefer, or ""
  bool conv_blocks = false;    // runs fused inverted-residual blocks and classifier heads
  bool epilogues = false;      // its Conv/MatMul/Gemm take fused bias, residual and activation
  bool conv_activation2 = false;  // its Conv takes a second activation after the first
  int max_weight_segments = 1; // weight buffers one loaded model may take in place
  std::string library;         // the kernel library and its version ("oneDNN 3.9.1"), or ""
};

// What the kernel info store answers for one node (kernel_info()).
struct KernelInfo {
  bool supported = false;
  std::string reason;            // why not (empty when supported)
  std::string preferred_format;  // "nchw", "nhwc", "nChw16c", ... or "any" (follows its data)
  std::vector<std::string> formats;  // formats the kernel accepts for its data operands
};

class Device {
 public:
  virtual ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // The backend's registered name ("host").
  const std::string& name() const { return name_; }
  // The thread budget: lanes and their helpers together run at most this many threads.
  int threads() const { return threads_; }
  // Cores available to the process.
  int cores() const { return cores_; }
  Scheduler& scheduler() const { return *scheduler_; }

  // ---- memory ----
  // A 64-byte aligned block of `bytes` (zero-filled when `zero`). Throws std::bad_alloc.
  virtual AlignedBuffer allocate(size_t bytes, bool zero) const = 0;
  // Whether allocate()'s memory is the host's: then caller buffers are bound in place
  // (kernels read inputs from, and write outputs into, host arrays). Otherwise every input
  // and output goes through the arena and the copies below.
  virtual bool host_visible() const = 0;
  // Copies of `n` bytes: host -> device memory, device -> host, and within device memory
  // (the ranges may overlap). Blocking. Host: memcpy / memmove.
  virtual void copy_to_device(void* dst, const void* src, size_t n) const = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t n) const = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t n) const = 0;

  // ---- streams ----
  // The execution context of one lane (called once on each lane thread as it starts).
  virtual std::unique_ptr<LaneStream> make_lane_stream() const = 0;

  // ---- kernels ----
  // The factory for `op`, or nullptr if the device has no kernel for it.
  virtual KernelFactory find_kernel(const std::string& op) const = 0;
  // Names of all implemented ops, sorted.
  virtual std::vector<std::string> supported_ops() const = 0;
  // Whether the device runs `op` on inputs of these dtypes ("" / empty for an omitted
  // one) and shapes. Never throws for bad arguments: they make an unsupported answer.
  virtual KernelInfo kernel_info(const std::string& op, const std::vector<std::string>& dtypes,
                                 const std::vector<Shape>& shapes, const Attrs& attrs) const = 0;
  // The tensor formats the runtime picks when the spec gives none (host: blocked formats
  // around the convolutions that prefer them), one per tensor.
  virtual std::vector<Format> assign_formats(const ModelSpec& spec, const std::vector<TensorInfo>& tensors) const = 0;
  // "" when the tensor formats of kernel task `t` follow its op's layout rule, else why not.
  virtual std::string check_formats(const TaskSpec& t, const std::vector<TensorInfo>& tensors) const = 0;
  // The store a model's kernels share prepared constants through (one per model).
  virtual std::unique_ptr<SharedConstants> make_shared_constants() const = 0;
  // A backend library's exception as a status naming `doing` ("prepare this node"):
  // true and *out set when `e` is one of the backend's, false otherwise.
  virtual bool library_error(const std::exception& e, const char* doing, Status* out) const = 0;

  virtual DeviceCaps caps() const = 0;

 protected:
  // threads <= 0 means "the cores available to this process". Derived constructors call
  // start() once they can make lane streams.
  Device(std::string name, int threads);
  // Creates the scheduler (lanes start on first use, each calling make_lane_stream()).
  void start();
  // Joins the lanes; a derived destructor calls it before its own members go.
  void stop();

 private:
  std::string name_;
  int cores_;
  int threads_;
  std::unique_ptr<Scheduler> scheduler_;
};

// ---- the backend registry ----
using DeviceFactory = std::function<std::shared_ptr<Device>(int threads)>;

// A new device of backend `name`. Throws Error(InvalidArgument) naming the known backends.
std::shared_ptr<Device> create_device(const std::string& name, int threads);
// Registered backend names, sorted.
std::vector<std::string> backend_names();

// The backends built into this runtime (backends.cc), registered through `add` before the
// registry is first used: the one list a new backend is added to.
void register_builtin_backends(const std::function<void(const std::string&, DeviceFactory)>& add);

}  // namespace ge
