// TransData (GE's layout conversion): one input, one output, the same logical shape and
// dtype, different formats; a oneDNN reorder, or between nchw and nhwc for 4-byte
// elements a transpose of our own (transpose.h: 28 us for a 64 x 56 x 56 image on one core
// against oneDNN's ~130). Attributes "src_format" and "dst_format" must name the formats
// the spec gives the two tensors. Transpose nodes whose permutation is a batched matrix
// transpose of 4-byte elements run the same transpose.
#include <omp.h>

#include <string>

#include "device.h"
#include "dnnl_util.h"
#include "kernels.h"
#include "transpose.h"

namespace ge {

namespace {

// For each of `batch_` matrices, [rows_][cols_] to [cols_][rows_] (transpose.h).
class TransposeKernel : public Kernel {
 public:
  TransposeKernel(const TensorInfo* x, const TensorInfo* y, int64_t batch, int64_t rows, int64_t cols)
      : x_(x), y_(y), batch_(batch), rows_(rows), cols_(cols) {}
  Status run(ExecContext& ctx) override {
    transpose::batched_4byte(ctx.ptr(*x_), ctx.ptr(*y_), batch_, rows_, cols_, omp_get_max_threads());
    return Status::Ok();
  }
  std::string impl() const override { return "transpose avx512"; }

 private:
  const TensorInfo* x_;
  const TensorInfo* y_;
  int64_t batch_, rows_, cols_;
};

// The transpose of x's stored bytes as `batch` [rows][cols] matrices into y; nullptr when
// it does not apply (no AVX-512, not 4-byte elements, or nothing moves).
std::unique_ptr<Kernel> own_transpose(const TensorInfo* x, const TensorInfo* y, int64_t batch, int64_t rows,
                                      int64_t cols) {
  if (!cpu_has_avx512() || dtype_size(x->dtype) != 4 || x->numel == 0) return nullptr;
  if (rows == 1 || cols == 1) return nullptr;  // the bytes do not move: a copy is cheaper
  return std::make_unique<TransposeKernel>(x, y, batch, rows, cols);
}

// The transpose for a plain tensor whose permutation keeps the first `k` axes and swaps the
// next two groups, [k, m) and [m, rank).
std::unique_ptr<Kernel> batched_transpose(const TensorInfo* x, const TensorInfo* y, size_t k, size_t m) {
  const Shape& s = x->shape;
  int64_t batch = 1, rows = 1, cols = 1;
  for (size_t i = 0; i < s.size(); ++i) (i < k ? batch : i < m ? rows : cols) *= s[i];
  return own_transpose(x, y, batch, rows, cols);
}

// Checks a TransData node: one input and one output of the same dtype and logical shape,
// stored in the formats its attributes name. Throws Error otherwise.
void check_transdata(const KernelArgs& a) {
  a.expect_inputs(1, 1);
  a.expect_outputs(1, 1);
  const TensorInfo* x = &a.in(0);
  const TensorInfo* y = &a.out(0);
  if (x->dtype != y->dtype) {
    invalid("output dtype ", dtype_name(y->dtype), " differs from input dtype ", dtype_name(x->dtype));
  }
  if (x->shape != y->shape) {
    invalid("output shape ", shape_str(y->shape), " differs from input shape ", shape_str(x->shape));
  }
  for (const auto& [key, t] : {std::pair<const char*, const TensorInfo*>{"src_format", x}, {"dst_format", y}}) {
    if (!a.has_attr(key)) invalid("attribute '", key, "' is required");
    const std::string name = a.attr_str(key, "");
    Format f;
    if (!parse_format(name, &f)) invalid("unknown format '", name, "' in attribute '", key, "'");
    if (f != t->format) {
      invalid("attribute ", key, "='", name, "' but tensor '", t->name, "' is stored ", format_name(t->format));
    }
  }
}

// A checked TransData as a oneDNN reorder (a copy when the formats are the same).
class TransDataKernel : public PrimitiveOrCopyKernel {
 public:
  explicit TransDataKernel(const KernelArgs& a) : PrimitiveOrCopyKernel(*a.device) {
    x_ = &a.in(0);
    y_ = &a.out(0);
    if (x_->format == y_->format) return;  // a plain copy
    const dnnl::memory::desc from = tensor_md(*x_), to = tensor_md(*y_);
    prim_ = Prim(dnnl::reorder::primitive_desc(host_engine(dev_), from, host_engine(dev_), to, make_attr()));
    prim_.arg(DNNL_ARG_FROM, from, Ref::of(*x_));
    prim_.arg(DNNL_ARG_TO, to, Ref::of(*y_));
    Prim::share_scratchpad(&plan_, {&prim_});
  }
};

// A reorder between two descriptions of the same logical tensor (used by Transpose).
class ReorderKernel : public PrimitiveKernel {
 public:
  ReorderKernel(const KernelArgs& a, const dnnl::memory::desc& from, const dnnl::memory::desc& to)
      : PrimitiveKernel(*a.device) {
    prim_ = Prim(dnnl::reorder::primitive_desc(host_engine(dev_), from, host_engine(dev_), to, make_attr()));
    prim_.arg(DNNL_ARG_FROM, from, Ref::of(a.in(0)));
    prim_.arg(DNNL_ARG_TO, to, Ref::of(a.out(0)));
    Prim::share_scratchpad(&plan_, {&prim_});
  }
};

}  // namespace

std::unique_ptr<Kernel> make_transdata(const KernelArgs& a) {
  check_transdata(a);
  const TensorInfo* x = &a.in(0);
  const TensorInfo* y = &a.out(0);
  if (x->rank() >= 3 && x->rank() <= 5) {  // the stored bytes as N matrices: [C][HW] in nchw,
                                            // [HW][C] in nhwc (HW: every spatial axis)
    const int64_t n = x->shape[0], c = x->shape[1];
    int64_t hw = 1;
    for (int i = 2; i < x->rank(); ++i) hw *= x->shape[i];
    std::unique_ptr<Kernel> t;
    if (x->plain() && y->channels_last()) t = own_transpose(x, y, n, c, hw);
    if (x->channels_last() && y->plain()) t = own_transpose(x, y, n, hw, c);
    if (t) return t;
  }
  return std::make_unique<TransDataKernel>(a);
}

// A contiguous run this long is copied by memcpy faster than oneDNN reorders it.
constexpr int64_t kMinRunBytes = 64;

std::unique_ptr<Kernel> make_permute(const KernelArgs& a, const std::vector<int64_t>& perm) {
  const TensorInfo& x = a.in(0);
  const TensorInfo& y = a.out(0);
  dt type;
  switch (x.dtype) {
    case DType::kFloat32: type = dt::f32; break;
    case DType::kFloat16: type = dt::f16; break;
    case DType::kInt32: type = dt::s32; break;
    case DType::kInt8: type = dt::s8; break;
    case DType::kUInt8: type = dt::u8; break;
    default: return nullptr;
  }
  const size_t r = perm.size();
  if (r < 2 || r > DNNL_MAX_NDIMS || x.numel == 0 || !x.plain() || !y.plain()) return nullptr;
  // perm = [0 .. k), [m .. r), [k .. m): a batched matrix transpose (NCHW -> NHWC is k = 1,
  // m = 2; a 2-D transpose k = 0, m = 1).
  size_t k = 0;
  while (k < r && perm[k] == static_cast<int64_t>(k)) ++k;
  if (k + 2 <= r) {
    const size_t m = static_cast<size_t>(perm[k]);
    bool rotation = m > k;
    for (size_t i = k; rotation && i < r; ++i) {
      const size_t want = i < k + (r - m) ? m + (i - k) : k + (i - k - (r - m));
      rotation = perm[i] == static_cast<int64_t>(want);
    }
    if (rotation) {
      if (auto t = batched_transpose(&x, &y, k, m)) return t;
    }
  }
  // A permutation that keeps trailing axes in place moves whole contiguous runs of them:
  // the caller's strided copy memcpys each run, where oneDNN's reorder ran jit:uni's loop
  // (a channel shuffle, [1, 2, 58, 28, 28] by [0, 2, 1, 3, 4]: ~118 us under load).
  size_t kept = r;
  while (kept > 0 && perm[kept - 1] == static_cast<int64_t>(kept - 1)) --kept;
  int64_t run = 1;
  for (size_t i = kept; i < r; ++i) run *= x.shape[i];
  if (kept < r && run * static_cast<int64_t>(dtype_size(x.dtype)) >= kMinRunBytes) return nullptr;
  // The output's bytes described in the input's logical dims: input dim perm[i] moves
  // with output dim i's stride.
  const Shape ys = dense_strides(y.shape);
  dnnl::memory::dims strides(r);
  for (size_t i = 0; i < r; ++i) strides[static_cast<size_t>(perm[i])] = ys[i];
  const dnnl::memory::desc from = plain_md(x.shape, type);
  const dnnl::memory::desc to(dnnl_dims(x.shape), type, strides);
  dnnl::reorder::primitive_desc pd(host_engine(*a.device), from, host_engine(*a.device), to, make_attr(), true);
  if (!pd || std::string(pd.impl_info_str()).rfind("simple", 0) == 0) return nullptr;  // no fast kernel
  return std::make_unique<ReorderKernel>(a, from, to);
}

}  // namespace ge
