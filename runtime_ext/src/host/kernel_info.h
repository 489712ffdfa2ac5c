// Kernel info store (GE's ops kernel info): what the device's kernels accept, asked by the
// compiler's placement and layout passes before anything is loaded.
//
// Checks, per op, the facts of its row in the op table (op_table.h): that the runtime
// implements it; the operand count; input 0's dtype and rank; then the row's own check
// (kernel_checks.h: e.g. Gemm's 2-D operands, matching inner dimensions of MatMul/Gemm,
// broadcastable shapes of elementwise ops; for Conv, the full shape/attribute validation
// of load plus a oneDNN primitive descriptor for these shapes, whose chosen source layout
// becomes the preferred format). The formats it reports follow the row's layout rule.
// Values of constant operands (e.g. Slice starts) are not known here and are checked at
// load.
#pragma once

#include <string>
#include <vector>

#include "device.h"
#include "kernel.h"

namespace ge {

// Never throws for bad arguments: they make an unsupported answer with the reason.
// `dtypes` and `shapes` describe the inputs (same length; "" / empty for an omitted one).
KernelInfo host_kernel_info(const Device& device, const std::string& op, const std::vector<std::string>& dtypes,
                            const std::vector<Shape>& shapes, const Attrs& attrs);

}  // namespace ge
