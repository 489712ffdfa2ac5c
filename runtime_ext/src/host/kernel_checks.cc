#include "kernel_checks.h"

#include <algorithm>
#include <functional>
#include <set>

#include "broadcast.h"
#include "conv_block.h"
#include "dnnl_util.h"
#include "kernel_info.h"
#include "kernels.h"

namespace ge {

std::string check_gather(const OpQuery& q, KernelInfo*) {
  if (q.types[1] != DType::kInt64 && q.types[1] != DType::kInt32) return cat(q.op, " indices must be int64 or int32");
  return "";
}

std::string check_where(const OpQuery& q, KernelInfo*) {
  if (*q.types[0] != DType::kBool) return "Where's condition must be bool";
  if (q.types[1] && q.types[2] && *q.types[1] != *q.types[2]) return "Where's X and Y must share a dtype";
  Shape b1, b2;
  if (!broadcast_shapes(q.shapes[0], q.shapes[1], &b1) || !broadcast_shapes(b1, q.shapes[2], &b2)) {
    return "shapes do not broadcast";
  }
  return "";
}

std::string check_broadcast2(const OpQuery& q, KernelInfo*) {
  std::string why = q.same_types(1, 2);
  Shape b;
  if (why.empty() && !broadcast_shapes(q.shapes[0], q.shapes[1], &b)) {
    why = cat("shapes ", shape_str(q.shapes[0]), " and ", shape_str(q.shapes[1]), " do not broadcast");
  }
  return why;
}

std::string check_compare(const OpQuery& q, KernelInfo* r) {
  const DType d = *q.types[0];
  if (d == DType::kFloat16) return cat(q.op, " does not take float16");
  if (d == DType::kBool && q.op != "Equal") return cat(q.op, " does not take bool");
  return check_broadcast2(q, r);
}

std::string check_resize(const OpQuery& q, KernelInfo*) {
  const auto it = q.attrs->find("mode");
  const auto* mode = it == q.attrs->end() ? nullptr : std::get_if<std::string>(&it->second);
  if (mode && *mode == "linear" && *q.types[0] != DType::kFloat32) {
    return cat("linear Resize takes float32, got ", dtype_name(*q.types[0]));
  }
  return "";
}

std::string check_gemm(const OpQuery& q, KernelInfo*) {
  std::string why = q.same_types(1, q.n());
  if (!why.empty()) return why;
  if (q.shapes[1].size() != 2) return "B must be 2-D";
  const Attrs& attrs = *q.attrs;
  const auto it_a = attrs.find("transA"), it_b = attrs.find("transB");
  const bool transa = it_a != attrs.end() && std::holds_alternative<int64_t>(it_a->second) &&
                      std::get<int64_t>(it_a->second) != 0;
  const bool transb = it_b != attrs.end() && std::holds_alternative<int64_t>(it_b->second) &&
                      std::get<int64_t>(it_b->second) != 0;
  const Shape& s0 = q.shapes[0];
  const int64_t K = transa ? s0[0] : s0[1];
  const int64_t KB = transb ? q.shapes[1][1] : q.shapes[1][0];
  return K != KB ? "inner dimensions differ" : "";
}

std::string check_matmul(const OpQuery& q, KernelInfo*) {
  // rows=1: the last input is the int64 count of routed rows (kernels_matmul.cc)
  std::string why = q.same_types(1, q.n() - (q.attr_int("rows", 0) != 0 ? 1 : 0));
  if (!why.empty()) return why;
  const Shape& s0 = q.shapes[0];
  const Shape& b = q.shapes[1];
  if (b.empty()) return "B must have rank >= 1";
  const int64_t K = s0.back(), KB = b.size() == 1 ? b[0] : b[b.size() - 2];
  Shape ba(s0.begin(), s0.end() - std::min<size_t>(2, s0.size()));
  Shape bb(b.begin(), b.end() - std::min<size_t>(2, b.size())), bo;
  if (K != KB) return cat("inner dimensions differ: ", shape_str(s0), " and ", shape_str(b));
  if (!broadcast_shapes(ba, bb, &bo)) return "batch dimensions do not broadcast";
  return "";
}

std::string check_matmul_integer(const OpQuery& q, KernelInfo*) { return matmul_integer_problem(q.types, q.shapes); }

std::string check_matmul_qweight(const OpQuery&, KernelInfo*) {
  return cpu_has_avx512() ? "" : "the 8-bit weight kernel needs AVX-512 (the weights are folded to float32 instead)";
}

std::string check_batch_norm(const OpQuery& q, KernelInfo*) {
  std::string why = q.same_types(1, q.n());
  for (int i = 1; i < q.n() && why.empty(); ++i) {
    if (q.shapes[i] != Shape{q.shapes[0][1]}) why = cat("input ", i, " must have shape [", q.shapes[0][1], "]");
  }
  return why;
}

std::string check_same_types(const OpQuery& q, KernelInfo*) { return q.same_types(1, q.n()); }

std::string check_concat(const OpQuery& q, KernelInfo*) {
  std::string why = q.same_types(1, q.n());
  for (int i = 1; i < q.n() && why.empty(); ++i) {
    if (q.shapes[i].size() != q.shapes[0].size()) why = "Concat inputs must share a rank";
  }
  return why;
}

std::string check_cast(const OpQuery& q, KernelInfo*) {
  const auto it = q.attrs->find("to");
  if (it == q.attrs->end()) return "attribute 'to' is required";
  if (const auto* name = std::get_if<std::string>(&it->second)) {
    DType t;
    if (!parse_dtype(*name, &t)) return cat("unknown dtype '", *name, "' in attribute 'to'");
  } else if (const auto* code = std::get_if<int64_t>(&it->second)) {
    const std::set<int64_t> ok = {1, 2, 3, 5, 6, 7, 9, 10, 11};
    if (!ok.count(*code)) return cat("unsupported ONNX dtype code ", *code, " in attribute 'to'");
  }
  return "";
}

namespace {

// Runs `body` on KernelArgs over stand-in tensors of the query's dtypes and shapes (no
// data); inputs from `first_weight` on are stand-in constants. Returns the factory's reason.
std::string with_stand_ins(const OpQuery& q, int first_weight,
                           const std::function<void(KernelArgs&, std::vector<TensorInfo>&)>& body) {
  try {
    std::vector<TensorInfo> ts(static_cast<size_t>(q.n()));
    KernelArgs a;
    a.name = "kernel_info";
    a.op = q.op;
    a.attrs = q.attrs;
    a.device = q.device;
    for (int i = 0; i < q.n(); ++i) {
      if (!q.types[i]) {
        a.inputs.push_back(nullptr);
        continue;
      }
      ts[i].name = cat("input", i);
      ts[i].dtype = *q.types[i];
      ts[i].shape = q.shapes[i];
      ts[i].numel = shape_numel(q.shapes[i]);
      ts[i].region = i >= first_weight ? Region::kWeight : Region::kArena;
      a.inputs.push_back(&ts[i]);
    }
    body(a, ts);
  } catch (const Error& e) {
    return e.status().message();
  } catch (const dnnl::error& e) {
    return cat("oneDNN cannot run this ", q.op, ": ", e.what());
  }
  return "";
}

}  // namespace

std::string check_conv(const OpQuery& q, KernelInfo* r) {
  return with_stand_ins(q, 1, [&](KernelArgs& a, std::vector<TensorInfo>&) {
    if (!a.inputs[1]) throw Error(Status::InvalidArgument("weight W is required"));
    r->preferred_format = conv_preferred_format(a);
  });
}

std::string check_conv_block(const OpQuery& q, KernelInfo*) {
  return block::available() ? "" : cat(q.op, " needs the block kernel, which needs AVX-512");
}

std::string check_conv_head(const OpQuery& q, KernelInfo* r) {
  const int64_t n = q.shapes[0][0];
  if (n < 1 || n > block::HeadSpec::kMaxRows) {
    return cat("ConvHead runs batches of 1 to ", block::HeadSpec::kMaxRows, ", input X has shape ",
               shape_str(q.shapes[0]));
  }
  return check_conv_block(q, r);
}

std::string check_fused_attention(const OpQuery& q, KernelInfo*) {
  return with_stand_ins(q, q.n(), [](KernelArgs& a, std::vector<TensorInfo>&) { check_attention(a); });
}

std::string check_deconv(const OpQuery& q, KernelInfo*) {
  return with_stand_ins(q, 1, [](KernelArgs& a, std::vector<TensorInfo>&) { check_conv_transpose(a); });
}

std::string check_chain(const OpQuery& q, KernelInfo*) {
  return with_stand_ins(q, q.n(), [](KernelArgs& a, std::vector<TensorInfo>& ts) {
    TensorInfo y = ts[0];  // the chain's output is shaped like input 0
    a.outputs.push_back(&y);
    make_chain(a);
  });
}

std::string check_eltwise_graph(const OpQuery& q, KernelInfo*) {
  return with_stand_ins(q, q.n(), [](KernelArgs& a, std::vector<TensorInfo>& ts) {
    Shape domain;  // the inputs' broadcast: the outputs' shape
    for (const TensorInfo& t : ts) {
      Shape next;
      if (!broadcast_shapes(domain, t.shape, &next)) invalid("inputs ", shape_str(t.shape), " do not broadcast");
      domain = next;
    }
    const size_t n_out = a.attr_ints("results", {}).size();
    if (n_out < 1 || n_out > 4096) invalid("attribute 'results' must name 1 to 4096 slots, got ", n_out);
    TensorInfo y;
    y.name = "output";
    y.dtype = DType::kFloat32;
    y.shape = domain;
    y.numel = shape_numel(domain);
    std::vector<TensorInfo> outs(n_out, y);
    for (TensorInfo& o : outs) a.outputs.push_back(&o);
    make_eltwise_graph(a);
  });
}

std::string check_on_stand_ins(const OpQuery& q, KernelInfo*) {
  const OpRow* row = find_op(q.op);
  return with_stand_ins(q, q.n(), [&](KernelArgs& a, std::vector<TensorInfo>& ts) {
    TensorInfo y = ts[0];
    if (q.op == "GatherElements") y.shape = ts[1].shape;
    if (q.op == "GridSample" && ts[0].shape.size() == 4 && ts[1].shape.size() == 4) {  // [N, C, Ho, Wo]
      y.shape = {ts[0].shape[0], ts[0].shape[1], ts[1].shape[1], ts[1].shape[2]};
    }
    if (q.op == "Col2Im" && ts[0].shape.size() == 3) {  // [N, C * block, L] -> [N, C, H, W]
      const std::vector<int64_t> image = a.attr_ints("image", {}), block = a.attr_ints("block", {});
      if (image.size() == 2 && block.size() == 2 && block[0] > 0 && block[1] > 0) {
        y.shape = {ts[0].shape[0], ts[0].shape[1] / (block[0] * block[1]), image[0], image[1]};
      }
    }
    y.numel = shape_numel(y.shape);
    a.outputs.push_back(&y);
    row->make(a);
  });
}

}  // namespace ge
