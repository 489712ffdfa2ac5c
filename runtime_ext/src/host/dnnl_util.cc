#include "dnnl_util.h"

#include <omp.h>

#include <algorithm>
#include <iterator>
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

dt dnnl_type(DType t) {
  if (t != DType::kFloat32) invalid("oneDNN kernels take float32, got ", dtype_name(t));
  return dt::f32;
}

dnnl::memory::desc format_md(const Shape& s, Format f, dt type) {
  switch (f) {
    case Format::kPlain:
      return plain_md(s, type);
    case Format::kNhwc: {
      tag t = s.size() == 3 ? tag::nwc : s.size() == 5 ? tag::ndhwc : tag::nhwc;
      return dnnl::memory::desc(dnnl_dims(s), type, t);
    }
    case Format::kNChw8c:
      return dnnl::memory::desc(dnnl_dims(s), type, tag::nChw8c);
    case Format::kNChw16c:
      return dnnl::memory::desc(dnnl_dims(s), type, tag::nChw16c);
  }
  return plain_md(s, type);
}

dnnl::memory::desc tensor_md(const TensorInfo& t) {
  dt type = dt::undef;
  switch (t.dtype) {
    case DType::kFloat32: type = dt::f32; break;
    case DType::kFloat16: type = dt::f16; break;
    case DType::kInt32: type = dt::s32; break;
    case DType::kInt8: type = dt::s8; break;
    case DType::kUInt8: type = dt::u8; break;
    default: invalid("tensor '", t.name, "': oneDNN has no ", dtype_name(t.dtype), " type");
  }
  return format_md(t.shape, t.format, type);
}

bool md_format(const dnnl::memory::desc& md, Format* out) {
  if (md.get_ndims() != 4) return false;
  const dnnl::memory::dims d = md.get_dims();
  for (Format f : {Format::kPlain, Format::kNhwc, Format::kNChw8c, Format::kNChw16c}) {
    if (!format_error(f, Shape(d.begin(), d.end())).empty()) continue;
    if (format_md(Shape(d.begin(), d.end()), f, md.get_data_type()) == md) {
      *out = f;
      return true;
    }
  }
  return false;
}

Fusion parse_fusion(const KernelArgs& a) {
  Fusion f = parse_activation(a, "activation");
  f.sum = a.attr_int("sum", 0) != 0;
  return f;
}

Fusion parse_activation(const KernelArgs& a, const std::string& key) {
  Fusion f;
  std::string act = a.attr_str(key.c_str(), "");
  if (act.empty()) return f;
  f.activation = true;
  const std::string alpha_key = key + "_alpha", beta_key = key + "_beta";
  const char* alpha = alpha_key.c_str();
  const char* beta = beta_key.c_str();
  using alg = dnnl::algorithm;
  const float inf = std::numeric_limits<float>::infinity();
  if (act == "Relu") {
    f.alg = alg::eltwise_relu;
  } else if (act == "LeakyRelu") {
    f.alg = alg::eltwise_relu;
    f.alpha = static_cast<float>(a.attr_float(alpha, 0.01));
  } else if (act == "Clip") {
    f.alg = alg::eltwise_clip_v2;
    f.alpha = static_cast<float>(a.attr_float(alpha, -inf));
    f.beta = static_cast<float>(a.attr_float(beta, inf));
  } else if (act == "Sigmoid") {
    f.alg = alg::eltwise_logistic;
  } else if (act == "Tanh") {
    f.alg = alg::eltwise_tanh;
  } else if (act == "Gelu") {
    f.alg = alg::eltwise_gelu_erf;
  } else if (act == "GeluTanh") {
    f.alg = alg::eltwise_gelu_tanh;
  } else if (act == "Swish") {  // x * sigmoid(alpha * x)
    f.alg = alg::eltwise_swish;
    f.alpha = static_cast<float>(a.attr_float(alpha, 1.0));
  } else if (act == "HardSwish") {
    f.alg = alg::eltwise_hardswish;
    f.alpha = 1.f / 6.f;
    f.beta = 0.5f;
  } else if (act == "Elu") {
    f.alg = alg::eltwise_elu;
    f.alpha = static_cast<float>(a.attr_float(alpha, 1.0));
  } else if (act == "HardSigmoid") {
    f.alg = alg::eltwise_hardsigmoid;
    f.alpha = static_cast<float>(a.attr_float(alpha, 0.2));
    f.beta = static_cast<float>(a.attr_float(beta, 0.5));
  } else {
    invalid("unknown ", key, " '", act, "'");
  }
  const std::string scale_key = key + "_scale", shift_key = key + "_shift";
  if (a.has_attr(scale_key.c_str()) || a.has_attr(shift_key.c_str())) {
    f.linear = true;
    f.scale = static_cast<float>(a.attr_float(scale_key.c_str(), 1.0));
    f.shift = static_cast<float>(a.attr_float(shift_key.c_str(), 0.0));
  }
  return f;
}

void append_activation(const Fusion& f, dnnl::post_ops* ops) {
  if (f.activation) ops->append_eltwise(f.alg, f.alpha, f.beta);
  if (f.activation && f.linear) ops->append_eltwise(dnnl::algorithm::eltwise_linear, f.scale, f.shift);
}

dnnl::primitive_attr make_attr(const dnnl::post_ops& ops) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_post_ops(ops);
  return attr;
}

void Prim::share_scratchpad(WorkspacePlan* plan, const std::vector<Prim*>& prims) {
  size_t bytes = 0;
  for (Prim* p : prims) bytes = std::max(bytes, p->scratchpad_bytes());
  if (bytes == 0) return;
  size_t at = plan->add(bytes);
  for (Prim* p : prims) {
    if (p->scratchpad_bytes() > 0) p->arg(DNNL_ARG_SCRATCHPAD, p->scratch_md_, Ref::workspace(at));
  }
}

void Prim::set_instances(int n, const dnnl::engine& eng) {
  if (!valid()) return;
  inst_.assign(static_cast<size_t>(n), {});
  for (Instance& in : inst_) {
    for (const Arg& a : args_) {
      // No buffer yet: the first execute() of the instance sets every handle.
      in.mems.emplace_back(a.md, eng, static_cast<void*>(nullptr));
      in.ptrs.push_back(nullptr);
      in.exec.push_back({a.key, in.mems.back().get()});
    }
  }
}

void Prim::execute(const ExecContext& c, std::initializer_list<std::pair<int, ptrdiff_t>> shifts) {
  Instance& in = inst_[static_cast<size_t>(c.instance)];
  for (size_t i = 0; i < args_.size(); ++i) {
    void* p = args_[i].ref.resolve(c);
    for (const auto& [key, offset] : shifts) {
      if (key == args_[i].key) p = static_cast<uint8_t*>(p) + offset;
    }
    if (p != in.ptrs[i]) {
      in.mems[i].set_data_handle(p);
      in.ptrs[i] = p;
    }
  }
  dnnl_status_t st = dnnl_primitive_execute(prim_.get(), host_stream(c).get(), static_cast<int>(in.exec.size()),
                                            in.exec.data());
  if (st != dnnl_success) throw dnnl::error(st, "could not execute a primitive");
}

std::shared_ptr<const AlignedBuffer> PreparedRegistry::find(const void* src, const dnnl::memory::desc& from,
                                                             const dnnl::memory::desc& to) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(src);
  if (it == entries_.end()) return nullptr;
  for (const Entry& e : it->second) {
    if (e.from == from && e.to == to) {
      if (auto buf = e.buf.lock()) return buf;
    }
  }
  return nullptr;
}

std::shared_ptr<const AlignedBuffer> PreparedRegistry::put(const void* src, const dnnl::memory::desc& from,
                                                            const dnnl::memory::desc& to,
                                                            const std::shared_ptr<const AlignedBuffer>& buf) {
  std::lock_guard<std::mutex> lock(mu_);
  auto expired = [](const Entry& e) { return e.buf.expired(); };
  if (++puts_ % kSweepEvery == 0) {  // the entries of models gone since, every address
    for (auto it = entries_.begin(); it != entries_.end();) {
      it->second.erase(std::remove_if(it->second.begin(), it->second.end(), expired), it->second.end());
      it = it->second.empty() ? entries_.erase(it) : std::next(it);
    }
  }
  std::vector<Entry>& list = entries_[src];
  // expired entries go (their models are gone); a live one for the same layouts wins
  list.erase(std::remove_if(list.begin(), list.end(), expired), list.end());
  for (const Entry& e : list) {
    if (e.from == from && e.to == to) {
      if (auto live = e.buf.lock()) return live;
    }
  }
  list.push_back({from, to, buf});
  return buf;
}

const PreparedCache::Entry* PreparedCache::local(const void* src, const dnnl::memory::desc& from,
                                                 const dnnl::memory::desc& to) const {
  for (const Entry& e : entries_) {
    if (e.src == src && e.from == from && e.to == to) return &e;
  }
  return nullptr;
}

std::shared_ptr<const AlignedBuffer> PreparedCache::find(const void* src, const dnnl::memory::desc& from,
                                                         const dnnl::memory::desc& to) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const Entry* e = local(src, from, to)) return e->buf;
  if (!registry_) return nullptr;
  auto buf = registry_->find(src, from, to);
  if (buf) entries_.push_back({src, from, to, buf, true});  // held by this model from now on
  return buf;
}

std::shared_ptr<const AlignedBuffer> PreparedCache::put(const void* src, const dnnl::memory::desc& from,
                                                        const dnnl::memory::desc& to,
                                                        std::shared_ptr<const AlignedBuffer> buf) {
  std::lock_guard<std::mutex> lock(mu_);
  if (const Entry* e = local(src, from, to)) return e->buf;
  if (registry_) buf = registry_->put(src, from, to, buf);
  entries_.push_back({src, from, to, buf});
  return buf;
}

size_t PreparedCache::borrowed_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const Entry& e : entries_) n += e.borrowed ? e.buf->size() : 0;
  return n;
}

size_t PreparedCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const Entry& e : entries_) n += e.buf->size();
  return n;
}

std::shared_ptr<const AlignedBuffer> reorder_constant(const KernelArgs& a, const dnnl::memory::desc& from,
                                                      const void* src, const dnnl::memory::desc& to,
                                                      const void* key) {
  if (!key) key = src;
  if (a.prepared) {
    if (auto hit = host_prepared(a)->find(key, from, to)) return hit;
  }
  auto buf = std::make_shared<AlignedBuffer>(to.get_size());
  dnnl::memory src_mem(from, host_engine(*a.device), const_cast<void*>(src));
  dnnl::memory dst_mem(to, host_engine(*a.device), buf->data());
  // One thread: a load runs hundreds of these short, memory-bound reorders between
  // single-threaded primitive creations, and a team's helper spinning between them
  // takes the core the page faults of the next buffer need (minilm6's load: 300 ms
  // with the lane's team of two, 37 ms with one thread).
  struct OneThread {
    int team = omp_get_max_threads();
    OneThread() { omp_set_num_threads(1); }
    ~OneThread() { omp_set_num_threads(team); }
  } one_thread;
  dnnl::reorder(src_mem, dst_mem).execute(host_load_stream(a), src_mem, dst_mem);
  host_load_stream(a).wait();
  return a.prepared ? host_prepared(a)->put(key, from, to, buf) : buf;
}

void resolve_auto_pad(const std::string& auto_pad, int64_t in, int64_t stride, int64_t span,
                      const std::vector<int64_t>& pads, int64_t* pb, int64_t* pe) {
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const int64_t out = (in + stride - 1) / stride;
    const int64_t total = std::max<int64_t>(0, add_checked(mul_checked(out - 1, stride), span - in));
    *pb = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    *pe = total - *pb;
  } else if (auto_pad == "VALID") {
    *pb = *pe = 0;
  } else if (auto_pad != "NOTSET") {
    invalid("unknown auto_pad '", auto_pad, "'");
  }
  if (*pb < 0 || *pe < 0) invalid("pads must be >= 0, got ", shape_str(pads));
}

}  // namespace ge
