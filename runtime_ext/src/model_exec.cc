// Model execution: binding, launching the streams of an instance on the lanes, sink-mode
// iterations, failure, completion, outputs.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>

#include "model_internal.h"
#include "spin.h"

#include <omp.h>

namespace ge {

namespace {

constexpr int64_t kMaxIterations = int64_t{1} << 24;
// Launches shorter than this (per iteration, on average) are waited for by polling.
constexpr uint64_t kShortLaunchNs = 150000;
// A longer launch alone in flight is polled for at least this long before its typical end
// (5% of it), and at most kPollTailMaxNs: while the lanes hold every core the poller takes
// turns with them (bert_mini at batch 8, two one-thread lanes, 34 ms: a 1.7 ms tail made
// runs ~0.3 ms slower), while waking late costs only the 27-61 us of a wake-up.
constexpr uint64_t kPollTailNs = 100000;
constexpr uint64_t kPollTailMaxNs = 250000;

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

uint8_t* resolve(const TensorInfo& t, const std::vector<uint8_t*>& bases) {
  return bases[t.slot] + t.slot_offset;
}

}  // namespace

// ---- lane side ----------------------------------------------------------------------------

void Model::StreamRun::run(LaneContext& lane) {
  Model& m = *model_;
  Instance& in = *inst_;
  Scheduler& sched = m.device_->scheduler();
  const Launch& launch = *in.launch;
  const std::vector<uint32_t>& order = m.stream_tasks_[static_cast<size_t>(stream_)];
  ExecContext ctx{lane.stream, in.index, nullptr, in.workspaces[static_cast<size_t>(stream_)].data()};
  for (;;) {
    if (in.failed.load(std::memory_order_acquire)) return finish();  // drain the failed launch
    if (pc_ == order.size()) {
      lane.stream.synchronize();  // the iteration's work is done before the barrier or the end
      if (iteration_ + 1 >= launch.iterations) return finish();
      if (!pass_barrier()) return;  // parked until every stream is done with the iteration
      ++iteration_;
      pc_ = 0;
      std::fill(jumps_.begin(), jumps_.end(), 0);
      continue;
    }
    ctx.bases = launch.bases[static_cast<size_t>(iteration_)].data();
    const uint32_t index = order[pc_];
    Task& t = m.tasks_[index];
    const uint64_t generation = launch.first_generation + static_cast<uint64_t>(iteration_);
    switch (t.kind) {
      case Kind::kKernel: {
        // Another launch holds part of the budget: run the single-threaded kernel on one
        // core rather than wait for the whole width.
        Kernel* k = t.kernel.get();
        int width = m.width_;
        Kernel* narrow = launch.narrow_ok ? t.narrow.get() : nullptr;
        if (narrow && (launch.narrow || !sched.try_acquire(width))) {
          k = narrow;
          width = 1;
          sched.acquire(1);
          if (lane.width > 1) omp_set_num_threads(1);  // our own loops follow the ICV
        } else if (!narrow) {
          sched.acquire(width);
        }
        Status st;
        const uint64_t t0 = now_ns();
        try {
          st = k->run(ctx);
        } catch (const std::bad_alloc&) {
          st = Status::Internal("out of memory");
        } catch (const std::exception& e) {
          if (m.device_->library_error(e, "run this node", &st)) {
            st = Status::Internal(st.message());  // a failure of ours, not the caller's input
          } else {
            st = Status::Internal(e.what());
          }
        }
        const uint64_t dt = now_ns() - t0;
        busy_ns_ += dt;
        m.task_ns_[index].fetch_add(dt, std::memory_order_relaxed);
        m.task_calls_[index].fetch_add(1, std::memory_order_relaxed);
        if (width != lane.width) omp_set_num_threads(lane.width);
        sched.release(width);
        if (!st.ok()) m.fail(in, st.prefixed(node_prefix(t.name, t.op)));
        break;
      }
      case Kind::kRecord:
        lane.stream.synchronize();  // what the stream enqueued is done before others see it
        in.events[static_cast<size_t>(t.event)]->signal(event_value(generation, t.seq), sched);
        break;
      case Kind::kWait:
        hand_off();
        // Parked: the record (or an abort) submits this run again, at the same task.
        if (!in.events[static_cast<size_t>(t.event)]->wait_or_park(event_value(generation, t.seq), this,
                                                                   launch.narrow ? 1 : m.width_)) {
          return;
        }
        break;
      case Kind::kCopy: {
        const uint8_t* src = ctx.ptr(*t.src);
        uint8_t* dst = ctx.ptr(*t.dst);
        if (dst != src && t.src->nbytes) m.device_->copy_on_device(dst, src, t.src->nbytes);
        in.copied.fetch_add(t.src->nbytes, std::memory_order_relaxed);
        break;
      }
      default:  // control flow: a jump sets pc_ (model_control.cc)
        if (control(t, lane, ctx)) continue;
        break;
    }
    ++pc_;
  }
}

bool Model::StreamRun::pass_barrier() {
  Model& m = *model_;
  Instance& in = *inst_;
  const Launch& launch = *in.launch;
  const uint64_t target = event_value(launch.first_generation + static_cast<uint64_t>(iteration_), 1);
  hand_off();
  if (!arrived_) {
    arrived_ = true;
    if (in.arrive.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      m.between_iterations(in, iteration_);
      in.arrive.store(m.num_streams_, std::memory_order_release);
      in.barrier.signal(target, m.device_->scheduler());
    }
  }
  if (!in.barrier.wait_or_park(target, this, launch.narrow ? 1 : m.width_)) return false;
  arrived_ = false;
  return true;
}

void Model::StreamRun::hand_off() {
  if (handed_off_) return;
  handed_off_ = true;
  Instance& in = *inst_;
  const size_t next = static_cast<size_t>(stream_) + 1;
  if (in.launch->serial && next < in.runs.size()) model_->device_->scheduler().submit(1, in.runs[next].get());
}

void Model::StreamRun::finish() {
  hand_off();  // before this stream counts as done: the launch cannot end without the rest
  Model& m = *model_;
  m.stream_ns_[stream_].fetch_add(busy_ns_, std::memory_order_relaxed);
  busy_ns_ = 0;
  Instance& in = *inst_;
  if (in.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) m.complete(in);
}

void Model::fail(Instance& in, const Status& status) {
  {
    std::lock_guard<std::mutex> lock(in.fail_mu);
    if (in.failed.load(std::memory_order_relaxed)) return;
    in.status = status;
    in.failed.store(true, std::memory_order_release);
  }
  const uint64_t last = in.launch->first_generation + static_cast<uint64_t>(in.launch->iterations) - 1;
  Scheduler& sched = device_->scheduler();
  for (auto& e : in.events) e->abort(last, sched);
  in.barrier.abort(last, sched);
}

void Model::between_iterations(Instance& in, int64_t iteration) {
  Launch& launch = *in.launch;
  if (launch.return_all) {  // the arena is about to be reused: keep this iteration's outputs
    const std::vector<uint8_t*>& bases = launch.bases[static_cast<size_t>(iteration)];
    std::vector<HostResult>& res = (*launch.results)[static_cast<size_t>(iteration)];
    for (size_t k = 0; k < outputs_.size(); ++k) {
      if (io_.output_slot[k] >= 0 || outputs_[k]->nbytes == 0) continue;
      device_->copy_to_host(res[k].data.data(), resolve(*outputs_[k], bases), outputs_[k]->nbytes);
      in.copied.fetch_add(outputs_[k]->nbytes, std::memory_order_relaxed);
    }
  }
  copy_in(in, iteration + 1);
}

void Model::copy_in(Instance& in, int64_t iteration) {
  const Launch& launch = *in.launch;
  const ExecRequest& req = *launch.request;
  const std::vector<HostTensor>& list = req.inputs[req.inputs.size() == 1 ? 0 : static_cast<size_t>(iteration)];
  const std::vector<uint8_t*>& bases = launch.bases[static_cast<size_t>(iteration)];
  for (size_t k = 0; k < inputs_.size(); ++k) {
    uint8_t* dst = resolve(*inputs_[k], bases);
    if (dst == list[k].data || inputs_[k]->nbytes == 0) continue;  // bound zero-copy
    device_->copy_to_device(dst, list[k].data, inputs_[k]->nbytes);
    in.copied.fetch_add(inputs_[k]->nbytes, std::memory_order_relaxed);
  }
}

void Model::complete(Instance& in) {
  Launch& l = *in.launch;
  uint64_t copied = in.copied.load(std::memory_order_relaxed);
  if (in.failed.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(in.fail_mu);
    l.status = in.status;
  } else {
    // The last iteration's outputs that were not written in place: out of the arena
    // before the instance serves the next launch.
    const std::vector<uint8_t*>& last = l.bases[static_cast<size_t>(l.iterations - 1)];
    for (size_t k = 0; k < outputs_.size(); ++k) {
      if (io_.output_slot[k] >= 0 || outputs_[k]->nbytes == 0) continue;
      device_->copy_to_host(l.results->back()[k].data.data(), resolve(*outputs_[k], last), outputs_[k]->nbytes);
      copied += outputs_[k]->nbytes;
    }
  }
  l.copied = copied;
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  // The next caller's launch starts now, on this lane, instead of after its caller wakes up
  // (a wake-up costs tens of microseconds here, a small model's whole run).
  release(in);
  l.wake();
}

void Model::release(Instance& in) {
  Launch* next = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!queued_.empty()) {
      next = queued_.front();
      queued_.pop_front();
    } else {
      free_.push_back(&in);
      pool_cv_.notify_all();  // the destructor waits for every instance
    }
  }
  if (next) begin(*next, in);
}

void Model::begin(Launch& l, Instance& in) {
  Status st = start(l, in);
  if (st.ok()) return;
  l.status = st;
  release(in);
  l.wake();
}

// ---- caller side --------------------------------------------------------------------------

Status Model::wait_in_queue(Launch& launch, const ExecRequest& req) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kPoll = std::chrono::milliseconds(10);  // how often the cancel flag is read
  for (;;) {
    Clock::time_point until = Clock::now() + kPoll;
    if (req.has_deadline) until = std::min(until, req.deadline);
    {
      std::unique_lock<std::mutex> lock(launch.mu);
      if (launch.cv.wait_until(lock, until, [&] { return launch.done; })) return Status::Ok();
    }
    const bool cancelled = req.cancel && req.cancel->load(std::memory_order_relaxed);
    const bool late = req.has_deadline && Clock::now() >= req.deadline;
    if (!cancelled && !late) continue;
    std::lock_guard<std::mutex> lock(pool_mu_);
    auto it = std::find(queued_.begin(), queued_.end(), &launch);
    if (it == queued_.end()) return Status::Ok();  // started meanwhile: it runs to its end
    queued_.erase(it);
    return cancelled ? Status::Cancelled(cat("the caller cancelled while model '", name_,
                                             "' waited for a free instance"))
                     : Status::DeadlineExceeded(cat("the caller's deadline passed while model '", name_,
                                                    "' waited for a free instance"));
  }
}

Status Model::check_inputs(const std::vector<HostTensor>& inputs) const {
  if (inputs.size() != inputs_.size()) {
    return Status::InvalidArgument(cat("model '", name_, "' expects ", inputs_.size(), " inputs, got ", inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const HostTensor& h = inputs[i];
    const TensorInfo& t = *inputs_[i];
    if (!h.dtype || *h.dtype != t.dtype || h.shape != t.shape) {
      std::string got = (h.dtype ? std::string(dtype_name(*h.dtype)) : h.type_name) + shape_str(h.shape);
      return Status::InvalidArgument(cat("input '", t.name, "': expected ", type_str(t.dtype, t.shape), ", got ", got));
    }
    if (h.nbytes != t.nbytes || (t.nbytes > 0 && !h.data)) {
      return Status::InvalidArgument(cat("input '", t.name, "': expected ", t.nbytes, " bytes, got ", h.nbytes));
    }
  }
  return Status::Ok();
}

Status Model::execute(const ExecRequest& req, std::vector<std::vector<HostResult>>* outputs) {
  outputs->clear();
  if (req.iterations < 1 || req.iterations > kMaxIterations) {
    return Status::InvalidArgument(cat("iterations must be in [1, ", kMaxIterations, "], got ", req.iterations));
  }
  if (req.inputs.size() != 1 && req.inputs.size() != static_cast<size_t>(req.iterations)) {
    return Status::InvalidArgument(cat("expected one list of inputs or one per iteration (", req.iterations,
                                       "), got ", req.inputs.size()));
  }
  for (const auto& list : req.inputs) {
    Status st = check_inputs(list);
    if (!st.ok()) return st;
  }
  const auto entered = std::chrono::steady_clock::now();
  const size_t n_iter = static_cast<size_t>(req.iterations);
  const size_t n_ret = req.return_all ? n_iter : 1;
  std::vector<std::vector<HostResult>> results(n_ret);
  Launch launch;
  try {
    for (auto& res : results) {
      for (const TensorInfo* t : outputs_) res.push_back(HostResult{t->dtype, t->shape, AlignedBuffer(t->nbytes, false)});
    }
    launch.bases.resize(n_iter);
  } catch (const std::bad_alloc&) {
    return Status::Internal("out of memory allocating outputs");
  }
  launch.iterations = req.iterations;
  launch.return_all = req.return_all;
  launch.request = &req;
  launch.results = &results;

  // The narrow set is built when a launch first wants it: the second one (its first
  // probe, pick_narrow) or, where launches are long (kEarlyProbeNs) and so is their work
  // (kEarlyProbeFlops; unknown counts as long), the kProbeMin-th; or one beside another
  // launch; never on the first launch's path.
  // The serial mode's probes (a batch split's chunks one after another, `width` times a
  // launch) wait the same way: on resnet50 at batch 8 (16 GFLOP a lane, ~0.3 s a launch)
  // they fell on the second and third launches and bench-zoo's 1.5-s throughput window
  // measured half the rate.
  if ((has_narrow_ && !narrow_ready_.load(std::memory_order_acquire)) ||
      (has_serial_ && !serial_ready_.load(std::memory_order_acquire))) {
    const uint32_t seen = launches_seen_.fetch_add(1, std::memory_order_relaxed);
    const uint64_t typical = launch_ns_.load(std::memory_order_relaxed);
    const bool heavy = work_flops_ == 0 || work_flops_ >= kEarlyProbeFlops * static_cast<uint64_t>(width_);
    if (in_flight_.load(std::memory_order_relaxed) > 0 ||
        (typical != 0 && (typical <= kEarlyProbeNs || !heavy || seen >= kProbeMin))) {
      if (has_narrow_) ensure_narrow();
      if (has_serial_) serial_ready_.store(true, std::memory_order_release);
    }
  }
  Instance* in = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool_mu_);
    if (!free_.empty()) {
      in = free_.back();
      free_.pop_back();
    } else {  // started by the lane that frees an instance
      queued_.push_back(&launch);
      std::lock_guard<std::mutex> sl(stats_mu_);
      stats_.peak_waiting = std::max<uint64_t>(stats_.peak_waiting, queued_.size());
    }
  }
  const uint64_t enqueued_ns = req.queue_ns ? now_ns() : 0;  // only when asked
  if (in) begin(launch, *in);
  if (!in && (req.has_deadline || req.cancel)) {
    Status st = wait_in_queue(launch, req);
    if (!st.ok()) {
      if (req.queue_ns) *req.queue_ns = now_ns() - enqueued_ns;
      return st;
    }
  }

  // Poll for completion when the lanes leave this thread a core, or when launches are
  // short (a wake-up costs ~10 us here, a good part of a 70 us run) and no other launch of
  // the model is in flight. A long launch alone in flight is slept through, but not to its
  // end: being woken by the lane took 27-61 us here (p10-p90, MobileNetV2 at 3.8 ms), so
  // the caller wakes itself a little before the typical launch would end and polls the rest
  // (then 5-7 us at the median). Never polls a long launch throughout: a polling thread
  // preempts the OpenMP team and stalls its barriers (as do several polling callers); at
  // the end it only yields until done.
  const uint64_t typical = launch_ns_.load(std::memory_order_relaxed);
  const bool alone = in && typical > 0 && launch.others == 0;
  const auto done_fast = [&] { return launch.done_fast.load(std::memory_order_acquire); };
  if (spin_wait_ || (alone && typical < kShortLaunchNs)) {
    const auto budget = spin_wait_ ? kSpinWait : std::chrono::microseconds(2 * typical / 1000 + 20);
    spin_until(done_fast, budget);
  } else if (alone) {
    const uint64_t tail = std::clamp(typical / 20, kPollTailNs, kPollTailMaxNs);
    const uint64_t end = launch.started_ns + typical * n_iter;
    const auto wake = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(end - tail));
    {
      std::unique_lock<std::mutex> lock(launch.mu);
      launch.cv.wait_until(lock, wake, [&] { return launch.done; });
    }
    spin_until(done_fast, std::chrono::microseconds(3 * tail / 1000));
  }
  {
    std::unique_lock<std::mutex> lock(launch.mu);
    launch.cv.wait(lock, [&] { return launch.done; });
  }
  if (req.queue_ns) *req.queue_ns = launch.started_ns > enqueued_ns ? launch.started_ns - enqueued_ns : 0;
  // A moving average of launch times (per iteration, from leaving the queue) decides the
  // next wait.
  const uint64_t took = (now_ns() - launch.started_ns) / n_iter;
  launch_ns_.store(typical == 0 ? took : (typical * 7 + took) / 8, std::memory_order_relaxed);
  if ((has_narrow_ || has_serial_) && launch.others == 0 && launch.status.ok()) record_mode(launch, took);
  if (!launch.status.ok()) {
    std::lock_guard<std::mutex> sl(stats_mu_);
    stats_.failures += 1;
    return launch.status;
  }
  *outputs = std::move(results);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - entered).count();
  std::lock_guard<std::mutex> sl(stats_mu_);
  stats_.runs += 1;
  stats_.narrow_runs += launch.narrow ? 1 : 0;
  stats_.serial_runs += launch.serial ? 1 : 0;
  stats_.probe_warmups += launch.probe_warmup ? 1 : 0;
  stats_.iterations += n_iter;
  stats_.seconds += secs;
  stats_.bytes_copied += launch.copied + req.converted_bytes;
  stats_.bytes_zero_copy += launch.zero_copy;
  return Status::Ok();
}

bool Model::pick_narrow(Launch& l) {
  std::lock_guard<std::mutex> lock(mode_mu_);
  const KernelSetChoice::Pick p = mode_.pick(now_ns());
  l.warmup = p.warmup;
  l.probe_warmup = p.warmup && mode_.probing();
  l.probe = p.probe;
  return p.narrow;
}

void Model::record_mode(const Launch& l, uint64_t took) {
  std::lock_guard<std::mutex> lock(mode_mu_);
  mode_.record({l.narrow || l.serial, l.warmup, l.probe}, took);
}

Status Model::start(Launch& l, Instance& in) {
  const ExecRequest& req = *l.request;
  const size_t n_iter = static_cast<size_t>(l.iterations);
  l.narrow_ok = has_narrow_ && narrow_ready_.load(std::memory_order_acquire);
  try {  // the only allocations: before anything is shared
    const std::vector<uint8_t*> base_template(static_cast<size_t>(io_.num_slots), nullptr);
    for (auto& bases : l.bases) bases = base_template;
    // The narrow set, built after this instance was, may need larger workspaces; the
    // instance is this launch's alone until it completes.
    for (size_t s = 0; l.narrow_ok && s < in.workspaces.size(); ++s) {
      if (in.workspaces[s].size() < workspace_bytes_[s]) {
        in.workspaces[s] = device_->allocate(workspace_bytes_[s], /*zero=*/false);
      }
    }
  } catch (const std::bad_alloc&) {
    return Status::Internal("out of memory binding the launch");
  }
  uint64_t zero_copy = 0;
  for (size_t i = 0; i < n_iter; ++i) {
    const std::vector<HostTensor>& list = req.inputs[req.inputs.size() == 1 ? 0 : i];
    std::vector<uint8_t*>& bases = l.bases[i];
    bases[kArenaSlot] = in.arena.data();
    for (size_t k = 0; k < segments_.size(); ++k) bases[kWeightSlot + k] = const_cast<uint8_t*>(segments_[k].base);
    for (size_t k = 0; k < variables_.size(); ++k) bases[variable_slot_ + k] = variables_[k]->data();
    for (size_t k = 0; k < inputs_.size(); ++k) {
      const int slot = io_.input_slot[k];
      if (slot < 0) continue;
      const TensorInfo& x = *inputs_[k];
      const auto addr = reinterpret_cast<uintptr_t>(list[k].data);
      if (addr % dtype_size(x.dtype) == 0) {  // kernels read the caller's buffer
        bases[static_cast<size_t>(slot)] = static_cast<uint8_t*>(const_cast<void*>(list[k].data));
        zero_copy += x.nbytes;
      } else {  // misaligned for its type: copied to where the plan put it in the arena
        bases[static_cast<size_t>(slot)] = in.arena.data() + x.offset;
      }
    }
    std::vector<HostResult>& res = (*l.results)[l.return_all ? i : 0];
    for (size_t k = 0; k < outputs_.size(); ++k) {
      const int slot = io_.output_slot[k];
      if (slot < 0) continue;
      bases[static_cast<size_t>(slot)] = res[k].data.data();  // the last kernel writes the result
      if (l.return_all || i + 1 == n_iter) zero_copy += outputs_[k]->nbytes;
    }
  }
  l.zero_copy = zero_copy;
  l.others = in_flight_.fetch_add(1, std::memory_order_relaxed);
  l.narrow = l.narrow_ok && (l.others > 0 || pick_narrow(l));
  l.serial = has_serial_ && serial_ready_.load(std::memory_order_acquire) &&
             (l.others > 0 || pick_narrow(l));  // never both: width_ 1 or not
  l.first_generation = in.generation + 1;
  in.generation += n_iter;
  in.launch = &l;
  in.failed.store(false, std::memory_order_relaxed);
  in.status = Status::Ok();
  in.arrive.store(num_streams_, std::memory_order_relaxed);
  in.pending.store(num_streams_, std::memory_order_relaxed);
  in.copied.store(0, std::memory_order_relaxed);
  l.started_ns = now_ns();
  copy_in(in, 0);
  for (auto& r : in.runs) r->reset();
  Scheduler& sched = device_->scheduler();
  const int lane_width = l.narrow ? 1 : width_;
  // Does not throw: the lanes of width_ were started by the load, those of width 1 by
  // ensure_narrow() before narrow_ok could be set.
  if (l.serial) {  // the rest follow one by one (StreamRun::hand_off)
    sched.submit(lane_width, in.runs.front().get());
  } else {
    for (auto& r : in.runs) sched.submit(lane_width, r.get());  // the queue's lock publishes the state
  }
  return Status::Ok();
}

}  // namespace ge
