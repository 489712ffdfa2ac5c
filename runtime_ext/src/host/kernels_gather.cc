// Gather and GatherND (ONNX): any data dtype, int64 or int32 indices, negative indices
// wrap. Indices are data, so they are checked at run time and a bad one fails the run,
// naming it.
#include <algorithm>
#include <cstring>

#include "copy.h"
#include "kernels.h"

namespace ge {

namespace {

// Data, int64 / int32 indices and the output, for both gathers.
struct GatherArgs {
  const TensorInfo* data_;
  const TensorInfo* idx_;
  const TensorInfo* y_;

  explicit GatherArgs(const KernelArgs& a) : data_(&a.in(0)), idx_(&a.in(1)), y_(&a.out(0)) {
    a.expect_inputs(2, 2);
    a.expect_outputs(1, 1);
    if (idx_->dtype != DType::kInt64 && idx_->dtype != DType::kInt32) {
      invalid("indices must be int64 or int32, got ", type_str(idx_->dtype, idx_->shape));
    }
  }
  // Index element i of the indices at `raw` (their bytes for this run).
  int64_t index(const uint8_t* raw, int64_t i) const {
    return idx_->dtype == DType::kInt64 ? reinterpret_cast<const int64_t*>(raw)[i]
                                        : reinterpret_cast<const int32_t*>(raw)[i];
  }
};

// `count` output slices from (outer slice o, index i) on: slice idx[i] of outer slice o of
// `src` (each `outer_stride` bytes) after another into `dst`.
struct Walk {
  const uint8_t* src;
  uint8_t* dst;
  const int64_t* idx;
  int64_t n, outer_stride, o, i, count;
};

// B bytes a slice (0: `bytes`, a run-time size).
template <int B>
void copy_slices(Walk w, int64_t bytes = B) {
  const uint8_t* s = w.src + w.o * w.outer_stride;
  for (int64_t k = 0; k < w.count; ++k, w.dst += bytes) {
    if constexpr (B > 0) {
      std::memcpy(w.dst, s + w.idx[w.i] * B, B);
    } else {
      std::memcpy(w.dst, s + w.idx[w.i] * bytes, static_cast<size_t>(bytes));
    }
    if (++w.i == w.n) {
      w.i = 0;
      s += w.outer_stride;
    }
  }
}

class GatherKernel : public Kernel, GatherArgs {
 public:
  explicit GatherKernel(const KernelArgs& a) : GatherArgs(a) {
    if (y_->dtype != data_->dtype) {
      invalid("output dtype ", dtype_name(y_->dtype), " differs from data dtype ", dtype_name(data_->dtype));
    }
    const int rank = data_->rank();
    if (rank < 1) invalid("data must have rank >= 1");
    axis_ = normalize_axis(a.attr_int("axis", 0), rank);
    Shape out(data_->shape.begin(), data_->shape.begin() + axis_);
    out.insert(out.end(), idx_->shape.begin(), idx_->shape.end());
    out.insert(out.end(), data_->shape.begin() + axis_ + 1, data_->shape.end());
    if (y_->shape != out) invalid("output shape ", shape_str(y_->shape), " does not match computed ", shape_str(out));
    outer_ = 1;
    for (int d = 0; d < axis_; ++d) outer_ *= data_->shape[d];
    dim_ = data_->shape[axis_];
    inner_bytes_ = static_cast<int64_t>(dtype_size(data_->dtype));
    for (int d = axis_ + 1; d < rank; ++d) inner_bytes_ *= data_->shape[d];
  }

  size_t workspace_bytes() const override { return static_cast<size_t>(idx_->numel) * sizeof(int64_t); }

  Status run(ExecContext& ctx) override {
    const int64_t n = idx_->numel;
    int64_t* idx_buf = reinterpret_cast<int64_t*>(ctx.workspace);
    const uint8_t* raw = ctx.ptr(*idx_);
    // Validate and normalise every index before any byte moves.
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = index(raw, i);
      if (v < -dim_ || v >= dim_) {
        return Status::InvalidArgument(
            cat("index ", v, " out of range [", -dim_, ", ", dim_ - 1, "] on axis ", axis_));
      }
      idx_buf[i] = v < 0 ? v + dim_ : v;
    }
    const uint8_t* src = ctx.ptr(*data_);
    uint8_t* dst = ctx.ptr(*y_);
    // Work items of kBlock consecutive output slices, walked as (outer slice, index) pairs
    // without a division per slice, slices of 1, 2, 4 or 8 bytes copied by a fixed-size
    // move: a span convolution's unfold ([1, 64, 40, 1] by [9, 32] along axis 2, then the
    // [.., 1] axis by [1, 1]: 18,432 slices of 4 bytes) took ~100 us a call with a division
    // and a memcpy call per element.
    const int64_t total = outer_ * n, items = (total + kBlock - 1) / kBlock;
    auto body = [&](int64_t t) {
      const int64_t a = t * kBlock, b = std::min(total, a + kBlock);
      const Walk w{src, dst + a * inner_bytes_, idx_buf, n, dim_ * inner_bytes_, a / n, a % n, b - a};
      switch (inner_bytes_) {
        case 1: return copy_slices<1>(w);
        case 2: return copy_slices<2>(w);
        case 4: return copy_slices<4>(w);
        case 8: return copy_slices<8>(w);
        default: return copy_slices<0>(w, inner_bytes_);
      }
    };
    for_rows(items, total * inner_bytes_, body);
    return Status::Ok();
  }

 private:
  static constexpr int64_t kBlock = 1024;  // output slices a work item
  int axis_ = 0;
  int64_t outer_ = 1, dim_ = 0, inner_bytes_ = 0;
};

// GatherND with batch_dims b: data [B..., D_b, ..., D_{b+k-1}, S...] and indices
// [B..., I..., k] give [B..., I..., S...]; each index tuple picks one slice S of its batch.
class GatherNDKernel : public Kernel, GatherArgs {
 public:
  explicit GatherNDKernel(const KernelArgs& a) : GatherArgs(a) {
    const int r = data_->rank(), q = idx_->rank();
    const int64_t b = a.attr_int("batch_dims", 0);
    if (q < 1 || r < 1) invalid("data and indices must have rank >= 1");
    if (b < 0 || b >= std::min(r, q)) invalid("batch_dims ", b, " must be in [0, ", std::min(r, q) - 1, "]");
    b_ = static_cast<int>(b);
    k_ = idx_->shape[q - 1];
    if (k_ < 1 || b_ + k_ > r) invalid("indices' last dim ", k_, " must be in [1, ", r - b_, "]");
    Shape out;
    batches_ = 1;
    for (int d = 0; d < b_; ++d) {
      if (idx_->shape[d] != data_->shape[d]) {
        invalid("batch dim ", d, " differs: data ", shape_str(data_->shape), ", indices ", shape_str(idx_->shape));
      }
      batches_ *= data_->shape[d];
    }
    out.assign(idx_->shape.begin(), idx_->shape.end() - 1);
    out.insert(out.end(), data_->shape.begin() + b_ + k_, data_->shape.end());
    if (y_->dtype != data_->dtype || y_->shape != out) {
      invalid("output ", type_str(y_->dtype, y_->shape), " must be ", type_str(data_->dtype, out));
    }
    tuples_ = batches_ ? shape_numel(idx_->shape) / k_ / batches_ : 0;
    slice_bytes_ = static_cast<int64_t>(dtype_size(data_->dtype));
    for (int d = b_ + static_cast<int>(k_); d < r; ++d) slice_bytes_ *= data_->shape[d];
    batch_slices_ = 1;  // slices of S in one batch of data
    for (int d = b_; d < b_ + k_; ++d) batch_slices_ *= data_->shape[d];
  }

  size_t workspace_bytes() const override { return static_cast<size_t>(batches_ * tuples_) * sizeof(int64_t); }

  Status run(ExecContext& ctx) override {
    // Every tuple becomes a slice number in its batch; all are checked before a byte moves.
    int64_t* slice = reinterpret_cast<int64_t*>(ctx.workspace);
    const uint8_t* raw = ctx.ptr(*idx_);
    const int64_t n = batches_ * tuples_;
    for (int64_t t = 0; t < n; ++t) {
      int64_t at = 0;
      for (int64_t j = 0; j < k_; ++j) {
        const int64_t e = t * k_ + j;
        const int64_t v = index(raw, e);
        const int64_t dim = data_->shape[b_ + j];
        if (v < -dim || v >= dim) {
          return Status::InvalidArgument(cat("index ", v, " out of range [", -dim, ", ", dim - 1, "] on data axis ",
                                             b_ + j, " (indices element ", e, ")"));
        }
        at = at * dim + (v < 0 ? v + dim : v);
      }
      slice[t] = at;
    }
    const uint8_t* src = ctx.ptr(*data_);
    uint8_t* dst = ctx.ptr(*y_);
    const int64_t per_batch = tuples_;
    for_rows(n, n * slice_bytes_, [&](int64_t t) {
      const int64_t batch = per_batch ? t / per_batch : 0;
      std::memcpy(dst + t * slice_bytes_, src + (batch * batch_slices_ + slice[t]) * slice_bytes_,
                  static_cast<size_t>(slice_bytes_));
    });
    return Status::Ok();
  }

 private:
  int b_ = 0;
  int64_t k_ = 1, batches_ = 1, tuples_ = 0, slice_bytes_ = 0, batch_slices_ = 1;
};

}  // namespace

std::unique_ptr<Kernel> make_gather_nd(const KernelArgs& a) { return std::make_unique<GatherNDKernel>(a); }

std::unique_ptr<Kernel> make_gather(const KernelArgs& a) { return std::make_unique<GatherKernel>(a); }

}  // namespace ge
