#include "copy.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace ge {

namespace {

template <class T>
void gather_row(T* dst, int64_t dst_stride, const T* src, int64_t src_stride, int64_t n) {
  if (dst_stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i * src_stride];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * dst_stride] = src[i * src_stride];
  }
}

void copy_row(uint8_t* dst, int64_t ds, const uint8_t* src, int64_t ss, int64_t n, size_t elem) {
  if (ds == 1 && ss == 1 && n * static_cast<int64_t>(elem) >= 64) {  // shorter: the loop
    std::memcpy(dst, src, static_cast<size_t>(n) * elem);
    return;
  }
  switch (elem) {
    case 1: gather_row(dst, ds, src, ss, n); break;
    case 2: gather_row(reinterpret_cast<uint16_t*>(dst), ds, reinterpret_cast<const uint16_t*>(src), ss, n); break;
    case 4: gather_row(reinterpret_cast<uint32_t*>(dst), ds, reinterpret_cast<const uint32_t*>(src), ss, n); break;
    default: gather_row(reinterpret_cast<uint64_t*>(dst), ds, reinterpret_cast<const uint64_t*>(src), ss, n); break;
  }
}

}  // namespace

void strided_copy2(uint8_t* dst, const Shape& dst_strides, const uint8_t* src,
                   const Shape& src_strides, const Shape& dims, size_t elem) {
  // Collapse: drop size-1 dims, merge neighbours contiguous on both sides.
  Shape d, ss, ds;
  int64_t total = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    total *= dims[i];
    if (dims[i] == 1) continue;
    if (!d.empty() && ss.back() == src_strides[i] * dims[i] && ds.back() == dst_strides[i] * dims[i]) {
      d.back() *= dims[i];
      ss.back() = src_strides[i];
      ds.back() = dst_strides[i];
    } else {
      d.push_back(dims[i]);
      ss.push_back(src_strides[i]);
      ds.push_back(dst_strides[i]);
    }
  }
  if (total == 0) return;
  if (d.empty()) {
    std::memcpy(dst, src, elem);
    return;
  }
  const int r = static_cast<int>(d.size());
  const int64_t inner = d[r - 1];
  const int64_t rows = total / inner;
  const int64_t e = static_cast<int64_t>(elem);
  // Rows [r0, r1): the first row's offsets from its index, then an odometer over the outer
  // dims (a division per dim per row cost more than copying a short row: 192 rows of 2
  // floats took 2.3 us).
  auto span = [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> idx(static_cast<size_t>(r), 0);
    int64_t so = 0, dof = 0, rem = r0;
    for (int k = r - 2; k >= 0; --k) {
      idx[k] = rem % d[k];
      rem /= d[k];
      so += idx[k] * ss[k];
      dof += idx[k] * ds[k];
    }
    for (int64_t row = r0; row < r1; ++row) {
      copy_row(dst + dof * e, ds[r - 1], src + so * e, ss[r - 1], inner, elem);
      for (int k = r - 2; k >= 0; --k) {  // next row: carry through the outer dims
        so += ss[k];
        dof += ds[k];
        if (++idx[k] < d[k]) break;
        so -= d[k] * ss[k];
        dof -= d[k] * ds[k];
        idx[k] = 0;
      }
    }
  };
  const int threads = omp_get_max_threads();
  if (total * e >= (1 << 18) && rows > 1 && threads > 1) {
    const int64_t parts = std::min<int64_t>(rows, threads);
#pragma omp parallel for schedule(static) num_threads(static_cast<int>(parts))
    for (int64_t t = 0; t < parts; ++t) span(rows * t / parts, rows * (t + 1) / parts);
  } else {
    span(0, rows);
  }
}

void strided_copy(uint8_t* dst, const uint8_t* src, const Shape& dims, const Shape& src_strides,
                  size_t elem) {
  strided_copy2(dst, dense_strides(dims), src, src_strides, dims, elem);
}

void fill_elements(uint8_t* dst, int64_t n, const void* value, size_t elem) {
  if (n <= 0) return;
  std::memcpy(dst, value, elem);
  int64_t done = 1;
  while (done < n) {  // doubling memcpy
    int64_t k = std::min(done, n - done);
    std::memcpy(dst + done * elem, dst, static_cast<size_t>(k) * elem);
    done += k;
  }
}

}  // namespace ge
