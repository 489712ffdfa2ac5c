// KernelSetChoice: which of a model's two kernel sets a launch alone runs — the team of
// `width` threads ("wide") or one thread ("narrow") — from the times of recent launches.
// A program of several one-thread streams (a batch split per core) uses it the same way
// for its streams at once ("wide") or one after another ("narrow": Model::has_serial_).
//
// An OpenMP team's barrier waits for its slowest thread: when other processes hold the
// cores, a descheduled helper costs each parallel region a timeslice (hf_mobilenet_v2 at
// batch 1 with two busy processes: p50 0.6 ms, p90 7-13 ms, p99 13-270 ms on the team of
// two; p90 0.85 ms single-threaded). So each set's launch times are kept and the faster one
// runs; every probe_every() launches the other set runs to refresh its time (the interval
// doubles, up to kProbeMax, while the choice holds, and drops back when it changes). A
// probe is two launches of the other set, the first not timed: after a long streak on one
// set the other's first launch pays for waking what the streak left idle (the OpenMP team,
// cold caches), and timed alone it always looked slower (byte_cnn and hf_llama ran the
// narrow set on 96-100% of launches on a quiet machine). The first launch back on a set
// after the other ran is untimed for the same reason: at start the team's first timed
// launch came right after the narrow set's probe, and one slow one (efficientnet_b0 at
// batch 1: the team ~7 ms once warm, 40-70 ms on that launch, one thread 13-15 ms) made the
// single thread look faster; the team's next probe was 16 launches and 32 times that slow
// launch later, past bench-zoo's whole latency round (p50 13.2 ms against ONNX Runtime's 7.2).
//
// A set's time is the median of its last kWindow launches, not a moving average: one
// launch that a passing process stretched (a 35 ms ResNet-50 launch whose helper lost a few
// timeslices: 300 ms) moved an average with weight 1/8 past the narrow set's 60 ms, and
// the model then ran on one thread until the next probe of the team, at least kProbeMin
// launches and kProbeSpacing times two team launches at that inflated time later (over 2 s:
// longer than a benchmark's whole latency run). A load that stays moves the median within
// half a window.
//
// Pure bookkeeping: no clock, no lock (Model holds its mode mutex around every call).
#pragma once

#include <cstdint>

namespace ge {

// A probe every kProbeMin launches at first; the interval doubles up to kProbeMax while the
// choice holds (on a quiet machine ~40 narrow launches in the first ~2000, then two in 1024).
constexpr uint32_t kProbeMin = 16;
constexpr uint32_t kProbeMax = 1024;
// ... and only once kProbeSpacing times the probe's own cost (two launches of the other set,
// at its last time) has passed since the last probe began, so probes take at most ~1/16 of
// the time. Counted in launches alone, a loaded machine's probes of the team of two (200 ms
// a launch beside two compiling processes, against 0.3 ms for the narrow set) took 1.7 s of
// a 2 s stretch of a small decoder's requests.
constexpr uint64_t kProbeSpacing = 16;

class KernelSetChoice {
 public:
  static constexpr int kWindow = 5;  // launches per set whose median is its time

  // What one launch alone runs: the narrow set or not, and whether it is a probe's untimed
  // warm-up or its timed launch.
  struct Pick {
    bool narrow = false;
    bool warmup = false;
    bool probe = false;
  };

  // Decides the next launch alone; `now_ns` is a steady clock's time (probe spacing).
  Pick pick(uint64_t now_ns);
  // Records a launch alone that ran `p` and took `took_ns` per iteration. The model's first
  // recorded launch is not a set's time (it paid for first touches; an estimate 10-50 times
  // too slow kept the spaced probes of its set away for good), nor is a probe's warm-up.
  void record(const Pick& p, uint64_t took_ns);

  // A set's current time (the median of its window); 0 until measured.
  uint64_t time_ns(bool narrow) const { return (narrow ? narrow_ : wide_).median(); }
  bool prefers_narrow() const;
  uint32_t probe_every() const { return probe_every_; }
  // The last pick was a probe's warm-up (its timed launch comes next), not the untimed
  // first launch back on a set.
  bool probing() const { return probe_next_; }

 private:
  // The last kWindow launch times of one set.
  struct Times {
    uint64_t ns[kWindow] = {};
    int count = 0;
    int next = 0;
    void add(uint64_t t);
    void reset(uint64_t t);
    uint64_t median() const;  // the lower middle of an even count; 0 when empty
  };

  Pick choose(uint64_t now_ns);

  Times wide_;
  Times narrow_;
  bool last_narrow_ = false;  // the last launch alone ran the narrow set
  bool warm_ = false;
  bool probe_next_ = false;  // the warm-up ran; the next launch alone is timed
  uint32_t since_probe_ = 0;
  uint32_t probe_every_ = kProbeMin;
  uint64_t last_probe_ns_ = 0;  // when the last probe's warm-up started
};

}  // namespace ge
