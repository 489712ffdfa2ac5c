#include "device.h"

#include <omp.h>

#include <algorithm>

namespace ge {

bool cpu_has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

Device::Device(int threads)
    : cores_(std::max(1, omp_get_num_procs())),
      threads_(threads > 0 ? std::min(threads, 1024) : cores_),
      engine_(dnnl::engine::kind::cpu, 0),
      scheduler_(std::make_unique<Scheduler>(engine_, threads_)) {}

Device::~Device() { scheduler_.reset(); }

}  // namespace ge
