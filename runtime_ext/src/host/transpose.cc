// 4-byte transposes in 16 x 16 tiles (see transpose.h).
//
// A tile: 16 rows of 16 elements loaded into zmm registers, transposed in registers in four
// rounds (32-bit, 64-bit and two 128-bit lane shuffles: 64 shuffles per 256 elements), and
// stored as 16 rows of the destination. Tiles cut by the matrix's edge are loaded and
// stored under masks (and rows past the edge read as zeros), so any shape takes the same
// path. Work is split by bands of 16 source rows (over every matrix of the batch), so a
// thread writes whole destination columns of its own.
#include "transpose.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

namespace ge::transpose {

#pragma GCC push_options
#pragma GCC target("avx512f")

namespace {

// Elements below which a call runs on the caller's thread only.
constexpr int64_t kParallelElements = 1 << 16;

inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {  // 32-bit interleave of row pairs
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // 64-bit interleave
    for (int j = 0; j < 2; ++j) {
      r[i + j] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
      r[i + j + 2] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + j]), _mm512_castps_pd(t[i + j + 2])));
    }
  }
  for (int i = 0; i < 16; i += 8) {  // 128-bit lanes: pairs four rows apart
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_f32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {  // 128-bit lanes: pairs eight rows apart
    r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xdd);
  }
}

// The register transpose leaves destination row k (source column k) in r[kPerm[k]]: the
// 64-bit round swaps the middle pair of every four.
constexpr int kPerm[16] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};

// One band: source rows [r0, r0 + nr) of one matrix, every column.
void band(const float* src, float* dst, int64_t rows, int64_t cols, int64_t r0, int64_t nr) {
  const __mmask16 row_mask = static_cast<__mmask16>((1u << nr) - 1);
  __m512 r[16];
  for (int64_t c0 = 0; c0 < cols; c0 += 16) {
    const int64_t nc = std::min<int64_t>(16, cols - c0);
    const __mmask16 col_mask = static_cast<__mmask16>((1u << nc) - 1);
    const float* s = src + r0 * cols + c0;
    for (int i = 0; i < 16; ++i) {
      r[i] = i < nr ? _mm512_maskz_loadu_ps(col_mask, s + i * cols) : _mm512_setzero_ps();
    }
    transpose16(r);
    float* d = dst + c0 * rows + r0;
    if (nr == 16) {
      for (int k = 0; k < nc; ++k) _mm512_storeu_ps(d + k * rows, r[kPerm[k]]);
    } else {
      for (int k = 0; k < nc; ++k) _mm512_mask_storeu_ps(d + k * rows, row_mask, r[kPerm[k]]);
    }
  }
}

}  // namespace

void batched_4byte(const void* src, void* dst, int64_t batch, int64_t rows, int64_t cols, int threads) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return;
  const float* s = static_cast<const float*>(src);
  float* d = static_cast<float*>(dst);
  const int64_t bands_per = (rows + 15) / 16, total = batch * bands_per, size = rows * cols;
  auto run = [&](int64_t t) {
    const int64_t b = t / bands_per, r0 = (t % bands_per) * 16;
    band(s + b * size, d + b * size, rows, cols, r0, std::min<int64_t>(16, rows - r0));
  };
  const int nt = static_cast<int>(std::min<int64_t>(std::max(1, threads), total));
  if (nt <= 1 || batch * size < kParallelElements) {
    for (int64_t t = 0; t < total; ++t) run(t);
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t t = 0; t < total; ++t) run(t);
}

#pragma GCC pop_options

}  // namespace ge::transpose
