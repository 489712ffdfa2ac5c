// The device engine's op table: one row per op, the only list of the ops the runtime runs.
//
// A row says everything the runtime's parts need to know of an op before a node exists:
// its kernel factory (kernel.cc: find_kernel), the facts the kernel info store checks
// before load — operand count, dtypes of the data operand, ranks — plus an optional static
// check of its own (kernel_info.cc), and how the kernel treats tensor formats (layout.cc).
// Adding a device op is adding a row here (and its factory in kernels.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kernel.h"
#include "layout.h"

namespace ge {

struct KernelInfo;  // kernel_info.h

// Element types the data operand (input 0) may have.
enum class Types {
  kF32,    // float32
  kFloat,  // float32, float64
  kArith,  // float32, float64, int64, int32
  kAny,    // every runtime dtype
  kDnnl,   // the dtypes oneDNN reorders move: float32, float16, int32, int8, uint8
  kBool,   // bool
  kInt8,   // int8, uint8
};

bool type_ok(Types t, DType d);
const char* types_str(Types t);

// What the kernel info store knows of a node before load: its inputs' dtypes (nullopt for
// an omitted optional input) and shapes, and the kernel attributes. No values.
struct OpQuery {
  const Device* device = nullptr;
  std::string op;
  std::vector<std::optional<DType>> types;
  std::vector<Shape> shapes;
  const Attrs* attrs = nullptr;

  int n() const { return static_cast<int>(types.size()); }
  // "" when inputs from..to-1 (those present) have input 0's dtype, else why not.
  std::string same_types(int from, int to) const;
  // The int attribute `key` (an int or a whole float), or `def`.
  int64_t attr_int(const char* key, int64_t def) const;
};

// An op's own static checks beyond its row: "" when the kernel runs the node, else why not.
// May set r->preferred_format (Conv: oneDNN's choice). Never throws.
using CheckFn = std::string (*)(const OpQuery& q, KernelInfo* r);

struct OpRow {
  const char* name;
  KernelFactory make;
  LayoutRule layout;
  int min_in, max_in;  // max < 0: unbounded
  Types types;         // of input 0
  int min_rank, max_rank;  // of input 0
  CheckFn check;       // nullptr: the row's facts are all
};

// The row of `op`, or nullptr when the device has no kernel for it.
const OpRow* find_op(const std::string& op);
// Every row, in table order.
const std::vector<OpRow>& op_table();

}  // namespace ge
