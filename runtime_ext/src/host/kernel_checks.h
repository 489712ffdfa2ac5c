// Static checks of the kernel info store that go beyond an op's table row (op_table.h):
// each follows the CheckFn contract ("" when the kernel runs the node, else why not).
#pragma once

#include "op_table.h"

namespace ge {

std::string check_gather(const OpQuery& q, KernelInfo* r);
std::string check_where(const OpQuery& q, KernelInfo* r);
// Two operands of one dtype whose shapes broadcast (arithmetic and comparisons).
std::string check_broadcast2(const OpQuery& q, KernelInfo* r);
// check_broadcast2, and a dtype the comparison loops take (bool for Equal only).
std::string check_compare(const OpQuery& q, KernelInfo* r);
// Linear mode on float32 only (nearest copies any dtype).
std::string check_resize(const OpQuery& q, KernelInfo* r);
std::string check_gemm(const OpQuery& q, KernelInfo* r);
std::string check_matmul(const OpQuery& q, KernelInfo* r);
// MatMulInteger: the int8 kernel's dtypes, shapes and zero points, and VNNI.
std::string check_matmul_integer(const OpQuery& q, KernelInfo* r);
std::string check_matmul_qweight(const OpQuery& q, KernelInfo* r);
std::string check_batch_norm(const OpQuery& q, KernelInfo* r);
// Every present input has input 0's dtype (LayerNormalization).
std::string check_same_types(const OpQuery& q, KernelInfo* r);
std::string check_concat(const OpQuery& q, KernelInfo* r);
std::string check_cast(const OpQuery& q, KernelInfo* r);
// The factory's own checks on stand-in tensors (no data): Conv and ConvDw (X and W; also
// oneDNN's preferred format), FusedAttention and EltwiseChain.
std::string check_conv(const OpQuery& q, KernelInfo* r);
// ConvBlock and ConvHead: the block kernels run here (AVX-512); a head's batch fits them.
std::string check_conv_block(const OpQuery& q, KernelInfo* r);
std::string check_conv_head(const OpQuery& q, KernelInfo* r);
std::string check_fused_attention(const OpQuery& q, KernelInfo* r);
std::string check_deconv(const OpQuery& q, KernelInfo* r);
std::string check_chain(const OpQuery& q, KernelInfo* r);
std::string check_eltwise_graph(const OpQuery& q, KernelInfo* r);
// The factory on stand-ins (the indices and lengths not constants), its output shaped as
// the op gives it: GatherElements, ScatterElements, CumSum, ReverseSequence.
std::string check_on_stand_ins(const OpQuery& q, KernelInfo* r);

}  // namespace ge
