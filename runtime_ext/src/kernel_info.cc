#include "kernel_info.h"

#include <algorithm>
#include <optional>
#include <set>

#include "broadcast.h"
#include "kernels.h"
#include "layout.h"

namespace ge {

namespace {

enum class Types { kF32, kArith, kFloat, kAny, kDnnl };

struct Rule {
  const char* op;
  int min_in, max_in;  // max < 0: unbounded
  Types types;         // of the data operand(s)
  int min_rank, max_rank;
};

// Every op of the kernel registry, with the facts its factory checks first.
const Rule kRules[] = {
    {"Conv", 2, 8, Types::kF32, 3, 5},
    {"MaxPool", 1, 1, Types::kF32, 3, 5},
    {"AveragePool", 1, 1, Types::kF32, 3, 5},
    {"GlobalAveragePool", 1, 1, Types::kF32, 3, 5},
    {"GlobalMaxPool", 1, 1, Types::kF32, 3, 5},
    {"Gemm", 2, 4, Types::kF32, 2, 2},
    {"MatMul", 2, 4, Types::kF32, 1, 12},
    {"Add", 2, 2, Types::kArith, 0, 12},
    {"Sub", 2, 2, Types::kArith, 0, 12},
    {"Mul", 2, 2, Types::kArith, 0, 12},
    {"Div", 2, 2, Types::kArith, 0, 12},
    {"Max", 2, 2, Types::kArith, 0, 12},
    {"Min", 2, 2, Types::kArith, 0, 12},
    {"Pow", 2, 2, Types::kFloat, 0, 12},
    {"Where", 3, 3, Types::kAny, 0, 12},
    {"Relu", 1, 1, Types::kF32, 0, 12},
    {"Sigmoid", 1, 1, Types::kF32, 0, 12},
    {"Tanh", 1, 1, Types::kF32, 0, 12},
    {"Exp", 1, 1, Types::kF32, 0, 12},
    {"Log", 1, 1, Types::kF32, 0, 12},
    {"Sqrt", 1, 1, Types::kF32, 0, 12},
    {"Abs", 1, 1, Types::kF32, 0, 12},
    {"Neg", 1, 1, Types::kF32, 0, 12},
    {"Erf", 1, 1, Types::kF32, 0, 12},
    {"Gelu", 1, 1, Types::kF32, 0, 12},
    {"LeakyRelu", 1, 1, Types::kF32, 0, 12},
    {"Clip", 1, 3, Types::kF32, 0, 12},
    {"HardSigmoid", 1, 1, Types::kF32, 0, 12},
    {"HardSwish", 1, 1, Types::kF32, 0, 12},
    {"Softplus", 1, 1, Types::kF32, 0, 12},
    {"Reciprocal", 1, 1, Types::kF32, 0, 12},
    {"Identity", 1, 1, Types::kAny, 0, 12},
    {"Floor", 1, 1, Types::kF32, 0, 12},
    {"Ceil", 1, 1, Types::kF32, 0, 12},
    {"Softmax", 1, 1, Types::kF32, 0, 12},
    {"LogSoftmax", 1, 1, Types::kF32, 0, 12},
    {"LayerNormalization", 2, 3, Types::kF32, 1, 12},
    {"BatchNormalization", 5, 5, Types::kF32, 2, 12},
    {"ReduceMean", 1, 2, Types::kF32, 0, 12},
    {"ReduceSum", 1, 2, Types::kF32, 0, 12},
    {"ReduceMax", 1, 2, Types::kF32, 0, 12},
    {"Concat", 1, -1, Types::kAny, 1, 12},
    {"Transpose", 1, 1, Types::kAny, 0, 12},
    {"Slice", 1, 5, Types::kAny, 0, 12},
    {"Expand", 1, 2, Types::kAny, 0, 12},
    {"Pad", 1, 4, Types::kAny, 0, 12},
    {"Gather", 2, 2, Types::kAny, 1, 12},
    {"Cast", 1, 1, Types::kAny, 0, 12},
    {"TransData", 1, 1, Types::kDnnl, 3, 5},
    {"FusedAttention", 3, 4, Types::kF32, 4, 4},
    {"EltwiseChain", 1, -1, Types::kF32, 0, 12},
};

bool type_ok(Types t, DType d) {
  switch (t) {
    case Types::kF32: return d == DType::kFloat32;
    case Types::kFloat: return d == DType::kFloat32 || d == DType::kFloat64;
    case Types::kArith:
      return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kInt64 || d == DType::kInt32;
    case Types::kAny: return true;
    case Types::kDnnl:
      return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kInt32 || d == DType::kInt8 ||
             d == DType::kUInt8;
  }
  return false;
}

const char* types_str(Types t) {
  switch (t) {
    case Types::kF32: return "float32";
    case Types::kFloat: return "float32 or float64";
    case Types::kArith: return "float32, float64, int64 or int32";
    case Types::kAny: return "any dtype";
    case Types::kDnnl: return "float32, float16, int32, int8 or uint8";
  }
  return "";
}

// Formats a data operand of `shape` may have under a format-preserving rule; padded
// blocked formats only where the op takes them (Conv, TransData).
std::vector<std::string> formats_for(const Shape& shape, bool padded_ok = false) {
  std::vector<std::string> r = {"nchw"};
  for (Format f : {Format::kNhwc, Format::kNChw8c, Format::kNChw16c}) {
    if (format_error(f, shape).empty() && (padded_ok || !format_padded(f, shape))) r.push_back(format_name(f));
  }
  return r;
}

}  // namespace

KernelInfo kernel_info(const Device& device, const std::string& op, const std::vector<std::string>& dtypes,
                       const std::vector<Shape>& shapes, const Attrs& attrs) {
  KernelInfo r;
  auto no = [&](const std::string& why) {
    r.supported = false;
    r.reason = why;
    r.preferred_format = "nchw";
    r.formats = {"nchw"};
    return r;
  };
  const Rule* rule = nullptr;
  for (const Rule& x : kRules) {
    if (op == x.op) rule = &x;
  }
  if (!rule || !find_kernel(op)) return no(cat("the device has no kernel for '", op, "'"));
  if (dtypes.size() != shapes.size()) {
    return no(cat("got ", dtypes.size(), " dtypes but ", shapes.size(), " shapes; give one of each per input"));
  }
  const int n = static_cast<int>(dtypes.size());
  if (n < rule->min_in || (rule->max_in >= 0 && n > rule->max_in)) {
    return no(cat(op, " takes ", rule->min_in, rule->max_in < 0 ? " or more" : cat(" to ", rule->max_in),
                  " inputs, got ", n));
  }
  std::vector<std::optional<DType>> types(dtypes.size());
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (dtypes[i].empty()) continue;  // omitted optional input
    DType d;
    if (!parse_dtype(dtypes[i], &d)) return no(cat("input ", i, ": unknown dtype '", dtypes[i], "'"));
    for (int64_t dim : shapes[i]) {
      if (dim < 0) return no(cat("input ", i, ": negative dimension in ", shape_str(shapes[i])));
    }
    types[i] = d;
  }
  if (!types[0]) return no("input 0 is required");
  const DType d0 = *types[0];
  const Shape& s0 = shapes[0];
  const int rank = static_cast<int>(s0.size());
  if (!type_ok(rule->types, d0)) return no(cat(op, " takes ", types_str(rule->types), ", got ", dtype_name(d0)));
  if (rank < rule->min_rank || rank > rule->max_rank) {
    return no(cat(op, " takes rank ", rule->min_rank, " to ", rule->max_rank, ", got ", shape_str(s0)));
  }
  auto same_types = [&](int from, int to) -> std::string {
    for (int i = from; i < std::min(to, n); ++i) {
      if (types[i] && *types[i] != d0) {
        return cat("input ", i, " is ", dtype_name(*types[i]), " but input 0 is ", dtype_name(d0));
      }
    }
    return "";
  };
  // Op-specific static checks.
  std::string why;
  const std::string& o = op;
  if (o == "Gather") {
    if (types[1] != DType::kInt64 && types[1] != DType::kInt32) why = "Gather indices must be int64 or int32";
  } else if (o == "Where") {
    if (d0 != DType::kBool) why = "Where's condition must be bool";
    if (why.empty() && types[1] && types[2] && *types[1] != *types[2]) why = "Where's X and Y must share a dtype";
    Shape b1, b2;
    if (why.empty() && (!broadcast_shapes(shapes[0], shapes[1], &b1) || !broadcast_shapes(b1, shapes[2], &b2))) {
      why = "shapes do not broadcast";
    }
  } else if (o == "Add" || o == "Sub" || o == "Mul" || o == "Div" || o == "Max" || o == "Min" || o == "Pow") {
    why = same_types(1, 2);
    Shape b;
    if (why.empty() && !broadcast_shapes(shapes[0], shapes[1], &b)) {
      why = cat("shapes ", shape_str(shapes[0]), " and ", shape_str(shapes[1]), " do not broadcast");
    }
  } else if (o == "Gemm") {
    why = same_types(1, n);
    if (why.empty() && shapes[1].size() != 2) why = "B must be 2-D";
    if (why.empty()) {
      const auto it_a = attrs.find("transA"), it_b = attrs.find("transB");
      const bool transa = it_a != attrs.end() && std::holds_alternative<int64_t>(it_a->second) &&
                          std::get<int64_t>(it_a->second) != 0;
      const bool transb = it_b != attrs.end() && std::holds_alternative<int64_t>(it_b->second) &&
                          std::get<int64_t>(it_b->second) != 0;
      const int64_t K = transa ? s0[0] : s0[1];
      const int64_t KB = transb ? shapes[1][1] : shapes[1][0];
      if (K != KB) why = "inner dimensions differ";
    }
  } else if (o == "MatMul") {
    why = same_types(1, n);
    const Shape& b = shapes[1];
    if (why.empty() && b.empty()) why = "B must have rank >= 1";
    if (why.empty()) {
      const int64_t K = s0.back(), KB = b.size() == 1 ? b[0] : b[b.size() - 2];
      Shape ba(s0.begin(), s0.end() - std::min<size_t>(2, s0.size()));
      Shape bb(b.begin(), b.end() - std::min<size_t>(2, b.size())), bo;
      if (K != KB) {
        why = cat("inner dimensions differ: ", shape_str(s0), " and ", shape_str(b));
      } else if (!broadcast_shapes(ba, bb, &bo)) {
        why = "batch dimensions do not broadcast";
      }
    }
  } else if (o == "BatchNormalization") {
    why = same_types(1, n);
    for (int i = 1; i < n && why.empty(); ++i) {
      if (shapes[i] != Shape{s0[1]}) why = cat("input ", i, " must have shape [", s0[1], "]");
    }
  } else if (o == "LayerNormalization" || o == "Concat") {
    why = same_types(1, n);
    if (o == "Concat") {
      for (int i = 1; i < n && why.empty(); ++i) {
        if (shapes[i].size() != s0.size()) why = "Concat inputs must share a rank";
      }
    }
  } else if (o == "Cast") {
    const auto it = attrs.find("to");
    if (it == attrs.end()) {
      why = "attribute 'to' is required";
    } else if (const auto* name = std::get_if<std::string>(&it->second)) {
      DType t;
      if (!parse_dtype(*name, &t)) why = cat("unknown dtype '", *name, "' in attribute 'to'");
    } else if (const auto* code = std::get_if<int64_t>(&it->second)) {
      const std::set<int64_t> ok = {1, 2, 3, 5, 6, 7, 9, 10, 11};
      if (!ok.count(*code)) why = cat("unsupported ONNX dtype code ", *code, " in attribute 'to'");
    }
  } else if (o == "Conv" || o == "FusedAttention" || o == "EltwiseChain") {
    // These factories' own checks answer: run them on stand-in tensors (no data).
    try {
      std::vector<TensorInfo> ts(static_cast<size_t>(n));
      KernelArgs a;
      a.name = "kernel_info";
      a.op = op;
      a.attrs = &attrs;
      a.device = &device;
      for (int i = 0; i < n; ++i) {
        if (!types[i]) {
          a.inputs.push_back(nullptr);
          continue;
        }
        ts[i].name = cat("input", i);
        ts[i].dtype = *types[i];
        ts[i].shape = shapes[i];
        ts[i].numel = shape_numel(shapes[i]);
        ts[i].region = i == 0 || o != "Conv" ? Region::kArena : Region::kWeight;
        a.inputs.push_back(&ts[i]);
      }
      if (o == "EltwiseChain") {
        TensorInfo y = ts[0];  // the chain's output is shaped like input 0
        a.outputs.push_back(&y);
        make_chain(a);
      } else if (o == "FusedAttention") {
        check_attention(a);
      } else {
        if (!a.inputs[1]) throw Error(Status::InvalidArgument("weight W is required"));
        r.preferred_format = conv_preferred_format(a);
      }
    } catch (const Error& e) {
      why = e.status().message();
    } catch (const dnnl::error& e) {
      why = cat("oneDNN cannot run this ", o, ": ", e.what());
    }
  }
  if (!why.empty()) return no(why);

  r.supported = true;
  switch (layout_rule(op)) {
    case LayoutRule::kPlainOnly:
      r.formats = {"nchw"};
      r.preferred_format = "nchw";
      break;
    case LayoutRule::kAnyData:
      r.formats = formats_for(s0, true);
      break;
    case LayoutRule::kConvert:
      r.formats = formats_for(s0, true);
      r.preferred_format = "any";
      break;
    case LayoutRule::kUniform:
    case LayoutRule::kConcat:
      r.formats = formats_for(s0);
      r.preferred_format = "any";
      break;
    case LayoutRule::kElementwise: {
      Shape out = s0;
      for (int i = 1; i < n; ++i) broadcast_shapes(out, shapes[i], &out);  // checked above
      bool same = true;
      for (int i = 0; i < n; ++i) {
        if (shape_numel(shapes[i]) > 1 && shapes[i] != out) same = false;
      }
      r.formats = same ? formats_for(out) : std::vector<std::string>{"nchw"};
      r.preferred_format = same ? "any" : "nchw";
      break;
    }
  }
  if (rule->types == Types::kDnnl && d0 != DType::kFloat32 && op != "TransData") r.formats = {"nchw"};
  return r;
}

}  // namespace ge
