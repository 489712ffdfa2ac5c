#include "broadcast.h"

#include "status.h"

namespace ge {

bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
  size_t r = std::max(a.size(), b.size());
  Shape o(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    o[i] = da == 1 ? db : da;
  }
  *out = o;
  return true;
}

BroadcastPlan plan_binary(const TensorInfo& a, const TensorInfo& b, const TensorInfo& y) {
  Shape out;
  if (!broadcast_shapes(a.shape, b.shape, &out)) {
    invalid("shapes ", shape_str(a.shape), " and ", shape_str(b.shape), " do not broadcast");
  }
  if (out != y.shape) {
    invalid("output shape ", shape_str(y.shape), " does not match broadcast shape ", shape_str(out));
  }
  return plan_broadcast(out, {&a.shape, &b.shape}, {"A", "B"});
}

BroadcastPlan plan_broadcast(const Shape& out, const std::vector<const Shape*>& inputs,
                             const std::vector<const char*>& names) {
  BroadcastPlan p;
  p.n_inputs = static_cast<int>(inputs.size());
  const int r = static_cast<int>(out.size());
  if (r > kMaxBroadcastRank) invalid("rank ", r, " exceeds ", kMaxBroadcastRank);
  // Full-rank strides, aligned from the right.
  int64_t st[kMaxBroadcastInputs][kMaxBroadcastRank] = {};
  for (int k = 0; k < p.n_inputs; ++k) {
    const Shape& s = *inputs[k];
    const int rk = static_cast<int>(s.size());
    if (rk > r) {
      invalid(names[k], " shape ", shape_str(s), " cannot broadcast to ", shape_str(out));
    }
    int64_t acc = 1;
    for (int i = rk - 1; i >= 0; --i) {
      int d = i + (r - rk);
      if (s[i] == out[d]) {
        st[k][d] = out[d] == 1 ? 0 : acc;
      } else if (s[i] == 1) {
        st[k][d] = 0;
      } else {
        invalid(names[k], " shape ", shape_str(s), " cannot broadcast to ", shape_str(out));
      }
      acc *= s[i];
    }
  }
  p.numel = shape_numel(out);
  // Drop size-1 dims, then merge neighbours that are contiguous for every input.
  int n = 0;
  for (int d = 0; d < r; ++d) {
    if (out[d] == 1) continue;
    bool merge = n > 0;
    for (int k = 0; k < p.n_inputs && merge; ++k) {
      merge = p.strides[k][n - 1] == st[k][d] * out[d];
    }
    if (merge) {
      p.dims[n - 1] *= out[d];
      for (int k = 0; k < p.n_inputs; ++k) p.strides[k][n - 1] = st[k][d];
    } else {
      p.dims[n] = out[d];
      for (int k = 0; k < p.n_inputs; ++k) p.strides[k][n] = st[k][d];
      ++n;
    }
  }
  if (n == 0) {  // scalar-like: one element
    p.dims[0] = 1;
    for (int k = 0; k < p.n_inputs; ++k) p.strides[k][0] = 0;
    n = 1;
  }
  p.rank = n;
  return p;
}

}  // namespace ge
