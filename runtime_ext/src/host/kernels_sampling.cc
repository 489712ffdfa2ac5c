// GridSample of a 4-D float32 image (ONNX opset 16/20): X [N, C, H, W] sampled at the
// points of grid [N, Ho, Wo, 2] ((x, y) in [-1, 1]), Y [N, C, Ho, Wo]; modes linear
// ("bilinear") and nearest, padding zeros, border and reflection, align_corners 0 or 1 —
// the compiler's host implementation's rules (engine/ops/sampling.py), cubic staying there.
// A deformable detector samples each feature level per head and point (Deformable-DETR: six
// host steps split its run into 13 programs).
//
// The output points go in chunks of 256 per work item: the chunk's taps (up to four offsets
// in a channel plane, weights zero for taps outside with zero padding) computed once in
// double, as the host does, then every channel plane of the sample gathers the chunk from
// them, 16 points a step by AVX-512 gathers (a scalar loop, ~40 instructions an output, took
// 44 us for a 4 x 16 x 32 x 4 output; the gathers 24). No workspace, whatever the grid's
// size. Plain NCHW only.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels.h"

namespace ge {

namespace {

enum class Pad { kZeros, kBorder, kReflection };

// The host's _reflect: x folded into [lo, hi] by reflections at both ends.
double reflect(double x, double lo, double hi) {
  const double span = hi - lo;
  if (x >= lo && x <= hi) return x;
  const double d = x < lo ? lo - x : x - hi;
  const double n = span > 0 ? std::floor(d / span) : 0.0;
  const double r = d - n * span;
  const bool even = std::fmod(n, 2.0) == 0.0;
  if (x < lo) return even ? lo + r : hi - r;
  return even ? hi - r : lo + r;
}

class GridSampleKernel : public Kernel {
 public:
  explicit GridSampleKernel(const KernelArgs& a) {
    a.expect_inputs(2, 2);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    g_ = &a.in(1);
    y_ = &a.out(0);
    a.expect_dtype(*x_, DType::kFloat32, "input X");
    a.expect_dtype(*g_, DType::kFloat32, "grid");
    a.expect_dtype(*y_, DType::kFloat32, "output Y");
    if (x_->rank() != 4) invalid("input X must be 4-D (N, C, H, W), got ", shape_str(x_->shape));
    const Shape want_g = {x_->shape[0], y_->rank() == 4 ? y_->shape[2] : -1, y_->rank() == 4 ? y_->shape[3] : -1, 2};
    if (g_->shape != want_g) invalid("grid shape ", shape_str(g_->shape), " must be [N, Ho, Wo, 2] of the output");
    if (y_->shape != Shape{x_->shape[0], x_->shape[1], g_->shape[1], g_->shape[2]}) {
      invalid("output shape ", shape_str(y_->shape), " must be [N, C, Ho, Wo] = ",
              shape_str(Shape{x_->shape[0], x_->shape[1], g_->shape[1], g_->shape[2]}));
    }
    if (!x_->plain() || !g_->plain() || !y_->plain()) invalid("GridSample takes nchw (plain) operands only");
    const std::string mode = a.attr_str("mode", "linear");
    if (mode == "linear" || mode == "bilinear") {
      linear_ = true;
    } else if (mode != "nearest") {
      invalid("mode must be linear or nearest on the device, got '", mode, "'");
    }
    const std::string pad = a.attr_str("padding_mode", "zeros");
    if (pad == "zeros") {
      pad_ = Pad::kZeros;
    } else if (pad == "border") {
      pad_ = Pad::kBorder;
    } else if (pad == "reflection") {
      pad_ = Pad::kReflection;
    } else {
      invalid("padding_mode must be zeros, border or reflection, got '", pad, "'");
    }
    const int64_t align = a.attr_int("align_corners", 0);
    if (align != 0 && align != 1) invalid("align_corners must be 0 or 1, got ", align);
    align_ = align == 1;
    points_ = g_->shape[1] * g_->shape[2];
    if (x_->shape[2] * x_->shape[3] > std::numeric_limits<int32_t>::max()) {
      invalid("a channel plane of ", x_->shape[2], " x ", x_->shape[3], " is too large for the device GridSample");
    }
    vector_ = cpu_has_avx512();
  }
  std::string impl() const override { return "grid sample"; }

  Status run(ExecContext& ctx) override {
    if (y_->numel == 0) return Status::Ok();
    const int64_t n = x_->shape[0], c = x_->shape[1], h = x_->shape[2], w = x_->shape[3];
    const float* grid = ctx.ptr<const float>(*g_);
    const float* x = ctx.ptr<const float>(*x_);
    float* y = ctx.ptr<float>(*y_);
    const int64_t plane = h * w, k = linear_ ? 4 : 1;
    const int64_t chunks = (points_ + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n * c * points_ >= 16384)
    for (int64_t item = 0; item < n * chunks; ++item) {
      const int64_t b = item / chunks, p0 = item % chunks * kChunk, m = std::min(points_, p0 + kChunk) - p0;
      Taps taps;
      for (int64_t p = 0; p < m; ++p) point_taps(grid + 2 * (b * points_ + p0 + p), h, w, &taps, p);
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* xp = x + (b * c + ch) * plane;
        float* yp = y + (b * c + ch) * points_ + p0;
        if (vector_) {
          gather_avx512(xp, taps, k, m, yp);
        } else {
          for (int64_t p = 0; p < m; ++p) {
            float s = 0.f;
            for (int64_t j = 0; j < k; ++j) s += taps.weight[j][p] * xp[taps.offset[j][p]];
            yp[p] = s;
          }
        }
      }
    }
    return Status::Ok();
  }

 private:
  static constexpr int64_t kChunk = 256;
  // A chunk's taps, tap-major: offsets in a channel plane (always inside it) and weights (0
  // for a tap outside with zero padding).
  struct Taps {
    int32_t offset[4][kChunk];
    float weight[4][kChunk];
  };

  // 16 points a step: each tap's 16 values fetched by one gather, weighted and summed.
  __attribute__((target("avx512f"))) static void gather_avx512(const float* xp, const Taps& t, int64_t k,
                                                               int64_t m, float* yp) {
    for (int64_t p = 0; p < m; p += 16) {
      const __mmask16 mask = m - p >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (m - p)) - 1);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t j = 0; j < k; ++j) {
        const __m512i off = _mm512_maskz_loadu_epi32(mask, t.offset[j] + p);
        const __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mask, off, xp, 4);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, t.weight[j] + p), v, acc);
      }
      _mm512_mask_storeu_ps(yp + p, mask, acc);
    }
  }

  // The source coordinate of a normalized one along an axis of `size`, with the padding's
  // rule applied (before the taps are taken).
  double coord(double g, int64_t size) const {
    const double s = static_cast<double>(size);
    double v = align_ ? (g + 1) / 2 * (s - 1) : ((g + 1) * s - 1) / 2;
    const double lo = align_ ? 0.0 : -0.5, hi = align_ ? s - 1 : s - 0.5;
    if (!linear_) v = std::nearbyint(v);  // half to even, as numpy's rint
    if (pad_ == Pad::kBorder && (v < lo || v > hi)) v = std::clamp(v, 0.0, s - 1);
    if (pad_ == Pad::kReflection) v = reflect(v, lo, hi);
    return v;
  }

  // A tap's index along an axis and whether it counts (zero padding drops outside taps).
  bool tap_index(double pos, int64_t size, int64_t* index) const {
    const double s = static_cast<double>(size);
    if (pad_ == Pad::kReflection) {
      pos = std::trunc(reflect(pos, align_ ? 0.0 : -0.5, align_ ? s - 1 : s - 0.5));
    }
    const bool inside = pos >= 0 && pos < s;
    *index = static_cast<int64_t>(std::clamp(pos, 0.0, s - 1));
    return pad_ != Pad::kZeros || inside;
  }

  void point_taps(const float* g, int64_t h, int64_t w, Taps* t, int64_t p) const {
    const double gx = g[0], gy = g[1];
    auto set = [&](int j, int64_t offset, double weight) {
      t->offset[j][p] = static_cast<int32_t>(offset);
      t->weight[j][p] = static_cast<float>(weight);
    };
    if (!std::isfinite(gx) || !std::isfinite(gy)) {  // NaN grid points sample nothing
      for (int j = 0; j < 4; ++j) set(j, 0, 0.0);
      return;
    }
    const double vx = coord(gx, w), vy = coord(gy, h);
    if (!linear_) {
      int64_t ix = 0, iy = 0;
      const bool ok = tap_index(std::trunc(vx), w, &ix) & tap_index(std::trunc(vy), h, &iy);
      set(0, iy * w + ix, ok ? 1.0 : 0.0);
      return;
    }
    const double fx = std::floor(vx), fy = std::floor(vy);
    const double tx = vx - fx, ty = vy - fy;
    int j = 0;
    for (int dy = 0; dy < 2; ++dy) {
      for (int dx = 0; dx < 2; ++dx, ++j) {
        int64_t ix = 0, iy = 0;
        const bool ok = tap_index(fx + dx, w, &ix) & tap_index(fy + dy, h, &iy);
        set(j, iy * w + ix, ok ? (dx ? tx : 1 - tx) * (dy ? ty : 1 - ty) : 0.0);
      }
    }
  }

  const TensorInfo *x_ = nullptr, *g_ = nullptr, *y_ = nullptr;
  bool linear_ = false, align_ = false, vector_ = false;
  Pad pad_ = Pad::kZeros;
  int64_t points_ = 0;
};

}  // namespace

std::unique_ptr<Kernel> make_grid_sample(const KernelArgs& a) { return std::make_unique<GridSampleKernel>(a); }

}  // namespace ge
