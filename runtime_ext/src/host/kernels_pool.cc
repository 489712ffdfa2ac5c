// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool on oneDNN pooling (a plain MaxPool
// or AveragePool that oneDNN would run on its simple_nchw reference on a loop of ours).
// The output tensor's shape is authoritative (it encodes ceil_mode): the right padding
// given to oneDNN is grown until oneDNN's output size equals it.
#include <algorithm>
#include <limits>

#include "dnnl_util.h"
#include "kernels.h"

namespace ge {

namespace {

using dims = dnnl::memory::dims;

class PoolKernel : public PrimitiveKernel {
 public:
  explicit PoolKernel(const KernelArgs& a);

  // The geometry oneDNN was given, for the loop below (2-D spatial only).
  dims kernel, strides, dil, pad_l;
};

// MaxPool or AveragePool of a plain [N, C, H, W] where oneDNN has only its plain-layout
// reference implementation (simple_nchw: a 1-D pool of a byte CNN, lifted to [N, C, 1, L],
// took 15% of its run; an unseen ESPNetv2's 3x3 stride-2 average pyramid of its 3-channel
// input, [4, 3, 128, 128] -> [4, 3, 64, 64], 0.99 ms): each plane's windows in a loop. Max
// ignores the padding; an all-padding window (which the shapes do not produce) gives the
// lowest float, as oneDNN's did. Average divides by the taps inside the input (exclude
// padding) or by every tap of the window, padding included (the right padding grown for
// ceil_mode counts as padding, as it does in oneDNN's).
class PlanePool : public Kernel {
 public:
  PlanePool(const TensorInfo& x, const TensorInfo& y, const PoolKernel& g, bool max, bool include_pad)
      : x_(&x), y_(&y), k_(g.kernel), s_(g.strides), d_(g.dil), p_(g.pad_l), max_(max), include_pad_(include_pad) {}
  Status run(ExecContext& ctx) override {
    const float* x = ctx.ptr<const float>(*x_);
    float* y = ctx.ptr<float>(*y_);
    const int64_t planes = x_->shape[0] * x_->shape[1];
    if (x_->numel >= 65536) {
#pragma omp parallel for schedule(static)
      for (int64_t p = 0; p < planes; ++p) max_ ? plane<true>(x, y, p) : plane<false>(x, y, p);
    } else {
      for (int64_t p = 0; p < planes; ++p) max_ ? plane<true>(x, y, p) : plane<false>(x, y, p);
    }
    return Status::Ok();
  }
  std::string impl() const override { return max_ ? "plane loop" : "plane loop (average)"; }

 private:
  template <bool kMax>
  void plane(const float* x, float* y, int64_t p) const {
    const int64_t ih = x_->shape[2], iw = x_->shape[3], oh = y_->shape[2], ow = y_->shape[3];
    const int64_t kh = k_[0], kw = k_[1], sh = s_[0], sw = s_[1], dh = d_[0] + 1, dw = d_[1] + 1;
    const int64_t ph = p_[0], pw = p_[1];
    // Columns whose window lies inside the row: no bounds checks there.
    const int64_t c_lo = std::min(ow, (pw + sw - 1) / sw);
    const int64_t last = iw - 1 - (kw - 1) * dw + pw;  // the largest c * sw that still fits
    const int64_t c_hi = last < 0 ? c_lo : std::max(c_lo, std::min(ow, last / sw + 1));
    const float* in = x + p * ih * iw;
    float* out = y + p * oh * ow;
    auto inside = [&](int64_t c) {  // the window's taps inside the row
      int64_t n = 0;
      for (int64_t b = 0; b < kw; ++b) {
        const int64_t j = c * sw - pw + b * dw;
        n += j >= 0 && j < iw;
      }
      return n;
    };
    for (int64_t r = 0; r < oh; ++r) {
      float* o = out + r * ow;
      std::fill(o, o + ow, kMax ? std::numeric_limits<float>::lowest() : 0.f);
      int64_t rows = 0;  // the window's rows inside the input
      for (int64_t a = 0; a < kh; ++a) {
        const int64_t i = r * sh - ph + a * dh;
        if (i < 0 || i >= ih) continue;
        ++rows;
        const float* row = in + i * iw;
        auto edge = [&](int64_t c) {
          float m = o[c];
          for (int64_t b = 0; b < kw; ++b) {
            const int64_t j = c * sw - pw + b * dw;
            if (j >= 0 && j < iw) m = kMax ? (row[j] > m ? row[j] : m) : m + row[j];
          }
          o[c] = m;
        };
        for (int64_t c = 0; c < c_lo; ++c) edge(c);
        for (int64_t c = c_lo; c < c_hi; ++c) {
          const float* w = row + c * sw - pw;
          float m = o[c];
          for (int64_t b = 0; b < kw; ++b) m = kMax ? (w[b * dw] > m ? w[b * dw] : m) : m + w[b * dw];
          o[c] = m;
        }
        for (int64_t c = c_hi; c < ow; ++c) edge(c);
      }
      if constexpr (!kMax) {
        if (include_pad_) {
          const float scale = 1.f / static_cast<float>(kh * kw);
          for (int64_t c = 0; c < ow; ++c) o[c] *= scale;
        } else {
          for (int64_t c = 0; c < ow; ++c) {
            const int64_t n = rows * (c >= c_lo && c < c_hi ? kw : inside(c));
            o[c] = n > 0 ? o[c] / static_cast<float>(n) : 0.f;
          }
        }
      }
    }
  }

  const TensorInfo *x_, *y_;
  dims k_, s_, d_, p_;
  bool max_, include_pad_;
};

PoolKernel::PoolKernel(const KernelArgs& a) : PrimitiveKernel(*a.device) {
  a.expect_inputs(1, 1);
  a.expect_outputs(1, 1);
  const TensorInfo& x = a.in(0);
  const TensorInfo& y = a.out(0);
  a.expect_dtype(x, DType::kFloat32, "input X");
  a.expect_dtype(y, DType::kFloat32, "output Y");
  const int rank = x.rank();
  if (rank < 3 || rank > 5) invalid("input X must be N,C,spatial... of rank 3 to 5, got ", shape_str(x.shape));
  const size_t sp = static_cast<size_t>(rank - 2);
  if (y.rank() != rank || y.shape[0] != x.shape[0] || y.shape[1] != x.shape[1]) {
    invalid("output shape ", shape_str(y.shape), " does not match input ", shape_str(x.shape));
  }
  const bool global = a.op == "GlobalAveragePool" || a.op == "GlobalMaxPool";
  dnnl::algorithm alg;
  if (a.op == "MaxPool" || a.op == "GlobalMaxPool") {
    alg = dnnl::algorithm::pooling_max;
  } else if (global || a.attr_int("count_include_pad", 0) == 0) {
    alg = dnnl::algorithm::pooling_avg_exclude_padding;
  } else {
    alg = dnnl::algorithm::pooling_avg_include_padding;
  }
  dims pad_r;
  if (global) {
    kernel = dims(x.shape.begin() + 2, x.shape.end());
    strides = dims(sp, 1);
    dil = pad_l = pad_r = dims(sp, 0);
    for (size_t i = 0; i < sp; ++i) {
      if (y.shape[2 + i] != 1) invalid("output shape ", shape_str(y.shape), " must have spatial dims of 1");
    }
  } else {
    if (a.outputs.size() > 1 && a.outputs[1]) invalid("the Indices output is not supported");
    std::vector<int64_t> k = a.attr_ints("kernel_shape", {});
    std::vector<int64_t> st = a.attr_ints("strides", std::vector<int64_t>(sp, 1));
    std::vector<int64_t> dl = a.attr_ints("dilations", std::vector<int64_t>(sp, 1));
    std::vector<int64_t> pads = a.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
    if (k.size() != sp) invalid("kernel_shape must have ", sp, " values, got ", shape_str(k));
    if (st.size() != sp) invalid("strides must have ", sp, " values, got ", shape_str(st));
    if (dl.size() != sp) invalid("dilations must have ", sp, " values, got ", shape_str(dl));
    if (pads.size() != 2 * sp) invalid("pads must have ", 2 * sp, " values, got ", shape_str(pads));
    const bool ceil_mode = a.attr_int("ceil_mode", 0) != 0;
    const std::string auto_pad = a.attr_str("auto_pad", "NOTSET");
    for (size_t i = 0; i < sp; ++i) {
      const int64_t in = x.shape[2 + i], out = y.shape[2 + i];
      if (k[i] < 1 || st[i] < 1 || dl[i] < 1) invalid("kernel_shape, strides and dilations must be >= 1");
      const int64_t span = add_checked(mul_checked(k[i] - 1, dl[i]), 1);
      int64_t pb = pads[i], pe = pads[i + sp];
      resolve_auto_pad(auto_pad, in, st[i], span, pads, &pb, &pe);
      if (pb >= span || pe >= span) invalid("pads ", shape_str(pads), " must be smaller than the kernel extent");
      const int64_t padded = add_checked(add_checked(in, pb), pe) - span;
      if (padded < 0) invalid("kernel extent ", span, " exceeds padded input on spatial axis ", i);
      const int64_t floor_out = padded / st[i] + 1;
      const int64_t ceil_out = (padded + st[i] - 1) / st[i] + 1;
      if (out != floor_out && !(ceil_mode && (out == ceil_out || out == ceil_out - 1))) {
        invalid("output shape ", shape_str(y.shape), " does not match input ", shape_str(x.shape),
                " on spatial axis ", i, ": expected ", ceil_mode ? ceil_out : floor_out);
      }
      // Right padding that makes oneDNN's floor-mode output size equal `out`.
      const int64_t need = add_checked(mul_checked(out - 1, st[i]), span) - in - pb;
      kernel.push_back(k[i]);
      strides.push_back(st[i]);
      dil.push_back(dl[i] - 1);
      pad_l.push_back(pb);
      pad_r.push_back(std::max(pe, need));
    }
  }
  dnnl::memory::desc x_md = tensor_md(x), y_md = tensor_md(y);
  int64_t y_spatial = 1;
  for (int i = 2; i < y.rank(); ++i) y_spatial *= y.shape[i];
  if (x.channels_last() && y.plain() && (y.shape[1] == 1 || y_spatial == 1)) {
    // A 1x1 (or single-channel) output has the same bytes in both layouts: describe it
    // like the input so oneDNN keeps its channels-last implementation.
    y_md = format_md(y.shape, Format::kNhwc);
  }
  dnnl::pooling_forward::primitive_desc pd(host_engine(dev_), dnnl::prop_kind::forward_inference, alg, x_md,
                                           y_md, strides, kernel, dil, pad_l, pad_r, make_attr());
  prim_ = Prim(pd);
  prim_.arg(DNNL_ARG_SRC, x_md, Ref::of(x));
  prim_.arg(DNNL_ARG_DST, y_md, Ref::of(y));
  Prim::share_scratchpad(&plan_, {&prim_});
}

}  // namespace

std::unique_ptr<Kernel> make_pool(const KernelArgs& a) {
  auto k = std::make_unique<PoolKernel>(a);  // validates the node in every case
  const TensorInfo& x = a.in(0);
  const TensorInfo& y = a.out(0);
  // (dilated: oneDNN's ref:any)
  const std::string impl = k->impl();
  if ((a.op == "MaxPool" || a.op == "AveragePool") && x.rank() == 4 && x.plain() && y.plain() &&
      (impl.find("simple_nchw") != std::string::npos || impl.find("ref") != std::string::npos)) {
    return std::make_unique<PlanePool>(x, y, *k, a.op == "MaxPool", a.attr_int("count_include_pad", 0) != 0);
  }
  // A plain global pool oneDNN would run on simple_nchw (a long 1-D signal's global max:
  // 0.48 ms for 512 x 508) is the reduction over the spatial axes, keepdims: its factory
  // (the folding loop, or oneDNN's reduction where that is jit).
  const bool global = a.op == "GlobalMaxPool" || a.op == "GlobalAveragePool";
  if (global && x.plain() && y.plain() && k->impl().find("simple_nchw") != std::string::npos) {
    std::vector<int64_t> axes;
    for (int d = 2; d < x.rank(); ++d) axes.push_back(d);
    const Attrs attrs = {{"axes", axes}, {"keepdims", int64_t{1}}};
    KernelArgs reduce = a;
    reduce.op = a.op == "GlobalMaxPool" ? "ReduceMax" : "ReduceMean";
    reduce.attrs = &attrs;
    return make_reduce(reduce);
  }
  return k;
}

}  // namespace ge
