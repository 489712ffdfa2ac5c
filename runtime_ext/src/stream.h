// Stream: an in-order task queue drained by one persistent native worker thread.
//
// Items submitted to a stream run one at a time, in submission order, on the stream's
// worker. Ordering between streams exists only through Events (event.h). The worker
// limits OpenMP (and so oneDNN) to `omp_threads` threads, so that the streams of a model
// together never oversubscribe the device's cores.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "device.h"

namespace ge {

// What an item sees while it runs on a stream. Borrowed from the stream; valid only
// during the call.
struct ExecContext {
  dnnl::stream& dnnl_stream;  // a CPU stream on the device's engine, owned by the Stream
  int stream_index;
};

class Stream {
 public:
  // An item is a plain function pointer plus two words of context, so submitting never
  // allocates per item. `ctx` is borrowed: it must outlive the item's execution.
  using Fn = void (*)(void* ctx, uint32_t arg, ExecContext& ec);
  struct Item {
    Fn fn;
    void* ctx;
    uint32_t arg;
  };

  // Non-blocking: starts the worker thread. `device` is borrowed and must outlive the
  // Stream. `spin_sync`: synchronize() polls briefly before it sleeps. Only worth it when
  // the model's OpenMP teams leave the caller a core: otherwise the poll steals time from
  // the very team it waits for. Throws std::system_error if the thread cannot be started.
  Stream(const Device& device, int index, int omp_threads, bool spin_sync);

  // Blocks: lets the worker finish every submitted item, then joins it.
  ~Stream();

  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Load-time only (before the first submit): makes workspace() at least `bytes` long,
  // 64-byte aligned. The workspace is owned by the Stream and never moves afterwards; items
  // of this stream may use it freely while they run (they never run concurrently).
  void reserve_workspace(size_t bytes);
  uint8_t* workspace() const { return workspace_.get(); }

  // Non-blocking: appends `n` items (copied) to the queue. Items must not throw.
  void submit(const Item* items, size_t n);

  // Blocks until every item submitted so far has finished running.
  void synchronize();

  int index() const { return index_; }
  int omp_threads() const { return omp_threads_; }

 private:
  void worker_main();

  struct FreeDeleter {
    void operator()(uint8_t* p) const;
  };

  const Device& device_;
  const int index_;
  const int omp_threads_;
  const bool spin_sync_;
  std::unique_ptr<uint8_t, FreeDeleter> workspace_;
  size_t workspace_bytes_ = 0;

  std::mutex mu_;
  std::condition_variable work_cv_;  // worker waits here for items or stop
  std::condition_variable idle_cv_;  // synchronize() waits here for completion
  std::vector<Item> queue_;
  uint64_t submitted_ = 0;  // guarded by mu_; mirrored in the atomics for spinning
  uint64_t completed_ = 0;
  std::atomic<uint64_t> submitted_fast_{0};
  std::atomic<uint64_t> completed_fast_{0};
  bool stop_ = false;
  std::thread thread_;  // last: started after everything above is initialised
};

}  // namespace ge
