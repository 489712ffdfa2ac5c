// HostDevice: the `host` backend, this machine's CPU. Kernels are oneDNN primitives and
// the runtime's own vector kernels (softmax.h, gelu.h, the panel GEMV, transposes, conv
// blocks and heads); lanes carry a oneDNN CPU stream; memory is the host's.
//
// Everything of oneDNN the generic runtime must not see lives behind this header: host
// kernels reach the engine, the lane's stream and the model's prepared-weight store
// through the helpers below (a host kernel only ever runs on a HostDevice, which made it).
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device.h"
#include "kernel.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace ge {

class PreparedCache;  // dnnl_util.h

// A lane's oneDNN CPU stream. CPU primitives run synchronously on the calling thread, so
// there is nothing to synchronize.
class HostLaneStream : public LaneStream {
 public:
  explicit HostLaneStream(const dnnl::engine& eng) : stream(eng) {}
  dnnl::stream stream;
};

class PreparedRegistry;  // dnnl_util.h

class HostDevice final : public Device {
 public:
  // Non-blocking (lanes start on first use). threads <= 0 means "the cores available to
  // this process". Throws dnnl::error if oneDNN cannot create a CPU engine.
  explicit HostDevice(int threads);
  // Blocks: joins the lanes. Every model on the device is gone by then (they retain it).
  ~HostDevice() override;

  // Borrowed; valid for the device's lifetime.
  const dnnl::engine& engine() const { return engine_; }

  AlignedBuffer allocate(size_t bytes, bool zero) const override { return AlignedBuffer(bytes, zero); }
  bool host_visible() const override { return true; }
  void copy_to_device(void* dst, const void* src, size_t n) const override { std::memcpy(dst, src, n); }
  void copy_to_host(void* dst, const void* src, size_t n) const override { std::memcpy(dst, src, n); }
  void copy_on_device(void* dst, const void* src, size_t n) const override { std::memmove(dst, src, n); }
  std::unique_ptr<LaneStream> make_lane_stream() const override;
  KernelFactory find_kernel(const std::string& op) const override;
  std::vector<std::string> supported_ops() const override;
  KernelInfo kernel_info(const std::string& op, const std::vector<std::string>& dtypes,
                         const std::vector<Shape>& shapes, const Attrs& attrs) const override;
  std::vector<Format> assign_formats(const ModelSpec& spec, const std::vector<TensorInfo>& tensors) const override;
  std::string check_formats(const TaskSpec& t, const std::vector<TensorInfo>& tensors) const override;
  std::unique_ptr<SharedConstants> make_shared_constants() const override;
  bool library_error(const std::exception& e, const char* doing, Status* out) const override;
  DeviceCaps caps() const override;

 private:
  dnnl::engine engine_;
  // prepared constants of the device's live models, by source address (dnnl_util.h)
  std::shared_ptr<PreparedRegistry> prepared_;
};

// The blocked format of oneDNN's direct convolutions on this CPU (one SIMD register of
// channels per block): "nChw16c" with AVX-512, "nChw8c" with AVX2, "" otherwise.
std::string host_blocked_format();
// The oneDNN library's version ("3.9.1").
std::string onednn_version();

inline const HostDevice& host_device(const Device& d) { return static_cast<const HostDevice&>(d); }
inline const dnnl::engine& host_engine(const Device& d) { return host_device(d).engine(); }
inline dnnl::stream& host_stream(LaneStream& s) { return static_cast<HostLaneStream&>(s).stream; }
inline dnnl::stream& host_stream(const ExecContext& c) { return host_stream(c.stream); }
// The lane stream of a factory call (load-time reorders).
inline dnnl::stream& host_load_stream(const KernelArgs& a) { return host_stream(*a.load_stream); }

}  // namespace ge
