// Tensor formats: which formats each op accepts, and the runtime's own choice when the
// spec gives none.
//
// Explicit formats: when any tensor of the spec has a "format", the spec's formats are
// used exactly (the compiler inserted TransData where they change) and every kernel task
// is checked against its op's rule below.
//
// Otherwise the runtime chooses. oneDNN's fast convolutions and pools work on N,H,W,C
// data; converting at each Conv's input and output costs 15-20% of a CNN (and more for
// depthwise ones). So at load the runtime picks, for tensors that only the runtime ever
// sees, the layout that the kernels around them prefer:
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

// How an op's kernel treats the formats of its operands.
enum class LayoutRule {
  kPlainOnly,    // every operand must be plain
  kAnyData,      // Conv: data input, output and residual may each be in any format
  kUniform,      // data input and output share one format (pools, BatchNorm, unary)
  kElementwise,  // kUniform when every non-scalar operand has the output's shape
  kChannel,      // kElementwise, plus per-channel operands ([N|1, C, 1, 1], plain: a scale)
  kConvert,      // TransData: input and output in any formats
  kConcat,       // Concat, Split: every input and output shares one format
  kSpatial,      // Pad: kUniform when the op moves only H and W (its "pads" attribute is zero on
                 // N and C), else plain; the runtime's own channels-last choice keeps it plain
  kReduce,       // ReduceMean/Sum/Max/Min: kUniform restricted to plain and NHWC when the output
                 // keeps the input's rank (keepdims: the kernel folds the stored order's axes),
                 // else plain; the runtime's own channels-last choice keeps it plain
  kDomain,       // EltwiseGraph: kChannel, plus inputs broadcast over some axes of the domain
                 // and stored in its format (the kernel reads them by runs of the stored order)
};

// True when a "pads" attribute [begin x r, end x r] of a rank 3 to 5 tensor leaves N and C
// alone.
bool spatial_pads(const std::vector<int64_t>& pads);

LayoutRule layout_rule(const std::string& op);

// True when `s` is a per-channel operand of an output `y` [N, C, H, W] with H*W > 1:
// [N or 1, C, 1, 1] (or [N|1, C, 1] and [N|1, C, 1, 1, 1] of a 3-D or 5-D `y`). Stored plain, its bytes are those
// of [N|1, 1, 1, C] in NHWC and of [N|1, C/b, 1, 1, b] in a blocked format, so a kChannel
// kernel reads it in any format.
bool per_channel_of(const Shape& s, const Shape& y);

// True when `s` is a per-pixel map of an output `y` [N, C, H, W] with C > 1: [N or 1, 1, H,
// W] (a decoder's spatial attention gating its features). One channel: its bytes are the
// same plain and NHWC, so a kElementwise kernel with an NHWC output reads it broadcast over
// the stored channels (oneDNN's binary describes it in the output's format).
bool pixel_map_of(const Shape& s, const Shape& y);

// Decides the format of every tensor (heuristic mode: plain or nhwc). Pure: reads the
// spec's tasks and I/O lists and the validated `tensors` (shape, dtype, region, offset);
// returns one Format per tensor. Assumes indices were validated.
std::vector<Format> assign_layouts(const ModelSpec& spec, const std::vector<TensorInfo>& tensors);

// Empty if the kernel task `t` may run on its operands' formats, else why not (naming
// the tensor). Operand indices must be valid (-1 = omitted).
std::string format_violation(const TaskSpec& t, const std::vector<TensorInfo>& tensors);

}  // namespace ge
