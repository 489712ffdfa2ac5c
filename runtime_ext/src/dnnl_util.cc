#include "dnnl_util.h"

#include <algorithm>
#include <limits>

namespace ge {

dnnl::memory::dims dnnl_dims(const Shape& s) {
  if (s.empty()) return {1};
  return dnnl::memory::dims(s.begin(), s.end());
}

dnnl::memory::desc plain_md(const Shape& s, dt type) {
  if (s.size() > DNNL_MAX_NDIMS) invalid("rank ", s.size(), " exceeds ", DNNL_MAX_NDIMS);
  dnnl::memory::dims dims = dnnl_dims(s);
  return dnnl::memory::desc(dims, type, dnnl::memory::dims(dense_strides(dims)));
}

dnnl::memory::desc tensor_md(const TensorInfo& t) {
  if (t.channels_last()) return dnnl::memory::desc(dnnl_dims(t.shape), dt::f32, tag::nhwc);
  return plain_md(t.shape);
}

dnnl::memory wrap(const dnnl::memory::desc& md, const Device& dev, const void* data) {
  return dnnl::memory(md, dev.engine(), const_cast<void*>(data));
}

Fusion parse_fusion(const KernelArgs& a) {
  Fusion f;
  f.sum = a.attr_int("sum", 0) != 0;
  std::string act = a.attr_str("activation", "");
  if (act.empty()) return f;
  f.activation = true;
  using alg = dnnl::algorithm;
  const float inf = std::numeric_limits<float>::infinity();
  if (act == "Relu") {
    f.alg = alg::eltwise_relu;
  } else if (act == "LeakyRelu") {
    f.alg = alg::eltwise_relu;
    f.alpha = static_cast<float>(a.attr_float("activation_alpha", 0.01));
  } else if (act == "Clip") {
    f.alg = alg::eltwise_clip_v2;
    f.alpha = static_cast<float>(a.attr_float("activation_alpha", -inf));
    f.beta = static_cast<float>(a.attr_float("activation_beta", inf));
  } else if (act == "Sigmoid") {
    f.alg = alg::eltwise_logistic;
  } else if (act == "Tanh") {
    f.alg = alg::eltwise_tanh;
  } else if (act == "Gelu") {
    f.alg = alg::eltwise_gelu_erf;
  } else if (act == "GeluTanh") {
    f.alg = alg::eltwise_gelu_tanh;
  } else if (act == "HardSwish") {
    f.alg = alg::eltwise_hardswish;
    f.alpha = 1.f / 6.f;
    f.beta = 0.5f;
  } else if (act == "HardSigmoid") {
    f.alg = alg::eltwise_hardsigmoid;
    f.alpha = static_cast<float>(a.attr_float("activation_alpha", 0.2));
    f.beta = static_cast<float>(a.attr_float("activation_beta", 0.5));
  } else {
    invalid("unknown activation '", act, "'");
  }
  return f;
}

void append_activation(const Fusion& f, dnnl::post_ops* ops) {
  if (f.activation) ops->append_eltwise(f.alg, f.alpha, f.beta);
}

dnnl::primitive_attr make_attr(const dnnl::post_ops& ops) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(ops);
  return attr;
}

void BoundPrimitive::share_scratchpad(WorkspacePlan* plan,
                                      std::initializer_list<BoundPrimitive*> prims) {
  size_t bytes = 0;
  for (BoundPrimitive* p : prims) bytes = std::max(bytes, p->scratchpad_bytes());
  size_t at = plan->add(bytes);
  for (BoundPrimitive* p : prims) p->scratch_at_ = at;
}

void BoundPrimitive::bind(uint8_t* workspace, const Device& dev) {
  if (scratchpad_bytes() > 0) {
    args_[DNNL_ARG_SCRATCHPAD] = wrap(scratch_md_, dev, workspace + scratch_at_);
  }
}

AlignedBuffer reorder_constant(const KernelArgs& a, const dnnl::memory::desc& from,
                               const void* src, const dnnl::memory::desc& to) {
  AlignedBuffer buf(to.get_size());
  dnnl::memory src_mem = wrap(from, *a.device, src);
  dnnl::memory dst_mem = wrap(to, *a.device, buf.data());
  dnnl::reorder(src_mem, dst_mem).execute(*a.load_stream, src_mem, dst_mem);
  a.load_stream->wait();
  return buf;
}

}  // namespace ge
