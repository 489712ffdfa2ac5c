// FMA peak measurement (see peak.h).
//
// Each thread keeps 12 accumulators: FMA latency (4 cycles) times the issue rate (two a
// cycle on two pipes) is 8 independent chains at least; 12 leaves room on cores with
// longer latency. The loop runs a fixed number of steps per timing check, so the check's
// cost is noise.
#include "peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "device.h"

namespace ge {

namespace {

constexpr int kChains = 12;
constexpr long kStepsPerCheck = 1 << 16;

using Clock = std::chrono::steady_clock;

// The loop for vectors of W floats (GCC vector extensions; `acc * a + b` is contracted to
// one FMA where the caller's target has it). Inlined into a function compiled for the ISA,
// so one body serves every width. Returns the FLOPs it ran; `sink` gets a value that
// depends on every chain, so that the compiler cannot drop the loop.
template <int W>
[[gnu::always_inline]] inline double chains(double seconds, float* sink) {
  typedef float vec __attribute__((vector_size(W * sizeof(float))));
  vec acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = vec{} + static_cast<float>(i);
  const vec a = vec{} + 0.999999f, b = vec{} + 1e-7f;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  long steps = 0;
  do {
    for (long s = 0; s < kStepsPerCheck; ++s) {
#pragma GCC unroll 12
      for (int i = 0; i < kChains; ++i) acc[i] = acc[i] * a + b;
    }
    steps += kStepsPerCheck;
  } while (Clock::now() < end);
  vec sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum += acc[i];
  float lanes[W], total = 0;
  std::memcpy(lanes, &sum, sizeof(lanes));
  for (float x : lanes) total += x;
  *sink = total;
  return static_cast<double>(steps) * kChains * W * 2;
}

__attribute__((target("avx512f,fma"))) double run_avx512(double seconds, float* sink) {
  return chains<16>(seconds, sink);
}

__attribute__((target("avx2,fma"))) double run_avx2(double seconds, float* sink) {
  return chains<8>(seconds, sink);
}

double run_scalar(double seconds, float* sink) { return chains<1>(seconds, sink); }

double run_widest(double seconds, float* sink) {
  if (cpu_has_avx512()) return run_avx512(seconds, sink);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return run_avx2(seconds, sink);
  return run_scalar(seconds, sink);
}

// Lanes a second of `run` on this thread, over one timing check (~0.2-0.5 ms).
double lane_rate(double (*run)(double, float*), float* sink) {
  const auto start = Clock::now();
  const double flops = run(1e-4, sink);
  return flops / std::max(1e-9, std::chrono::duration<double>(Clock::now() - start).count());
}

}  // namespace

double narrow_fma_gain() {
  static const double gain = [] {
    // the hardware's answer, cached for the process: not whether the AVX-512 kernels are
    // allowed at the first call (set_avx512_allowed), which can change after it
    if (!cpu_supports_avx512()) return 1.0;
    float sink = 0;
    lane_rate(run_avx512, &sink);  // the 512-bit units power up on first use
    double wide = 0, narrow = 0;
    for (int i = 0; i < 2; ++i) {  // the best of two each
      wide = std::max(wide, lane_rate(run_avx512, &sink));
      narrow = std::max(narrow, lane_rate(run_avx2, &sink));
    }
    volatile float keep = sink;
    (void)keep;
    return 2 * narrow / wide;  // an 8-wide FMA is half the lanes
  }();
  return gain;
}

double fma_peak_gflops(int threads, double seconds) {
  threads = std::max(1, threads);
  seconds = std::clamp(seconds, 1e-3, 60.0);
  std::vector<double> flops(static_cast<size_t>(threads), 0.0);
  std::vector<float> sinks(static_cast<size_t>(threads), 0.f);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      flops[static_cast<size_t>(t)] = run_widest(seconds, &sinks[static_cast<size_t>(t)]);
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const auto start = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : pool) th.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  double total = 0;
  for (double f : flops) total += f;
  volatile float keep = 0;
  for (float s : sinks) keep = keep + s;
  (void)keep;
  return total / wall / 1e9;
}

}  // namespace ge
