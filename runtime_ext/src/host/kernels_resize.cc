// Resize of the spatial axes of a 4-D or 5-D tensor: nearest (any dtype, the element is
// copied) and linear (float32, bilinear; trilinear for 5-D: a 3-D U-Net's upsampling). Plain NCHW or in the layout region's format
// (LayoutRule::kUniform: N and C are kept, so input and output share one format): the loops
// see the stored order as planes of [H, W, inner] — NCHW: N*C planes, inner 1; NHWC: N
// planes, inner C; nChw<b>c: N*C/b planes, inner b — so a feature pyramid's upsampling
// between NHWC convolutions needs no conversion, and its inner loop runs along channels. Attributes are the compiler's resolved form:
// "scales" = [scale_h, scale_w] or [scale_d, scale_h, scale_w] (the ONNX scale of each axis, from the scales input or
// sizes / input size), "mode", "coordinate_transformation_mode" (asymmetric, half_pixel,
// pytorch_half_pixel, align_corners) and "nearest_mode" (floor, ceil, round_prefer_floor,
// round_prefer_ceil); the output shape is the output tensor's.
//
// Our own loops rather than oneDNN's resampling: its nearest rounds coordinates its own
// way and its linear is half_pixel only, so of the exporters' modes few would match the
// ONNX results exactly. Every source index is computed once per axis at load (in double,
// as the ONNX reference does) and clamped into the input, so run() reads only in bounds.
#include <cmath>
#include <cstring>

#include "copy.h"
#include "kernels.h"

namespace ge {

namespace {

// The source coordinate of output index `i` on an axis of `n_in` -> `n_out` elements.
double source_coord(const std::string& mode, int64_t i, int64_t n_in, double scale) {
  const double length = scale * static_cast<double>(n_in);  // as the ONNX reference has it
  const double y = static_cast<double>(i);
  if (mode == "align_corners") return length == 1 ? 0.0 : y * static_cast<double>(n_in - 1) / (length - 1);
  if (mode == "asymmetric") return y / scale;
  if (mode == "pytorch_half_pixel") return length == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
  return (y + 0.5) / scale - 0.5;  // half_pixel
}

int64_t clamp_index(double v, int64_t n) {
  if (!(v > 0)) return 0;  // NaN too
  return v >= static_cast<double>(n - 1) ? n - 1 : static_cast<int64_t>(v);
}

// Per output index of one axis: the two source indices (equal for nearest) and weights.
struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<float> w0, w1;
};

Taps axis_taps(const std::string& mode, const std::string& coord, const std::string& nearest, int64_t n_in,
               int64_t n_out, double scale) {
  Taps t;
  for (int64_t i = 0; i < n_out; ++i) {
    const double x = source_coord(coord, i, n_in, scale);
    if (mode == "nearest") {
      double r = nearest == "floor"               ? std::floor(x)
                 : nearest == "ceil"              ? std::ceil(x)
                 : nearest == "round_prefer_ceil" ? std::floor(x + 0.5)
                                                  : std::ceil(x - 0.5);  // round_prefer_floor
      const int64_t k = clamp_index(r, n_in);
      t.i0.push_back(k);
      t.i1.push_back(k);
      t.w0.push_back(1.f);
      t.w1.push_back(0.f);
    } else {
      const double base = std::floor(x);
      const double frac = x - base;
      t.i0.push_back(clamp_index(base, n_in));
      t.i1.push_back(clamp_index(base + 1, n_in));
      t.w0.push_back(static_cast<float>(1 - frac));
      t.w1.push_back(static_cast<float>(frac));
    }
  }
  return t;
}

template <class T>
void nearest_plane(T* y, const T* x, const Taps& h, const Taps& w, int64_t win, int64_t oh) {
  const T* row = x + h.i0[oh] * win;
  const int64_t wout = static_cast<int64_t>(w.i0.size());
  for (int64_t ow = 0; ow < wout; ++ow) y[ow] = row[w.i0[ow]];
}

// Nearest over pixels of `block` bytes (the channels stored together).
void nearest_pixels(uint8_t* y, const uint8_t* x, const Taps& h, const Taps& w, int64_t win, int64_t oh,
                    int64_t block) {
  const uint8_t* row = x + h.i0[oh] * win * block;
  const int64_t wout = static_cast<int64_t>(w.i0.size());
  for (int64_t ow = 0; ow < wout; ++ow) std::memcpy(y + ow * block, row + w.i0[ow] * block, static_cast<size_t>(block));
}

class ResizeKernel : public Kernel {
 public:
  explicit ResizeKernel(const KernelArgs& a) {
    a.expect_inputs(1, 4);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    y_ = &a.out(0);
    if (x_->rank() != 4 && x_->rank() != 5) {
      invalid("input must be 4-D (N,C,H,W) or 5-D (N,C,D,H,W), got ", shape_str(x_->shape));
    }
    const int r = x_->rank();
    if (y_->dtype != x_->dtype || y_->rank() != r || y_->shape[0] != x_->shape[0] || y_->shape[1] != x_->shape[1]) {
      invalid("output ", type_str(y_->dtype, y_->shape), " must keep the input's dtype, N and C (input ",
              type_str(x_->dtype, x_->shape), ")");
    }
    mode_ = a.attr_str("mode", "nearest");
    const std::string coord = a.attr_str("coordinate_transformation_mode", "half_pixel");
    const std::string nearest = a.attr_str("nearest_mode", "round_prefer_floor");
    if (mode_ != "nearest" && mode_ != "linear") invalid("mode must be nearest or linear, got '", mode_, "'");
    if (coord != "asymmetric" && coord != "half_pixel" && coord != "pytorch_half_pixel" && coord != "align_corners") {
      invalid("coordinate_transformation_mode '", coord, "' is not supported");
    }
    if (nearest != "floor" && nearest != "ceil" && nearest != "round_prefer_floor" && nearest != "round_prefer_ceil") {
      invalid("nearest_mode '", nearest, "' is not supported");
    }
    linear_ = mode_ == "linear";
    if (linear_) a.expect_dtype(*x_, DType::kFloat32, "input X of a linear Resize");
    std::vector<double> scales = a.attr_floats("scales", {});
    if (scales.size() != static_cast<size_t>(r - 2)) {
      invalid("scales must have ", r - 2, " values (one a spatial axis), got ", scales.size());
    }
    for (double s : scales) {
      if (!(s > 0) || !std::isfinite(s)) invalid("scales must be positive and finite");
    }
    if (r == 4) scales.insert(scales.begin(), 1.0);  // a depth of one, kept
    din_ = r == 5 ? x_->shape[2] : 1;
    dout_ = r == 5 ? y_->shape[2] : 1;
    const int64_t hin = x_->shape[r - 2], win = x_->shape[r - 1];
    if ((din_ == 0 || hin == 0 || win == 0) && y_->numel != 0) {
      invalid("cannot resize an empty image to ", shape_str(y_->shape));
    }
    if (din_ > 0 && hin > 0 && win > 0) {
      d_ = axis_taps(mode_, coord, nearest, din_, dout_, scales[0]);
      h_ = axis_taps(mode_, coord, nearest, hin, y_->shape[r - 2], scales[1]);
      w_ = axis_taps(mode_, coord, nearest, win, y_->shape[r - 1], scales[2]);
    }
    if (x_->format != y_->format) {
      invalid("input and output must share one format, got ", format_name(x_->format), " and ",
              format_name(y_->format));
    }
    const int64_t c = x_->shape[1];
    switch (x_->format) {
      case Format::kPlain: planes_ = x_->shape[0] * c; break;
      case Format::kNhwc: planes_ = x_->shape[0], inner_ = c; break;
      case Format::kNChw8c:
      case Format::kNChw16c:  // unpadded (format_violation): whole blocks
        inner_ = x_->format == Format::kNChw8c ? 8 : 16;
        planes_ = x_->shape[0] * (c / inner_);
        break;
    }
  }

  Status run(ExecContext& ctx) override {
    const int r = x_->rank();
    const int64_t hin = x_->shape[r - 2], win = x_->shape[r - 1], hout = y_->shape[r - 2], wout = y_->shape[r - 1];
    const int64_t rows = planes_ * dout_ * hout;  // output rows of every plane (and depth)
    const uint8_t* x = ctx.ptr(*x_);
    uint8_t* y = ctx.ptr(*y_);
    const size_t es = dtype_size(x_->dtype);
    const int64_t px = inner_ * static_cast<int64_t>(es);  // bytes of a stored pixel
    const int64_t slice = hin * win * px;  // bytes of one input depth slice
    for_rows(rows, static_cast<int64_t>(y_->nbytes), [&](int64_t row) {
      const int64_t plane = row / (dout_ * hout), od = (row / hout) % dout_, oh = row % hout;
      const uint8_t* xp = x + (plane * din_ + d_.i0[od]) * slice;  // the (nearer) depth slice
      uint8_t* yr = y + row * wout * px;
      if (linear_) {
        // a second depth slice where the depth is resized and this output falls between two
        const uint8_t* xq = x + (plane * din_ + d_.i1[od]) * slice;
        const float a = d_.w0[od], b = xq == xp ? 0.f : d_.w1[od];
        if (inner_ == 1) {
          linear_row(reinterpret_cast<float*>(yr), reinterpret_cast<const float*>(xp), win, oh);
          if (b != 0.f) bilinear_pixels<true>(reinterpret_cast<float*>(yr), reinterpret_cast<const float*>(xq), win, oh, 1, a, b);
        } else {
          bilinear_pixels<false>(reinterpret_cast<float*>(yr), reinterpret_cast<const float*>(xp), win, oh, inner_);
          if (b != 0.f) bilinear_pixels<true>(reinterpret_cast<float*>(yr), reinterpret_cast<const float*>(xq), win, oh, inner_, a, b);
        }
        return;
      }
      if (inner_ != 1) {
        nearest_pixels(yr, xp, h_, w_, win, oh, px);
        return;
      }
      switch (es) {
        case 1: nearest_plane(yr, xp, h_, w_, win, oh); break;
        case 2: nearest_plane(reinterpret_cast<uint16_t*>(yr), reinterpret_cast<const uint16_t*>(xp), h_, w_, win, oh); break;
        case 4: nearest_plane(reinterpret_cast<uint32_t*>(yr), reinterpret_cast<const uint32_t*>(xp), h_, w_, win, oh); break;
        default: nearest_plane(reinterpret_cast<uint64_t*>(yr), reinterpret_cast<const uint64_t*>(xp), h_, w_, win, oh);
      }
    });
    return Status::Ok();
  }

 private:
  void linear_row(float* y, const float* x, int64_t win, int64_t oh) const {
    const float* r0 = x + h_.i0[oh] * win;
    const float* r1 = x + h_.i1[oh] * win;
    const float a = h_.w0[oh], b = h_.w1[oh];
    const int64_t wout = static_cast<int64_t>(w_.i0.size());
    for (int64_t ow = 0; ow < wout; ++ow) {
      const int64_t c0 = w_.i0[ow], c1 = w_.i1[ow];
      const float top = w_.w0[ow] * r0[c0] + w_.w1[ow] * r0[c1];
      const float bottom = w_.w0[ow] * r1[c0] + w_.w1[ow] * r1[c1];
      y[ow] = a * top + b * bottom;
    }
  }

  // linear_row over pixels of n channels (stored together): the channel loop is the inner
  // one, so it vectorizes. kBlend: y = a * y + b * (the bilinear row of slice x), the
  // trilinear blend of two depth slices, the first already in y (n 1 too).
  template <bool kBlend>
  void bilinear_pixels(float* y, const float* x, int64_t win, int64_t oh, int64_t n, float a = 0.f,
                       float b = 0.f) const {
    const float* r0 = x + h_.i0[oh] * win * n;
    const float* r1 = x + h_.i1[oh] * win * n;
    const float ha = h_.w0[oh], hb = h_.w1[oh];
    const int64_t wout = static_cast<int64_t>(w_.i0.size());
    for (int64_t ow = 0; ow < wout; ++ow) {
      const float* p00 = r0 + w_.i0[ow] * n;
      const float* p01 = r0 + w_.i1[ow] * n;
      const float* p10 = r1 + w_.i0[ow] * n;
      const float* p11 = r1 + w_.i1[ow] * n;
      const float u = w_.w0[ow], v = w_.w1[ow];
      float* out = y + ow * n;
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) {
        const float value = ha * (u * p00[c] + v * p01[c]) + hb * (u * p10[c] + v * p11[c]);
        out[c] = kBlend ? a * out[c] + b * value : value;
      }
    }
  }

  const TensorInfo* x_;
  const TensorInfo* y_;
  int64_t planes_ = 0, inner_ = 1;
  int64_t din_ = 1, dout_ = 1;  // depth (5-D), else 1
  std::string mode_;
  bool linear_ = false;
  Taps d_, h_, w_;
};

}  // namespace

std::unique_ptr<Kernel> make_resize(const KernelArgs& a) { return std::make_unique<ResizeKernel>(a); }

}  // namespace ge
