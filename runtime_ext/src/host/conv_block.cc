// The inverted-residual block kernel (see conv_block.h).
//
// Three stages per band of output rows: the expand GEMM writes the expanded rows the band
// needs into a ring of rows (each row computed once; a stride-1 band reuses the two rows
// above it from the previous band), the depthwise stage reads the ring and writes the band
// into a small buffer, the project GEMM reads that buffer and writes the output rows. The
// ring and the buffer are sized to stay in the core's L2 (1 MiB here), so the widest tensor
// of the block never goes to memory, and a block is one fork/join instead of two or three.
//
// Two ways to split a sample over the team:
// - by output rows (large images): each thread runs its own rows with its own ring; the
//   rows next to a split are expanded by both threads (one or two rows in 28+);
// - by channels (small images, where that overlap would be 15-30% of the expand): each
//   thread expands and filters its share of the expanded channels for the whole image (the
//   depthwise stage is per channel) and projects them: the projection's K goes in two fixed
//   groups of channels, each thread (of two) computing its group's part of every output,
//   and after one barrier the parts are added in group order, by pixels. No thread reads
//   another's depthwise output (with the projection split by pixels every run moved those
//   lines between the cores: ~15-45 us over MobileNetV2's 11 such blocks in the network).
//   One sample of a small image always runs this way, on one thread too (the groups one
//   after the other), so the sums never depend on the team's size.
// With more samples, each thread runs whole samples, or each sample is split by rows.
// Results do not depend on the number of threads (under concurrent callers a model runs on
// one-thread lanes and must give the bits it gives alone).
//
// GEMM tiles: MR pixels x NR blocks of 16 output channels in zmm accumulators (6x4, 8x3,
// 12x2, 16x1), one broadcast of the input per pixel and k, weights packed per block as
// [K][16]. Bias, residual and Clip are applied in the tile's epilogue.
#include "conv_block.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "device.h"

namespace ge::block {

bool available() {
  static const bool vl = __builtin_cpu_supports("avx512vl");
  return vl && cpu_has_avx512();
}

// Everything below runs only where available() holds (ConvKernel checks it first).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,fma")

namespace {

constexpr int64_t kBlock = 16;
constexpr size_t kL2Budget = 448 << 10;  // bytes of ring + band buffer per thread
// The channel split's projection sums its K in this many groups, in order, whatever the
// team's size (see Block::run_channels).
constexpr int64_t kGroups = 2;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// A GEMM operand or result: element (m, block j, lane l) at p[j * cs + m * ws + l].
struct Mat {
  const float* p;
  int64_t cs, ws;
};

struct Epi {
  const float* bias;  // [blocks * 16] from the tile's first block
  Mat r;              // residual (r.p null: none)
  Clip act;
  __mmask16 keep;     // lanes of the last block that hold channels (the rest are written 0)
  __mmask16 store;    // lanes of the last block to write (keep, or all of a padded block)
  // A tile with PF set prefetches two lines from pf per k step while pf < pf_end: memory
  // the next stage will read, streamed in under the FMAs (see Head).
  const char* pf = nullptr;
  const char* pf_end = nullptr;
};

constexpr int64_t kPrefetchPerK = 2 * 64;  // bytes a PF tile prefetches per k step

// Pixels per tile for NR blocks of output channels: 24 accumulators (16 for one block).
constexpr int mr_for(int nr) { return nr == 4 ? 6 : nr == 3 ? 8 : nr == 2 ? 12 : 16; }

// C[MR x NR blocks] = A[MR x K] * B[K x NR blocks] with the epilogue. A is blocked with
// pixels 16 floats apart (a.ws == 16, so every address in the k loop is a constant offset
// from one register: GCC spilled the rows' pointers with a run-time stride). B block j at
// b + j * b_cs, row k at + k * 16; both are stored in whole blocks of 16 k, the last one
// zero-padded, which a K that is not a multiple of 16 stops short of (24 input channels:
// a quarter fewer FMAs than running the padded 32). `last_block`: the tile's
// last block is the matrix's last.
//
// HALF: the tile's last block holds at most 8 channels (the matrix's last, e.g. 24 = 16 +
// 8): it is computed with 256-bit FMAs, half the cost of a 512-bit one on this core (two
// 256-bit pipes), in the low half of its accumulators.
template <int MR, int NR, bool HALF = false, bool PF = false>
void tile(const Mat& a, int64_t k_dim, const float* b, int64_t b_cs, float* c, int64_t c_cs, int64_t c_ws,
          const Epi& e, bool last_block) {
  __m512 acc[MR][NR];
  const char* pf = e.pf;
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) {
    const __m512 bias = _mm512_load_ps(e.bias + j * kBlock);
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) acc[m][j] = bias;
  }
  const float* ak = a.p;
  const float* bk = b;
  for (int64_t kb = 0; kb < k_dim; kb += kBlock, ak += a.cs, bk += kBlock * kBlock) {
    const int kn = static_cast<int>(std::min<int64_t>(kBlock, k_dim - kb));
#pragma GCC unroll 4
    for (int kk = 0; kk < kn; ++kk) {
      if constexpr (PF) {
        if (pf < e.pf_end) {
          _mm_prefetch(pf, _MM_HINT_T0);
          _mm_prefetch(pf + 64, _MM_HINT_T0);
          pf += kPrefetchPerK;
        }
      }
      __m512 bv[NR];
#pragma GCC unroll 4
      for (int j = 0; j < NR; ++j) {
        if (HALF && j == NR - 1) {
          bv[j] = _mm512_castps256_ps512(_mm256_load_ps(bk + j * b_cs + kk * kBlock));
        } else {
          bv[j] = _mm512_load_ps(bk + j * b_cs + kk * kBlock);
        }
      }
#pragma GCC unroll 16
      for (int m = 0; m < MR; ++m) {
        const __m512 av = _mm512_set1_ps(ak[m * kBlock + kk]);
#pragma GCC unroll 4
        for (int j = 0; j < NR; ++j) {
          if (HALF && j == NR - 1) {
            acc[m][j] = _mm512_castps256_ps512(_mm256_fmadd_ps(
                _mm512_castps512_ps256(av), _mm512_castps512_ps256(bv[j]), _mm512_castps512_ps256(acc[m][j])));
          } else {
            acc[m][j] = _mm512_fmadd_ps(av, bv[j], acc[m][j]);
          }
        }
      }
    }
  }
  const __m512 lo = _mm512_set1_ps(e.act.lo), hi = _mm512_set1_ps(e.act.hi);
#pragma GCC unroll 4
  for (int j = 0; j < NR; ++j) {
    const bool tail = last_block && j == NR - 1;
    const __mmask16 keep = tail ? e.keep : static_cast<__mmask16>(0xffff);
    const __mmask16 store = tail ? e.store : static_cast<__mmask16>(0xffff);
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      __m512 v = acc[m][j];
      if (HALF && j == NR - 1) v = _mm512_zextps256_ps512(_mm512_castps512_ps256(v));
      if (e.r.p) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(keep, e.r.p + j * e.r.cs + m * e.r.ws));
      if (e.act.on) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      if (tail) v = _mm512_maskz_mov_ps(keep, v);
      _mm512_mask_storeu_ps(c + j * c_cs + m * c_ws, store, v);
    }
  }
}

// A tile of mr < MR pixels (the end of a run): the same kernel with fewer rows.
template <int NR, bool HALF, bool PF, int M>
void tile_rows(int mr, const Mat& a, int64_t k_dim, const float* b, int64_t b_cs, float* c, int64_t c_cs,
               int64_t c_ws, const Epi& e, bool last_block) {
  if constexpr (M > 0) {
    if (mr == M) {
      tile<M, NR, HALF, PF>(a, k_dim, b, b_cs, c, c_cs, c_ws, e, last_block);
    } else {
      tile_rows<NR, HALF, PF, M - 1>(mr, a, k_dim, b, b_cs, c, c_cs, c_ws, e, last_block);
    }
  }
}

// One panel of NR blocks over pixels [0, m_dim). With PF, tile i prefetches from
// e.pf + i * k_dim * kPrefetchPerK.
template <int NR, bool HALF = false, bool PF = false>
void panel(const Mat& a, int64_t m_dim, int64_t k_dim, const float* b, int64_t b_cs, float* c, int64_t c_cs,
           int64_t c_ws, Epi e, bool last_block) {
  constexpr int MR = mr_for(NR);
  int64_t m = 0;
  for (; m < m_dim; m += MR) {
    Epi em = e;
    if (em.r.p) em.r.p += m * e.r.ws;
    if (PF) em.pf += m / MR * k_dim * kPrefetchPerK;
    const Mat am{a.p + m * kBlock, a.cs, kBlock};
    if (m + MR <= m_dim) {
      tile<MR, NR, HALF, PF>(am, k_dim, b, b_cs, c + m * c_ws, c_cs, c_ws, em, last_block);
    } else {
      tile_rows<NR, HALF, PF, MR - 1>(static_cast<int>(m_dim - m), am, k_dim, b, b_cs, c + m * c_ws, c_cs, c_ws, em,
                                      last_block);
    }
  }
}

// C[pixels, blocks j0..j1) = A * B (+ epilogue). B holds every block as [K][16] at
// b + j * b_cs; `nblocks` is the matrix's total, for the last block's mask.
struct Tail {
  __mmask16 keep, store;  // see Epi
};
constexpr Tail kWhole{static_cast<__mmask16>(0xffff), static_cast<__mmask16>(0xffff)};

void gemm(const Mat& a, int64_t m_dim, int64_t k_dim, const float* b, int64_t b_cs, const float* bias, float* c,
          int64_t c_cs, int64_t c_ws, const Mat& r, Clip act, Tail tail, int64_t j0, int64_t j1,
          int64_t nblocks) {
  const int64_t n = j1 - j0;
  if (n <= 0 || m_dim <= 0) return;
  const int64_t panels = (n + 3) / 4;
  int64_t j = j0;
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t w = n * (p + 1) / panels - n * p / panels;  // even widths of 1..4 blocks
    Epi e{bias + j * kBlock, r.p ? Mat{r.p + j * r.cs, r.cs, r.ws} : Mat{nullptr, 0, 0}, act, tail.keep,
          tail.store};
    const bool lb = j + w == nblocks;
    const float* bj = b + j * b_cs;
    float* cj = c + j * c_cs;
    if (lb && tail.keep <= 0xff) {  // the last block has at most 8 channels
      switch (w) {
        case 4: panel<4, true>(a, m_dim, k_dim, bj, b_cs, cj, c_cs, c_ws, e, lb); break;
        case 3: panel<3, true>(a, m_dim, k_dim, bj, b_cs, cj, c_cs, c_ws, e, lb); break;
        case 2: panel<2, true>(a, m_dim, k_dim, bj, b_cs, cj, c_cs, c_ws, e, lb); break;
        default: panel<1, true>(a, m_dim, k_dim, bj, b_cs, cj, c_cs, c_ws, e, lb); break;
      }
      j += w;
      continue;
    }
    switch (w) {
      case 4: panel<4>(a, m_dim, k_dim, bj, b_cs, cj, c_cs, c_ws, e, lb); break;
      case 3: panel<3>(a, m_dim, k_dim, bj, b_cs, cj, c_cs, c_ws, e, lb); break;
      case 2: panel<2>(a, m_dim, k_dim, bj, b_cs, cj, c_cs, c_ws, e, lb); break;
      default: panel<1>(a, m_dim, k_dim, bj, b_cs, cj, c_cs, c_ws, e, lb); break;
    }
    j += w;
  }
}

// The expanded rows the depthwise stage reads: row h at base + (h % mod) * hs (mod 0: no
// wrap), channel block cb (counted from the view's first) at + cb * cs, column at + w * ws.
struct Rows {
  const float* base;
  int64_t cs, hs, ws, mod;
  const float* row(int64_t h) const { return base + (mod ? h % mod : h) * hs; }
};

// T outputs of one row of one channel block, from column ow: the nr input rows that exist
// (rows[q], with their three taps taps[q]). Each row's columns are loaded once (T + 2 at
// stride 1, 2T + 1 at stride 2) and the T outputs are T independent FMA chains (one
// output's nine taps in a row are a chain of 4-cycle FMAs: that ran at ~60% of peak).
// LEFT: the first column is the padding left of the image; RIGHT: the last one is the
// padding right of it (never more than one column each side): both known at compile time,
// so a tile has no per-column bounds checks. With the checks (and tiles of 8, 4, 2, 1),
// rows of 7 and 14 pixels, where every tile touches an edge, took 20 and 15 cycles an
// output vector; now 11 and 10 (nine FMAs at one a cycle is the floor).
template <int S, int T, bool LEFT, bool RIGHT>
inline void dw_tile(const float* const* rows, const __m512* const* taps, int nr, int64_t ow, int64_t ws, __m512 bias,
                    bool act, __m512 lo, __m512 hi, float* out) {
  constexpr int C = S == 1 ? T + 2 : 2 * T + 1;
  __m512 acc[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) acc[t] = bias;
  const int64_t first = ow * S - 1;
  for (int q = 0; q < nr; ++q) {
    const float* row = rows[q] + first * ws;
    __m512 col[C];
#pragma GCC unroll 17
    for (int i = 0; i < C; ++i) {
      col[i] = (LEFT && i == 0) || (RIGHT && i == C - 1) ? _mm512_setzero_ps() : _mm512_loadu_ps(row + i * ws);
      // Keep the column in a register: left to itself GCC folds the load into each of the
      // (up to three) FMAs that read it, 2.4x the loads (rows of 56: 12.8 cycles an output,
      // 10.3 with this).
      asm("" : "+v"(col[i]));
    }
    const __m512 k0 = taps[q][0], k1 = taps[q][1], k2 = taps[q][2];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      acc[t] = _mm512_fmadd_ps(col[t * S], k0, acc[t]);
      acc[t] = _mm512_fmadd_ps(col[t * S + 1], k1, acc[t]);
      acc[t] = _mm512_fmadd_ps(col[t * S + 2], k2, acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    if (act) acc[t] = _mm512_min_ps(_mm512_max_ps(acc[t], lo), hi);
    _mm512_store_ps(out + (ow + t) * kBlock, acc[t]);
  }
}

template <int S, bool LEFT, bool RIGHT>
void dw_tile_n(int t, const float* const* rows, const __m512* const* taps, int nr, int64_t ow, int64_t ws,
               __m512 bias, bool act, __m512 lo, __m512 hi, float* out) {
  switch (t) {
    case 1: return dw_tile<S, 1, LEFT, RIGHT>(rows, taps, nr, ow, ws, bias, act, lo, hi, out);
    case 2: return dw_tile<S, 2, LEFT, RIGHT>(rows, taps, nr, ow, ws, bias, act, lo, hi, out);
    case 3: return dw_tile<S, 3, LEFT, RIGHT>(rows, taps, nr, ow, ws, bias, act, lo, hi, out);
    case 4: return dw_tile<S, 4, LEFT, RIGHT>(rows, taps, nr, ow, ws, bias, act, lo, hi, out);
    case 5: return dw_tile<S, 5, LEFT, RIGHT>(rows, taps, nr, ow, ws, bias, act, lo, hi, out);
    case 6: return dw_tile<S, 6, LEFT, RIGHT>(rows, taps, nr, ow, ws, bias, act, lo, hi, out);
    case 7: return dw_tile<S, 7, LEFT, RIGHT>(rows, taps, nr, ow, ws, bias, act, lo, hi, out);
    default: return dw_tile<S, 8, LEFT, RIGHT>(rows, taps, nr, ow, ws, bias, act, lo, hi, out);
  }
}

// How a row of wo outputs is cut into tiles: n tiles of at most 8, as even as the row allows
// (14 = 7 + 7): the first `rem` tiles have base + 1 outputs, the others base.
struct RowTiles {
  int64_t n, base, rem;
  explicit RowTiles(int64_t wo) : n((wo + 7) / 8), base(wo / n), rem(wo % n) {}
};

// One output row.
template <int S>
void dw_row(const float* const* rows, const __m512* const* taps, int nr, int64_t w, const RowTiles& tiles, int64_t ws,
            __m512 bias, bool act, __m512 lo, __m512 hi, float* out) {
  int64_t b = 0;
  for (int64_t i = 0; i < tiles.n; ++i) {
    const int64_t a = b;
    b = a + tiles.base + (i < tiles.rem);
    const int t = static_cast<int>(b - a);
    const bool left = a == 0, right = (S == 1 ? b : 2 * b - 1) >= w;  // the last column read
    if (left && right) {
      dw_tile_n<S, true, true>(t, rows, taps, nr, a, ws, bias, act, lo, hi, out);
    } else if (left) {
      dw_tile_n<S, true, false>(t, rows, taps, nr, a, ws, bias, act, lo, hi, out);
    } else if (right) {
      dw_tile_n<S, false, true>(t, rows, taps, nr, a, ws, bias, act, lo, hi, out);
    } else {
      dw_tile_n<S, false, false>(t, rows, taps, nr, a, ws, bias, act, lo, hi, out);
    }
  }
}

// Depthwise 3x3 (pads 1) of output rows [oh0, oh1) and channel blocks [cb0, cb1) into
// d (block cb at d + cb * d_cs, pixel (oh - oh0) * wo + ow at + pixel * 16). `first` is the
// channel block that e's block 0 holds.
void depthwise(const Rows& e, int64_t first, int64_t h, int64_t w, int64_t stride, int64_t oh0, int64_t oh1,
               int64_t cb0, int64_t cb1, const float* wd, const float* bd, Clip act, float* d, int64_t d_cs) {
  const int64_t wo = (w - 1) / stride + 1;
  const RowTiles tiles(wo);
  const __m512 lo = _mm512_set1_ps(act.lo), hi = _mm512_set1_ps(act.hi);
  for (int64_t cb = cb0; cb < cb1; ++cb) {
    __m512 k[9];
    for (int t = 0; t < 9; ++t) k[t] = _mm512_load_ps(wd + (cb * 9 + t) * kBlock);
    const __m512 bias = _mm512_load_ps(bd + cb * kBlock);
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      const float* rows[3];
      const __m512* taps[3];
      int nr = 0;
      for (int kh = 0; kh < 3; ++kh) {
        const int64_t ih = oh * stride - 1 + kh;
        if (ih < 0 || ih >= h) continue;
        rows[nr] = e.row(ih) + (cb - first) * e.cs;
        taps[nr++] = k + kh * 3;
      }
      float* out = d + cb * d_cs + (oh - oh0) * wo * kBlock;
      if (stride == 1) {
        dw_row<1>(rows, taps, nr, w, tiles, e.ws, bias, act.on, lo, hi, out);
      } else {
        dw_row<2>(rows, taps, nr, w, tiles, e.ws, bias, act.on, lo, hi, out);
      }
    }
  }
}

// Pixels [p0, p1) of an NHWC run of `pixels` pixels starting at `from` (pixel stride ws,
// `channels` floats each) into blocked [channels / 16][pixels][16], zero past the channels.
void pack(const float* from, int64_t ws, int64_t channels, int64_t pixels, int64_t p0, int64_t p1, float* to) {
  const int64_t blocks = (channels + kBlock - 1) / kBlock;
  for (int64_t cb = 0; cb < blocks; ++cb) {
    const int64_t rem = std::min<int64_t>(kBlock, channels - cb * kBlock);
    const __mmask16 m = static_cast<__mmask16>((1u << rem) - 1);
    float* out = to + cb * pixels * kBlock;
    for (int64_t p = p0; p < p1; ++p) {
      _mm512_store_ps(out + p * kBlock, _mm512_maskz_loadu_ps(m, from + p * ws + cb * kBlock));
    }
  }
}

// The output's last block: its channels, and what to write (all 16 lanes of a padded
// blocked tensor, zeros past the channels; only the channels of an NHWC one).
Tail out_tail(int64_t channels, bool full) {
  const int64_t rem = channels % kBlock;
  const __mmask16 keep = rem == 0 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << rem) - 1);
  return Tail{keep, full ? static_cast<__mmask16>(0xffff) : keep};
}

// Lays out N zeroed parts of the given float counts in `store`, each 64-byte aligned.
template <size_t N>
void carve(std::vector<float>* store, const int64_t (&sizes)[N], float* (&parts)[N]) {
  int64_t total = kBlock;  // room to align the start
  for (int64_t n : sizes) total += round_up(n, kBlock);
  store->assign(static_cast<size_t>(total), 0.f);
  float* p = store->data();
  p += (kBlock - (reinterpret_cast<uintptr_t>(p) / sizeof(float)) % kBlock) % kBlock;
  for (size_t i = 0; i < N; ++i) {
    parts[i] = p;
    p += round_up(sizes[i], kBlock);
  }
}

}  // namespace

Block::Block(const Spec& s, const Weights& w) : s_(s) {
  ceb_ = (s.ce + kBlock - 1) / kBlock;
  coutb_ = (s.cout + kBlock - 1) / kBlock;
  cin_k_ = round_up(s.cin, kBlock);
  const int64_t cep = ceb_ * kBlock;
  const int64_t sizes[] = {s.expand ? ceb_ * cin_k_ * kBlock : 0, s.expand ? cep : 0, ceb_ * 9 * kBlock, cep,
                           coutb_ * cep * kBlock, coutb_ * kBlock, coutb_ * kBlock};
  float* parts[7];
  carve(&store_, sizes, parts);
  zero_ = parts[6];
  float* we = parts[0];
  float* be = parts[1];
  float* wd = parts[2];
  float* bd = parts[3];
  float* wp = parts[4];
  float* bp = parts[5];
  for (int64_t c = 0; c < (s.expand ? s.ce : 0); ++c) {
    for (int64_t k = 0; k < s.cin; ++k) we[((c / kBlock) * cin_k_ + k) * kBlock + c % kBlock] = w.we[c * s.cin + k];
    if (w.be) be[c] = w.be[c];
  }
  for (int64_t c = 0; c < s.ce; ++c) {
    for (int t = 0; t < 9; ++t) wd[((c / kBlock) * 9 + t) * kBlock + c % kBlock] = w.wd[c * 9 + t];
    if (w.bd) bd[c] = w.bd[c];
  }
  for (int64_t o = 0; o < s.cout; ++o) {
    for (int64_t c = 0; c < s.ce; ++c) wp[((o / kBlock) * cep + c) * kBlock + o % kBlock] = w.wp[o * s.ce + c];
    if (w.bp) bp[o] = w.bp[o];
  }
  we_ = we, be_ = be, wd_ = wd, bd_ = bd, wp_ = wp, bp_ = bp;
}

int64_t Block::band_rows() const {
  const int64_t wo = s_.wo();
  const int64_t row_bytes = ceb_ * kBlock * static_cast<int64_t>(sizeof(float));
  int64_t band = 1;
  for (int64_t b = 2; b <= s_.ho(); ++b) {
    const int64_t ring = std::min(s_.h, (b - 1) * s_.stride + 3);
    const int64_t bytes = (s_.expand ? ring * s_.w : 0) * row_bytes + b * wo * row_bytes;
    if (bytes > static_cast<int64_t>(kL2Budget)) break;
    band = b;
  }
  return band;
}

// Per thread of a row split: [packed input rows (NHWC input)][ring][band buffer].
size_t Block::rows_scratch_floats() const {
  const int64_t band = band_rows();
  const int64_t ring = s_.expand ? std::min(s_.h, (band - 1) * s_.stride + 3) : 0;
  const int64_t packed = s_.expand && !s_.blocked_in ? ring * s_.w * cin_k_ : 0;
  return static_cast<size_t>(round_up(packed + (ring * s_.w + band * s_.wo()) * ceb_ * kBlock, kBlock));
}

// A channel split: [band buffer of the whole image][packed input][the expanded image][each
// group's partial projection]. Independent of the team's size.
size_t Block::channels_scratch_floats() const {
  const int64_t expanded = s_.expand ? s_.h * s_.w * ceb_ * kBlock : 0;
  const int64_t packed = s_.expand && !s_.blocked_in ? s_.h * s_.w * cin_k_ : 0;
  return static_cast<size_t>(round_up(s_.ho() * s_.wo() * ceb_ * kBlock, kBlock) + round_up(packed, kBlock) +
                             expanded + kGroups * s_.ho() * s_.wo() * coutb_ * kBlock);
}

// One sample of a small image runs split by channels (a row split would expand more than
// ~10% of the rows twice: the rows around each split), on any number of threads.
bool Block::by_channels(int64_t n) const { return n == 1 && s_.ho() < 20 && ceb_ >= kGroups; }

size_t Block::scratch_bytes(int threads) const {
  threads = std::max(1, threads);
  const size_t floats = std::max(threads * rows_scratch_floats(), by_channels(1) ? channels_scratch_floats() : 0);
  return floats * sizeof(float);
}

// Output rows [o0, o1) of one sample on the calling thread, in bands.
void Block::run_rows(const View& x, const View& y, const View& r, int64_t o0, int64_t o1, float* scratch) const {
  const Spec& s = s_;
  const int64_t band = band_rows(), wo = s.wo(), cep = ceb_ * kBlock;
  const int64_t slots = s.expand ? std::min(s.h, (band - 1) * s.stride + 3) : 0;
  float* packed = scratch;
  float* ring = packed + (s.expand && !s.blocked_in ? slots * s.w * cin_k_ : 0);
  float* dbuf = ring + slots * s.w * cep;
  const int64_t ring_cs = slots * s.w * kBlock;
  const Rows e = s.expand ? Rows{ring, ring_cs, s.w * kBlock, kBlock, slots} : Rows{x.base, x.cs, x.hs, x.ws, 0};
  const Tail tail_y = out_tail(s.cout, s.full_out);
  int64_t next = std::max<int64_t>(0, o0 * s.stride - 1);  // next input row to expand
  for (int64_t r0 = o0; r0 < o1; r0 += band) {
    const int64_t r1 = std::min(o1, r0 + band);
    if (s.expand) {
      const int64_t need = std::min(s.h - 1, (r1 - 1) * s.stride + 1);
      while (next <= need) {
        const int64_t slot = next % slots, run = std::min(need - next + 1, slots - slot);
        const int64_t pixels = run * s.w;
        Mat a{x.base + next * x.hs, x.cs, kBlock};
        if (!s.blocked_in) {
          pack(x.base + next * x.hs, x.ws, s.cin, pixels, 0, pixels, packed);
          a = Mat{packed, pixels * kBlock, kBlock};
        }
        gemm(a, pixels, s.cin, we_, cin_k_ * kBlock, be_, ring + slot * s.w * kBlock, ring_cs, kBlock,
             Mat{nullptr, 0, 0}, s.act_e, kWhole, 0, ceb_, ceb_);
        next += run;
      }
    }
    const int64_t pixels = (r1 - r0) * wo, d_cs = pixels * kBlock;
    depthwise(e, 0, s.h, s.w, s.stride, r0, r1, 0, ceb_, wd_, bd_, s.act_d, dbuf, d_cs);
    const Mat res = s.residual ? Mat{r.base + r0 * r.hs, r.cs, r.ws} : Mat{nullptr, 0, 0};
    gemm(Mat{dbuf, d_cs, kBlock}, pixels, cep, wp_, cep * kBlock, bp_, const_cast<float*>(y.base) + r0 * y.hs, y.cs,
         y.ws, res, s.act_p, tail_y, 0, coutb_, coutb_);
  }
}

// One sample split by channels over a team of nt (called by every member, t = its index).
void Block::run_channels(const View& x, const View& y, const View& r, float* scratch, int t, int nt) const {
  const Spec& s = s_;
  const int64_t ho = s.ho(), wo = s.wo(), cep = ceb_ * kBlock, pixels = ho * wo, in_pixels = s.h * s.w;
  float* dbuf = scratch;
  float* packed = dbuf + round_up(pixels * cep, kBlock);
  float* expanded = packed + round_up(s.expand && !s.blocked_in ? in_pixels * cin_k_ : 0, kBlock);
  float* partials = expanded + (s.expand ? in_pixels * cep : 0);
  const int64_t d_cs = pixels * kBlock, p_size = pixels * coutb_ * kBlock;
  auto group = [&](int64_t g) { return ceb_ * g / kGroups; };  // group g: blocks [group(g), group(g + 1))
  // Up to kGroups threads take whole groups (the depthwise output a thread projects is its
  // own); more threads split the channels evenly and the groups' pixels after a barrier.
  const bool whole = nt <= kGroups;
  const int64_t cb0 = whole ? group(kGroups * t / nt) : ceb_ * t / nt;
  const int64_t cb1 = whole ? group(kGroups * (t + 1) / nt) : ceb_ * (t + 1) / nt;
  Mat a{x.base, x.cs, kBlock};
  if (s.expand && !s.blocked_in) {  // every thread reads the whole input: pack it together
    pack(x.base, x.ws, s.cin, in_pixels, in_pixels * t / nt, in_pixels * (t + 1) / nt, packed);
    a = Mat{packed, in_pixels * kBlock, kBlock};
    if (nt > 1) {
#pragma omp barrier
    }
  }
  if (cb1 > cb0) {
    if (s.expand) {
      const int64_t e_cs = in_pixels * kBlock;
      float* mine = expanded + cb0 * e_cs;
      gemm(a, in_pixels, s.cin, we_ + cb0 * cin_k_ * kBlock, cin_k_ * kBlock, be_ + cb0 * kBlock, mine, e_cs,
           kBlock, Mat{nullptr, 0, 0}, s.act_e, kWhole, 0, cb1 - cb0, cb1 - cb0);
      depthwise(Rows{mine, e_cs, s.w * kBlock, kBlock, 0}, cb0, s.h, s.w, s.stride, 0, ho, cb0, cb1, wd_, bd_,
                s.act_d, dbuf, d_cs);
    } else {
      depthwise(Rows{x.base, x.cs, x.hs, x.ws, 0}, 0, s.h, s.w, s.stride, 0, ho, cb0, cb1, wd_, bd_, s.act_d, dbuf,
                d_cs);
    }
  }
  // Each group's part of every output (from zero), pixels [p0, p1).
  auto project = [&](int64_t g, int64_t p0, int64_t p1) {
    const int64_t k0 = group(g), k1 = group(g + 1);
    gemm(Mat{dbuf + k0 * d_cs + p0 * kBlock, d_cs, kBlock}, p1 - p0, (k1 - k0) * kBlock, wp_ + k0 * kBlock * kBlock,
         cep * kBlock, zero_, partials + g * p_size + p0 * kBlock, pixels * kBlock, kBlock, Mat{nullptr, 0, 0}, Clip{},
         kWhole, 0, coutb_, coutb_);
  };
  if (whole) {
    for (int64_t g = kGroups * t / nt; g < kGroups * (t + 1) / nt; ++g) project(g, 0, pixels);
  } else {
#pragma omp barrier
    int64_t g = 0;
    while (t >= nt * (g + 1) / kGroups) ++g;
    const int64_t t0 = nt * g / kGroups, t1 = nt * (g + 1) / kGroups;
    project(g, pixels * (t - t0) / (t1 - t0), pixels * (t - t0 + 1) / (t1 - t0));
  }
  if (nt > 1) {
#pragma omp barrier
  }
  // The bias plus the parts in group order, the residual and the activation, by pixels. Rows
  // are dense (hs = wo * ws), so pixel p of the image is at p * ws.
  const Tail tail_y = out_tail(s.cout, s.full_out);
  const __m512 lo = _mm512_set1_ps(s.act_p.lo), hi = _mm512_set1_ps(s.act_p.hi);
  float* out = const_cast<float*>(y.base);
  const int64_t p0 = pixels * t / nt, p1 = pixels * (t + 1) / nt;
  for (int64_t j = 0; j < coutb_; ++j) {
    const bool last = j + 1 == coutb_;
    const __mmask16 keep = last ? tail_y.keep : static_cast<__mmask16>(0xffff);
    const __mmask16 store = last ? tail_y.store : static_cast<__mmask16>(0xffff);
    const __m512 bias = _mm512_load_ps(bp_ + j * kBlock);
    for (int64_t p = p0; p < p1; ++p) {
      __m512 v = bias;
      for (int64_t g = 0; g < kGroups; ++g) {
        v = _mm512_add_ps(v, _mm512_load_ps(partials + g * p_size + (j * pixels + p) * kBlock));
      }
      if (s.residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(keep, r.base + j * r.cs + p * r.ws));
      if (s.act_p.on) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      _mm512_mask_storeu_ps(out + j * y.cs + p * y.ws, store, _mm512_maskz_mov_ps(keep, v));
    }
  }
}

void Block::run(int64_t n, const View& x, int64_t x_ns, const View& y, int64_t y_ns, const View& r, int64_t r_ns,
                float* scratch, int threads) const {
  const Spec& s = s_;
  threads = std::max(1, threads);
  auto at = [](const View& v, int64_t ns, int64_t i) {
    return View{v.base ? v.base + i * ns : nullptr, v.cs, v.hs, v.ws};
  };
  if (by_channels(n)) {  // one sample, however many threads: the same sums
    if (threads == 1) {
      run_channels(x, y, r, scratch, 0, 1);
      return;
    }
#pragma omp parallel num_threads(threads)
    run_channels(x, y, r, scratch, omp_get_thread_num(), omp_get_num_threads());
    return;
  }
  const size_t per_rows = rows_scratch_floats();
  if (threads == 1) {
    for (int64_t i = 0; i < n; ++i) run_rows(at(x, x_ns, i), at(y, y_ns, i), at(r, r_ns, i), 0, s.ho(), scratch);
    return;
  }
  if (n >= threads) {  // whole samples per thread
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      for (int64_t i = n * t / nt; i < n * (t + 1) / nt; ++i) {
        run_rows(at(x, x_ns, i), at(y, y_ns, i), at(r, r_ns, i), 0, s.ho(), scratch + t * per_rows);
      }
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {  // fewer samples than threads: each split by rows
    const View xi = at(x, x_ns, i), yi = at(y, y_ns, i), ri = at(r, r_ns, i);
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t ho = s.ho();
      run_rows(xi, yi, ri, ho * t / nt, ho * (t + 1) / nt, scratch + t * per_rows);
    }
  }
}

// ---- Head ---------------------------------------------------------------------------------

namespace {

constexpr int64_t kChunk = 4;  // conv output blocks per chunk: one 4-block GEMM panel

// y[G blocks] = sum over k < kc of g[k] * slab block q, row k (each block [64][16]).
template <int G>
void fc_blocks(const float* g, int64_t kc, const float* slab, float* y) {
  __m512 acc[G];
#pragma GCC unroll 4
  for (int q = 0; q < G; ++q) acc[q] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 gv = _mm512_set1_ps(g[k]);
#pragma GCC unroll 4
    for (int q = 0; q < G; ++q) acc[q] = _mm512_fmadd_ps(gv, _mm512_load_ps(slab + (q * 64 + k) * kBlock), acc[q]);
  }
#pragma GCC unroll 4
  for (int q = 0; q < G; ++q) _mm512_store_ps(y + q * kBlock, acc[q]);
}

}  // namespace

Head::Head(const HeadSpec& s, const HeadWeights& w) : s_(s) {
  cmb_ = (s.cmid + kBlock - 1) / kBlock;
  cin_k_ = round_up(s.cin, kBlock);
  ncb_ = (s.classes + kBlock - 1) / kBlock;
  chunks_ = (cmb_ + kChunk - 1) / kChunk;
  const int64_t sizes[] = {chunks_ * record_floats(), cmb_ * kBlock, ncb_ * kBlock};
  float* parts[3];
  carve(&store_, sizes, parts);
  float* rec = parts[0];
  float* bp = parts[1];
  float* fcb = parts[2];
  // Chunk c's record: the conv weights of its 4 blocks [4][cin_k][16], then its slab of the
  // fc weights: its 64 channels k against every class o, [class block][64][16].
  const int64_t conv_part = kChunk * cin_k_ * kBlock, chunk_k = kChunk * kBlock;
  for (int64_t c = 0; c < s.cmid; ++c) {
    float* r = rec + (c / chunk_k) * record_floats();
    for (int64_t k = 0; k < s.cin; ++k) r[((c % chunk_k) / kBlock * cin_k_ + k) * kBlock + c % kBlock] = w.w[c * s.cin + k];
    if (w.b) bp[c] = w.b[c];
    float* slab = r + conv_part + (c % chunk_k) * kBlock;
    for (int64_t o = 0; o < s.classes; ++o) {
      slab[(o / kBlock) * chunk_k * kBlock + o % kBlock] = s.fc_transposed ? w.fc[o * s.cmid + c] : w.fc[c * s.classes + o];
    }
  }
  for (int64_t o = 0; o < (w.fc_b ? s.classes : 0); ++o) fcb[o] = w.fc_b[o];
  rec_ = rec, b_ = bp, fc_b_ = fcb;
}

int64_t Head::record_floats() const { return kChunk * cin_k_ * kBlock + ncb_ * kChunk * kBlock * kBlock; }

// Scratch: each chunk's part of the classes [chunk][rows][ncb][16] (added up in chunk order
// whatever the team's size, so a run on one thread gives the same bits as on two), then per
// thread [packed input (NHWC)][chunk's conv output, 4 blocks][pooled, 64 per row].
size_t Head::parts_floats() const { return static_cast<size_t>(chunks_ * s_.rows * ncb_ * kBlock); }

size_t Head::thread_floats() const {
  const int64_t packed = s_.blocked_in ? 0 : s_.rows * s_.pixels * cin_k_;
  return static_cast<size_t>(round_up(packed, kBlock) + kChunk * s_.pixels * kBlock + s_.rows * kChunk * kBlock);
}

size_t Head::scratch_bytes(int threads) const {
  return (parts_floats() + static_cast<size_t>(std::max(1, threads)) * thread_floats()) * sizeof(float);
}

void Head::run_thread(const View& x, int64_t x_ns, float* parts, float* scratch, int t, int nt) const {
  const HeadSpec& s = s_;
  const int64_t px = s.pixels, record = record_floats();
  float* packed = scratch;
  float* conv = packed + round_up(s.blocked_in ? 0 : s.rows * px * cin_k_, kBlock);
  float* pooled = conv + kChunk * px * kBlock;
  const int64_t c0 = chunks_ * t / nt, c1 = chunks_ * (t + 1) / nt;
  if (c0 == c1) return;
  // An NHWC input is packed by every thread for itself (at most 4 x 49 x 320 floats for
  // MobileNetV2's head): cheaper than a barrier.
  Mat a[HeadSpec::kMaxRows];
  for (int64_t i = 0; i < s.rows; ++i) {
    const float* xi = x.base + i * x_ns;
    if (s.blocked_in) {
      a[i] = Mat{xi, x.cs, kBlock};
    } else {
      float* to = packed + i * px * cin_k_;
      pack(xi, x.ws, s.cin, px, 0, px, to);
      a[i] = Mat{to, px * kBlock, kBlock};
    }
  }
  const Tail tail{out_tail(s.cmid, false).keep, static_cast<__mmask16>(0xffff)};  // padded lanes: 0
  const float inv = 1.f / static_cast<float>(px);
  for (int64_t c = c0; c < c1; ++c) {
    const int64_t j0 = c * kChunk, j1 = std::min(cmb_, j0 + kChunk), w = j1 - j0;
    const float* wc = rec_ + c * record;               // this chunk's conv weights
    const float* sl = wc + kChunk * cin_k_ * kBlock;  // and its slab
    for (int64_t i = 0; i < s.rows; ++i) {
      if (w == kChunk && (j1 < cmb_ || s.cmid % kBlock == 0)) {
        // Under the FMAs, the next chunk's record (the first sample's GEMM brings it in).
        Epi e{b_ + j0 * kBlock, Mat{nullptr, 0, 0}, s.act, tail.keep, tail.store};
        if (i == 0 && c + 1 < chunks_) {
          e.pf = reinterpret_cast<const char*>(wc + record);
          e.pf_end = e.pf + record * static_cast<int64_t>(sizeof(float));
        }
        panel<kChunk, false, true>(a[i], px, s.cin, wc, cin_k_ * kBlock, conv, px * kBlock, kBlock, e, j1 == cmb_);
      } else {
        gemm(a[i], px, s.cin, wc, cin_k_ * kBlock, b_ + j0 * kBlock, conv, px * kBlock, kBlock, Mat{nullptr, 0, 0},
             s.act, tail, 0, w, cmb_ - j0);
      }
      float* g = pooled + i * kChunk * kBlock;
      for (int64_t q = 0; q < w; ++q) {
        const float* col = conv + q * px * kBlock;
        __m512 sum = _mm512_setzero_ps();
        for (int64_t p = 0; p < px; ++p) sum = _mm512_add_ps(sum, _mm512_load_ps(col + p * kBlock));
        _mm512_store_ps(g + q * kBlock, _mm512_mul_ps(sum, _mm512_set1_ps(inv)));
      }
      float* y = parts + (c * s.rows + i) * ncb_ * kBlock;
      const int64_t kc = w * kBlock;
      int64_t o = 0;
      for (; o + 4 <= ncb_; o += 4) fc_blocks<4>(g, kc, sl + o * kChunk * kBlock * kBlock, y + o * kBlock);
      switch (ncb_ - o) {
        case 3: fc_blocks<3>(g, kc, sl + o * kChunk * kBlock * kBlock, y + o * kBlock); break;
        case 2: fc_blocks<2>(g, kc, sl + o * kChunk * kBlock * kBlock, y + o * kBlock); break;
        case 1: fc_blocks<1>(g, kc, sl + o * kChunk * kBlock * kBlock, y + o * kBlock); break;
        default: break;
      }
    }
  }
}

// Class blocks [ncb * t / nt, ncb * (t + 1) / nt) of y: the bias plus every chunk's part.
void Head::reduce(float* y, const float* parts, int t, int nt) const {
  const HeadSpec& s = s_;
  const int64_t o0 = ncb_ * t / nt, o1 = ncb_ * (t + 1) / nt;
  for (int64_t i = 0; i < s.rows; ++i) {
    for (int64_t o = o0; o < o1; ++o) {
      __m512 v = _mm512_load_ps(fc_b_ + o * kBlock);
      for (int64_t c = 0; c < chunks_; ++c) v = _mm512_add_ps(v, _mm512_load_ps(parts + ((c * s.rows + i) * ncb_ + o) * kBlock));
      const int64_t rem = std::min<int64_t>(kBlock, s.classes - o * kBlock);
      _mm512_mask_storeu_ps(y + i * s.classes + o * kBlock, static_cast<__mmask16>((1u << rem) - 1), v);
    }
  }
}

void Head::run(const View& x, int64_t x_ns, float* y, float* scratch, int threads) const {
  threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, chunks_)));
  float* parts = scratch;
  float* own = scratch + parts_floats();
  if (threads == 1) {
    run_thread(x, x_ns, parts, own, 0, 1);
    reduce(y, parts, 0, 1);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    run_thread(x, x_ns, parts, own + t * thread_floats(), t, nt);
#pragma omp barrier
    reduce(y, parts, t, nt);
  }
}

#pragma GCC pop_options

}  // namespace ge::block
