// Helpers shared by the kernels built on oneDNN primitives.
#pragma once

#include <unordered_map>

#include "buffer.h"
#include "kernel.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace ge {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// oneDNN dims of a shape; a scalar becomes {1}.
dnnl::memory::dims dnnl_dims(const Shape& s);

// Dense row-major descriptor of `s` (rank <= 12, else throws Error).
dnnl::memory::desc plain_md(const Shape& s, dt type = dt::f32);

// Descriptor of a tensor as stored: plain, or N,H,W,C for a channels-last float32 one.
dnnl::memory::desc tensor_md(const TensorInfo& t);

// Memory object over borrowed bytes (a tensor, a kernel buffer, the workspace).
dnnl::memory wrap(const dnnl::memory::desc& md, const Device& dev, const void* data);

// The fusion attributes of Conv, Gemm and MatMul:
//   activation: "" | Relu | LeakyRelu | Clip | Sigmoid | Tanh | Gelu | GeluTanh |
//               HardSwish | HardSigmoid, with activation_alpha / activation_beta,
//   sum: 1 -> the node's last input is a residual added before the activation.
struct Fusion {
  bool sum = false;
  bool activation = false;
  dnnl::algorithm alg = dnnl::algorithm::undef;
  float alpha = 0.f;
  float beta = 0.f;
};

// Throws Error(InvalidArgument) for an unknown activation.
Fusion parse_fusion(const KernelArgs& a);

// Appends the activation (if any) as an eltwise post-op.
void append_activation(const Fusion& f, dnnl::post_ops* ops);

// Attributes with a user-managed scratchpad (kept in the stream workspace) and `ops`.
dnnl::primitive_attr make_attr(const dnnl::post_ops& ops = dnnl::post_ops());

// Carves 64-byte aligned sub-buffers out of a kernel's workspace.
class WorkspacePlan {
 public:
  // Reserves `bytes`; returns the offset of the slot (aligned).
  size_t add(size_t bytes) {
    size_t at = total_;
    total_ += (bytes + 63) / 64 * 64;
    return at;
  }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

// A primitive with its arguments bound once at load. The scratchpad lives in the stream
// workspace (slot reserved by reserve(), bound by bind()).
class BoundPrimitive {
 public:
  BoundPrimitive() = default;
  template <class PD>
  explicit BoundPrimitive(const PD& pd) : prim_(pd.get()), scratch_md_(pd.scratchpad_desc()) {}

  bool valid() const { return static_cast<bool>(prim_); }
  void arg(int key, const dnnl::memory& m) { args_[key] = m; }

  size_t scratchpad_bytes() const { return valid() ? scratch_md_.get_size() : 0; }
  // Reserves one scratchpad slot in `plan` shared by `prims` (they run one after the
  // other, never concurrently). Invalid (empty) primitives are skipped.
  static void share_scratchpad(WorkspacePlan* plan, std::initializer_list<BoundPrimitive*> prims);
  // Binds the scratchpad to workspace + slot. No-op for an invalid primitive.
  void bind(uint8_t* workspace, const Device& dev);

  // Blocks until done (CPU + OpenMP runtime executes synchronously). Throws dnnl::error.
  void execute(dnnl::stream& s) { prim_.execute(s, args_); }

 private:
  dnnl::primitive prim_;
  dnnl::memory::desc scratch_md_;
  size_t scratch_at_ = 0;
  std::unordered_map<int, dnnl::memory> args_;
};

// A constant tensor (e.g. weights) converted at load into the layout `to` chosen by a
// primitive. Blocks (runs the reorder on the load stream). Returns an owned buffer.
AlignedBuffer reorder_constant(const KernelArgs& a, const dnnl::memory::desc& from,
                               const void* src, const dnnl::memory::desc& to);

}  // namespace ge
