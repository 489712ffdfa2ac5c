#include "op_table.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "kernel_checks.h"
#include "kernels.h"
#include "plugin.h"

namespace ge {

namespace {

using L = LayoutRule;
using T = Types;
constexpr int kAnyRank = 12;

}  // namespace

const std::vector<OpRow>& op_table() {
  // name, factory, layout rule, inputs min..max, input 0's dtypes, its ranks, own check
  static const std::vector<OpRow> table = {
      {"Conv", make_conv, L::kAnyData, 2, 4, T::kF32, 3, 5, check_conv},
      {"ConvDw", make_conv_dw, L::kAnyData, 4, 5, T::kF32, 4, 4, check_conv},
      {"ConvBlock", make_conv_block, L::kAnyData, 5, 8, T::kF32, 4, 4, check_conv_block},
      {"ConvHead", make_conv_head, L::kAnyData, 5, 5, T::kF32, 4, 4, check_conv_head},
      {"MaxPool", make_pool, L::kUniform, 1, 1, T::kF32, 3, 5, nullptr},
      {"AveragePool", make_pool, L::kUniform, 1, 1, T::kF32, 3, 5, nullptr},
      {"GlobalAveragePool", make_pool, L::kUniform, 1, 1, T::kF32, 3, 5, nullptr},
      {"GlobalMaxPool", make_pool, L::kUniform, 1, 1, T::kF32, 3, 5, nullptr},
      {"Gemm", make_gemm, L::kPlainOnly, 2, 4, T::kF32, 2, 2, check_gemm},
      {"MatMul", make_matmul, L::kPlainOnly, 2, 6, T::kF32, 1, kAnyRank, check_matmul},
      {"Add", make_binary, L::kChannel, 2, 2, T::kArith, 0, kAnyRank, check_broadcast2},
      {"Sub", make_binary, L::kChannel, 2, 2, T::kArith, 0, kAnyRank, check_broadcast2},
      {"Mul", make_binary, L::kChannel, 2, 2, T::kArith, 0, kAnyRank, check_broadcast2},
      {"Div", make_binary, L::kChannel, 2, 2, T::kArith, 0, kAnyRank, check_broadcast2},
      {"Max", make_binary, L::kElementwise, 2, 2, T::kArith, 0, kAnyRank, check_broadcast2},
      {"Min", make_binary, L::kElementwise, 2, 2, T::kArith, 0, kAnyRank, check_broadcast2},
      {"Pow", make_binary, L::kElementwise, 2, 2, T::kFloat, 0, kAnyRank, check_broadcast2},
      {"PRelu", make_binary, L::kChannel, 2, 2, T::kArith, 0, kAnyRank, check_broadcast2},
      {"Mod", make_binary, L::kElementwise, 2, 2, T::kArith, 0, kAnyRank, check_broadcast2},
      {"Where", make_where, L::kElementwise, 3, 3, T::kAny, 0, kAnyRank, check_where},
      {"Relu", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Sigmoid", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Tanh", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Exp", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Log", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Sqrt", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Abs", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Neg", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Erf", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Sin", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Cos", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Gelu", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"LeakyRelu", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Clip", make_unary, L::kUniform, 1, 3, T::kF32, 0, kAnyRank, nullptr},
      {"HardSigmoid", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Elu", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"HardSwish", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Swish", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Softplus", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Reciprocal", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Identity", make_unary, L::kUniform, 1, 1, T::kAny, 0, kAnyRank, nullptr},
      {"Floor", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Ceil", make_unary, L::kUniform, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"Softmax", make_softmax, L::kPlainOnly, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"LogSoftmax", make_softmax, L::kPlainOnly, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"LayerNormalization", make_layer_norm, L::kPlainOnly, 2, 3, T::kF32, 1, kAnyRank, check_same_types},
      {"RMSNormalization", make_rms_norm, L::kPlainOnly, 2, 2, T::kF32, 1, kAnyRank, check_same_types},
      {"BatchNormalization", make_batch_norm, L::kUniform, 5, 5, T::kF32, 2, kAnyRank, check_batch_norm},
      {"GroupNorm", make_group_norm, L::kUniform, 3, 3, T::kF32, 3, kAnyRank, nullptr},
      {"ReduceMean", make_reduce, L::kReduce, 1, 2, T::kF32, 0, kAnyRank, nullptr},
      {"ReduceSum", make_reduce, L::kReduce, 1, 2, T::kArith, 0, kAnyRank, nullptr},
      {"ReduceMax", make_reduce, L::kReduce, 1, 2, T::kArith, 0, kAnyRank, nullptr},
      {"ReduceMin", make_reduce, L::kReduce, 1, 2, T::kArith, 0, kAnyRank, nullptr},
      {"ReduceProd", make_reduce, L::kReduce, 1, 2, T::kArith, 0, kAnyRank, nullptr},
      {"Concat", make_concat, L::kConcat, 1, -1, T::kAny, 1, kAnyRank, check_concat},
      {"Transpose", make_transpose, L::kPlainOnly, 1, 1, T::kAny, 0, kAnyRank, nullptr},
      {"Slice", make_slice, L::kPlainOnly, 1, 5, T::kAny, 0, kAnyRank, nullptr},
      {"Expand", make_expand, L::kPlainOnly, 1, 2, T::kAny, 0, kAnyRank, nullptr},
      {"Pad", make_pad, L::kSpatial, 1, 4, T::kAny, 0, kAnyRank, nullptr},
      {"Gather", make_gather, L::kPlainOnly, 2, 2, T::kAny, 1, kAnyRank, check_gather},
      {"Cast", make_cast, L::kPlainOnly, 1, 1, T::kAny, 0, kAnyRank, check_cast},
      {"TransData", make_transdata, L::kConvert, 1, 1, T::kDnnl, 3, 5, nullptr},
      {"FusedAttention", make_attention, L::kPlainOnly, 3, 4, T::kF32, 4, 4, check_fused_attention},
      {"Rope", make_rope, L::kPlainOnly, 3, 3, T::kF32, 1, kAnyRank, nullptr},
      {"RNN", make_rnn, L::kPlainOnly, 3, 6, T::kF32, 3, 3, nullptr},
      {"GRU", make_rnn, L::kPlainOnly, 3, 6, T::kF32, 3, 3, nullptr},
      {"LSTM", make_rnn, L::kPlainOnly, 3, 8, T::kF32, 3, 3, nullptr},
      {"DynamicQuantizeLSTM", make_dq_lstm, L::kPlainOnly, 12, 12, T::kF32, 3, 3, nullptr},
      {"EltwiseChain", make_chain, L::kChannel, 1, -1, T::kF32, 0, kAnyRank, check_chain},
      {"EltwiseGraph", make_eltwise_graph, L::kDomain, 1, -1, T::kF32, 0, kAnyRank, check_eltwise_graph},
      {"Equal", make_compare, L::kElementwise, 2, 2, T::kAny, 0, kAnyRank, check_compare},
      {"Less", make_compare, L::kElementwise, 2, 2, T::kAny, 0, kAnyRank, check_compare},
      {"Greater", make_compare, L::kElementwise, 2, 2, T::kAny, 0, kAnyRank, check_compare},
      {"LessOrEqual", make_compare, L::kElementwise, 2, 2, T::kAny, 0, kAnyRank, check_compare},
      {"GreaterOrEqual", make_compare, L::kElementwise, 2, 2, T::kAny, 0, kAnyRank, check_compare},
      {"And", make_compare, L::kElementwise, 2, 2, T::kBool, 0, kAnyRank, check_broadcast2},
      {"Or", make_compare, L::kElementwise, 2, 2, T::kBool, 0, kAnyRank, check_broadcast2},
      {"Xor", make_compare, L::kElementwise, 2, 2, T::kBool, 0, kAnyRank, check_broadcast2},
      {"Not", make_not, L::kUniform, 1, 1, T::kBool, 0, kAnyRank, nullptr},
      {"Split", make_split, L::kConcat, 1, 2, T::kAny, 1, kAnyRank, nullptr},
      {"ConvTranspose", make_conv_transpose, L::kAnyData, 2, 3, T::kF32, 3, 4, check_deconv},
      {"DynamicQuantizeLinear", make_dynamic_quantize, L::kPlainOnly, 1, 1, T::kF32, 0, kAnyRank, nullptr},
      {"MatMulInteger", make_matmul_integer, L::kPlainOnly, 2, 4, T::kInt8, 1, kAnyRank, check_matmul_integer},
      {"MatMulQWeight", make_matmul_qweight, L::kPlainOnly, 3, 5, T::kF32, 1, kAnyRank, check_matmul_qweight},
      {"TopK", make_select, L::kPlainOnly, 1, 2, T::kArith, 1, kAnyRank, nullptr},
      {"ArgMax", make_select, L::kPlainOnly, 1, 1, T::kArith, 1, kAnyRank, nullptr},
      {"ArgMin", make_select, L::kPlainOnly, 1, 1, T::kArith, 1, kAnyRank, nullptr},
      {"GatherND", make_gather_nd, L::kPlainOnly, 2, 2, T::kAny, 1, kAnyRank, check_gather},
      {"PaddedNonMaxSuppression", make_padded_nms, L::kPlainOnly, 2, 5, T::kF32, 3, 3, nullptr},
      {"Resize", make_resize, L::kUniform, 1, 4, T::kAny, 4, 5, check_resize},
      {"GridSample", make_grid_sample, L::kPlainOnly, 2, 2, T::kF32, 4, 4, check_on_stand_ins},
      {"TreeEnsembleClassifier", make_tree_ensemble, L::kPlainOnly, 1, 1, T::kF32, 1, 2, nullptr},
      {"TreeEnsembleRegressor", make_tree_ensemble, L::kPlainOnly, 1, 1, T::kF32, 1, 2, nullptr},
      // element indexing, scans along an axis, float predicates: their factories check them
      {"GatherElements", make_gather_elements, L::kPlainOnly, 2, 2, T::kAny, 1, kAnyRank, check_on_stand_ins},
      {"ScatterElements", make_scatter_elements, L::kPlainOnly, 3, 3, T::kAny, 1, kAnyRank, check_on_stand_ins},
      {"ScatterND", make_scatter_nd, L::kPlainOnly, 3, 3, T::kAny, 1, kAnyRank, check_on_stand_ins},
      {"CumSum", make_cumsum, L::kPlainOnly, 1, 1, T::kArith, 1, kAnyRank, check_on_stand_ins},
      {"ReverseSequence", make_reverse_sequence, L::kPlainOnly, 2, 2, T::kAny, 2, kAnyRank, check_on_stand_ins},
      {"Col2Im", make_col2im, L::kPlainOnly, 1, 1, T::kF32, 3, 3, check_on_stand_ins},
      // the weights are read at load, where the factory checks them
      {"SegmentMatMul", make_segment_matmul, L::kPlainOnly, 3, 4, T::kF32, 2, 2, nullptr},
      // writes to a session's variable (input 0), in place: the output is its bytes
      {"Assign", make_assign, L::kPlainOnly, 2, 2, T::kAny, 0, kAnyRank, check_on_stand_ins},
      {"AssignAdd", make_assign, L::kPlainOnly, 2, 2, T::kArith, 0, kAnyRank, check_on_stand_ins},
      {"AssignSlice", make_assign, L::kPlainOnly, 3, 3, T::kAny, 1, kAnyRank, check_on_stand_ins},
      {"IsNaN", make_classify, L::kPlainOnly, 1, 1, T::kFloat, 0, kAnyRank, nullptr},
      {"IsInf", make_classify, L::kPlainOnly, 1, 1, T::kFloat, 0, kAnyRank, nullptr},
  };
  return table;
}

namespace {

// A plugin kernel's input dtypes: every present input one its description takes.
std::string check_plugin(const OpQuery& q, KernelInfo*) {
  const PluginKernelDef* def = find_plugin_kernel(q.op);
  if (def == nullptr) return cat("no plugin kernel for '", q.op, "'");
  for (int i = 0; i < q.n(); ++i) {
    if (q.types[i] && !def->accepts(*q.types[i])) {
      return cat("plugin kernel '", q.op, "' does not take ", dtype_name(*q.types[i]), " (input ", i, ")");
    }
  }
  return "";
}

// The row of a plugin kernel (plugin.h): made at its first lookup, kept for the process.
const OpRow* plugin_row(const std::string& op) {
  const PluginKernelDef* def = find_plugin_kernel(op);
  if (def == nullptr) return nullptr;
  static std::mutex mu;
  static auto* rows = new std::map<const PluginKernelDef*, OpRow>;
  std::lock_guard<std::mutex> lock(mu);
  auto it = rows->find(def);
  if (it == rows->end()) {
    it = rows->emplace(def, OpRow{def->op.c_str(), make_plugin_kernel, L::kPlainOnly, def->min_inputs,
                                  def->max_inputs, T::kAny, 0, kAnyRank, check_plugin})
             .first;
  }
  return &it->second;
}

}  // namespace

const OpRow* find_op(const std::string& op) {
  for (const OpRow& row : op_table()) {
    if (op == row.name) return &row;
  }
  return plugin_row(op);
}

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
    case Types::kBool: return d == DType::kBool;
    case Types::kInt8: return d == DType::kInt8 || d == DType::kUInt8;
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
    case Types::kBool: return "bool";
    case Types::kInt8: return "int8 or uint8";
  }
  return "";
}

std::string OpQuery::same_types(int from, int to) const {
  for (int i = from; i < std::min(to, n()); ++i) {
    if (types[i] && *types[i] != *types[0]) {
      return cat("input ", i, " is ", dtype_name(*types[i]), " but input 0 is ", dtype_name(*types[0]));
    }
  }
  return "";
}

int64_t OpQuery::attr_int(const char* key, int64_t def) const {
  const auto it = attrs->find(key);
  if (it == attrs->end()) return def;
  if (const auto* i = std::get_if<int64_t>(&it->second)) return *i;
  if (const auto* d = std::get_if<double>(&it->second)) {
    if (std::floor(*d) == *d && std::fabs(*d) < 9e18) return static_cast<int64_t>(*d);
  }
  return def;
}

}  // namespace ge
