#include "event.h"

#include "spin.h"

namespace ge {

void Event::signal(uint64_t value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (value <= value_) return;
    value_ = value;
    value_fast_.store(value, std::memory_order_release);
  }
  cv_.notify_all();
}

bool Event::wait(uint64_t value) {
  const uint64_t generation = value >> kEventSeqBits;
  spin_until([&] {
    return value_fast_.load(std::memory_order_acquire) >= value ||
           aborted_fast_.load(std::memory_order_acquire) >= generation;
  }, kSpinWait);
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return value_ >= value || aborted_generation_ >= generation; });
  return value_ >= value;
}

void Event::abort(uint64_t generation) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation <= aborted_generation_) return;
    aborted_generation_ = generation;
    aborted_fast_.store(generation, std::memory_order_release);
  }
  cv_.notify_all();
}

}  // namespace ge
