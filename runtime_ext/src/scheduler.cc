#include "scheduler.h"

#include <omp.h>

#include <algorithm>
#include <utility>

#include "spin.h"

namespace ge {

struct Scheduler::Group {
  int width = 1;
  int count = 1;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Runnable*> queue;  // guarded by mu
  std::atomic<size_t> queued{0};  // mirrors queue.size() for spinning lanes
  int sleeping = 0;               // guarded by mu
  bool stop = false;              // guarded by mu
  std::vector<std::thread> threads;
};

Scheduler::Scheduler(std::function<std::unique_ptr<LaneStream>()> make_stream, int budget)
    : make_stream_(std::move(make_stream)), budget_(std::max(1, budget)), free_tokens_(std::max(1, budget)) {}

Scheduler::~Scheduler() {
  for (auto& g : groups_) {
    if (!g) continue;
    {
      std::lock_guard<std::mutex> lock(g->mu);
      g->stop = true;
    }
    g->cv.notify_all();
    for (std::thread& t : g->threads) t.join();
  }
}

int Scheduler::clamp_width(int threads) const {
  return std::clamp(threads, 1, std::min(budget_, kMaxWidth));
}

int Scheduler::lanes(int width) const { return std::max(1, budget_ / clamp_width(width)); }

Scheduler::Group& Scheduler::group(int width) {
  width = clamp_width(width);
  if (Group* g = fast_groups_[width].load(std::memory_order_acquire)) return *g;
  std::lock_guard<std::mutex> lock(groups_mu_);
  if (!groups_[width]) {
    auto g = std::make_unique<Group>();
    g->width = width;
    g->count = lanes(width);
    Group* raw = g.get();
    groups_[width] = std::move(g);
    for (int i = 0; i < raw->count; ++i) raw->threads.emplace_back([this, raw] { lane_main(*raw); });
    fast_groups_[width].store(raw, std::memory_order_release);
  }
  return *groups_[width];
}

int Scheduler::threads_started() const {
  std::lock_guard<std::mutex> lock(groups_mu_);
  int n = 0;
  for (const auto& g : groups_) {
    if (g) n += static_cast<int>(g->threads.size());
  }
  return n;
}

void Scheduler::submit(int width, Runnable* r) {
  Group& g = group(width);
  bool wake;
  {
    std::lock_guard<std::mutex> lock(g.mu);
    g.queue.push_back(r);
    g.queued.store(g.queue.size(), std::memory_order_release);
    wake = g.sleeping > 0;
  }
  if (wake) g.cv.notify_one();
}

void Scheduler::lane_main(Group& g) {
  // The ICV is per thread: every parallel region this lane starts (oneDNN's or ours)
  // uses a team of g.width threads.
  omp_set_num_threads(g.width);
  std::unique_ptr<LaneStream> stream = make_stream_();
  LaneContext lc{*stream, g.width};
  for (;;) {
    // Poll briefly first: the gap between a model's runs is often shorter than a
    // thread wake-up on a VM. Yields, so it never holds a core another thread wants.
    spin_until([&] { return g.queued.load(std::memory_order_acquire) > 0; }, kSpinWork);
    Runnable* r;
    {
      std::unique_lock<std::mutex> lock(g.mu);
      if (g.queue.empty() && !g.stop) {
        ++g.sleeping;
        g.cv.wait(lock, [&] { return g.stop || !g.queue.empty(); });
        --g.sleeping;
      }
      if (g.queue.empty()) return;  // stopping, nothing left
      r = g.queue.front();
      g.queue.pop_front();
      g.queued.store(g.queue.size(), std::memory_order_release);
    }
    r->run(lc);
  }
}

void Scheduler::acquire(int n) {
  n = std::min(n, budget_);
  if (token_waiters_.load(std::memory_order_seq_cst) == 0) {
    int f = free_tokens_.load(std::memory_order_relaxed);
    while (f >= n) {
      if (free_tokens_.compare_exchange_weak(f, f - n, std::memory_order_acquire)) return;
    }
  }
  std::unique_lock<std::mutex> lock(token_mu_);
  const uint64_t ticket = ticket_tail_++;
  token_waiters_.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    if (ticket_head_ == ticket) {
      int f = free_tokens_.load(std::memory_order_seq_cst);
      if (f >= n && free_tokens_.compare_exchange_strong(f, f - n, std::memory_order_acquire)) break;
    }
    token_cv_.wait(lock);
  }
  ++ticket_head_;
  token_waiters_.fetch_sub(1, std::memory_order_seq_cst);
  lock.unlock();
  token_cv_.notify_all();  // the next ticket may be servable now
}

bool Scheduler::try_acquire(int n) {
  n = std::min(n, budget_);
  if (token_waiters_.load(std::memory_order_seq_cst) != 0) return false;
  int f = free_tokens_.load(std::memory_order_relaxed);
  while (f >= n) {
    if (free_tokens_.compare_exchange_weak(f, f - n, std::memory_order_acquire)) return true;
  }
  return false;
}

void Scheduler::release(int n) {
  n = std::min(n, budget_);
  free_tokens_.fetch_add(n, std::memory_order_seq_cst);
  if (token_waiters_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(token_mu_); }
    token_cv_.notify_all();
  }
}

namespace {

// Runs one function on a lane and counts down a latch.
class FnRunnable : public Runnable {
 public:
  FnRunnable(const std::function<void(LaneContext&)>* fn, Scheduler* s, std::mutex* mu,
             std::condition_variable* cv, int* left)
      : fn_(fn), sched_(s), mu_(mu), cv_(cv), left_(left) {}
  void run(LaneContext& lane) override {
    sched_->acquire(lane.width);
    (*fn_)(lane);
    sched_->release(lane.width);
    std::lock_guard<std::mutex> lock(*mu_);
    if (--*left_ == 0) cv_->notify_all();  // under the lock: the waiter owns cv_
  }

 private:
  const std::function<void(LaneContext&)>* fn_;
  Scheduler* sched_;
  std::mutex* mu_;
  std::condition_variable* cv_;
  int* left_;
};

}  // namespace

void Scheduler::run_on_lanes(int width, const std::vector<std::function<void(LaneContext&)>>& fns) {
  std::mutex mu;
  std::condition_variable cv;
  int left = static_cast<int>(fns.size());
  std::vector<std::unique_ptr<FnRunnable>> jobs;
  for (const auto& fn : fns) jobs.push_back(std::make_unique<FnRunnable>(&fn, this, &mu, &cv, &left));
  for (auto& j : jobs) submit(width, j.get());
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return left == 0; });
}

}  // namespace ge
