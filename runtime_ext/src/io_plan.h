// I/O binding plan: which model inputs kernels read straight from the caller's buffer and
// which model outputs kernels write straight into the array handed back to the caller.
//
// Each such tensor gets its own binding slot (tensor.h); so do the views (tensors no task
// writes, e.g. a Reshape resolved to an alias) that read its bytes. At run time the slot's
// base is the caller's buffer (an input) or a fresh buffer that becomes the output array.
//
// An input binds zero-copy unless a task writes it, or a view reads some of its bytes and
// some bytes outside it. An output is written in place when exactly one task writes it,
// no later task writes bytes it overlaps, every view reading its bytes (after that task)
// lies inside it, and it is not also an input or an earlier output. Everything else stays
// in the arena and costs one copy per run (counted in the statistics).
//
// Views are told apart from other storages that reuse the same arena bytes by program
// order: a view belongs to the storage whose writer last wrote its bytes before its first
// reader (a model output is "read" after the last task); with no such writer it reads
// model inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "spec.h"
#include "tensor.h"

namespace ge {

struct IoPlan {
  std::vector<int> input_slot;   // per model input: slot (>= kFirstIoSlot) or -1 (copied in)
  std::vector<int> output_slot;  // per model output: slot (>= kFirstIoSlot) or -1 (copied out)
  std::vector<uint32_t> slot;    // per tensor
  std::vector<size_t> slot_offset;
  int num_slots = kFirstIoSlot;
};

// Pure. `tensors` are validated (regions, offsets, sizes); task and I/O indices are valid
// (-1 = omitted operand).
IoPlan plan_io(const std::vector<TensorInfo>& tensors, const std::vector<TaskSpec>& tasks,
               const std::vector<int64_t>& inputs, const std::vector<int64_t>& outputs);

}  // namespace ge
