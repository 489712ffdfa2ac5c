#include "layout.h"

#include "op_table.h"
#include "status.h"

#include <algorithm>
#include <numeric>
#include <unordered_set>

namespace ge {

namespace {

// The product of the spatial dims (2 ..) of a tensor of rank >= 2.
int64_t spatial_numel(const Shape& s) {
  int64_t n = 1;
  for (size_t i = 2; i < s.size(); ++i) n *= s[i];
  return n;
}

// True when NCHW and NHWC order the tensor's bytes identically (NHWC is N, spatial..., C
// for ranks 3 to 5; other ranks have no NHWC).
bool layout_invariant(const TensorInfo& t) {
  return t.rank() < 3 || t.rank() > 5 || t.shape[1] == 1 || spatial_numel(t.shape) == 1;
}

// True when every format the tensor may have orders its bytes identically (nothing to
// check between operands).
bool format_invariant(const TensorInfo& t) {
  if (t.numel <= 1) return true;
  if (t.format == Format::kNChw8c || t.format == Format::kNChw16c) return false;
  return layout_invariant(t);
}

class UnionFind {
 public:
  explicit UnionFind(size_t n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), size_t{0}); }
  size_t find(size_t i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  void unite(size_t a, size_t b) { parent_[find(a)] = find(b); }

 private:
  std::vector<size_t> parent_;
};

}  // namespace

bool per_channel_of(const Shape& s, const Shape& y) {
  if (y.size() < 3 || y.size() > 5 || s.size() != y.size() || spatial_numel(y) <= 1 || s[1] != y[1]) return false;
  return spatial_numel(s) == 1 && (s[0] == 1 || s[0] == y[0]);
}

bool pixel_map_of(const Shape& s, const Shape& y) {
  return s.size() == 4 && y.size() == 4 && y[1] > 1 && s[1] == 1 && s[2] == y[2] && s[3] == y[3] &&
         (s[0] == 1 || s[0] == y[0]);
}

bool spatial_pads(const std::vector<int64_t>& pads) {
  const size_t r = pads.size() / 2;
  return pads.size() % 2 == 0 && r >= 3 && r <= 5 && pads[0] == 0 && pads[1] == 0 && pads[r] == 0 &&
         pads[r + 1] == 0;
}

LayoutRule layout_rule(const std::string& op) {
  const OpRow* row = find_op(op);
  return row ? row->layout : LayoutRule::kPlainOnly;
}

std::vector<Format> assign_layouts(const ModelSpec& spec, const std::vector<TensorInfo>& tensors) {
  const size_t n = tensors.size();
  std::vector<Format> result(n, Format::kPlain);
  if (!spec.channels_last) return result;
  auto valid = [&](int64_t i) { return i >= 0 && static_cast<size_t>(i) < n; };

  std::vector<char> blocked(n, 0), conv_edge(n, 0), written(n, 0), model_input(n, 0);
  for (int64_t i : spec.inputs) {
    if (valid(i)) blocked[i] = model_input[i] = 1;
  }
  for (int64_t i : spec.outputs) {
    if (valid(i)) blocked[i] = 1;
  }
  for (size_t i = 0; i < n; ++i) {
    if (tensors[i].region != Region::kArena) blocked[i] = 1;
  }
  for (const TaskSpec& t : spec.tasks) {
    for (int64_t o : t.outputs) {
      if (valid(o)) written[o] = 1;
    }
  }
  // A view (arena tensor no task writes, e.g. a Reshape resolved to an alias) reads some
  // other tensor's bytes as plain: keep everything it overlaps plain.
  for (size_t v = 0; v < n; ++v) {
    const TensorInfo& tv = tensors[v];
    if (tv.region != Region::kArena || written[v] || model_input[v] || tv.nbytes == 0) continue;
    blocked[v] = 1;
    for (size_t u = 0; u < n; ++u) {
      const TensorInfo& tu = tensors[u];
      if (tu.region == Region::kArena && tu.offset < tv.offset + tv.nbytes && tv.offset < tu.offset + tu.nbytes) {
        blocked[u] = 1;
      }
    }
  }

  UnionFind groups(n);
  auto block_all = [&](const TaskSpec& t) {
    for (int64_t i : t.inputs) {
      if (valid(i)) blocked[i] = 1;
    }
    for (int64_t o : t.outputs) {
      if (valid(o)) blocked[o] = 1;
    }
  };
  // Joins the layout-variant operands in `data` into one group; blocks every other operand.
  auto join = [&](const TaskSpec& t, const std::vector<int64_t>& data) {
    std::unordered_set<int64_t> in_data(data.begin(), data.end());
    int64_t first = -1;
    for (int64_t i : data) {
      if (!valid(i) || layout_invariant(tensors[i])) continue;
      if (first < 0) {
        first = i;
      } else {
        groups.unite(static_cast<size_t>(i), static_cast<size_t>(first));
      }
    }
    for (const auto* list : {&t.inputs, &t.outputs}) {
      for (int64_t i : *list) {
        if (valid(i) && !in_data.count(i)) blocked[i] = 1;
      }
    }
  };
  for (const TaskSpec& t : spec.tasks) {
    if (t.kind != "kernel") {  // copies and control flow (switch, slice_copy...) read plain bytes
      block_all(t);
      continue;
    }
    const int64_t in0 = t.inputs.empty() ? -1 : t.inputs[0];
    const int64_t out0 = t.outputs.empty() ? -1 : t.outputs[0];
    switch (layout_rule(t.op)) {
      case LayoutRule::kPlainOnly:
      case LayoutRule::kConvert:
      case LayoutRule::kConcat:
      case LayoutRule::kSpatial:
      case LayoutRule::kReduce:
        block_all(t);
        break;
      case LayoutRule::kAnyData: {
        std::vector<int64_t> data = {in0, out0};
        auto sum = t.attrs.find("sum");
        if (sum != t.attrs.end() && std::holds_alternative<int64_t>(sum->second) &&
            std::get<int64_t>(sum->second) != 0 && t.inputs.size() >= 3) {
          data.push_back(t.inputs.back());
        }
        // Each data operand is its own group: the kernel converts between layouts.
        std::unordered_set<int64_t> in_data(data.begin(), data.end());
        for (int64_t i : data) {
          if (valid(i)) conv_edge[i] = 1;
        }
        for (const auto* list : {&t.inputs, &t.outputs}) {
          for (int64_t i : *list) {
            if (valid(i) && !in_data.count(i)) blocked[i] = 1;
          }
        }
        break;
      }
      case LayoutRule::kUniform:
        join(t, {in0, out0});
        break;
      case LayoutRule::kElementwise:
      case LayoutRule::kChannel:
      case LayoutRule::kDomain: {
        const bool channel = layout_rule(t.op) != LayoutRule::kElementwise;
        bool same = valid(out0);
        std::vector<int64_t> data = {out0};
        for (int64_t i : t.inputs) {
          if (!valid(i) || !same) continue;
          if (tensors[i].numel == 1) continue;  // scalar-like: no layout
          // a per-channel operand has the same bytes in NCHW and NHWC (1x1 spatial)
          same = tensors[i].shape == tensors[out0].shape ||
                 (channel && per_channel_of(tensors[i].shape, tensors[out0].shape));
          data.push_back(i);
        }
        if (same) {
          join(t, data);
        } else {
          block_all(t);
        }
        break;
      }
    }
  }

  std::vector<char> ok(n, 1), has_conv(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (layout_invariant(tensors[i])) continue;
    size_t g = groups.find(i);
    // the runtime's own choice is NHWC of rank 4 only (3-D and 5-D come from the compiler)
    if (blocked[i] || tensors[i].dtype != DType::kFloat32 || tensors[i].rank() != 4) ok[g] = 0;
    if (conv_edge[i]) has_conv[g] = 1;
  }
  for (size_t i = 0; i < n; ++i) {
    if (layout_invariant(tensors[i])) continue;
    size_t g = groups.find(i);
    if (ok[g] && has_conv[g]) result[i] = Format::kNhwc;
  }
  return result;
}

std::string format_violation(const TaskSpec& t, const std::vector<TensorInfo>& tensors) {
  auto at = [&](int64_t i) -> const TensorInfo* { return i >= 0 ? &tensors[static_cast<size_t>(i)] : nullptr; };
  auto need_plain = [&](const TensorInfo* ti, const char* why) -> std::string {
    if (!ti || ti->plain() || ti->numel <= 1) return "";
    return cat("tensor '", ti->name, "' is stored ", format_name(ti->format), "; ", why);
  };
  auto plain_except = [&](const std::vector<int64_t>& data, const char* why) -> std::string {
    for (const auto* list : {&t.inputs, &t.outputs}) {
      for (int64_t i : *list) {
        if (std::find(data.begin(), data.end(), i) != data.end()) continue;
        std::string e = need_plain(at(i), why);
        if (!e.empty()) return e;
      }
    }
    return "";
  };
  // The data operands must all be stored alike (format-invariant ones excepted).
  auto same_format = [&](const std::vector<int64_t>& data) -> std::string {
    const TensorInfo* first = nullptr;
    for (int64_t i : data) {
      const TensorInfo* ti = at(i);
      if (!ti || format_invariant(*ti)) continue;
      if (!first) {
        first = ti;
      } else if (ti->format != first->format) {
        return cat("tensor '", ti->name, "' is stored ", format_name(ti->format), " but '", first->name, "' is ",
                   format_name(first->format), "; this op needs one format for its data operands");
      }
    }
    return "";
  };
  const int64_t in0 = t.inputs.empty() ? -1 : t.inputs[0];
  const int64_t out0 = t.outputs.empty() ? -1 : t.outputs[0];
  // Padded blocked tensors (tensor.h) go to the kernels that keep the padding zero.
  const LayoutRule rule = layout_rule(t.op);
  if (rule != LayoutRule::kAnyData && rule != LayoutRule::kConvert) {
    for (const auto* list : {&t.inputs, &t.outputs}) {
      for (int64_t i : *list) {
        const TensorInfo* ti = at(i);
        if (ti && ti->padded()) {
          return cat("tensor '", ti->name, "' is stored ", format_name(ti->format), " with padded channels (",
                     ti->shape[1], "); only Conv and TransData take padded blocked tensors");
        }
      }
    }
  }
  switch (rule) {
    case LayoutRule::kPlainOnly:
      return plain_except({}, "this op takes nchw (plain) operands only");
    case LayoutRule::kConvert:
      return "";
    case LayoutRule::kConcat: {  // Concat's inputs, Split's outputs
      std::vector<int64_t> data(t.inputs.begin(), t.inputs.end());
      data.insert(data.end(), t.outputs.begin(), t.outputs.end());
      return same_format(data);
    }
    case LayoutRule::kAnyData: {
      std::vector<int64_t> data = {in0, out0};
      auto sum = t.attrs.find("sum");
      if (sum != t.attrs.end() && std::holds_alternative<int64_t>(sum->second) && std::get<int64_t>(sum->second) &&
          t.inputs.size() >= 3) {
        data.push_back(t.inputs.back());
      }
      return plain_except(data, "Conv weights and bias must be nchw");
    }
    case LayoutRule::kSpatial:  // the kernel checks that N and C are left alone
    case LayoutRule::kUniform: {
      std::string e = same_format({in0, out0});
      return e.empty() ? plain_except({in0, out0}, "parameters of this op must be nchw") : e;
    }
    case LayoutRule::kReduce: {
      const TensorInfo* x = at(in0);
      const TensorInfo* y = at(out0);
      if (!x || !y || x->rank() != y->rank()) {
        return plain_except({}, "a reduction that drops axes takes nchw (plain) operands only");
      }
      for (const TensorInfo* ti : {x, y}) {
        if (!ti->plain() && ti->format != Format::kNhwc) {
          return cat("tensor '", ti->name, "' is stored ", format_name(ti->format),
                     "; a reduction takes nchw or nhwc operands");
        }
      }
      std::string e = same_format({in0, out0});
      return e.empty() ? plain_except({in0, out0}, "the axes of a reduction must be nchw") : e;
    }
    case LayoutRule::kDomain: {  // the kernel checks each input against the domain's runs
      const TensorInfo* y = at(out0);
      std::vector<int64_t> outs(t.outputs.begin(), t.outputs.end());
      std::string e = same_format(outs);
      if (!e.empty() || !y || !y->plain()) return e;
      return plain_except({}, "inputs of an elementwise region with a plain output must be nchw");
    }
    case LayoutRule::kElementwise:
    case LayoutRule::kChannel: {
      const TensorInfo* y = at(out0);
      std::vector<int64_t> data = {out0};
      bool same = y != nullptr;
      for (int64_t i : t.inputs) {
        const TensorInfo* ti = at(i);
        if (!ti || ti->numel <= 1) continue;
        if (same && rule == LayoutRule::kChannel && per_channel_of(ti->shape, y->shape)) {
          std::string e = format_invariant(*ti) ? "" : need_plain(ti, "a per-channel operand is read plain");
          if (!e.empty()) return e;
          continue;
        }
        if (same && y->format == Format::kNhwc && pixel_map_of(ti->shape, y->shape) &&
            (ti->plain() || ti->format == Format::kNhwc)) {
          continue;  // one channel: the same bytes plain and NHWC, broadcast over the channels
        }
        same = same && ti->shape == y->shape;
        data.push_back(i);
      }
      if (!same) return plain_except({}, "a broadcasting elementwise op takes nchw (plain) operands only");
      return same_format(data);
    }
  }
  return "";
}

}  // namespace ge
