// Variable: a named tensor in device memory that outlives runs and models — a session's
// state (a counter, weights being trained, a decoder's KV cache).
//
// A variable's bytes are allocated once, on its device, when it is created (zero-filled),
// and never move: models loaded afterwards bind them (tensors of Region::kVariable) and
// their kernels read and write them in place during runs, so a run that updates the state
// moves no bytes between the host and the device beyond its own inputs and outputs.
// dtype and shape are fixed for the variable's life.
//
// Ownership: shared (std::shared_ptr) by whoever created it (a session's variable store)
// and every Model that binds it, so a model never outlives the bytes it writes. The device
// is retained.
//
// Thread-safety: none of its own. Runs of models, read() and write() may touch the bytes
// from several threads; the owner orders them (the session takes a reader/writer lock per
// variable around each run, read and write). Concurrent unordered access tears values.
#pragma once

#include <memory>
#include <string>

#include "buffer.h"
#include "device.h"
#include "dtype.h"
#include "tensor.h"

namespace ge {

class Variable {
 public:
  // Allocates the zero-filled bytes on `device`. Throws Error(InvalidArgument) for an
  // empty name, a negative dim or a shape past the runtime's element bound, and
  // std::bad_alloc when the device has no room.
  Variable(std::shared_ptr<const Device> device, std::string name, DType dtype, Shape shape);

  const std::string& name() const { return name_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return nbytes_; }
  const Device& device() const { return *device_; }
  // The bytes in device memory (64-byte aligned; never null, even for an empty variable).
  uint8_t* data() const { return data_.data(); }

  // Blocking copies of the whole value: to host memory `dst` (nbytes() of it), and from
  // host memory `src`. Not ordered against runs: see the class comment.
  void read(void* dst) const;
  void write(const void* src);

 private:
  std::shared_ptr<const Device> device_;
  std::string name_;
  DType dtype_;
  Shape shape_;
  int64_t numel_ = 0;
  size_t nbytes_ = 0;
  AlignedBuffer data_;
};

}  // namespace ge
