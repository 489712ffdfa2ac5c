// Factories of the device engine's kernels, one group per kernels_*.cc file.
// Each follows the KernelFactory contract of kernel.h.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "host_device.h"
#include "kernel.h"

namespace ge {

// An operation of at most this many elements runs on the runtime's own loops where it has
// them (elementwise Add/Sub/Mul/Div, Neg/Abs/Sqrt, ReduceSum/Mean): a oneDNN primitive's
// execute alone costs ~1.5-2 us, the time of a few thousand elements.
constexpr int64_t kSmallOpElements = 16384;

// kernels_conv.cc
std::unique_ptr<Kernel> make_conv(const KernelArgs& a);
std::unique_ptr<Kernel> make_conv_dw(const KernelArgs& a);     // ConvDw: 1x1 + depthwise post-op
std::unique_ptr<Kernel> make_conv_block(const KernelArgs& a);  // ConvBlock (conv_block.cc)
std::unique_ptr<Kernel> make_conv_head(const KernelArgs& a);   // ConvHead (conv_block.cc)
// For kernel_info: checks X (input 0) and W (input 1) like load would and returns the
// format oneDNN prefers for X ("nhwc", "nChw16c", ...). Throws Error / dnnl::error.
std::string conv_preferred_format(const KernelArgs& a);
// kernels_pool.cc
std::unique_ptr<Kernel> make_pool(const KernelArgs& a);  // MaxPool, AveragePool, Global*
// kernels_matmul.cc
std::unique_ptr<Kernel> make_gemm(const KernelArgs& a);
std::unique_ptr<Kernel> make_matmul(const KernelArgs& a);
// kernels_binary.cc
std::unique_ptr<Kernel> make_binary(const KernelArgs& a);  // Add Sub Mul Div Max Min Pow
std::unique_ptr<Kernel> make_where(const KernelArgs& a);
// kernels_unary.cc
std::unique_ptr<Kernel> make_unary(const KernelArgs& a);
// kernels_norm.cc
std::unique_ptr<Kernel> make_softmax(const KernelArgs& a);  // Softmax, LogSoftmax
std::unique_ptr<Kernel> make_layer_norm(const KernelArgs& a);
std::unique_ptr<Kernel> make_rms_norm(const KernelArgs& a);
std::unique_ptr<Kernel> make_batch_norm(const KernelArgs& a);
std::unique_ptr<Kernel> make_group_norm(const KernelArgs& a);  // graphengine.GroupNorm
// kernels_reduce.cc
std::unique_ptr<Kernel> make_reduce(const KernelArgs& a);  // ReduceMean Sum Max Min
// kernels_layout.cc
std::unique_ptr<Kernel> make_concat(const KernelArgs& a);
std::unique_ptr<Kernel> make_transpose(const KernelArgs& a);
std::unique_ptr<Kernel> make_slice(const KernelArgs& a);
std::unique_ptr<Kernel> make_expand(const KernelArgs& a);
std::unique_ptr<Kernel> make_pad(const KernelArgs& a);
// kernels_attention.cc
std::unique_ptr<Kernel> make_attention(const KernelArgs& a);  // FusedAttention
std::unique_ptr<Kernel> make_rope(const KernelArgs& a);       // Rope (rotate-half rotary embedding)
std::unique_ptr<Kernel> make_rnn(const KernelArgs& a);        // RNN, GRU, LSTM
// kernels_dq_lstm.cc
std::unique_ptr<Kernel> make_dq_lstm(const KernelArgs& a);  // com.microsoft.DynamicQuantizeLSTM
// kernels_variable.cc: Assign, AssignAdd, AssignSlice (writes to a session's variable)
std::unique_ptr<Kernel> make_assign(const KernelArgs& a);
// kernels_chain.cc
std::unique_ptr<Kernel> make_chain(const KernelArgs& a);  // EltwiseChain
std::unique_ptr<Kernel> make_eltwise_graph(const KernelArgs& a);  // EltwiseGraph
// "a,b,c" -> {"a", "b", "c"}: the fused elementwise kernels' op lists (kernels_chain.cc).
std::vector<std::string> split_commas(const std::string& s);
// For kernel_info: checks the inputs and attributes like load would. Throws Error.
void check_attention(const KernelArgs& a);
// kernels_gather.cc
std::unique_ptr<Kernel> make_gather(const KernelArgs& a);
std::unique_ptr<Kernel> make_gather_nd(const KernelArgs& a);
// kernels_nms.cc: PaddedNonMaxSuppression (the selection padded to its bound, and its count)
std::unique_ptr<Kernel> make_padded_nms(const KernelArgs& a);
// kernels_quant.cc
std::unique_ptr<Kernel> make_dynamic_quantize(const KernelArgs& a);  // DynamicQuantizeLinear
// kernels_int8.cc
// MatMulInteger's sums stay below 2^31 in oneDNN's int32 accumulators: K * 255 * 128 < 2^31.
constexpr int64_t kMaxIntegerInner = 65793;
std::unique_ptr<Kernel> make_matmul_integer(const KernelArgs& a);  // MatMulInteger
// X @ ((float(W) - Z) * S) with constant 8-bit weights kept 8-bit (kernels_wq.cc)
std::unique_ptr<Kernel> make_matmul_qweight(const KernelArgs& a);  // MatMulQWeight
// For kernel_info and load: "" when the int8 kernel runs MatMulInteger on these inputs (A, B,
// A's and B's zero points; nullopt for an omitted one) and this CPU, else why not.
std::string matmul_integer_problem(const std::vector<std::optional<DType>>& types, const std::vector<Shape>& shapes);
// kernels_select.cc
std::unique_ptr<Kernel> make_select(const KernelArgs& a);  // TopK, ArgMax, ArgMin
// kernels_compare.cc
std::unique_ptr<Kernel> make_compare(const KernelArgs& a);  // Equal Less Greater LessOrEqual
                                                            // GreaterOrEqual And Or Xor
std::unique_ptr<Kernel> make_not(const KernelArgs& a);
// kernels_resize.cc
std::unique_ptr<Kernel> make_resize(const KernelArgs& a);
std::unique_ptr<Kernel> make_grid_sample(const KernelArgs& a);
// kernels_deconv.cc
std::unique_ptr<Kernel> make_conv_transpose(const KernelArgs& a);
// For kernel_info: checks the inputs and attributes like load would, without building
// oneDNN's primitive descriptor (it runs every shape the checks pass). Throws Error.
void check_conv_transpose(const KernelArgs& a);
// kernels_trees.cc
std::unique_ptr<Kernel> make_tree_ensemble(const KernelArgs& a);  // TreeEnsembleClassifier, Regressor
// kernels_scatter.cc
std::unique_ptr<Kernel> make_gather_elements(const KernelArgs& a);
std::unique_ptr<Kernel> make_scatter_elements(const KernelArgs& a);
std::unique_ptr<Kernel> make_scatter_nd(const KernelArgs& a);
// kernels_sequence.cc
std::unique_ptr<Kernel> make_cumsum(const KernelArgs& a);
std::unique_ptr<Kernel> make_reverse_sequence(const KernelArgs& a);
std::unique_ptr<Kernel> make_col2im(const KernelArgs& a);
std::unique_ptr<Kernel> make_segment_matmul(const KernelArgs& a);
// kernels_classify.cc
std::unique_ptr<Kernel> make_classify(const KernelArgs& a);  // IsNaN, IsInf
// kernels_split.cc
std::unique_ptr<Kernel> make_split(const KernelArgs& a);
// kernels_cast.cc
std::unique_ptr<Kernel> make_cast(const KernelArgs& a);
// kernels_transdata.cc
std::unique_ptr<Kernel> make_transdata(const KernelArgs& a);
// Transpose of a plain tensor as a oneDNN reorder; nullptr when oneDNN has no fast
// kernel for it (the caller falls back to a strided copy). `perm` is validated.
std::unique_ptr<Kernel> make_permute(const KernelArgs& a, const std::vector<int64_t>& perm);

}  // namespace ge
