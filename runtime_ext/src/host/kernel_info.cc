#include "kernel_info.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <variant>

#include "broadcast.h"
#include "layout.h"
#include "op_table.h"

namespace ge {

namespace {

// Formats a data operand of `shape` may have under a format-preserving rule; padded
// blocked formats only where the op takes them (Conv, TransData).
std::vector<std::string> formats_for(const Shape& shape, bool padded_ok = false) {
  std::vector<std::string> r = {"nchw"};
  for (Format f : {Format::kNhwc, Format::kNChw8c, Format::kNChw16c}) {
    if (format_error(f, shape).empty() && (padded_ok || !format_padded(f, shape))) r.push_back(format_name(f));
  }
  return r;
}

}  // namespace

KernelInfo host_kernel_info(const Device& device, const std::string& op, const std::vector<std::string>& dtypes,
                       const std::vector<Shape>& shapes, const Attrs& attrs) {
  KernelInfo r;
  auto no = [&](const std::string& why) {
    r.supported = false;
    r.reason = why;
    r.preferred_format = "nchw";
    r.formats = {"nchw"};
    return r;
  };
  const OpRow* rule = find_op(op);
  if (!rule) return no(cat("the device has no kernel for '", op, "'"));
  if (dtypes.size() != shapes.size()) {
    return no(cat("got ", dtypes.size(), " dtypes but ", shapes.size(), " shapes; give one of each per input"));
  }
  const int n = static_cast<int>(dtypes.size());
  if (n < rule->min_in || (rule->max_in >= 0 && n > rule->max_in)) {
    return no(cat(op, " takes ", rule->min_in, rule->max_in < 0 ? " or more" : cat(" to ", rule->max_in),
                  " inputs, got ", n));
  }
  std::vector<std::optional<DType>> types(dtypes.size());
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (dtypes[i].empty()) continue;  // omitted optional input
    DType d;
    if (!parse_dtype(dtypes[i], &d)) return no(cat("input ", i, ": unknown dtype '", dtypes[i], "'"));
    for (int64_t dim : shapes[i]) {
      if (dim < 0) return no(cat("input ", i, ": negative dimension in ", shape_str(shapes[i])));
    }
    types[i] = d;
  }
  if (!types[0]) return no("input 0 is required");
  const DType d0 = *types[0];
  const Shape& s0 = shapes[0];
  const int rank = static_cast<int>(s0.size());
  if (!type_ok(rule->types, d0)) return no(cat(op, " takes ", types_str(rule->types), ", got ", dtype_name(d0)));
  if (rank < rule->min_rank || rank > rule->max_rank) {
    return no(cat(op, " takes rank ", rule->min_rank, " to ", rule->max_rank, ", got ", shape_str(s0)));
  }
  OpQuery q;
  q.device = &device;
  q.op = op;
  q.types = std::move(types);
  q.shapes = shapes;
  q.attrs = &attrs;
  const std::string why = rule->check ? rule->check(q, &r) : "";
  if (!why.empty()) return no(why);

  r.supported = true;
  switch (rule->layout) {
    case LayoutRule::kPlainOnly:
      r.formats = {"nchw"};
      r.preferred_format = "nchw";
      break;
    case LayoutRule::kAnyData:
      r.formats = formats_for(s0, true);
      break;
    case LayoutRule::kConvert:
      r.formats = formats_for(s0, true);
      r.preferred_format = "any";
      break;
    case LayoutRule::kUniform:
    case LayoutRule::kConcat:
      r.formats = formats_for(s0);
      r.preferred_format = "any";
      break;
    case LayoutRule::kSpatial: {
      auto pads = attrs.find("pads");
      const bool spatial = s0.size() == 4 && pads != attrs.end() &&
                           std::holds_alternative<std::vector<int64_t>>(pads->second) &&
                           spatial_pads(std::get<std::vector<int64_t>>(pads->second));
      r.formats = spatial ? formats_for(s0) : std::vector<std::string>{"nchw"};
      r.preferred_format = spatial ? "any" : "nchw";
      break;
    }
    case LayoutRule::kReduce: {  // NHWC where the output keeps the rank (keepdims)
      auto keep = attrs.find("keepdims");
      const bool keeps = keep == attrs.end() ||
                         (std::holds_alternative<int64_t>(keep->second) && std::get<int64_t>(keep->second) != 0);
      r.formats = {"nchw"};
      if (keeps && rank >= 3 && rank <= 5) r.formats.push_back("nhwc");
      r.preferred_format = "nchw";
      break;
    }
    case LayoutRule::kElementwise:
    case LayoutRule::kChannel:
    case LayoutRule::kDomain: {
      Shape out = s0;
      for (int i = 1; i < n; ++i) broadcast_shapes(out, shapes[i], &out);  // checked above
      bool same = true, maps = false;
      for (int i = 0; i < n; ++i) {
        const bool channel = rule->layout != LayoutRule::kElementwise && per_channel_of(shapes[i], out);
        if (shape_numel(shapes[i]) > 1 && shapes[i] != out && !channel) {
          if (pixel_map_of(shapes[i], out)) {
            maps = true;  // a per-pixel map: broadcast over NHWC's stored channels
          } else {
            same = false;
          }
        }
      }
      if (same && maps) {
        r.formats = {"nchw", "nhwc"};
      } else {
        r.formats = same ? formats_for(out) : std::vector<std::string>{"nchw"};
      }
      r.preferred_format = same ? "any" : "nchw";
      break;
    }
  }
  return r;
}

}  // namespace ge
