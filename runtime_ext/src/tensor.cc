#include "tensor.h"

#include <sstream>

namespace ge {

namespace {
struct FormatEntry {
  Format format;
  const char* name;
};
constexpr FormatEntry kFormats[] = {
    {Format::kPlain, "nchw"},
    {Format::kNhwc, "nhwc"},
    {Format::kNChw8c, "nChw8c"},
    {Format::kNChw16c, "nChw16c"},
};
}  // namespace

bool parse_format(const std::string& name, Format* out) {
  for (const FormatEntry& e : kFormats) {
    if (name == e.name) {
      *out = e.format;
      return true;
    }
  }
  return false;
}

const char* format_name(Format f) { return kFormats[static_cast<int>(f)].name; }

std::string format_error(Format f, const std::vector<int64_t>& shape) {
  const size_t r = shape.size();
  switch (f) {
    case Format::kPlain:
      return "";
    case Format::kNhwc:
      if (r < 3 || r > 5) return "nhwc needs a tensor of rank 3 to 5";
      return "";
    case Format::kNChw8c:
    case Format::kNChw16c: {
      if (r != 4) return std::string(format_name(f)) + " needs a tensor of rank 4";
      return "";  // C not a multiple of the block: the last block is padded
    }
  }
  return "unknown format";
}

namespace {
int64_t block_of(Format f) { return f == Format::kNChw8c ? 8 : f == Format::kNChw16c ? 16 : 1; }
}  // namespace

bool format_padded(Format f, const std::vector<int64_t>& shape) {
  const int64_t block = block_of(f);
  return block > 1 && shape.size() == 4 && shape[1] % block != 0;
}

std::vector<int64_t> stored_shape(const std::vector<int64_t>& s, Format f) {
  if (s.size() < 3 || s.size() > 5 || f == Format::kPlain) return s;
  std::vector<int64_t> t = {s[0]};
  if (f != Format::kNhwc) t.push_back(s[1] / block_of(f));
  t.insert(t.end(), s.begin() + 2, s.end());
  t.push_back(f == Format::kNhwc ? s[1] : block_of(f));
  return t;
}

int64_t storage_numel(Format f, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t d = shape[i];
    if (i == 1 && format_padded(f, shape)) d = (d + block_of(f) - 1) / block_of(f) * block_of(f);
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  os << ']';
  return os.str();
}

std::string type_str(DType t, const Shape& s) { return dtype_name(t) + shape_str(s); }

Shape dense_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

}  // namespace ge
