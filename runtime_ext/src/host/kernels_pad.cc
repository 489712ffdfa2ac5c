// Pad, any dtype: constant (the fill value, then the input copied into the middle; negative
// pads crop), reflect and edge (every output element read from an input element: the
// source index of each output position is computed per axis at load, so run() reads only
// inside the input). A Pad of H and W only runs in the layout region's format too (NHWC or
// blocked, LayoutRule::kSpatial): the kernels work on the stored order of the axes (NHWC:
// [N, H, W, C]; nChw<b>c: [N, C/b, H, W, b]) with the pads moved along, so a U-Net's reflect
// pads between NHWC convolutions need no conversion on either side.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "copy.h"
#include "kernels.h"
#include "layout.h"

namespace ge {

namespace {

// What every Pad kernel reads: X, Y and the begin / end pads of each axis (from the pads
// input of opset 11+ or the attribute, and axes), checked against Y's shape; then the same
// in the order the format stores the axes (shape_, begin_, end_ below are that order).
struct PadArgs {
  const TensorInfo* x_;
  const TensorInfo* y_;
  std::vector<int64_t> begin_, end_;
  Shape x_shape_, y_shape_;  // the stored order of the axes

  explicit PadArgs(const KernelArgs& a) : x_(&a.in(0)), y_(&a.out(0)) {
    a.expect_inputs(1, 4);
    a.expect_outputs(1, 1);
    const int rank = x_->rank();
    std::vector<int64_t> pads = a.opt_in(1) ? a.const_ints(1) : a.attr_ints("pads", {});
    std::vector<int64_t> axes;
    if (a.opt_in(3)) {
      axes = a.const_ints(3);
    } else {
      for (int i = 0; i < rank; ++i) axes.push_back(i);
    }
    if (pads.size() != 2 * axes.size()) invalid("pads ", shape_str(pads), " must have ", 2 * axes.size(), " values");
    begin_.assign(static_cast<size_t>(rank), 0);
    end_.assign(static_cast<size_t>(rank), 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      const int d = normalize_axis(axes[i], rank);
      begin_[d] = pads[i];
      end_[d] = pads[i + axes.size()];
    }
    if (y_->dtype != x_->dtype) invalid("output dtype ", dtype_name(y_->dtype), " differs from input ", dtype_name(x_->dtype));
    Shape out(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) {
      out[d] = add_checked(add_checked(x_->shape[d], begin_[d]), end_[d]);
      if (out[d] < 0) invalid("pads ", shape_str(pads), " remove more than the input has on axis ", d);
    }
    if (y_->shape != out) invalid("output shape ", shape_str(y_->shape), " does not match computed ", shape_str(out));
    x_shape_ = x_->shape;
    y_shape_ = y_->shape;
    if (x_->plain() && y_->plain()) return;
    // The layout pass only keeps a Pad of the spatial axes in the region (format_violation has
    // checked that X and Y share the format and that neither is padded): NHWC of rank 3 to 5
    // (N, spatial..., C), a blocked format of rank 4 (N, C/b, H, W, b).
    const bool nhwc = x_->format == Format::kNhwc;
    const bool ranked = nhwc ? rank >= 3 && rank <= 5 : rank == 4;
    if (x_->format != y_->format || !ranked || begin_[0] || begin_[1] || end_[0] || end_[1]) {
      invalid("a Pad stored ", format_name(x_->format), " pads the spatial axes only, in one format; got pads ",
              shape_str(pads), " from ", format_name(x_->format), " to ", format_name(y_->format));
    }
    const int64_t b = x_->format == Format::kNChw8c ? 8 : 16;
    auto stored = [&](const Shape& s) -> Shape {
      Shape t = {s[0]};
      if (!nhwc) t.push_back(s[1] / b);
      t.insert(t.end(), s.begin() + 2, s.end());
      t.push_back(nhwc ? s[1] : b);
      return t;
    };
    auto stored_pads = [&](const std::vector<int64_t>& p) {
      std::vector<int64_t> t = {0};
      if (!nhwc) t.push_back(0);
      t.insert(t.end(), p.begin() + 2, p.end());
      t.push_back(0);
      return t;
    };
    x_shape_ = stored(x_->shape);
    y_shape_ = stored(y_->shape);
    begin_ = stored_pads(begin_);
    end_ = stored_pads(end_);
  }

  int rank() const { return static_cast<int>(x_shape_.size()); }
};

class PadKernel : public Kernel, PadArgs {
 public:
  explicit PadKernel(const KernelArgs& a);
  Status run(ExecContext& ctx) override {
    const size_t es = dtype_size(y_->dtype);
    uint8_t* y = ctx.ptr(*y_);
    fill_elements(y, y_->numel, value_, es);
    if (copy_numel_ > 0) {
      strided_copy2(y + dst_offset_ * static_cast<int64_t>(es), y_strides_,
                    ctx.ptr(*x_) + src_offset_ * static_cast<int64_t>(es), x_strides_, copy_dims_, es);
    }
    return Status::Ok();
  }

 private:
  alignas(8) uint8_t value_[8] = {};
  Shape copy_dims_, x_strides_, y_strides_;
  int64_t copy_numel_ = 0;
  int64_t src_offset_ = 0, dst_offset_ = 0;
};

template <class T>
void store_value(double v, uint8_t* out) {
  T t;
  if constexpr (std::is_integral_v<T>) {
    t = float_to_int<T>(v);
  } else {
    t = static_cast<T>(v);
  }
  std::memcpy(out, &t, sizeof(T));
}

PadKernel::PadKernel(const KernelArgs& a) : PadArgs(a) {
  const int rank = this->rank();
  const std::vector<int64_t>& begin = begin_;
  const std::vector<int64_t>& end = end_;
  double value = a.attr_float("value", 0.0);
  if (a.opt_in(2)) {
    const TensorInfo& v = a.in(2);
    if (!v.constant() || v.numel != 1 || v.dtype != x_->dtype) {
      invalid("constant_value must be a one-element constant of the data's dtype");
    }
    std::memcpy(value_, v.data, dtype_size(v.dtype));
  } else {
    switch (x_->dtype) {
      case DType::kFloat32: store_value<float>(value, value_); break;
      case DType::kFloat64: store_value<double>(value, value_); break;
      case DType::kFloat16: {
        uint16_t h = float_to_half(static_cast<float>(value));
        std::memcpy(value_, &h, 2);
        break;
      }
      case DType::kInt64: store_value<int64_t>(value, value_); break;
      case DType::kInt32: store_value<int32_t>(value, value_); break;
      case DType::kInt16: store_value<int16_t>(value, value_); break;
      case DType::kInt8: store_value<int8_t>(value, value_); break;
      case DType::kUInt8: store_value<uint8_t>(value, value_); break;
      case DType::kBool: value_[0] = value != 0.0; break;
    }
  }
  const Shape xs = dense_strides(x_shape_), ys = dense_strides(y_shape_);
  copy_numel_ = 1;
  for (int d = 0; d < rank; ++d) {
    // Negative pads crop: skip that much of the input and start the output at 0.
    const int64_t n = add_checked(add_checked(x_shape_[d], std::min<int64_t>(begin[d], 0)),
                                  std::min<int64_t>(end[d], 0));
    if (n <= 0) {  // nothing of the input survives: the output is all padding
      copy_numel_ = 0;
      return;
    }
    copy_dims_.push_back(n);
    copy_numel_ *= n;
  }
  x_strides_ = xs;
  y_strides_ = ys;
  // Bounded now: 0 <= -begin < input dim and 0 <= begin < output dim.
  for (int d = 0; d < rank; ++d) {
    src_offset_ += std::max<int64_t>(-begin[d], 0) * xs[d];
    dst_offset_ += std::max<int64_t>(begin[d], 0) * ys[d];
  }
}


// Reflect and edge: each output element is one input element. The axes after the last
// padded one form contiguous blocks of `inner_` elements (NHWC: the channels of a pixel);
// an output row (every index of the axes before it) is its begin blocks, the input's row
// copied whole, and its end blocks, each read through a per-axis table of source indices.
class IndexPadKernel : public Kernel, PadArgs {
 public:
  IndexPadKernel(const KernelArgs& a, bool reflect) : PadArgs(a) {
    const int rank = this->rank();
    if (rank == 0) invalid("cannot pad a scalar");
    for (int d = 0; d < rank; ++d) {
      if (begin_[d] < 0 || end_[d] < 0) invalid(reflect ? "reflect" : "edge", " Pad takes no negative pads");
      const int64_t n = x_shape_[d];
      if (n == 0 && y_shape_[d] > 0) invalid("cannot ", reflect ? "reflect" : "extend", " an empty axis ", d);
      std::vector<int64_t> src(static_cast<size_t>(y_shape_[d]));
      const int64_t period = 2 * (n - 1);
      for (int64_t i = 0; i < y_shape_[d]; ++i) {
        int64_t j = i - begin_[d];
        if (!reflect || n == 1) {
          j = std::clamp<int64_t>(j, 0, n - 1);
        } else {  // mirror without repeating the edge, as numpy's "reflect", any pad width
          j = ((j % period) + period) % period;
          if (j >= n) j = period - j;
        }
        src[static_cast<size_t>(i)] = j;
      }
      src_.push_back(std::move(src));
      if (begin_[d] != 0 || end_[d] != 0) last_ = d;
    }
    x_strides_ = dense_strides(x_shape_);
    for (int d = last_ + 1; d < rank; ++d) inner_ *= x_shape_[d];
    rows_ = 1;
    for (int d = 0; d < last_; ++d) rows_ *= y_shape_[d];
  }

  Status run(ExecContext& ctx) override {
    if (y_->numel == 0) return Status::Ok();
    const int64_t es = static_cast<int64_t>(dtype_size(x_->dtype));
    const uint8_t* x = ctx.ptr(*x_);
    uint8_t* y = ctx.ptr(*y_);
    if (last_ < 0) {  // nothing padded
      std::memcpy(y, x, static_cast<size_t>(y_->nbytes));
      return Status::Ok();
    }
    const size_t k = static_cast<size_t>(last_);
    const int64_t block = inner_ * es;                     // bytes of one index of the last padded axis
    const int64_t x_row = x_shape_[k] * block, y_row = y_shape_[k] * block;
    const int64_t b = begin_[k], e = end_[k];
    const std::vector<int64_t>& last = src_[k];
    for_rows(rows_, static_cast<int64_t>(y_->nbytes), [&](int64_t r) {
      int64_t off = 0, rem = r;  // the source row of output row r (in elements)
      for (int d = last_ - 1; d >= 0; --d) {
        const int64_t i = rem % y_shape_[d];
        rem /= y_shape_[d];
        off += src_[static_cast<size_t>(d)][static_cast<size_t>(i)] * x_strides_[d];
      }
      const uint8_t* in = x + off * es;
      uint8_t* out = y + r * y_row;
      auto blocks = [&](int64_t from, int64_t to) {
        for (int64_t i = from; i < to; ++i) {
          std::memcpy(out + i * block, in + last[static_cast<size_t>(i)] * block, static_cast<size_t>(block));
        }
      };
      blocks(0, b);
      std::memcpy(out + b * block, in, static_cast<size_t>(x_row));
      blocks(b + x_shape_[k], b + x_shape_[k] + e);
    });
    return Status::Ok();
  }

 private:
  std::vector<std::vector<int64_t>> src_;  // per axis: the input index of each output index
  Shape x_strides_;
  int last_ = -1;        // the last padded axis (stored order); -1: none
  int64_t inner_ = 1;    // elements of the axes after it
  int64_t rows_ = 1;     // output rows: indices of the axes before it
};

}  // namespace

std::unique_ptr<Kernel> make_pad(const KernelArgs& a) {
  const std::string mode = a.attr_str("mode", "constant");
  if (mode == "reflect" || mode == "edge") return std::make_unique<IndexPadKernel>(a, mode == "reflect");
  if (mode != "constant") invalid("mode must be constant, reflect or edge, got '", mode, "'");
  return std::make_unique<PadKernel>(a);
}

}  // namespace ge
