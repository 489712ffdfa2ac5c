// TopK and ArgMax / ArgMin along one axis: loops of our own (oneDNN has no selection
// primitive). Results follow the ONNX reference exactly: TopK orders by value (largest or
// smallest first) and equal values by index, a NaN after every number; ArgMax / ArgMin
// take the first extreme (the last with select_last_index), a NaN being the extreme, as
// numpy's argmax / argmin do. Indices are int64.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "copy.h"
#include "kernels.h"

namespace ge {

namespace {

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  return false;
}

// The tensor seen as [outer, dim, inner] around `axis`.
struct AxisView {
  int64_t outer = 1, dim = 1, inner = 1;
  AxisView(const Shape& s, int axis) {
    for (int d = 0; d < axis; ++d) outer *= s[d];
    dim = s[axis];
    for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  }
};

enum class Sel { kTopLargest, kTopSmallest, kArgMax, kArgMin };

// TopK's k up to which a row's selection is an insertion into k slots.
constexpr int64_t kSmallK = 16;

class SelectKernel : public Kernel {
 public:
  explicit SelectKernel(const KernelArgs& a) {
    const bool topk = a.op == "TopK";
    a.expect_inputs(1, topk ? 2 : 1);
    a.expect_outputs(topk ? 2 : 1, topk ? 2 : 1);
    x_ = &a.in(0);
    const int rank = x_->rank();
    if (rank < 1) invalid("input must have rank >= 1");
    axis_ = normalize_axis(a.attr_int("axis", topk ? -1 : 0), rank);
    const AxisView v(x_->shape, axis_);
    Shape want = x_->shape;
    if (topk) {
      sel_ = a.attr_int("largest", 1) ? Sel::kTopLargest : Sel::kTopSmallest;
      const std::vector<int64_t> k = a.opt_in(1) ? a.const_ints(1) : std::vector<int64_t>{a.attr_int("k", -1)};
      if (k.size() != 1) invalid("K must have one element, got ", k.size());
      k_ = k[0];
      if (k_ < 0 || k_ > v.dim) invalid("k = ", k_, " is out of range [0, ", v.dim, "] for axis ", axis_);
      want[axis_] = k_;
      values_ = &a.out(0);
      idx_ = &a.out(1);
      if (values_->dtype != x_->dtype || values_->shape != want) {
        invalid("values output must be ", type_str(x_->dtype, want));
      }
    } else {
      sel_ = a.op == "ArgMax" ? Sel::kArgMax : Sel::kArgMin;
      last_ = a.attr_int("select_last_index", 0) != 0;
      if (v.dim == 0) invalid("cannot take ", a.op, " of an empty axis ", axis_);
      want[axis_] = 1;
      if (!a.attr_int("keepdims", 1)) want.erase(want.begin() + axis_);
      idx_ = &a.out(0);
    }
    if (idx_->dtype != DType::kInt64 || idx_->shape != want) invalid("indices output must be ", type_str(DType::kInt64, want));
    const bool typed = with_arith_type(x_->dtype, [this](auto v) { run_ = &SelectKernel::run_as<decltype(v)>; });
    if (!typed) invalid(a.op, " does not support ", dtype_name(x_->dtype));
  }

  Status run(ExecContext& ctx) override { return (this->*run_)(ctx); }

 private:
  template <class T>
  Status run_as(ExecContext& ctx) {
    const AxisView v(x_->shape, axis_);
    const T* x = ctx.ptr<const T>(*x_);
    int64_t* idx = ctx.ptr<int64_t>(*idx_);
    T* vals = values_ ? ctx.ptr<T>(*values_) : nullptr;
    const int64_t lanes = v.outer * v.inner;
    if ((sel_ == Sel::kArgMax || sel_ == Sel::kArgMin) && v.inner > 1) {
      // along an outer axis: rows of inner elements in order, each lane's best index kept
      // (per lane, a strided walk down the axis cost ~16 ns an element; a MoE's slot
      // ArgMax over [2, 512] took 17 us)
      for_rows(v.outer, lanes * v.dim * static_cast<int64_t>(sizeof(T)), [&](int64_t o) {
        arg_rows(x + o * v.dim * v.inner, v.dim, v.inner, sel_ == Sel::kArgMax, idx + o * v.inner);
      });
      return Status::Ok();
    }
    for_rows(lanes, lanes * v.dim * static_cast<int64_t>(sizeof(T)), [&](int64_t lane) {
      const int64_t o = lane / v.inner, i = lane % v.inner;
      const T* col = x + o * v.dim * v.inner + i;  // element j at col[j * v.inner]
      auto at = [&](int64_t j) { return col[j * v.inner]; };
      if (sel_ == Sel::kArgMax || sel_ == Sel::kArgMin) {
        idx[lane] = arg(at, v.dim, sel_ == Sel::kArgMax);
        return;
      }
      // TopK: the first k of the column's indices in the reference's order.
      const bool largest = sel_ == Sel::kTopLargest;
      auto before = [&](int64_t p, int64_t q) {
        const T a = at(p), b = at(q);
        if (is_nan(a) || is_nan(b)) return !is_nan(a) || (is_nan(b) && p < q);
        if (a != b) return largest ? a > b : a < b;
        return p < q;
      };
      auto emit = [&](const int64_t* order) {
        for (int64_t j = 0; j < k_; ++j) {
          const int64_t out = (o * k_ + j) * v.inner + i;
          idx[out] = order[j];
          vals[out] = at(order[j]);
        }
      };
      if (k_ <= kSmallK) {
        // a router's top-k of a few experts: insertion into k slots, no allocation (the
        // sort below took ~200 ns a row, most of it the vector)
        // The k-th best value so far is the bar an element must pass: a number compared
        // with it alone (an equal one comes later, so after; a NaN after every number);
        // with a NaN among the k, the full order (a byte CNN's k-max pooling over 64 x 255:
        // ~100 us a TopK through the order for every element).
        int64_t best[kSmallK];
        int64_t have = 0;
        if (k_ == 0) {
          emit(best);
          return;
        }
        T bar = T();
        for (int64_t j = 0; j < v.dim; ++j) {
          if (have == k_) {
            const T a = at(j);
            if (!is_nan(bar)) {
              if (!(largest ? a > bar : a < bar)) continue;
            } else if (!before(j, best[k_ - 1])) {
              continue;
            }
          }
          int64_t p = have < k_ ? have++ : k_ - 1;
          while (p > 0 && before(j, best[p - 1])) {
            best[p] = best[p - 1];
            --p;
          }
          best[p] = j;
          if (have == k_) bar = at(best[k_ - 1]);
        }
        emit(best);
        return;
      }
      std::vector<int64_t> order(static_cast<size_t>(v.dim));
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + k_, order.end(), before);
      emit(order.data());
    });
    return Status::Ok();
  }

  // arg() of each of `inner` lanes of x [n, inner] at once, into best[inner].
  template <class T>
  void arg_rows(const T* x, int64_t n, int64_t inner, bool max, int64_t* best) const {
    std::fill(best, best + inner, int64_t{0});
    for (int64_t j = 1; j < n; ++j) {
      const T* row = x + j * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const T v = row[i], b = x[best[i] * inner + i];
        if (is_nan(b) && !last_) continue;  // the first NaN stays
        if (is_nan(v)) {                     // a NaN is the extreme
          best[i] = j;
          continue;
        }
        if (is_nan(b)) continue;
        const bool better = max ? (last_ ? v >= b : v > b) : (last_ ? v <= b : v < b);
        if (better) best[i] = j;
      }
    }
  }

  template <class At>
  int64_t arg(At at, int64_t n, bool max) const {
    int64_t best = 0;
    for (int64_t j = 0; j < n; ++j) {
      const auto x = at(j), b = at(best);
      if (is_nan(x)) {  // a NaN is the extreme: the first one, or the last one
        if (!last_) return j;
        best = j;
        continue;
      }
      if (is_nan(b)) continue;
      const bool better = max ? (last_ ? x >= b : x > b) : (last_ ? x <= b : x < b);
      if (better) best = j;
    }
    return best;
  }

  const TensorInfo* x_ = nullptr;
  const TensorInfo* values_ = nullptr;
  const TensorInfo* idx_ = nullptr;
  int axis_ = 0;
  int64_t k_ = 0;
  bool last_ = false;
  Sel sel_ = Sel::kArgMax;
  Status (SelectKernel::*run_)(ExecContext&) = nullptr;
};

}  // namespace

std::unique_ptr<Kernel> make_select(const KernelArgs& a) { return std::make_unique<SelectKernel>(a); }

}  // namespace ge
