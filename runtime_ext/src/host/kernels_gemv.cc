// Gemm / MatMul of a few rows against constant weights: a matrix-vector product.
//
// At batch 1 a fully connected layer reads every weight once and does two flops per weight,
// so its speed is the speed at which the weights stream in from cache. oneDNN's brgemm
// matmul is built for many rows; at one row it measured ~25% slower than the loop below on
// this machine (AVX-512, 2 threads, weights reordered for each: 784x1024 26.9 vs 20.7 us,
// 1024x1024 33.6 vs 26.6 us). So for up to kMaxGemvRows rows the weights are packed at load
// into panels of 64 output columns (16 when there are at most 48), each panel K x width
// contiguous and zero-padded past N, and a run streams every panel once: one AVX-512
// accumulator per row and 16 columns (two sets for one row, so more FMA chains are in
// flight), one broadcast of x[k] per row, aligned loads. Panels are split over the
// lane's OpenMP team; small layers run on one thread (a fork/join costs more than they do).
// The epilogue adds the bias and the residual and applies Relu / LeakyRelu / Clip; other
// activations, Gemm's alpha/beta scaling and CPUs without AVX-512 keep the oneDNN kernel.
// A narrow layer (at most 24 outputs, e.g. a classifier) at more rows runs as dot products
// instead (dot_rows: weights packed transposed, K in 16-float vectors, one or two rows at a
// time). The file is compiled -O3: at -Os GCC kept dot_rows' accumulators in memory.
#include "kernels_gemv.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "dnnl_util.h"

namespace ge {

namespace {

// Output columns per panel: 64 (4 zmm), or 16 for layers with few outputs (a classifier's
// 10 columns padded to 64 would read 6x the weights).
constexpr int64_t kWidePanel = 64, kNarrowPanel = 16;
constexpr int64_t kBytesPerThread = 256 << 10;  // weight bytes that pay for one more thread
// rows x K of a narrow layer that pay for one more thread (a few microseconds of FMAs)
constexpr int64_t kRowWorkPerThread = 16384;

struct Epilogue {
  const float* bias = nullptr;      // [N] or nullptr
  const float* residual = nullptr;  // [rows, N] or nullptr (may be y itself)
  float lo = 0.f, hi = 0.f;         // Clip bounds
  float slope = 0.f;                // LeakyRelu's alpha (0 for Relu)
  enum class Act { kNone, kRelu, kClip } act = Act::kNone;
};

// Rows [0, R) of x (row stride ldx) times panels [p0, p1) of w, into y (row stride n). A
// panel is V vectors (16 columns each) wide.
template <int R, int V>
__attribute__((target("avx512f"))) void gemv_panels(const float* x, int64_t ldx, const float* w, int64_t k_dim,
                                                    int64_t n, const Epilogue& e, float* y, int64_t p0,
                                                    int64_t p1) {
  constexpr int64_t width = 16 * V;
  for (int64_t p = p0; p < p1; ++p) {
    const float* panel = w + p * k_dim * width;
    __m512 acc[R][V];
    __m512 acc2[V];  // one row: a second set on odd k, so more FMA chains are in flight
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) acc[r][j] = _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) acc2[j] = _mm512_setzero_ps();
    int64_t k = 0;
    if (R == 1) {
      for (; k + 1 < k_dim; k += 2) {
        const float* wr = panel + k * width;
        const __m512 x0 = _mm512_set1_ps(x[k]);
        const __m512 x1 = _mm512_set1_ps(x[k + 1]);
#pragma GCC unroll 4
        for (int j = 0; j < V; ++j) {
          acc[0][j] = _mm512_fmadd_ps(x0, _mm512_load_ps(wr + 16 * j), acc[0][j]);
          acc2[j] = _mm512_fmadd_ps(x1, _mm512_load_ps(wr + width + 16 * j), acc2[j]);
        }
      }
    }
    for (; k < k_dim; ++k) {
      const float* wr = panel + k * width;
      __m512 wv[V];
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) wv[j] = _mm512_load_ps(wr + 16 * j);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m512 xv = _mm512_set1_ps(x[r * ldx + k]);
#pragma GCC unroll 4
        for (int j = 0; j < V; ++j) acc[r][j] = _mm512_fmadd_ps(xv, wv[j], acc[r][j]);
      }
    }
    if (R == 1) {
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) acc[0][j] = _mm512_add_ps(acc[0][j], acc2[j]);
    }
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int j = 0; j < V; ++j) {
      const int64_t col = p * width + 16 * j;
      if (col >= n) break;
      const __mmask16 m = n - col >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - col)) - 1);
      const __m512 b = e.bias ? _mm512_maskz_loadu_ps(m, e.bias + col) : zero;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        __m512 v = _mm512_add_ps(acc[r][j], b);
        if (e.residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, e.residual + r * n + col));
        switch (e.act) {
          case Epilogue::Act::kRelu: {
            const __mmask16 neg = _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ);
            v = _mm512_mask_mul_ps(v, neg, v, _mm512_set1_ps(e.slope));
            break;
          }
          case Epilogue::Act::kClip:
            v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(e.lo)), _mm512_set1_ps(e.hi));
            break;
          case Epilogue::Act::kNone:
            break;
        }
        _mm512_mask_storeu_ps(y + r * n + col, m, v);
      }
    }
  }
}

// Scalar epilogue of one output (the dot form below).
inline float finish(float v, const Epilogue& e, int64_t r, int64_t c, int64_t n) {
  if (e.bias) v += e.bias[c];
  if (e.residual) v += e.residual[r * n + c];
  switch (e.act) {
    case Epilogue::Act::kRelu:
      return v < 0.f ? v * e.slope : v;
    case Epilogue::Act::kClip:
      return std::min(std::max(v, e.lo), e.hi);
    case Epilogue::Act::kNone:
      break;
  }
  return v;
}

// Rows [0, R) of x times a narrow layer (n <= NC outputs) stored transposed: wt is [NC][kp],
// row c holding output column c's K weights, zero-padded to kp (a multiple of 16) and past
// n. Dot products over K in 16-float vectors, every lane useful (a 16-column panel of a
// 10-output layer wastes 6 of 16 lanes: the MLP's 32x1024x10 layer in blocks of four rows
// of panels took 12.5-13.3 us median in the network, this 9.4-11); one horizontal sum per
// output at the end.
template <int R, int NC>
__attribute__((target("avx512f"))) void dot_rows(const float* x, int64_t ldx, const float* wt, int64_t k_dim,
                                                 int64_t kp, int64_t n, const Epilogue& e, float* y) {
  __m512 acc[R][NC];
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 24
    for (int c = 0; c < NC; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < k_dim; k += 16) {
    const __mmask16 m = k_dim - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (k_dim - k)) - 1);
    __m512 xv[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) xv[r] = _mm512_maskz_loadu_ps(m, x + r * ldx + k);
#pragma GCC unroll 24
    for (int c = 0; c < NC; ++c) {
      const __m512 wv = _mm512_load_ps(wt + c * kp + k);
#pragma GCC unroll 2
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
#pragma GCC unroll 2
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 24
    for (int c = 0; c < NC; ++c) {
      // every c unrolled (a run-time bound would keep acc in memory)
      if (c < n) y[r * n + c] = finish(_mm512_reduce_add_ps(acc[r][c]), e, r, c, n);
    }
  }
}

using PanelFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, const Epilogue&, float*, int64_t,
                         int64_t);

class GemvKernel : public Kernel {
 public:
  Status run(ExecContext& ctx) override {
    if (dot_) return run_rows(ctx);
    Epilogue e = epilogue_;
    if (spec_.bias) e.bias = ctx.ptr<const float>(*spec_.bias);
    if (spec_.residual) e.residual = ctx.ptr<const float>(*spec_.residual);
    const float* x = ctx.ptr<const float>(*spec_.a);
    float* y = ctx.ptr<float>(*spec_.y);
    const float* w = reinterpret_cast<const float*>(weights_->data());
    const int64_t k = spec_.k, n = spec_.n;
    const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), max_threads_));
    if (threads <= 1) {
      fn_(x, k, w, k, n, e, y, 0, panels_);
      return Status::Ok();
    }
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      fn_(x, k, w, k, n, e, y, panels_ * t / nt, panels_ * (t + 1) / nt);
    }
    return Status::Ok();
  }
  std::string impl() const override { return dot_ && spec_.count ? "gemv avx512 + counted rows" : "gemv avx512"; }

  // Many rows, narrow output (dot_rows): blocks of two rows (one for 13-24 outputs), the
  // blocks split over the team.
  Status run_rows(ExecContext& ctx) {
    const Epilogue& e0 = epilogue_;
    const int64_t per_block = dot_ == 12 ? 2 : 1;
    const float* bias = spec_.bias ? ctx.ptr<const float>(*spec_.bias) : nullptr;
    const float* residual = spec_.residual ? ctx.ptr<const float>(*spec_.residual) : nullptr;
    const float* x = ctx.ptr<const float>(*spec_.a);
    float* y = ctx.ptr<float>(*spec_.y);
    const float* w = reinterpret_cast<const float*>(weights_->data());
    int64_t rows = spec_.rows;
    if (spec_.count) {  // routed rows: the count is the graph's data, bounded by the rows there are
      rows = std::clamp<int64_t>(*ctx.ptr<const int64_t>(*spec_.count), 0, rows / spec_.unit) * spec_.unit;
    }
    const int64_t k = spec_.k, n = spec_.n, blocks = (rows + per_block - 1) / per_block;
    const int64_t kp = (k + 15) / 16 * 16;
    auto span = [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = per_block * b, nr = std::min(per_block, rows - r0);
        Epilogue e = e0;
        e.bias = bias;
        e.residual = residual ? residual + r0 * n : nullptr;
        if (dot_ == 12) {
          (nr == 2 ? dot_rows<2, 12> : dot_rows<1, 12>)(x + r0 * k, k, w, k, kp, n, e, y + r0 * n);
        } else {
          dot_rows<1, 24>(x + r0 * k, k, w, k, kp, n, e, y + r0 * n);
        }
      }
    };
    const int threads = static_cast<int>(
        std::min<int64_t>({omp_get_max_threads(), blocks, std::max<int64_t>(1, rows * k / kRowWorkPerThread)}));
    if (threads <= 1) {
      span(0, blocks);
      return Status::Ok();
    }
#pragma omp parallel num_threads(threads)
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      span(blocks * t / nt, blocks * (t + 1) / nt);
    }
    return Status::Ok();
  }

  GemvSpec spec_;
  int dot_ = 0;  // more than kMaxGemvRows rows: dot_rows over this many transposed columns (12 or 24)
  Epilogue epilogue_;
  PanelFn fn_ = nullptr;
  int64_t panels_ = 0;
  int64_t max_threads_ = 1;
  std::shared_ptr<const AlignedBuffer> weights_;
};

// B as stored ([K,N], or [N,K] when transposed): the source layout of its packings.
dnnl::memory::desc stored_b(const GemvSpec& s) {
  return dnnl::memory::desc(dnnl::memory::dims{s.b_transposed ? s.n : s.k, s.b_transposed ? s.k : s.n},
                            dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
}

// Packs B (as stored: [K,N], or [N,K] when transposed) into panels [ceil(N/W)][K][W].
std::shared_ptr<const AlignedBuffer> pack_panels(const KernelArgs& a, const GemvSpec& s, int64_t panels,
                                                 int64_t pw) {
  // The shared cache is keyed by a oneDNN descriptor; this one names the panel layout and
  // the transposition, so no oneDNN reorder of the same constant can match it.
  const dnnl::memory::desc key(dnnl::memory::dims{s.b_transposed ? 2 : 1, panels, s.k, pw},
                               dnnl::memory::data_type::f32, dnnl::memory::format_tag::abcd);
  if (a.prepared) {
    if (auto hit = host_prepared(a)->find(s.b->data, stored_b(s), key)) return hit;
  }
  auto buf = std::make_shared<AlignedBuffer>(static_cast<size_t>(panels * s.k * pw) * sizeof(float));
  const float* b = reinterpret_cast<const float*>(s.b->data);
  float* out = reinterpret_cast<float*>(buf->data());
  for (int64_t p = 0; p < panels; ++p) {
    const int64_t c0 = p * pw, width = std::min(pw, s.n - c0);
    float* panel = out + p * s.k * pw;
    if (s.b_transposed) {  // row c of B is output column c: scatter it down the panel
      for (int64_t c = 0; c < width; ++c) {
        const float* row = b + (c0 + c) * s.k;
        for (int64_t kk = 0; kk < s.k; ++kk) panel[kk * pw + c] = row[kk];
      }
    } else {
      for (int64_t kk = 0; kk < s.k; ++kk) {
        std::memcpy(panel + kk * pw, b + kk * s.n + c0, static_cast<size_t>(width) * sizeof(float));
      }
    }
  }
  return a.prepared ? host_prepared(a)->put(s.b->data, stored_b(s), key, buf) : buf;
}

// Packs B transposed for dot_rows: [nc][kp], row c = output column c's weights, zeros past
// k and n.
std::shared_ptr<const AlignedBuffer> pack_transposed(const KernelArgs& a, const GemvSpec& s, int64_t nc) {
  const int64_t kp = (s.k + 15) / 16 * 16;
  const dnnl::memory::desc key(dnnl::memory::dims{s.b_transposed ? 4 : 3, nc, kp},
                               dnnl::memory::data_type::f32, dnnl::memory::format_tag::abc);
  if (a.prepared) {
    if (auto hit = host_prepared(a)->find(s.b->data, stored_b(s), key)) return hit;
  }
  auto buf = std::make_shared<AlignedBuffer>(static_cast<size_t>(nc * kp) * sizeof(float));  // zeroed
  const float* b = reinterpret_cast<const float*>(s.b->data);
  float* out = reinterpret_cast<float*>(buf->data());
  for (int64_t c = 0; c < s.n; ++c) {
    for (int64_t kk = 0; kk < s.k; ++kk) out[c * kp + kk] = s.b_transposed ? b[c * s.k + kk] : b[kk * s.n + c];
  }
  return a.prepared ? host_prepared(a)->put(s.b->data, stored_b(s), key, buf) : buf;
}

}  // namespace

std::unique_ptr<Kernel> make_gemv(const KernelArgs& a, const GemvSpec& s, const Fusion& f) {
  const bool skinny = s.rows > kMaxGemvRows && s.n <= kMaxSkinnyColumns && s.rows <= kMaxSkinnyRows;
  if (!cpu_has_avx512() || s.rows < 1 || (s.rows > kMaxGemvRows && !skinny) || s.k < 1 || s.n < 1) return nullptr;
  if (!s.b->constant() || !s.b->data) return nullptr;
  Epilogue e;
  if (f.linear) return nullptr;  // the oneDNN kernel applies it as a post-op
  if (f.activation) {
    if (f.alg == dnnl::algorithm::eltwise_relu) {
      e.act = Epilogue::Act::kRelu;
      e.slope = f.alpha;
    } else if (f.alg == dnnl::algorithm::eltwise_clip_v2 || f.alg == dnnl::algorithm::eltwise_clip) {
      e.act = Epilogue::Act::kClip;
      e.lo = f.alpha;
      e.hi = f.beta;
    } else {
      return nullptr;  // the oneDNN kernel applies it as a post-op
    }
  }
  auto k = std::make_unique<GemvKernel>();
  k->spec_ = s;
  k->epilogue_ = e;
  if (skinny) {
    k->dot_ = s.n <= 12 ? 12 : 24;
    k->weights_ = pack_transposed(a, s, k->dot_);
    return k;
  }
  const int64_t width = s.n > 48 ? kWidePanel : kNarrowPanel;
  k->panels_ = (s.n + width - 1) / width;
  const int64_t weight_bytes = s.k * s.n * static_cast<int64_t>(sizeof(float));
  k->max_threads_ = std::max<int64_t>(1, std::min(k->panels_, weight_bytes / kBytesPerThread));
  if (width == kWidePanel) {
    k->fn_ = s.rows == 1 ? gemv_panels<1, 4> : gemv_panels<2, 4>;
  } else {
    k->fn_ = s.rows == 1 ? gemv_panels<1, 1> : gemv_panels<2, 1>;
  }
  k->weights_ = pack_panels(a, s, k->panels_, width);
  return k;
}

}  // namespace ge
