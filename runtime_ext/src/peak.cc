// FMA peak measurement (see peak.h).
//
// Each thread keeps 12 accumulators: FMA latency (4 cycles) times the issue rate (two a
// cycle on two pipes) is 8 independent chains at least; 12 leaves room on cores with
// longer latency. The loop runs a fixed number of steps per timing check, so the check's
// cost is noise.
#include "peak.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "device.h"

namespace ge {

namespace {

constexpr int kChains = 12;
constexpr long kStepsPerCheck = 1 << 16;

using Clock = std::chrono::steady_clock;

// Every kernel returns the FLOPs it ran and a value that depends on every chain (kept
// alive so that the compiler cannot drop the loop).

__attribute__((target("avx512f,fma"))) double run_avx512(double seconds, float* sink) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  long steps = 0;
  do {
    for (long s = 0; s < kStepsPerCheck; ++s) {
#pragma GCC unroll 12
      for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    }
    steps += kStepsPerCheck;
  } while (Clock::now() < end);
  __m512 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, acc[i]);
  *sink = _mm512_reduce_add_ps(sum);
  return static_cast<double>(steps) * kChains * 16 * 2;
}

__attribute__((target("avx2,fma"))) double run_avx2(double seconds, float* sink) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  long steps = 0;
  do {
    for (long s = 0; s < kStepsPerCheck; ++s) {
#pragma GCC unroll 12
      for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    }
    steps += kStepsPerCheck;
  } while (Clock::now() < end);
  alignas(32) float lanes[8];
  __m256 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  _mm256_store_ps(lanes, sum);
  *sink = lanes[0] + lanes[7];
  return static_cast<double>(steps) * kChains * 8 * 2;
}

double run_scalar(double seconds, float* sink) {
  float acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = static_cast<float>(i);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  long steps = 0;
  do {
    for (long s = 0; s < kStepsPerCheck; ++s) {
      for (float& x : acc) x = x * 0.999999f + 1e-7f;
    }
    steps += kStepsPerCheck;
  } while (Clock::now() < end);
  float sum = 0;
  for (float x : acc) sum += x;
  *sink = sum;
  return static_cast<double>(steps) * kChains * 2;
}

double run_widest(double seconds, float* sink) {
  if (cpu_has_avx512()) return run_avx512(seconds, sink);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return run_avx2(seconds, sink);
  return run_scalar(seconds, sink);
}

}  // namespace

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
