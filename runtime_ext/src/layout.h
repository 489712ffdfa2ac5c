// Layout assignment: which activations the runtime stores channels-last.
//
// oneDNN's fast convolutions and pools work on N,H,W,C data. The spec describes every
// tensor as plain NCHW; converting at each Conv's input and output costs 15-20% of a CNN
// (and more for depthwise ones). So at load the runtime picks, for tensors that only the
// runtime ever sees, the layout that the kernels around them prefer:
//
//   * candidates are float32 rank-4 arena tensors that are not model inputs/outputs,
//     are not aliased by a view (a tensor no task writes), and are not copied bytewise;
//   * ops that must see the same layout on their data operands (pools, BatchNorm, unary
//     and same-shape binary elementwise ops) join their operands into one group; a Conv
//     accepts any layout on its data input, output and residual;
//   * a group goes channels-last when all its members are candidates, no op that needs
//     plain data touches any of them, and at least one member is a Conv's input/output.
//
// Tensors whose H*W is 1 have the same bytes in both layouts and never constrain a group.
#pragma once

#include <string>
#include <vector>

#include "spec.h"
#include "tensor.h"

namespace ge {

// How an op's kernel treats the layout of its operands.
enum class LayoutRule {
  kPlainOnly,    // every operand must be plain
  kAnyData,      // Conv: data input, output and residual may each be either layout
  kUniform,      // data input(s) and output share one layout (pools, BatchNorm, unary)
  kElementwise,  // kUniform when every non-scalar operand has the output's shape
};

LayoutRule layout_rule(const std::string& op);

// Decides the layout of every tensor. Pure: reads the spec's tasks and I/O lists and the
// validated `tensors` (shape, dtype, region, offset); returns one Layout per tensor.
// Assumes indices were validated (out-of-range ones are ignored).
std::vector<Layout> assign_layouts(const ModelSpec& spec, const std::vector<TensorInfo>& tensors);

}  // namespace ge
