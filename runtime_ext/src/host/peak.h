// The host's arithmetic ceiling: fused multiply-adds per second, measured.
//
// Benchmarks report how close a model's run comes to what the cores can do at all (the
// fraction of this peak its convolutions and matrix products reach), so a ratio against
// another runtime can be read against the machine's limit.
#pragma once

namespace ge {

// Blocks for about `seconds`: `threads` threads (>= 1) each run independent chains of
// float32 FMAs, in the widest vectors the CPU has (AVX-512, else AVX2, else scalar), all
// at once. Returns their summed rate in GFLOP/s (an FMA counts as two). Does not use the
// device's lanes or its thread budget: call it with nothing else running.
double fma_peak_gflops(int threads, double seconds);

// How many 8-wide float32 FMAs one thread completes in the time of one 16-wide FMA: about 2
// where a core issues two 8-wide ones in the cycle it issues one 16-wide one (one 512-bit
// FMA unit; this machine: 1.998), about 1 where it has two. Kernels whose channel count leaves
// a 16-wide vector mostly empty choose their width by it. Measured once per process on the
// calling thread (about 1 ms); 1 on a CPU without AVX-512F.
double narrow_fma_gain();

}  // namespace ge
