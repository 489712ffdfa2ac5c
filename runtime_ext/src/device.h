// Device: the host CPU backend. Owns the oneDNN engine, the thread budget and the pool of
// worker threads (scheduler.h) that runs the streams of every model loaded on it.
//
// A Device is shared (std::shared_ptr) by every Model loaded on it and lives as long as
// the longest of them. Its configuration is immutable after construction; the scheduler
// is thread-safe, so a Device may be used from any thread.
#pragma once

#include <memory>
#include <string>

#include "oneapi/dnnl/dnnl.hpp"
#include "scheduler.h"

namespace ge {

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

class Device {
 public:
  // Non-blocking (lanes start on first use). threads <= 0 means "the cores available to
  // this process". Throws dnnl::error if oneDNN cannot create a CPU engine.
  explicit Device(int threads);
  // Blocks: joins the lanes. Every model on the device is gone by then (they retain it).
  ~Device();

  const std::string& name() const { return name_; }
  // The thread budget: lanes and their OpenMP helpers together run at most this many
  // threads at once.
  int threads() const { return threads_; }
  // Cores available to the process.
  int cores() const { return cores_; }
  // Borrowed; valid for the Device's lifetime.
  const dnnl::engine& engine() const { return engine_; }
  Scheduler& scheduler() const { return *scheduler_; }

 private:
  std::string name_ = "host";
  int cores_;
  int threads_;
  dnnl::engine engine_;
  std::unique_ptr<Scheduler> scheduler_;
};

}  // namespace ge
