// Device: the host CPU backend. Owns the oneDNN engine and the thread budget.
//
// A Device is shared (std::shared_ptr) by every Model loaded on it and lives as long as
// the longest of them. It is immutable after construction, so it is safe to use from any
// thread.
#pragma once

#include <string>

#include "oneapi/dnnl/dnnl.hpp"

namespace ge {

class Device {
 public:
  // Non-blocking. threads <= 0 means "number of cores available to this process".
  // Throws dnnl::error if oneDNN cannot create a CPU engine (never happens on x86-64).
  explicit Device(int threads);

  const std::string& name() const { return name_; }
  int threads() const { return threads_; }
  // Borrowed; valid for the Device's lifetime.
  const dnnl::engine& engine() const { return engine_; }

 private:
  std::string name_ = "host";
  int threads_;
  dnnl::engine engine_;
};

}  // namespace ge
