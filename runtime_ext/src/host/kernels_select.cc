// TopK and ArgMax / ArgMin along one axis: loops of our own (oneDNN has no selection
// primitive). Results follow the ONNX reference exactly: TopK orders by value (largest or
// smallest first) and equal values by index, a NaN after every number; ArgMax / ArgMin
// take the first extreme (the last with select_last_index), a NaN being the extreme, as
// numpy's argmax / argmin do. Indices are int64.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "copy.h"
#include "device.h"
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
// The axis length up to which a float TopK of a larger k sorts integer keys (index in the
// low 32 bits).
constexpr int64_t kMaxKeyedDim = int64_t{1} << 20;  // a per-thread buffer of at most 8 MB

// The first j in [from, n) whose x[j] passes a (number) bar: above it for the largest,
// below it for the smallest; n if none. A NaN never passes (the comparisons are ordered).
// Once a row's k slots are full, most elements fail the bar (a random row of n inserts
// ~k ln(n / k) of them): 8 compared at once, the scalar loop's branch per element gone.
int64_t next_passing_plain(const float* x, int64_t from, int64_t n, float bar, bool largest) {
  int64_t j = from;
  for (; j + 8 <= n; j += 8) {
    bool any = false;  // branch-free over 8: the compiler's packed compares
    for (int i = 0; i < 8; ++i) any |= largest ? x[j + i] > bar : x[j + i] < bar;
    if (any) break;
  }
  for (; j < n; ++j) {
    if (largest ? x[j] > bar : x[j] < bar) return j;
  }
  return n;
}

// A contiguous row's top k (1 <= k <= kSmallK <= 16, k <= n) into best[] in the reference's
// order; false if the row holds a NaN (the caller then takes the general order). Two passes
// of 16 at a time: the first keeps each lane's extreme and from them a floor no element of
// the k is below (below, folded). The second admits only elements at or past the floor
// (strictly past the k-th kept one once k are kept), each admission an insertion and most
// a mispredicted branch: fewer of them than from the row's start with no floor (an
// ascending row: every element). A byte CNN's k-max pooling, 512 rows of 255, k = 4: 73 ->
// 28 us a TopK. The smallest are the largest of the negated row (ties stay tied, NaNs NaN).
__attribute__((target("avx512f"))) inline __m512 flipped(__m512 v, __m512i sign) {
  return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), sign));
}

__attribute__((target("avx512f"))) bool topk_row_avx512(const float* x, int64_t n, int64_t k, bool largest,
                                                         int64_t* best) {
  const __m512i flip = _mm512_set1_epi32(largest ? 0 : INT32_MIN);
  const float lowest = -std::numeric_limits<float>::infinity();
  __m512 ext = _mm512_set1_ps(lowest);
  __mmask16 nan = 0;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 c = flipped(_mm512_loadu_ps(x + j), flip);
    nan |= _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
    ext = _mm512_max_ps(ext, c);
  }
  if (j < n) {  // the tail: the missing lanes at the lowest
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 t = flipped(_mm512_maskz_loadu_ps(tail, x + j), flip);
    const __m512 c = _mm512_mask_mov_ps(_mm512_set1_ps(lowest), tail, t);
    nan |= _mm512_cmp_ps_mask(c, c, _CMP_UNORD_Q);
    ext = _mm512_max_ps(ext, c);
  }
  if (nan) return false;
  // The lanes folded into g >= k groups (lanes i, i + g, ...; a group's extreme is one
  // element of it): the least of the g group extremes is at most the g-th best element, so
  // at most the k-th (a few shuffles, where ranking the 16 took ~50 ns a row)
  alignas(64) float e[16];
  _mm512_store_ps(e, ext);
  int64_t g = 1;
  while (g < k) g *= 2;
  for (int64_t w = 16; w > g; w /= 2) {
    for (int64_t i = 0; i < w / 2; ++i) e[i] = std::max(e[i], e[i + w / 2]);
  }
  float bar = e[0];
  for (int64_t i = 1; i < g; ++i) bar = std::min(bar, e[i]);
  float val[kSmallK];
  int64_t have = 0;
  for (j = 0;; ++j) {
    const bool full = have == k;  // then strictly past the k-th kept (an equal one is later)
    for (; j + 16 <= n; j += 16) {
      const __m512 c = flipped(_mm512_loadu_ps(x + j), flip);
      const __m512 b = _mm512_set1_ps(bar);
      const __mmask16 m = full ? _mm512_cmp_ps_mask(b, c, _CMP_LT_OQ) : _mm512_cmp_ps_mask(b, c, _CMP_LE_OQ);
      if (m) {
        j += __builtin_ctz(m);
        break;
      }
    }
    for (; j < n; ++j) {
      const float a = largest ? x[j] : -x[j];
      if (full ? a > bar : a >= bar) break;
    }
    if (j >= n) break;
    const float a = largest ? x[j] : -x[j];
    int64_t p = have < k ? have++ : k - 1;
    while (p > 0 && a > val[p - 1]) {
      val[p] = val[p - 1];
      best[p] = best[p - 1];
      --p;
    }
    val[p] = a;
    best[p] = j;
    if (have == k) bar = val[k - 1];
  }
  return have == k;
}

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
    wide_ = cpu_has_avx512();
    const bool typed = with_arith_type(x_->dtype, [this](auto v) { run_ = &SelectKernel::run_as<decltype(v)>; });
    if (!typed) invalid(a.op, " does not support ", dtype_name(x_->dtype));
  }

  Status run(ExecContext& ctx) override { return (this->*run_)(ctx); }

  std::string impl() const override {
    const bool skips = (sel_ == Sel::kTopLargest || sel_ == Sel::kTopSmallest) && k_ <= kSmallK &&
                       x_->dtype == DType::kFloat32 && AxisView(x_->shape, axis_).inner == 1;
    return skips ? (wide_ ? "rows past a floor avx512" : "rows past the bar") : "";
  }

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
        if constexpr (std::is_same_v<T, float>) {
          if (wide_ && v.inner == 1 && topk_row_avx512(col, v.dim, k_, largest, best)) {
            emit(best);
            return;
          }
        }
        T bar = T();
        for (int64_t j = 0; j < v.dim; ++j) {
          if constexpr (std::is_same_v<T, float>) {
            if (!wide_ && have == k_ && v.inner == 1 && !is_nan(bar)) {
              finish_row(col, j, v.dim, largest, best);
              break;
            }
          }
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
      if constexpr (std::is_same_v<T, float>) {
        if (v.dim <= kMaxKeyedDim) {
          // keys whose integer order is the reference's: the value's bits made monotone
          // (-0 as +0, so that equal values tie), inverted for the largest, a NaN after
          // every number, the index below them breaking ties; sorted as integers (the
          // comparator through the indices took ~750 ns a row of 40: Doge's top 24 of 40
          // attention scores, 640 rows, 480 us)
          thread_local std::vector<uint64_t> keys;
          keys.resize(static_cast<size_t>(v.dim));
          for (int64_t j = 0; j < v.dim; ++j) {
            const float a = at(j);
            uint32_t bits;
            std::memcpy(&bits, &a, sizeof bits);
            uint32_t key;
            if (a != a) {
              key = 0xffffffffu;
            } else {
              if (a == 0.f) bits = 0;
              key = bits & 0x80000000u ? ~bits : bits | 0x80000000u;
              if (largest) key = ~key - 1;  // below the NaNs' 0xffffffff
            }
            keys[static_cast<size_t>(j)] = uint64_t{key} << 32 | static_cast<uint64_t>(j);
          }
          std::partial_sort(keys.begin(), keys.begin() + k_, keys.end());
          for (int64_t j = 0; j < k_; ++j) {
            const int64_t at_j = static_cast<int64_t>(keys[static_cast<size_t>(j)] & 0xffffffffu);
            const int64_t out = (o * k_ + j) * v.inner + i;
            idx[out] = at_j;
            vals[out] = at(at_j);
          }
          return;
        }
      }
      std::vector<int64_t> order(static_cast<size_t>(v.dim));
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + k_, order.end(), before);
      emit(order.data());
    });
    return Status::Ok();
  }

  // The rest of a contiguous row from j once its k slots hold numbers only (the bar, the
  // k-th best, is a number; only numbers pass it, so it stays one): the next passing
  // element found 16 or 8 at a time, inserted by value among the k kept values (an equal
  // one, later, goes after).
  void finish_row(const float* x, int64_t j, int64_t n, bool largest, int64_t* best) const {
    float val[kSmallK];
    for (int64_t p = 0; p < k_; ++p) val[p] = x[best[p]];
    for (;;) {
      const float bar = val[k_ - 1];
      j = next_passing_plain(x, j, n, bar, largest);
      if (j == n) return;
      const float a = x[j];
      int64_t p = k_ - 1;
      while (p > 0 && (largest ? a > val[p - 1] : a < val[p - 1])) {
        val[p] = val[p - 1];
        best[p] = best[p - 1];
        --p;
      }
      val[p] = a;
      best[p] = j++;
    }
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
  bool wide_ = false;
  Sel sel_ = Sel::kArgMax;
  Status (SelectKernel::*run_)(ExecContext&) = nullptr;
};

}  // namespace

std::unique_ptr<Kernel> make_select(const KernelArgs& a) { return std::make_unique<SelectKernel>(a); }

}  // namespace ge
