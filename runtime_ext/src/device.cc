#include "device.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

namespace ge {

namespace {
// GE_NO_AVX512 set (to anything) in the environment starts with the AVX-512 paths off.
std::atomic<bool> g_avx512_allowed{std::getenv("GE_NO_AVX512") == nullptr};

struct Registry {
  std::mutex mu;
  std::map<std::string, DeviceFactory> factories;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: devices may outlive static destruction
    register_builtin_backends([reg](const std::string& name, DeviceFactory f) {
      reg->factories[name] = std::move(f);
    });
    return reg;
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

void register_backend(const std::string& name, DeviceFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[name] = std::move(factory);
}

std::shared_ptr<Device> create_device(const std::string& name, int threads) {
  DeviceFactory f;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(name);
    if (it == r.factories.end()) {
      std::string known;
      for (const auto& [n, _] : r.factories) known += (known.empty() ? "" : ", ") + n;
      invalid("unknown backend '", name, "'; registered: ", known);
    }
    f = it->second;
  }
  return f(threads);
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [n, _] : r.factories) names.push_back(n);
  return names;  // std::map: sorted
}

}  // namespace ge
