// Kernel: one prepared graph node of the device engine.
//
// A kernel is built once at load by its op's factory from KernelArgs (the node's tensors
// and attributes). The factory validates everything it is given against ONNX rules and
// prepares all the work it can (oneDNN primitives for the exact shapes, reordered copies
// of constant weights). run() then only touches memory.
//
// Ownership: tensors (TensorInfo, their data) are borrowed from the Model and outlive the
// kernel; everything else a kernel allocates it owns.
//
// Nothing here is of a backend: a kernel reaches its backend's objects (host: the oneDNN
// engine and stream) through its Device and LaneStream, which its backend made.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "scheduler.h"
#include "status.h"
#include "tensor.h"

namespace ge {

class Device;  // device.h

// Constants a model's kernels prepare at load (host: weights reordered into a primitive's
// layout), kept once per model so that kernels asking for the same ones share them. Each
// backend derives its own store (Device::make_shared_constants). Thread-safe.
class SharedConstants {
 public:
  virtual ~SharedConstants() = default;
  // Bytes held.
  virtual size_t bytes() const = 0;
  // Of those, bytes another live model of the device prepared (shared, not held twice).
  virtual size_t borrowed_bytes() const { return 0; }
};

using AttrValue =
    std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;
using Attrs = std::map<std::string, AttrValue>;

// Everything a factory may look at. Borrowed; valid only during the factory call (the
// TensorInfo pointers themselves stay valid for the kernel's lifetime).
//
// The getters throw Error(InvalidArgument) naming what is wrong; the Model prefixes the
// node ("node 'conv1' (Conv): ").
struct KernelArgs {
  std::string name;
  std::string op;
  std::vector<const TensorInfo*> inputs;  // nullptr for an omitted optional input
  std::vector<const TensorInfo*> outputs;
  const Attrs* attrs = nullptr;
  const Device* device = nullptr;
  // For load-time work (weight reorders). Factories run on a lane of the width that will
  // run the kernel, so this is that lane's stream.
  LaneStream* load_stream = nullptr;
  // True when the spec gave tensor formats: the kernel must honour them exactly.
  bool explicit_formats = false;
  // Where prepared constants (reordered weights) are shared between kernels of the model
  // (e.g. its wide and narrow kernel sets). Borrowed; outlives the kernels.
  SharedConstants* prepared = nullptr;

  // Input i, which must be present.
  const TensorInfo& in(size_t i) const;
  // Input i or nullptr when omitted or beyond the list.
  const TensorInfo* opt_in(size_t i) const;
  const TensorInfo& out(size_t i) const;

  // Throws unless min <= count <= max (max < 0: unbounded).
  void expect_inputs(int min, int max) const;
  void expect_outputs(int min, int max) const;
  // Throws unless t has dtype `dt`; `what` names the tensor's role ("input X").
  void expect_dtype(const TensorInfo& t, DType dt, const char* what) const;

  // Values of input i, which must be a constant (weight region) int64 or int32 tensor.
  std::vector<int64_t> const_ints(size_t i) const;
  // Value of input i, which must be a one-element constant float32/float64 tensor.
  double const_float(size_t i) const;

  bool has_attr(const char* key) const;
  int64_t attr_int(const char* key, int64_t def) const;
  double attr_float(const char* key, double def) const;
  std::string attr_str(const char* key, const std::string& def) const;
  // Missing -> `def`. A scalar int is accepted as a one-element list.
  std::vector<int64_t> attr_ints(const char* key, const std::vector<int64_t>& def) const;
  std::vector<double> attr_floats(const char* key, const std::vector<double>& def) const;
};

// What a kernel sees while it runs. Borrowed from the stream run; valid during the call.
struct ExecContext {
  LaneStream& stream;         // the lane's backend stream
  int instance;               // which model instance runs (selects per-instance state)
  uint8_t* const* bases;      // base address of each binding slot for this run
  uint8_t* workspace;         // this instance's scratch for this stream

  // Address of a tensor for this run (arena of the instance, weights, or caller buffer).
  uint8_t* ptr(const TensorInfo& t) const { return bases[t.slot] + t.slot_offset; }
  template <class T>
  T* ptr(const TensorInfo& t) const {
    return reinterpret_cast<T*>(ptr(t));
  }
};

// A prepared node. Built once at load and shared by every instance of the model; the
// instances differ only in where tensors live, which run() resolves through its
// ExecContext. Two instances may run the same kernel at the same time, so run() keeps no
// state in the kernel except per-instance state indexed by ctx.instance.
class Kernel {
 public:
  virtual ~Kernel() = default;

  // Bytes of scratch the kernel needs while it runs. Each instance's stream provides it
  // (shared by the stream's kernels, which never run concurrently), 64-byte aligned.
  virtual size_t workspace_bytes() const { return 0; }

  // Called once at load, after construction, with the number of instances. May throw
  // the backend library's exception.
  virtual void set_instances(int /*n*/) {}


  // Runs the node on the calling lane. Blocks until the outputs are written.
  // Returns InvalidArgument for bad data found only at run time (e.g. an out-of-range
  // Gather index), Internal for anything else. The message does not name the node: the
  // caller prefixes it. May throw the backend library's exception or std::bad_alloc; the
  // caller catches them.
  virtual Status run(ExecContext& ctx) = 0;

  // Which implementation runs (e.g. "oneDNN brg:avx512_core"), for profiles; "" when the
  // kernel does not say.
  virtual std::string impl() const { return ""; }
};

// `axis` in [-rank, rank) made non-negative; throws Error(InvalidArgument) otherwise.
int normalize_axis(int64_t axis, int rank);

// Builds the kernel of one node. Throws Error for invalid nodes, or the backend library's
// exception (Device::library_error words it) if the library cannot prepare it.
using KernelFactory = std::unique_ptr<Kernel> (*)(const KernelArgs& args);

}  // namespace ge
