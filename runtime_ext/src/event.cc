#include "event.h"

#include "spin.h"

namespace ge {

void Event::collect(std::vector<Waiter>* out) {
  size_t keep = 0;
  for (size_t i = 0; i < waiters_.size(); ++i) {
    const Waiter& w = waiters_[i];
    if (value_ >= w.value || aborted_ >= (w.value >> kEventSeqBits)) {
      out->push_back(w);
    } else {
      waiters_[keep++] = w;
    }
  }
  waiters_.resize(keep);
}

void Event::signal(uint64_t value, Scheduler& sched) {
  std::vector<Waiter> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (value <= value_) return;
    value_ = value;
    value_fast_.store(value, std::memory_order_release);
    if (!waiters_.empty()) collect(&ready);
  }
  for (const Waiter& w : ready) sched.submit(w.width, w.runnable);
}

bool Event::wait_or_park(uint64_t value, Runnable* r, int width) {
  if (spin_until([&] { return reached(value); }, kSpinWait)) return true;
  std::lock_guard<std::mutex> lock(mu_);
  if (value_ >= value || aborted_ >= (value >> kEventSeqBits)) return true;
  waiters_.push_back({value, r, width});
  return false;
}

void Event::abort(uint64_t generation, Scheduler& sched) {
  std::vector<Waiter> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (generation <= aborted_) return;
    aborted_ = generation;
    aborted_fast_.store(generation, std::memory_order_release);
    if (!waiters_.empty()) collect(&ready);
  }
  for (const Waiter& w : ready) sched.submit(w.width, w.runnable);
}

}  // namespace ge
