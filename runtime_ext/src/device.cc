#include "device.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <utility>

namespace ge {

namespace {
// GE_NO_AVX512 set (to anything) in the environment starts with the AVX-512 paths off.
std::atomic<bool> g_avx512_allowed{std::getenv("GE_NO_AVX512") == nullptr};

// The built-in backends by name: filled once (thread-safe static init), read-only after.
const std::map<std::string, DeviceFactory>& registry() {
  static const auto* r = [] {
    auto* factories = new std::map<std::string, DeviceFactory>;  // never destroyed
    register_builtin_backends([factories](const std::string& name, DeviceFactory f) {
      (*factories)[name] = std::move(f);
    });
    return factories;
  }();
  return *r;
}
}  // namespace

bool cpu_supports_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f");
  return yes;
}

bool cpu_has_avx512() { return cpu_supports_avx512() && g_avx512_allowed.load(std::memory_order_relaxed); }

void set_avx512_allowed(bool allowed) { g_avx512_allowed.store(allowed, std::memory_order_relaxed); }

Device::Device(std::string name, int threads)
    : name_(std::move(name)),
      cores_(std::max(1, omp_get_num_procs())),
      threads_(threads > 0 ? std::min(threads, 1024) : cores_) {}

Device::~Device() = default;

void Device::start() {
  scheduler_ = std::make_unique<Scheduler>([this] { return make_lane_stream(); }, threads_);
}

void Device::stop() { scheduler_.reset(); }

std::shared_ptr<Device> create_device(const std::string& name, int threads) {
  const auto& factories = registry();
  auto it = factories.find(name);
  if (it == factories.end()) {
    std::string known;
    for (const auto& [n, _] : factories) known += (known.empty() ? "" : ", ") + n;
    invalid("unknown backend '", name, "'; registered: ", known);
  }
  return it->second(threads);
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const auto& [n, _] : registry()) names.push_back(n);
  return names;  // std::map: sorted
}

}  // namespace ge
