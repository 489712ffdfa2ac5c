// RefDevice: the `ref` backend, a portable reference device. Plain C++ kernels for a few
// float32 ops (elementwise Add/Sub/Mul/Div on equal shapes, Relu/Sigmoid/Tanh/Neg/Abs, 2-D
// MatMul), no library, one plain tensor format, and memory it treats as its own: it says
// it is not host visible, so the runtime binds no caller buffer and moves every input,
// output and weight through copy_to_device / copy_to_host, as it must for a discrete
// accelerator.
//
// It exists to hold the seam honest (tests compile and run models on it: whatever it lacks
// the compiler places on the host engine) and as the smallest template of a backend: a
// Device subclass, its kernels, one line in backends.cc. Nothing in it is fast.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "device.h"

namespace ge {

class RefDevice final : public Device {
 public:
  explicit RefDevice(int threads);
  ~RefDevice() override;

  AlignedBuffer allocate(size_t bytes, bool zero) const override;
  bool host_visible() const override { return false; }
  void copy_to_device(void* dst, const void* src, size_t n) const override;
  void copy_to_host(void* dst, const void* src, size_t n) const override;
  void copy_on_device(void* dst, const void* src, size_t n) const override;
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
};

}  // namespace ge
