// GatherElements and ScatterElements (ONNX): every element of the indices names one
// position along `axis`; its other coordinates are the index element's own. ScatterND: each
// row of the indices' last dim (k entries) names a slice data[i0, ..., ik-1, :, ...] that
// the matching slice of the updates replaces (or reduces into). Any data dtype, int64 or
// int32 indices, negative indices wrap once (the range is [-dim, dim)).
//
// Indices are data, so all of them are checked before a byte moves and a bad one fails the
// run naming it (the model stays usable). The results are the numpy reference's: a data dim
// of 1 off the axis broadcasts in GatherElements (take_along_axis does), and
// ScatterElements applies the updates in the indices' row-major order, so with duplicate
// indices the last write wins (reduction none) and sums accumulate in that order, as
// numpy's ufunc.at does.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "copy.h"
#include "kernels.h"

namespace ge {

namespace {

// Calls f(E{}) with E an unsigned integer of `size` bytes, the type element copies move.
template <class F>
bool with_elem_bytes(size_t size, F&& f) {
  switch (size) {
    case 1: f(uint8_t{}); return true;
    case 2: f(uint16_t{}); return true;
    case 4: f(uint32_t{}); return true;
    case 8: f(uint64_t{}); return true;
    default: return false;
  }
}

// One pass over int64 indices in rows of `last`: their least and greatest, and whether each
// row holds one value. Cloned for AVX-512 (64-bit min, max and compare are AVX-512
// instructions; the baseline build did these 82K-index passes of an unseen GNN one by one).
__attribute__((target_clones("avx512f", "default"))) void scan_indices(const int64_t* v, int64_t n, int64_t last,
                                                                       int64_t* lo_out, int64_t* hi_out,
                                                                       bool* uniform_out) {
  int64_t lo = v[0], hi = v[0], diff = 0;  // (min, max and an OR of differences: a loop
  for (int64_t t = 0; t < n; t += last) {  // of compares and selects stayed scalar)
    const int64_t first = v[t];
    int64_t l = lo, h = hi, d = 0;
    for (int64_t k = 0; k < last; ++k) {
      const int64_t x = v[t + k];
      l = std::min(l, x);
      h = std::max(h, x);
      d |= x ^ first;
    }
    lo = l;
    hi = h;
    diff |= d;
  }
  *lo_out = lo;
  *hi_out = hi;
  *uniform_out = diff == 0;
}

// Data, indices (any shape of data's rank) and the axis they index, shared by both ops.
struct ElementIndexing {
  const TensorInfo* data_ = nullptr;
  const TensorInfo* idx_ = nullptr;
  int axis_ = 0;
  int64_t dim_ = 0;           // data's length along the axis
  Shape strides_;             // per dim of the indices: the element stride it moves in the
                              // addressed tensor (0 where data broadcasts), the axis's excluded
  int64_t axis_stride_ = 0;   // of the addressed tensor along the axis

  // `inputs`: the op's input count; `scatter`: the output is the addressed tensor (else data).
  ElementIndexing(const KernelArgs& a, int inputs, bool scatter) {
    a.expect_inputs(inputs, inputs);
    a.expect_outputs(1, 1);
    data_ = &a.in(0);
    idx_ = &a.in(1);
    const TensorInfo& addressed = scatter ? a.out(0) : *data_;
    if (idx_->dtype != DType::kInt64 && idx_->dtype != DType::kInt32) {
      invalid("indices must be int64 or int32, got ", type_str(idx_->dtype, idx_->shape));
    }
    const int rank = data_->rank();
    if (rank < 1) invalid("data must have rank >= 1");
    if (idx_->rank() != rank) {
      invalid("indices ", shape_str(idx_->shape), " must have data's rank ", rank, " (data ", shape_str(data_->shape), ")");
    }
    axis_ = normalize_axis(a.attr_int("axis", 0), rank);
    dim_ = data_->shape[axis_];
    Shape dense(static_cast<size_t>(rank), 1);
    for (int d = rank - 2; d >= 0; --d) dense[d] = dense[d + 1] * addressed.shape[d + 1];
    strides_ = dense;
    axis_stride_ = dense[axis_];
    strides_[axis_] = 0;
  }

  // Checks every index against [-dim, dim); *at points at them non-negative: the int64
  // indices themselves when none is negative (the usual case: a min/max pass, vectorized,
  // instead of a checking copy: 82K indices of an unseen GNN), else `buf` filled.
  // *uniform: each row of the last dim holds one index and rows_contiguous().
  Status normalize(const uint8_t* raw, int64_t* buf, const int64_t** at, bool* uniform) const {
    const int rank = idx_->rank();
    const int64_t last = rank > 0 ? idx_->shape[rank - 1] : 1;
    *uniform = false;
    if (idx_->numel == 0 || last == 0) {
      *at = buf;
      return Status::Ok();
    }
    int64_t lo = 0, hi = 0;
    bool same = false;
    if (idx_->dtype == DType::kInt64) {
      scan_indices(reinterpret_cast<const int64_t*>(raw), idx_->numel, last, &lo, &hi, &same);
      if (lo >= 0 && hi < dim_) {
        *at = reinterpret_cast<const int64_t*>(raw);
        *uniform = same && rows_contiguous();
        return Status::Ok();
      }
    }
    *at = buf;
    const Status s = normalize_into(raw, buf);
    if (!s.ok()) return s;
    scan_indices(buf, idx_->numel, last, &lo, &hi, &same);  // (int32 or negative ones)
    *uniform = same && rows_contiguous();
    return s;
  }

  // Checks every index against [-dim, dim) and writes them non-negative to `at`.
  Status normalize_into(const uint8_t* raw, int64_t* at) const {
    const bool wide = idx_->dtype == DType::kInt64;
    for (int64_t i = 0; i < idx_->numel; ++i) {
      const int64_t v = wide ? reinterpret_cast<const int64_t*>(raw)[i] : reinterpret_cast<const int32_t*>(raw)[i];
      if (v < -dim_ || v >= dim_) {
        return Status::InvalidArgument(cat("index ", v, " out of range [", -dim_, ", ", dim_ - 1, "] on axis ", axis_,
                                           " (indices element ", i, ")"));
      }
      at[i] = v < 0 ? v + dim_ : v;
    }
    return Status::Ok();
  }

  // Whether a row of the indices' last dim that holds one index moves along contiguous
  // elements of the addressed tensor (the axis is not the last, which is not broadcast): a
  // graph net's edge list expanded over the features (`idx.unsqueeze(-1).expand(..., D)`),
  // whose element-wise gathers and scatters are then row copies (`each_row`).
  bool rows_contiguous() const {
    const int rank = idx_->rank();
    return axis_ != rank - 1 && strides_[rank - 1] == 1 && idx_->shape[rank - 1] >= 2;
  }
  // Calls g(r, base) for every row r of the indices' last dim in row-major order, with the
  // element offset of the row's coordinates off the last dim and the axis in the addressed
  // tensor; rows run in parallel when `parallel` and `bytes` (the work) is large.
  template <class G>
  void each_row_base(bool parallel, int64_t bytes, G g) const {
    const int rank = idx_->rank();
    const int64_t last = idx_->shape[rank - 1];
    if (last == 0 || idx_->numel == 0) return;
    const int64_t rows = idx_->numel / last;
    // The rows in a few spans, each walked by an odometer over the dims off the last: a
    // division per dim only at a span's start (a division per dim a row cost more than the
    // row's copies: k-max pooling's gathers of 4 from 512 rows)
    const int64_t spans = parallel && bytes >= (int64_t{1} << 18) ? std::min<int64_t>(rows, omp_get_max_threads()) : 1;
    auto span = [&](int64_t i) {
      const int64_t r0 = rows * i / spans, r1 = rows * (i + 1) / spans;
      Shape coord(static_cast<size_t>(rank), 0);
      int64_t base = 0, rest = r0;
      for (int d = rank - 2; d >= 0; --d) {
        coord[d] = rest % idx_->shape[d];
        base += coord[d] * strides_[d];
        rest /= idx_->shape[d];
      }
      for (int64_t r = r0; r < r1; ++r) {
        g(r, base);
        for (int d = rank - 2; d >= 0; --d) {
          base += strides_[d];
          if (++coord[d] < idx_->shape[d]) break;
          base -= coord[d] * strides_[d];
          coord[d] = 0;
        }
      }
    };
    for_rows(spans, bytes, span);
  }

  // For rows with one index each (normalize's `uniform`): calls f(r, offset) for every row r
  // of the indices' last dim, with the element offset of its first element in the addressed
  // tensor (the row's elements follow it contiguously).
  template <class F>
  void each_row(const int64_t* at, bool parallel, int64_t bytes, F f) const {
    const int64_t last = idx_->shape[idx_->rank() - 1];
    each_row_base(parallel, bytes, [&](int64_t r, int64_t base) { f(r, base + at[r * last] * axis_stride_); });
  }

  // Calls f(t, offset) for every index element t in row-major order, with the element
  // offset it addresses (its own coordinates off the axis, at[t] on it).
  template <class F>
  void each(const int64_t* at, bool parallel, int64_t bytes, F f) const {
    const int rank = idx_->rank();
    const int64_t last = idx_->shape[rank - 1], step = strides_[rank - 1];
    each_row_base(parallel, bytes, [&](int64_t r, int64_t base) {
      for (int64_t k = 0, t = r * last; k < last; ++k, ++t) f(t, base + k * step + at[t] * axis_stride_);
    });
  }
};

class GatherElementsKernel : public Kernel, ElementIndexing {
 public:
  explicit GatherElementsKernel(const KernelArgs& a) : ElementIndexing(a, 2, false), y_(&a.out(0)) {
    if (y_->dtype != data_->dtype || y_->shape != idx_->shape) {
      invalid("output ", type_str(y_->dtype, y_->shape), " must be ", type_str(data_->dtype, idx_->shape));
    }
    // numpy's take_along_axis broadcasts the two off the axis: equal dims, or data's 1
    for (int d = 0; d < data_->rank(); ++d) {
      if (d == axis_ || idx_->shape[d] == data_->shape[d]) continue;
      if (data_->shape[d] != 1) {
        invalid("indices ", shape_str(idx_->shape), " and data ", shape_str(data_->shape), " differ on dim ", d,
                " off the axis (only a data dim of 1 broadcasts)");
      }
      strides_[d] = 0;
    }
    if (!with_elem_bytes(dtype_size(data_->dtype), [](auto) {})) invalid("unsupported dtype ", dtype_name(data_->dtype));
  }

  size_t workspace_bytes() const override { return static_cast<size_t>(idx_->numel) * sizeof(int64_t); }

  Status run(ExecContext& ctx) override {
    const int64_t* at = nullptr;
    bool uniform = false;
    const Status s = normalize(ctx.ptr(*idx_), reinterpret_cast<int64_t*>(ctx.workspace), &at, &uniform);
    if (!s.ok()) return s;
    with_elem_bytes(dtype_size(data_->dtype), [&](auto e) {
      using E = decltype(e);
      const E* src = ctx.ptr<const E>(*data_);
      E* dst = ctx.ptr<E>(*y_);
      const int64_t bytes = y_->numel * static_cast<int64_t>(sizeof(E));
      if (uniform) {  // row copies (an unseen GNN's: 86 -> 21 us each at batch 8)
        const int64_t last = idx_->shape[idx_->rank() - 1];
        each_row(at, true, bytes, [&](int64_t r, int64_t off) {
          std::memcpy(dst + r * last, src + off, static_cast<size_t>(last) * sizeof(E));
        });
      } else if (axis_ == idx_->rank() - 1) {
        // along the last axis (a relative-position attention's [B, L, L] from [B, L, 2k]
        // scores): each row's picks from one row of the data, a plain indexed load (the
        // general walk's per-element offset arithmetic ran ~1.3 ns an element: SEW-D's
        // [4, 99, 99] from [4, 99, 128], 50 us)
        const int64_t last = idx_->shape[idx_->rank() - 1];
        each_row_base(true, bytes, [&](int64_t r, int64_t base) {
          const E* row = src + base;
          const int64_t* ir = at + r * last;
          E* out = dst + r * last;
          for (int64_t k = 0; k < last; ++k) out[k] = row[ir[k]];
        });
      } else {
        each(at, true, bytes, [&](int64_t t, int64_t off) { dst[t] = src[off]; });
      }
    });
    return Status::Ok();
  }

 private:
  const TensorInfo* y_;
};

enum class Reduce { kNone, kAdd, kMul, kMax, kMin };

// One update, as the reference's ufunc (numpy's maximum / minimum keep a NaN from either
// side; integers wrap).
template <Reduce r, class T>
inline T combine(T old, T upd) {
  if constexpr (r == Reduce::kNone) return upd;
  if constexpr (std::is_integral_v<T> && (r == Reduce::kAdd || r == Reduce::kMul)) {
    using U = std::make_unsigned_t<T>;
    const U a = static_cast<U>(old), b = static_cast<U>(upd);
    return static_cast<T>(r == Reduce::kAdd ? static_cast<U>(a + b) : static_cast<U>(a * b));
  }
  if constexpr (r == Reduce::kAdd) return old + upd;
  if constexpr (r == Reduce::kMul) return old * upd;
  if constexpr (r == Reduce::kMax) return (old >= upd || old != old) ? old : upd;
  if constexpr (r == Reduce::kMin) return (old <= upd || old != old) ? old : upd;
  return upd;
}

// A scatter's output y as a copy of its data (already one when the plan runs it in place),
// for the updates to land in.
template <class T>
T* scatter_target(ExecContext& ctx, const TensorInfo& data, const TensorInfo& y) {
  const uint8_t* src = ctx.ptr(data);
  T* out = ctx.ptr<T>(y);
  if (reinterpret_cast<const uint8_t*>(out) != src) std::memcpy(out, src, y.nbytes);
  return out;
}

// The scatter kernel K's run for reduction `red` on `dtype`: K::run_as<reduction, T>, T the
// element bytes when nothing combines, the arithmetic type otherwise.
template <class K>
Status (K::*scatter_run(const std::string& red, DType dtype))(ExecContext&) {
  static const std::pair<const char*, Reduce> names[] = {
      {"none", Reduce::kNone}, {"add", Reduce::kAdd}, {"mul", Reduce::kMul}, {"max", Reduce::kMax}, {"min", Reduce::kMin}};
  const auto* it = std::find_if(std::begin(names), std::end(names), [&](const auto& n) { return red == n.first; });
  if (it == std::end(names)) invalid("unknown reduction '", red, "'");
  const Reduce r = it->second;
  Status (K::*run)(ExecContext&) = nullptr;
  bool typed;
  if (r == Reduce::kNone) {
    typed = with_elem_bytes(dtype_size(dtype), [&](auto e) { run = &K::template run_as<Reduce::kNone, decltype(e)>; });
  } else {
    typed = with_arith_type(dtype, [&](auto v) {
      using T = decltype(v);
      run = r == Reduce::kAdd   ? &K::template run_as<Reduce::kAdd, T>
            : r == Reduce::kMul ? &K::template run_as<Reduce::kMul, T>
            : r == Reduce::kMax ? &K::template run_as<Reduce::kMax, T>
                                : &K::template run_as<Reduce::kMin, T>;
    });
  }
  if (!typed) invalid("reduction '", red, "' does not support ", dtype_name(dtype));
  return run;
}

class ScatterElementsKernel : public Kernel, ElementIndexing {
 public:
  explicit ScatterElementsKernel(const KernelArgs& a)
      : ElementIndexing(a, 3, true), upd_(&a.in(2)), y_(&a.out(0)) {
    if (y_->dtype != data_->dtype || y_->shape != data_->shape) {
      invalid("output ", type_str(y_->dtype, y_->shape), " must be ", type_str(data_->dtype, data_->shape));
    }
    if (upd_->dtype != data_->dtype || upd_->shape != idx_->shape) {
      invalid("updates ", type_str(upd_->dtype, upd_->shape), " must be ", type_str(data_->dtype, idx_->shape));
    }
    for (int d = 0; d < data_->rank(); ++d) {
      if (d != axis_ && idx_->shape[d] > data_->shape[d]) {
        invalid("indices ", shape_str(idx_->shape), " exceed data ", shape_str(data_->shape), " on dim ", d);
      }
    }
    run_ = scatter_run<ScatterElementsKernel>(a.attr_str("reduction", "none"), data_->dtype);
  }

  size_t workspace_bytes() const override { return static_cast<size_t>(idx_->numel) * sizeof(int64_t); }

  Status run(ExecContext& ctx) override { return (this->*run_)(ctx); }

  // Public: scatter_run picks it.
  template <Reduce r, class T>
  Status run_as(ExecContext& ctx) {
    const int64_t* at = nullptr;
    bool uniform = false;
    const Status s = normalize(ctx.ptr(*idx_), reinterpret_cast<int64_t*>(ctx.workspace), &at, &uniform);
    if (!s.ok()) return s;
    T* y = scatter_target<T>(ctx, *data_, *y_);
    const T* upd = ctx.ptr<const T>(*upd_);
    // In order on one thread: duplicates must see the updates before them.
    if (uniform) {  // a row of updates into a row of y
      const int64_t last = idx_->shape[idx_->rank() - 1];
      each_row(at, false, 0, [&](int64_t row, int64_t off) {
        T* out = y + off;
        const T* in = upd + row * last;
        for (int64_t k = 0; k < last; ++k) out[k] = combine<r>(out[k], in[k]);
      });
    } else {
      each(at, false, 0, [&](int64_t t, int64_t off) { y[off] = combine<r>(y[off], upd[t]); });
    }
    return Status::Ok();
  }

 private:
  const TensorInfo* upd_;
  const TensorInfo* y_;
  Status (ScatterElementsKernel::*run_)(ExecContext&) = nullptr;
};

// ScatterND: data [d0, ..., dr-1], indices [m..., k] (1 <= k <= r), updates [m..., dk, ...,
// dr-1]. The indices are checked whole before a byte moves; the slices are applied in the
// indices' row-major order on one thread, so duplicates resolve as the reference's (the
// last write wins; reductions accumulate in order).
class ScatterNDKernel : public Kernel {
 public:
  explicit ScatterNDKernel(const KernelArgs& a) {
    a.expect_inputs(3, 3);
    a.expect_outputs(1, 1);
    data_ = &a.in(0);
    idx_ = &a.in(1);
    upd_ = &a.in(2);
    y_ = &a.out(0);
    if (idx_->dtype != DType::kInt64 && idx_->dtype != DType::kInt32) {
      invalid("indices must be int64 or int32, got ", type_str(idx_->dtype, idx_->shape));
    }
    if (y_->dtype != data_->dtype || y_->shape != data_->shape) {
      invalid("output ", type_str(y_->dtype, y_->shape), " must be ", type_str(data_->dtype, data_->shape));
    }
    const int r = data_->rank(), q = idx_->rank();
    if (r < 1 || q < 1) invalid("data ", shape_str(data_->shape), " and indices ", shape_str(idx_->shape), " need rank >= 1");
    k_ = idx_->shape[q - 1];
    if (k_ < 1 || k_ > r) invalid("indices' last dim ", k_, " must be in [1, ", r, "] (data rank)");
    Shape want(idx_->shape.begin(), idx_->shape.end() - 1);
    want.insert(want.end(), data_->shape.begin() + k_, data_->shape.end());
    if (upd_->dtype != data_->dtype || upd_->shape != want) {
      invalid("updates ", type_str(upd_->dtype, upd_->shape), " must be ", type_str(data_->dtype, want));
    }
    slice_ = 1;
    for (int d = static_cast<int>(k_); d < r; ++d) slice_ *= data_->shape[d];
    rows_ = k_ ? idx_->numel / k_ : 0;
    run_ = scatter_run<ScatterNDKernel>(a.attr_str("reduction", "none"), data_->dtype);
  }

  size_t workspace_bytes() const override { return static_cast<size_t>(rows_) * sizeof(int64_t); }

  Status run(ExecContext& ctx) override { return (this->*run_)(ctx); }

 private:
  // Each index row's slice offset (in elements of data) into `at`, every entry checked.
  Status offsets(const uint8_t* raw, int64_t* at) const {
    const bool wide = idx_->dtype == DType::kInt64;
    for (int64_t row = 0; row < rows_; ++row) {
      int64_t off = 0;
      for (int64_t j = 0; j < k_; ++j) {
        const int64_t t = row * k_ + j;
        const int64_t v = wide ? reinterpret_cast<const int64_t*>(raw)[t] : reinterpret_cast<const int32_t*>(raw)[t];
        const int64_t dim = data_->shape[j];
        if (v < -dim || v >= dim) {
          return Status::InvalidArgument(cat("index ", v, " out of range [", -dim, ", ", dim - 1, "] on data dim ", j,
                                             " (indices row ", row, ")"));
        }
        off = off * dim + (v < 0 ? v + dim : v);
      }
      at[row] = off * slice_;
    }
    return Status::Ok();
  }

 public:
  // Public: scatter_run picks it.
  template <Reduce rd, class T>
  Status run_as(ExecContext& ctx) {
    int64_t* at = reinterpret_cast<int64_t*>(ctx.workspace);
    const Status s = offsets(ctx.ptr(*idx_), at);
    if (!s.ok()) return s;
    T* y = scatter_target<T>(ctx, *data_, *y_);
    const T* upd = ctx.ptr<const T>(*upd_);
    for (int64_t row = 0; row < rows_; ++row) {
      T* dst = y + at[row];
      const T* from = upd + row * slice_;
      if constexpr (rd == Reduce::kNone) {
        std::memcpy(dst, from, static_cast<size_t>(slice_) * sizeof(T));
      } else {
        for (int64_t i = 0; i < slice_; ++i) dst[i] = combine<rd>(dst[i], from[i]);
      }
    }
    return Status::Ok();
  }

 private:
  const TensorInfo* data_ = nullptr;
  const TensorInfo* idx_ = nullptr;
  const TensorInfo* upd_ = nullptr;
  const TensorInfo* y_ = nullptr;
  int64_t k_ = 0, slice_ = 1, rows_ = 0;
  Status (ScatterNDKernel::*run_)(ExecContext&) = nullptr;
};

}  // namespace

std::unique_ptr<Kernel> make_gather_elements(const KernelArgs& a) { return std::make_unique<GatherElementsKernel>(a); }

std::unique_ptr<Kernel> make_scatter_elements(const KernelArgs& a) {
  return std::make_unique<ScatterElementsKernel>(a);
}

std::unique_ptr<Kernel> make_scatter_nd(const KernelArgs& a) { return std::make_unique<ScatterNDKernel>(a); }

}  // namespace ge
