// ReduceMean and ReduceSum on oneDNN reduction; ReduceMax and ReduceMin as a loop of our
// own (oneDNN's max gave -FLT_MAX for a row of -inf and dropped NaNs, numpy's propagate),
// and Sum/Mean too where oneDNN would run its reference implementation.
// Axes come from the attr "axes" or (opset 18) a constant second input; keepdims only
// changes the output's shape, not its bytes, so the kernels always see the keepdims form.
// Input and output stored NHWC (LayoutRule::kReduce: the output keeps the rank, as in a
// convolution region's coordinate attention or CBAM channel pooling) are folded in the stored
// order of the axes, the reduced ones mapped with them.
#include <algorithm>
#include <limits>

#include "dnnl_util.h"
#include "kernels.h"

namespace ge {

namespace {

// The keepdims shape of reducing `x` over the node's axes, after checking the output's
// shape; `*any_real` tells whether some reduced axis has more than one element.
Shape reduced_shape(const KernelArgs& a, const TensorInfo& x, const TensorInfo& y, bool* any_real) {
  const int rank = x.rank();
  std::vector<int64_t> axes = a.opt_in(1) ? a.const_ints(1) : a.attr_ints("axes", {});
  const bool keepdims = a.attr_int("keepdims", 1) != 0;
  const bool noop = axes.empty() && a.attr_int("noop_with_empty_axes", 0) != 0;
  std::vector<bool> reduced(static_cast<size_t>(rank), axes.empty() && !noop);
  for (int64_t ax : axes) {
    const int d = normalize_axis(ax, rank);
    if (reduced[d]) invalid("axis ", ax, " appears twice in axes");
    reduced[d] = true;
  }
  Shape keep_shape, out_shape;
  *any_real = false;
  for (int d = 0; d < rank; ++d) {
    if (reduced[d]) {
      keep_shape.push_back(1);
      if (keepdims) out_shape.push_back(1);
      *any_real = *any_real || x.shape[d] != 1;
    } else {
      keep_shape.push_back(x.shape[d]);
      out_shape.push_back(x.shape[d]);
    }
  }
  if (y.shape != out_shape) {
    invalid("output shape ", shape_str(y.shape), " does not match computed ", shape_str(out_shape));
  }
  return keep_shape;
}

// The format both operands are folded in: NHWC when either is stored so (format_violation
// let only NHWC or a format-invariant plain partner beside it), else plain.
Format fold_format(const TensorInfo& x, const TensorInfo& y) {
  for (const TensorInfo* t : {&x, &y}) {
    if (!t->plain() && t->format != Format::kNhwc) {
      invalid("tensor '", t->name, "' is stored ", format_name(t->format), "; a reduction takes nchw or nhwc");
    }
  }
  return x.format == Format::kNhwc || y.format == Format::kNhwc ? Format::kNhwc : Format::kPlain;
}

class ReduceKernel : public PrimitiveOrCopyKernel {  // nothing reduced: a copy
 public:
  explicit ReduceKernel(const KernelArgs& a);
};

ReduceKernel::ReduceKernel(const KernelArgs& a) : PrimitiveOrCopyKernel(*a.device) {
  a.expect_inputs(1, 2);
  a.expect_outputs(1, 1);
  x_ = &a.in(0);
  y_ = &a.out(0);
  a.expect_dtype(*x_, DType::kFloat32, "input X");
  a.expect_dtype(*y_, DType::kFloat32, "output Y");
  bool any_real = false;
  const Shape keep_shape = reduced_shape(a, *x_, *y_, &any_real);
  if (!any_real && !(a.op == "ReduceMean" && x_->numel == 0)) return;  // a copy (or empty)
  if (x_->numel == 0) invalid("cannot reduce an empty tensor");
  const dnnl::algorithm alg = a.op == "ReduceMean" ? dnnl::algorithm::reduction_mean : dnnl::algorithm::reduction_sum;
  const Format f = fold_format(*x_, *y_);
  dnnl::memory::desc xmd = format_md(x_->shape, f), ymd = format_md(keep_shape, f);
  dnnl::reduction::primitive_desc pd(host_engine(dev_), alg, xmd, ymd, 0.f, 0.f, make_attr());
  prim_ = Prim(pd);
  prim_.arg(DNNL_ARG_SRC, xmd, Ref::of(*x_));
  prim_.arg(DNNL_ARG_DST, ymd, Ref::of(*y_));
  Prim::share_scratchpad(&plan_, {&prim_});
}

// Merged axes a fold handles (a tensor's rank bounds them).
constexpr int kMaxFoldRank = 16;

// ReduceMax / ReduceMin / ReduceProd, and ReduceSum / ReduceMean where oneDNN would run its reference
// implementation (a middle axis of a 3-D tensor: 36% of one zoo model): the input is read
// once in memory order, each element folded into its output element. Dims are merged into
// runs of reduced or kept axes, so the inner loop either folds a contiguous row into one
// output or folds a row into a row of outputs.
class FoldKernel : public Kernel {
 public:
  explicit FoldKernel(const KernelArgs& a) {
    a.expect_inputs(1, 2);
    a.expect_outputs(1, 1);
    x_ = &a.in(0);
    y_ = &a.out(0);
    if (y_->dtype != x_->dtype) invalid("output dtype ", dtype_name(y_->dtype), " differs from input ", dtype_name(x_->dtype));
    bool any_real = false;
    const Format f = fold_format(*x_, *y_);
    const Shape keep = stored_shape(reduced_shape(a, *x_, *y_, &any_real), f);
    const Shape xs = stored_shape(x_->shape, f);
    max_ = a.op == "ReduceMax";
    sum_ = a.op == "ReduceSum" || a.op == "ReduceMean";
    prod_ = a.op == "ReduceProd";
    if (a.op == "ReduceMean" && y_->numel > 0) scale_ = static_cast<double>(y_->numel) / static_cast<double>(x_->numel);
    // Merged dims: size, and the output stride (0 along reduced ones).
    const Shape ys = dense_strides(keep);
    for (size_t d = 0; d < xs.size(); ++d) {
      const int64_t n = xs[d];
      if (n == 1) continue;
      const int64_t stride = keep[d] == 1 ? 0 : ys[d];
      if (!dims_.empty() && (stride == 0) == (strides_.back() == 0) && (stride == 0 || strides_.back() == stride * n)) {
        dims_.back() *= n;
        strides_.back() = stride;
      } else {
        dims_.push_back(n);
        strides_.push_back(stride);
      }
    }
    if (dims_.empty()) {
      dims_.push_back(1);
      strides_.push_back(0);
    }
    if (dims_.size() > static_cast<size_t>(kMaxFoldRank)) invalid("rank ", x_->rank(), " exceeds ", kMaxFoldRank);
    const bool typed = with_arith_type(x_->dtype, [this](auto v) { run_ = &FoldKernel::run_as<decltype(v)>; });
    if (!typed) invalid(a.op, " does not support ", dtype_name(x_->dtype));
  }

  Status run(ExecContext& ctx) override { return (this->*run_)(ctx); }
  std::string impl() const override { return "loop"; }
  // The length of the contiguous rows folded into one output each when the reduced axes are
  // exactly the trailing ones (after merging), else 0.
  int64_t trailing_row() const {
    if (strides_.back() != 0) return 0;
    for (size_t d = 0; d + 1 < strides_.size(); ++d) {
      if (strides_[d] == 0) return 0;
    }
    return dims_.back();
  }

 private:
  template <class T>
  Status run_as(ExecContext& ctx) {
    const T* x = ctx.ptr<const T>(*x_);
    T* y = ctx.ptr<T>(*y_);
    // numpy's initial: -inf / +inf (the value of an empty reduction), the integer's
    // extremes; 0 for a sum
    using L = std::numeric_limits<T>;
    const T init = sum_ ? T(0) : prod_ ? T(1)
                   : L::has_infinity ? (max_ ? -L::infinity() : L::infinity()) : (max_ ? L::lowest() : L::max());
    std::fill(y, y + y_->numel, init);
    if (x_->numel == 0) return Status::Ok();
    const bool max = max_, sum = sum_, prod = prod_;
    auto fold = [max, sum, prod](T acc, T v) {  // NaN wins and stays
      if (sum) return static_cast<T>(acc + v);
      if (prod) {  // integers wrap, as numpy's
        if constexpr (std::is_integral_v<T>) {
          using U = std::make_unsigned_t<T>;
          return static_cast<T>(static_cast<U>(acc) * static_cast<U>(v));
        } else {
          return static_cast<T>(acc * v);
        }
      }
      if constexpr (std::is_floating_point_v<T>) {
        if (v != v) return v;
      }
      return (max ? v > acc : v < acc) ? v : acc;
    };
    const int r = static_cast<int>(dims_.size());
    const int64_t n = dims_[r - 1], s = strides_[r - 1];
    const int64_t rows = x_->numel / n;
    // Each row's output offset is kept by an odometer (a division per axis a row cost more
    // than a short row's adds)
    int64_t idx[kMaxFoldRank] = {};
    int64_t out = 0;
    for (int64_t row = 0; row < rows; ++row) {
      const T* in = x + row * n;
      if (s == 0 && sum) {
        // Eight partial sums: independent adds the compiler vectorises (one chain of
        // dependent adds costs a latency per element).
        T part[8] = {};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
          for (int k = 0; k < 8; ++k) part[k] += in[i + k];
        }
        T acc = y[out];
        for (; i < n; ++i) acc += in[i];
        y[out] = static_cast<T>(acc + (((part[0] + part[1]) + (part[2] + part[3])) +
                                       ((part[4] + part[5]) + (part[6] + part[7]))));
      } else if (s == 0) {
        T acc = y[out];
        for (int64_t i = 0; i < n; ++i) acc = fold(acc, in[i]);
        y[out] = acc;
      } else if (sum) {
        T* o = y + out;
        for (int64_t i = 0; i < n; ++i) o[i] += in[i];
      } else {
        T* o = y + out;
        for (int64_t i = 0; i < n; ++i) o[i] = fold(o[i], in[i]);
      }
      for (int d = r - 2; d >= 0; --d) {  // the next row's output offset
        out += strides_[d];
        if (++idx[d] < dims_[d]) break;
        idx[d] = 0;
        out -= strides_[d] * dims_[d];
      }
    }
    if (scale_ != 1.0) {
      for (int64_t i = 0; i < y_->numel; ++i) y[i] = static_cast<T>(y[i] * scale_);
    }
    return Status::Ok();
  }

  const TensorInfo* x_;
  const TensorInfo* y_;
  bool max_ = true;
  bool sum_ = false;
  bool prod_ = false;
  double scale_ = 1.0;  // ReduceMean: 1 / the elements folded into each output
  Shape dims_, strides_;
  Status (FoldKernel::*run_)(ExecContext&) = nullptr;
};

}  // namespace

constexpr int64_t kShortRow = 1024;
constexpr int64_t kShortRowsElements = int64_t{1} << 22;  // one thread's loop: up to 16 MB

std::unique_ptr<Kernel> make_reduce(const KernelArgs& a) {
  if (a.op == "ReduceMax" || a.op == "ReduceMin" || a.op == "ReduceProd") return std::make_unique<FoldKernel>(a);
  // Integer sums (a count of selected items: ArgMax == label, summed) are the loop's.
  if (!a.inputs.empty() && a.in(0).dtype != DType::kFloat32) return std::make_unique<FoldKernel>(a);
  // (the loop folds the stored order of a plain or NHWC tensor, the only formats a reduction
  // takes: format_violation)
  const bool operands = !a.inputs.empty() && !a.outputs.empty();
  // A small reduction (an RMSNorm's mean over a row of 64): the loop.
  if (operands && a.in(0).numel <= kSmallOpElements) return std::make_unique<FoldKernel>(a);
  // A sum or mean over short trailing rows (Swin-V2's cosine attention normalizes rows of 32
  // head channels: oneDNN's reduction took ~450 us a call at batch 8, 43% of the model): the
  // loop's eight partial sums a row.
  std::unique_ptr<FoldKernel> fold;
  if (operands && a.in(0).numel <= kShortRowsElements) {
    fold = std::make_unique<FoldKernel>(a);
    const int64_t row = fold->trailing_row();
    if (row > 0 && row <= kShortRow) return fold;
  }
  auto k = std::make_unique<ReduceKernel>(a);
  if (k->impl().find(" ref") == std::string::npos) return k;
  return fold ? std::move(fold) : std::make_unique<FoldKernel>(a);
}

}  // namespace ge
