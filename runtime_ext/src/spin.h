// Bounded spinning before blocking. On virtual machines waking a sleeping thread costs
// tens of microseconds, more than most kernels of a small model, so the runtime's waits
// poll briefly before they fall back to a condition variable.
#pragma once

#include <sched.h>

#include <chrono>

namespace ge {

// Spin budgets: long enough to cover the gap between the kernels of a run and between
// back-to-back runs, short enough not to matter to a long wait.
constexpr std::chrono::microseconds kSpinWork{200};  // stream worker waiting for tasks
constexpr std::chrono::microseconds kSpinWait{100};  // execute() / event waits

// Returns true as soon as ready() holds, false once `budget` has passed. Non-blocking
// in the sense that it never sleeps; burns one core for at most `budget`.
template <class Pred>
bool spin_until(Pred ready, std::chrono::microseconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (unsigned i = 0;; ++i) {
    if (ready()) return true;
    // Yield rather than pause: when the OpenMP team of a kernel needs this core, the
    // spinning thread must not hold it.
    sched_yield();
    if ((i & 7) == 7 && std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

}  // namespace ge
