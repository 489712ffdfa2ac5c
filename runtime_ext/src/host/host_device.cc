#include "host_device.h"

#include <algorithm>

#include "conv_block.h"
#include "dnnl_util.h"
#include "kernel_info.h"
#include "layout.h"
#include "op_table.h"

namespace ge {

HostDevice::HostDevice(int threads)
    : Device("host", threads), engine_(dnnl::engine::kind::cpu, 0), prepared_(std::make_shared<PreparedRegistry>()) {
  start();
}

HostDevice::~HostDevice() { stop(); }  // the lanes hold streams of engine_

std::unique_ptr<LaneStream> HostDevice::make_lane_stream() const { return std::make_unique<HostLaneStream>(engine_); }

KernelFactory HostDevice::find_kernel(const std::string& op) const {
  const OpRow* row = find_op(op);
  return row ? row->make : nullptr;
}

std::vector<std::string> HostDevice::supported_ops() const {
  std::vector<std::string> ops;
  for (const OpRow& row : op_table()) ops.push_back(row.name);
  std::sort(ops.begin(), ops.end());
  return ops;
}

KernelInfo HostDevice::kernel_info(const std::string& op, const std::vector<std::string>& dtypes,
                                   const std::vector<Shape>& shapes, const Attrs& attrs) const {
  return host_kernel_info(*this, op, dtypes, shapes, attrs);
}

std::vector<Format> HostDevice::assign_formats(const ModelSpec& spec, const std::vector<TensorInfo>& tensors) const {
  return assign_layouts(spec, tensors);
}

std::string HostDevice::check_formats(const TaskSpec& t, const std::vector<TensorInfo>& tensors) const {
  return format_violation(t, tensors);
}

std::unique_ptr<SharedConstants> HostDevice::make_shared_constants() const {
  return std::make_unique<PreparedCache>(prepared_);
}

bool HostDevice::library_error(const std::exception& e, const char* doing, Status* out) const {
  const auto* d = dynamic_cast<const dnnl::error*>(&e);
  if (!d) return false;
  *out = Status::InvalidArgument(cat("oneDNN cannot ", doing, ": ", d->what()));
  return true;
}

DeviceCaps HostDevice::caps() const {
  DeviceCaps c;
  c.isa = cpu_has_avx512() ? "avx512" : "avx2";
  c.blocked_format = host_blocked_format();
  c.conv_blocks = block::available();
  c.epilogues = true;  // oneDNN post-ops (dnnl_util.h: Fusion)
  c.conv_activation2 = true;  // Conv's activation2: a second eltwise post-op
  c.max_weight_segments = static_cast<int>(kMaxWeightSegments);
  c.library = "oneDNN " + onednn_version();
  return c;
}

std::string host_blocked_format() {
  // ISA values are bit masks: each includes the bits of the ISAs it extends.
  const int isa = static_cast<int>(dnnl::get_effective_cpu_isa());
  auto has = [isa](dnnl_cpu_isa_t want) { return (isa & want) == want; };
  if (has(dnnl_cpu_isa_avx512_core)) return "nChw16c";
  if (has(dnnl_cpu_isa_avx2)) return "nChw8c";
  return "";
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl::version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

}  // namespace ge
