#include "variable.h"

#include <utility>

namespace ge {

namespace {

constexpr int64_t kMaxVariableElements = int64_t{1} << 40;  // the engine's tensor bound
constexpr size_t kMaxVariableRank = 32;

}  // namespace

Variable::Variable(std::shared_ptr<const Device> device, std::string name, DType dtype, Shape shape)
    : device_(std::move(device)), name_(std::move(name)), dtype_(dtype), shape_(std::move(shape)) {
  if (name_.empty()) invalid("a variable needs a name");
  if (shape_.size() > kMaxVariableRank) invalid("variable '", name_, "': rank ", shape_.size(), " is above ", kMaxVariableRank);
  int64_t n = 1;
  for (int64_t d : shape_) {
    if (d < 0) invalid("variable '", name_, "': negative dimension in shape ", shape_str(shape_));
    if (d != 0 && n > kMaxVariableElements / d) {
      invalid("variable '", name_, "': shape ", shape_str(shape_), " has more than ", kMaxVariableElements, " elements");
    }
    n *= d;
  }
  numel_ = n;
  nbytes_ = static_cast<size_t>(n) * dtype_size(dtype_);
  data_ = device_->allocate(nbytes_, /*zero=*/true);
}

void Variable::read(void* dst) const {
  if (nbytes_) device_->copy_to_host(dst, data_.data(), nbytes_);
}

void Variable::write(const void* src) {
  if (nbytes_) device_->copy_to_device(data_.data(), src, nbytes_);
}

}  // namespace ge
