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
      const int64_t block = f == Format::kNChw8c ? 8 : 16;
      if (r != 4) return std::string(format_name(f)) + " needs a tensor of rank 4";
      if (shape[1] % block != 0) {
        return std::string(format_name(f)) + " needs channels divisible by " + std::to_string(block) +
               " (no padded blocks)";
      }
      return "";
    }
  }
  return "unknown format";
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
