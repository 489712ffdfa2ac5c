// Helpers shared by the kernels built on oneDNN primitives.
#pragma once

#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "buffer.h"
#include "host_device.h"
#include "kernel.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace ge {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// oneDNN dims of a shape; a scalar becomes {1}.
dnnl::memory::dims dnnl_dims(const Shape& s);

// Dense row-major descriptor of `s` (rank <= 12, else throws Error).
dnnl::memory::desc plain_md(const Shape& s, dt type = dt::f32);

// oneDNN data type of a float32 tensor (throws Error for other dtypes).
dt dnnl_type(DType t);

// Descriptor of a tensor as stored, in its Format (tensor.h).
dnnl::memory::desc tensor_md(const TensorInfo& t);
// Descriptor of a logical shape stored in `f`.
dnnl::memory::desc format_md(const Shape& s, Format f, dt type = dt::f32);

// Our Format for a oneDNN descriptor of a rank-4 tensor, if it is one we name
// (plain, nhwc, nChw8c, nChw16c); false otherwise.
bool md_format(const dnnl::memory::desc& md, Format* out);

// The fusion attributes of Conv, Gemm and MatMul:
//   activation: "" | Relu | LeakyRelu | Clip | Sigmoid | Tanh | Gelu | GeluTanh |
//               HardSwish | HardSigmoid | Swish, with activation_alpha / activation_beta,
//   activation_scale / activation_shift: y = scale * act(x) + shift after the activation
//               (a learnable affine block after it: PP-LCNetV3's), one linear post-op,
//   sum: 1 -> the node's last input is a residual added before the activation.
struct Fusion {
  bool sum = false;
  bool activation = false;
  dnnl::algorithm alg = dnnl::algorithm::undef;
  float alpha = 0.f;
  float beta = 0.f;
  bool linear = false;  // scale * act(x) + shift after the activation
  float scale = 1.f;
  float shift = 0.f;
};

// Padding of one spatial axis of a convolution or pool under ONNX `auto_pad`: *pb / *pe
// come in as the node's pads (kept for NOTSET) and leave resolved. `span` is the dilated
// kernel extent. Throws InvalidArgument for an unknown mode or a negative pad (`pads` is
// shown in the message).
void resolve_auto_pad(const std::string& auto_pad, int64_t in, int64_t stride, int64_t span,
                      const std::vector<int64_t>& pads, int64_t* pb, int64_t* pe);

// Throws Error(InvalidArgument) for an unknown activation.
Fusion parse_fusion(const KernelArgs& a);
// The activation named by attribute `key`, with `key`_alpha / `key`_beta (e.g.
// "dw_activation" for the depthwise stage of a fused Conv); sum is left false.
Fusion parse_activation(const KernelArgs& a, const std::string& key);

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

// Where a primitive argument's bytes are during a run.
struct Ref {
  enum class Kind : uint8_t { kTensor, kWorkspace, kFixed };
  Kind kind = Kind::kFixed;
  const TensorInfo* tensor = nullptr;  // kTensor: resolved per run
  size_t offset = 0;                   // kWorkspace: offset in the stream workspace
  const void* fixed = nullptr;         // kFixed: a kernel-owned buffer

  static Ref of(const TensorInfo& t) { return {Kind::kTensor, &t, 0, nullptr}; }
  static Ref workspace(size_t at) { return {Kind::kWorkspace, nullptr, at, nullptr}; }
  static Ref buffer(const void* p) { return {Kind::kFixed, nullptr, 0, p}; }

  void* resolve(const ExecContext& c) const {
    switch (kind) {
      case Kind::kTensor: return c.ptr(*tensor);
      case Kind::kWorkspace: return c.workspace + offset;
      case Kind::kFixed: return const_cast<void*>(fixed);
    }
    return nullptr;
  }
};

// A primitive with its arguments described once at load and resolved per run. Each
// instance gets its own oneDNN memory objects (set_instances), so instances can run the
// same primitive concurrently; a run only updates the handles whose address changed
// (caller buffers bound zero-copy, outputs written in place).
class Prim {
 public:
  Prim() = default;
  template <class PD>
  explicit Prim(const PD& pd)
      : prim_(pd.get()), scratch_md_(pd.scratchpad_desc()), impl_(std::string("oneDNN ") + pd.impl_info_str()) {}

  bool valid() const { return static_cast<bool>(prim_); }
  // oneDNN's name of the implementation it chose ("oneDNN brg:avx512_core").
  const std::string& impl() const { return impl_; }
  void arg(int key, const dnnl::memory::desc& md, Ref ref) { args_.push_back({key, md, ref}); }

  size_t scratchpad_bytes() const { return valid() ? scratch_md_.get_size() : 0; }
  // Reserves one scratchpad slot in `plan` shared by `prims` (they run one after the
  // other, never concurrently). Invalid (empty) primitives are skipped.
  static void share_scratchpad(WorkspacePlan* plan, const std::vector<Prim*>& prims);

  // Creates the per-instance memory objects. No-op for an invalid primitive.
  void set_instances(int n, const dnnl::engine& eng);

  // Blocks until done (the CPU runtime executes synchronously on the calling lane).
  // Throws dnnl::error.
  void execute(const ExecContext& c) { execute(c, {}); }
  // The same with the arguments named by `shifts` (oneDNN argument key, byte offset) moved
  // from their tensors' addresses by the offset: a primitive of a few rows run over one
  // block of a larger tensor's rows.
  void execute(const ExecContext& c, std::initializer_list<std::pair<int, ptrdiff_t>> shifts);

 private:
  struct Arg {
    int key;
    dnnl::memory::desc md;
    Ref ref;
  };
  struct Instance {
    std::vector<dnnl::memory> mems;
    std::vector<void*> ptrs;
    std::vector<dnnl_exec_arg_t> exec;
  };
  dnnl::primitive prim_;
  dnnl::memory::desc scratch_md_;
  std::string impl_;
  std::vector<Arg> args_;
  std::vector<Instance> inst_;
};

// The device's index of the prepared constants its live models hold, so that models whose
// weights are the same bytes (the programs compiled from one graph for several input
// shapes share their weight segments, codegen/shared_weights.py) share one reordered copy.
// Entries are weak: a buffer lives while a model's PreparedCache holds it, and that model
// keeps the source bytes at `src` alive (its weight segments), so no other bytes can be at
// that address while the entry can be found. Thread-safe.
class PreparedRegistry {
 public:
  std::shared_ptr<const AlignedBuffer> find(const void* src, const dnnl::memory::desc& from,
                                            const dnnl::memory::desc& to);
  // Indexes `buf` for (src, from, to) unless a live one is there; returns the one indexed.
  std::shared_ptr<const AlignedBuffer> put(const void* src, const dnnl::memory::desc& from,
                                           const dnnl::memory::desc& to,
                                           const std::shared_ptr<const AlignedBuffer>& buf);

 private:
  struct Entry {
    dnnl::memory::desc from, to;
    std::weak_ptr<const AlignedBuffer> buf;
  };
  static constexpr size_t kSweepEvery = 1024;  // puts between sweeps of expired entries
  std::mutex mu_;
  std::unordered_map<const void*, std::vector<Entry>> entries_;
  size_t puts_ = 0;
};

// Constants prepared at load (weights reordered into a primitive's layout), kept once per
// model: kernels asking for the same source bytes in the same layout share one buffer, and
// through the device's registry, so do models whose weights are the same bytes.
// Thread-safe (kernels of different streams are built concurrently).
class PreparedCache final : public SharedConstants {
 public:
  explicit PreparedCache(std::shared_ptr<PreparedRegistry> registry = nullptr)
      : registry_(std::move(registry)) {}
  // The buffer for (src, from, to), if prepared already (by this model or a live other).
  std::shared_ptr<const AlignedBuffer> find(const void* src, const dnnl::memory::desc& from,
                                            const dnnl::memory::desc& to);
  // Keeps `buf` for (src, from, to); returns the buffer kept (an earlier one if there is one).
  std::shared_ptr<const AlignedBuffer> put(const void* src, const dnnl::memory::desc& from,
                                           const dnnl::memory::desc& to,
                                           std::shared_ptr<const AlignedBuffer> buf);
  size_t bytes() const override;
  size_t borrowed_bytes() const override;

 private:
  struct Entry {
    const void* src;
    dnnl::memory::desc from, to;
    std::shared_ptr<const AlignedBuffer> buf;
    bool borrowed = false;  // found in the device's registry
  };
  const Entry* local(const void* src, const dnnl::memory::desc& from, const dnnl::memory::desc& to) const;
  std::shared_ptr<PreparedRegistry> registry_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
};

// The model's store of prepared constants (a HostDevice made it), or nullptr.
inline PreparedCache* host_prepared(const KernelArgs& a) { return static_cast<PreparedCache*>(a.prepared); }

// A constant tensor (e.g. weights) converted at load into the layout `to` chosen by a
// primitive, or the model's earlier conversion of the same bytes (a.prepared). Blocks (runs
// the reorder on the load stream). The buffer is shared and read-only. `key` (default: src)
// names the constant in a.prepared when `src` is a transient copy derived from it.
std::shared_ptr<const AlignedBuffer> reorder_constant(const KernelArgs& a, const dnnl::memory::desc& from,
                                                      const void* src, const dnnl::memory::desc& to,
                                                      const void* key = nullptr);

// A kernel that is one bound oneDNN primitive and nothing else at run time. Kernels with a
// fallback (e.g. a plain copy when the primitive is not needed) override run().
class PrimitiveKernel : public Kernel {
 public:
  explicit PrimitiveKernel(const Device& dev) : dev_(dev) {}
  size_t workspace_bytes() const override { return plan_.total(); }
  void set_instances(int n) override { prim_.set_instances(n, host_engine(dev_)); }
  Status run(ExecContext& ctx) override {
    prim_.execute(ctx);
    return Status::Ok();
  }
  std::string impl() const override { return prim_.impl(); }

  const Device& dev_;
  Prim prim_;
  WorkspacePlan plan_;
};

// A one-input, one-output kernel whose load may find that no primitive is needed (the
// output is the input's bytes: nothing reduced, no format change): then it copies.
class PrimitiveOrCopyKernel : public PrimitiveKernel {
 public:
  using PrimitiveKernel::PrimitiveKernel;
  Status run(ExecContext& ctx) override {
    if (prim_.valid()) {
      prim_.execute(ctx);
    } else {
      const uint8_t* x = ctx.ptr(*x_);
      uint8_t* y = ctx.ptr(*y_);
      if (x != y) std::memmove(y, x, x_->nbytes);
    }
    return Status::Ok();
  }
  std::string impl() const override { return prim_.valid() ? prim_.impl() : "copy"; }

  const TensorInfo* x_ = nullptr;
  const TensorInfo* y_ = nullptr;
};

}  // namespace ge
