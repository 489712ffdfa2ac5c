#include "stream.h"

#include "spin.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>

namespace ge {

void Stream::FreeDeleter::operator()(uint8_t* p) const { std::free(p); }

Stream::Stream(const Device& device, int index, int omp_threads, bool spin_sync)
    : device_(device), index_(index), omp_threads_(omp_threads < 1 ? 1 : omp_threads), spin_sync_(spin_sync) {
  thread_ = std::thread([this] { worker_main(); });
}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

void Stream::reserve_workspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return;
  size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  workspace_.reset(static_cast<uint8_t*>(p));
  workspace_bytes_ = rounded;
}

void Stream::submit(const Item* items, size_t n) {
  if (n == 0) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.insert(queue_.end(), items, items + n);
    submitted_ += n;
    submitted_fast_.store(submitted_, std::memory_order_release);
  }
  work_cv_.notify_one();
}

void Stream::synchronize() {
  // Only the submitting thread calls synchronize, so submitted_fast_ is current here.
  const uint64_t target = submitted_fast_.load(std::memory_order_acquire);
  if (spin_sync_ &&
      spin_until([&] { return completed_fast_.load(std::memory_order_acquire) >= target; }, kSpinWait)) {
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return completed_ >= target; });
}

void Stream::worker_main() {
  // The ICV is per thread: set it once here and every parallel region started by this
  // worker (ours or oneDNN's) uses this many threads.
  omp_set_num_threads(omp_threads_);
  dnnl::stream dnnl_stream(device_.engine());
  ExecContext ec{dnnl_stream, index_};
  std::vector<Item> batch;
  for (;;) {
    // Poll briefly for the next items (the gap between runs is often short); yields, so
    // it never holds a core another thread wants.
    spin_until([&] { return submitted_fast_.load(std::memory_order_acquire) > completed_fast_.load(std::memory_order_relaxed); },
               kSpinWork);
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and fully drained
      batch.swap(queue_);
    }
    for (const Item& item : batch) item.fn(item.ctx, item.arg, ec);
    {
      std::lock_guard<std::mutex> lock(mu_);
      completed_ += batch.size();
      completed_fast_.store(completed_, std::memory_order_release);
    }
    idle_cv_.notify_all();
    batch.clear();
  }
}

}  // namespace ge
