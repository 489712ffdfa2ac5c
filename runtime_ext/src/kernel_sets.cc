#include "kernel_sets.h"

#include <algorithm>

namespace ge {

void KernelSetChoice::Times::add(uint64_t t) {
  ns[next] = t;
  next = (next + 1) % kWindow;
  count = std::min(count + 1, kWindow);
}

void KernelSetChoice::Times::reset(uint64_t t) {
  count = 0;
  next = 0;
  add(t);
}

uint64_t KernelSetChoice::Times::median() const {
  if (count == 0) return 0;
  uint64_t sorted[kWindow];
  std::copy(ns, ns + count, sorted);
  std::sort(sorted, sorted + count);
  return sorted[(count - 1) / 2];
}

bool KernelSetChoice::prefers_narrow() const {
  const uint64_t n = narrow_.median(), w = wide_.median();
  return n != 0 && w != 0 && n < w;
}

KernelSetChoice::Pick KernelSetChoice::pick(uint64_t now_ns) {
  const Pick p = choose(now_ns);
  last_narrow_ = p.narrow;
  return p;
}

KernelSetChoice::Pick KernelSetChoice::choose(uint64_t now_ns) {
  const bool prefer = prefers_narrow();
  if (probe_next_) {  // the warm-up ran on the last launch alone: this one is timed
    probe_next_ = false;
    return {!prefer, false, true};
  }
  // The narrow set's first run is on the second launch (a warm-up; the third is timed):
  // until then a machine whose cores are taken pays for every wide launch. Later probes
  // also wait until kProbeSpacing times their cost has passed since the last one.
  const uint64_t probed = time_ns(!prefer);  // a probe runs it twice
  if (warm_ && ((++since_probe_ >= probe_every_ && now_ns - last_probe_ns_ >= kProbeSpacing * 2 * probed) ||
                narrow_.count == 0)) {
    since_probe_ = 0;
    last_probe_ns_ = now_ns;
    probe_next_ = true;
    return {!prefer, true, false};
  }
  // The first launch back on a set after the other one ran (after a probe, or on the switch
  // a probe decided) pays for waking it as a probe's first launch does: not its time.
  // (Nothing is preferred before the first launch, which ran the wide set.)
  return {prefer, prefer != last_narrow_, false};
}

void KernelSetChoice::record(const Pick& p, uint64_t took_ns) {
  if (p.warmup) return;  // paid for waking the other set: not its time
  if (!warm_) {
    warm_ = true;
    return;
  }
  const bool before = prefers_narrow();
  Times& mine = p.narrow ? narrow_ : wide_;
  const uint64_t other = time_ns(!p.narrow);
  // One probe after a long gap: a fast one switches at once (the set's older times are
  // from before the machine changed); a slow one is one more sample.
  if (p.probe && other != 0 && took_ns < other) {
    mine.reset(took_ns);
  } else {
    mine.add(took_ns);
  }
  if (p.probe) {
    const bool after = prefers_narrow();
    probe_every_ = after == before ? std::min(probe_every_ * 2, kProbeMax) : kProbeMin;
  }
}

}  // namespace ge
