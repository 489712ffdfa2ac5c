#include "device.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

namespace ge {

namespace {
// GE_NO_AVX512 set (to anything) in the environment starts with the AVX-512 paths off.
std::atomic<bool> g_avx512_allowed{std::getenv("GE_NO_AVX512") == nullptr};
}  // namespace

bool cpu_supports_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

bool cpu_has_avx512() { return cpu_supports_avx512() && g_avx512_allowed.load(std::memory_order_relaxed); }

void set_avx512_allowed(bool allowed) { g_avx512_allowed.store(allowed, std::memory_order_relaxed); }

Device::Device(int threads)
    : cores_(std::max(1, omp_get_num_procs())),
      threads_(threads > 0 ? std::min(threads, 1024) : cores_),
      engine_(dnnl::engine::kind::cpu, 0),
      scheduler_(std::make_unique<Scheduler>(engine_, threads_)) {}

Device::~Device() { scheduler_.reset(); }

}  // namespace ge
