// 4-byte transposes in 16 x 16 tiles (see transpose.h).
//
// A tile: 16 rows of 16 elements loaded into zmm registers, transposed in registers in four
// rounds (32-bit, 64-bit and two 128-bit lane shuffles: 64 shuffles per 256 elements), and
// stored as 16 rows of the destination. Tiles cut by the matrix's edge are loaded and
// stored under masks (and rows past the edge read as zeros), so any shape takes the same
// path. Work is split by bands of 16 source rows (over every matrix of the batch), so a
// thread writes whole destination columns of its own.
//
// A side of 2..8 (an image's 3 channels into NHWC, a 2-channel map back to NCHW) wastes most
// of a tile: 16 x 16 shuffled for 16 x 3 elements, under 16 masked stores (10 us for a
// 3 x 64 x 64 image). There, 16 pixels are R whole vectors on either side (R planes of 16,
// or 16 pixels of R interleaved) and each output vector is put together from the R input
// vectors by ceil(R / 2) two-source permutes, blended under lane masks.
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

// Work items 0..total-1 of a call moving `elements`: on the caller's thread, or split over
// a team of at most `threads` when the call is large.
template <typename F>
void for_items(int64_t total, int64_t elements, int threads, const F& run) {
  const int nt = static_cast<int>(std::min<int64_t>(std::max(1, threads), total));
  if (nt <= 1 || elements < kParallelElements) {
    for (int64_t t = 0; t < total; ++t) run(t);
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t t = 0; t < total; ++t) run(t);
}

// The largest side taken by the small-side path (above it, a tile's 16 rows are half used).
constexpr int kMaxSmall = 8;

// For R in 2..kMaxSmall: the permutes that make output vector j of a group of 16 pixels
// from the group's R input vectors, pair k = (input 2k, input 2k + 1): `idx[j][k]` selects
// lanes (16 and up: the pair's second vector), `mask[j][k]` says which output lanes take
// that pair's permute. `interleave` (planes in, pixels of R out) and the reverse.
struct SmallTables {
  int32_t idx[2][kMaxSmall + 1][kMaxSmall][kMaxSmall / 2][16];
  __mmask16 mask[2][kMaxSmall + 1][kMaxSmall][kMaxSmall / 2];
};

const SmallTables& small_tables() {
  static const SmallTables tables = [] {
    SmallTables t{};
    for (int dir = 0; dir < 2; ++dir) {
      for (int r = 2; r <= kMaxSmall; ++r) {
        for (int j = 0; j < r; ++j) {
          for (int l = 0; l < 16; ++l) {
            int src, lane;
            if (dir == 0) {  // interleave: output j lane l is pixel g / r of plane g % r
              const int g = 16 * j + l;
              src = g % r;
              lane = g / r;
            } else {  // deinterleave: output plane j, pixel l is element l * r + j of the group
              const int g = l * r + j;
              src = g / 16;
              lane = g % 16;
            }
            t.idx[dir][r][j][src / 2][l] = lane + 16 * (src % 2);
            t.mask[dir][r][j][src / 2] |= static_cast<__mmask16>(1u << l);
          }
        }
      }
    }
    return t;
  }();
  return tables;
}

// Pixels [p0, p1) of one matrix: planes [R][n] -> pixels [n][R] (DIR 0), or back (DIR 1).
// R and DIR are template parameters so that the permutes' indices and masks stay in
// registers across the groups.
template <int R, int DIR>
void small_side(const float* src, float* dst, int64_t n, int64_t p0, int64_t p1) {
  constexpr int kPairs = (R + 1) / 2;
  const SmallTables& t = small_tables();
  __m512i idx[R][kPairs];
  __mmask16 mask[R][kPairs];
  for (int j = 0; j < R; ++j) {
    for (int k = 0; k < kPairs; ++k) {
      idx[j][k] = _mm512_loadu_si512(t.idx[DIR][R][j][k]);
      mask[j][k] = t.mask[DIR][R][j][k];
    }
  }
  __m512 in[R];
  int64_t p = p0;
  for (; p + 16 <= p1; p += 16) {
    for (int i = 0; i < R; ++i) in[i] = _mm512_loadu_ps(DIR == 0 ? src + i * n + p : src + p * R + 16 * i);
    for (int j = 0; j < R; ++j) {
      __m512 v = _mm512_setzero_ps();
      for (int k = 0; k < kPairs; ++k) {
        const __m512 b = 2 * k + 1 < R ? in[2 * k + 1] : in[2 * k];  // an odd R's last: one source
        v = _mm512_mask_mov_ps(v, mask[j][k], _mm512_permutex2var_ps(in[2 * k], idx[j][k], b));
      }
      _mm512_storeu_ps(DIR == 0 ? dst + p * R + 16 * j : dst + j * n + p, v);
    }
  }
  for (; p < p1; ++p) {
    for (int i = 0; i < R; ++i) {
      if (DIR == 0) {
        dst[p * R + i] = src[i * n + p];
      } else {
        dst[i * n + p] = src[p * R + i];
      }
    }
  }
}

template <int DIR>
void small_side(const float* src, float* dst, int r, int64_t n, int64_t p0, int64_t p1) {
  switch (r) {
    case 2: return small_side<2, DIR>(src, dst, n, p0, p1);
    case 3: return small_side<3, DIR>(src, dst, n, p0, p1);
    case 4: return small_side<4, DIR>(src, dst, n, p0, p1);
    case 5: return small_side<5, DIR>(src, dst, n, p0, p1);
    case 6: return small_side<6, DIR>(src, dst, n, p0, p1);
    case 7: return small_side<7, DIR>(src, dst, n, p0, p1);
    default: return small_side<8, DIR>(src, dst, n, p0, p1);
  }
}

// The batch's matrices with a side of 2..kMaxSmall, split in runs of whole groups.
void small_batched(const float* s, float* d, int64_t batch, int64_t rows, int64_t cols, int threads) {
  const int dir = rows <= kMaxSmall ? 0 : 1;
  const int r = static_cast<int>(dir == 0 ? rows : cols);
  const int64_t n = dir == 0 ? cols : rows, size = rows * cols;
  constexpr int64_t kChunk = 64 * 16;  // pixels a work item
  const int64_t chunks = (n + kChunk - 1) / kChunk, total = batch * chunks;
  auto run = [&](int64_t t) {
    const int64_t b = t / chunks, p0 = (t % chunks) * kChunk;
    const int64_t p1 = std::min(n, p0 + kChunk);
    if (dir == 0) {
      small_side<0>(s + b * size, d + b * size, r, n, p0, p1);
    } else {
      small_side<1>(s + b * size, d + b * size, r, n, p0, p1);
    }
  };
  for_items(total, batch * size, threads, run);
}

}  // namespace

void batched_4byte(const void* src, void* dst, int64_t batch, int64_t rows, int64_t cols, int threads) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return;
  const float* s = static_cast<const float*>(src);
  float* d = static_cast<float*>(dst);
  if ((rows >= 2 && rows <= kMaxSmall) || (cols >= 2 && cols <= kMaxSmall)) {
    small_batched(s, d, batch, rows, cols, threads);
    return;
  }
  const int64_t bands_per = (rows + 15) / 16, total = batch * bands_per, size = rows * cols;
  auto run = [&](int64_t t) {
    const int64_t b = t / bands_per, r0 = (t % bands_per) * 16;
    band(s + b * size, d + b * size, rows, cols, r0, std::min<int64_t>(16, rows - r0));
  };
  for_items(total, batch * size, threads, run);
}

#pragma GCC pop_options

}  // namespace ge::transpose
