// AlignedBuffer: an owned, 64-byte aligned, zero-initialised block of bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace ge {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;

  // Throws std::bad_alloc. A zero-byte buffer still has a valid (64-byte) allocation so
  // that data() is never null. `zero`: fill with zeros (skip for buffers about to be
  // overwritten in full).
  explicit AlignedBuffer(size_t bytes, bool zero = true) : size_(bytes) {
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) throw std::bad_alloc();
    if (zero) std::memset(p, 0, rounded);
    data_.reset(static_cast<uint8_t*>(p));
  }

  uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  // Gives up ownership; free the result with std::free.
  uint8_t* release() { return data_.release(); }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0;
};

}  // namespace ge
