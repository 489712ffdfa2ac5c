// Status: the one error currency of the runtime.
//
// Functions that can fail at run time return a Status; load-time code (spec validation,
// kernel construction) throws ge::Error, which Model::load catches and turns back into a
// Status. Neither a Status nor an Error ever carries a Python object: the binding layer
// (module.cc) maps Status codes to Python exceptions in one place.
#pragma once

#include <cstdint>
#include <exception>
#include <sstream>
#include <string>
#include <utility>

namespace ge {

enum class Code {
  kOk,
  kInvalidArgument,  // bad input from a request or a graph: shapes, dtypes, indices, spec
  kInternal,         // everything else (oneDNN failure, out of memory)
  kDeadlineExceeded,  // the caller's deadline passed while its launch waited for an instance
  kCancelled,         // the caller cancelled while its launch waited for an instance
};

class Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
  static Status Cancelled(std::string m) { return {Code::kCancelled, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // The same status with `prefix` put in front of the message (e.g. "node 'x' (Conv): ").
  Status prefixed(const std::string& prefix) const {
    return ok() ? *this : Status(code_, prefix + message_);
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Load-time failure. Thrown only on the loading thread; never crosses a stream worker.
class Error : public std::exception {
 public:
  explicit Error(Status status) : status_(std::move(status)) {}
  const char* what() const noexcept override { return status_.message().c_str(); }
  const Status& status() const { return status_; }

 private:
  Status status_;
};

// Concatenates its arguments with operator<< (used to build error messages).
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Throws Error(InvalidArgument) with the concatenated message.
template <class... Args>
[[noreturn]] void invalid(const Args&... args) {
  throw Error(Status::InvalidArgument(cat(args...)));
}

// Overflow-checked arithmetic for sizes computed from graph attributes: absurd values
// become an InvalidArgument instead of undefined behaviour.
inline int64_t add_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) invalid("integer overflow computing a size (", a, " + ", b, ")");
  return r;
}
inline int64_t mul_checked(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) invalid("integer overflow computing a size (", a, " * ", b, ")");
  return r;
}

}  // namespace ge
