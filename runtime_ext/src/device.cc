#include "device.h"

#include <omp.h>

namespace ge {

Device::Device(int threads)
    : threads_(threads > 0 ? threads : omp_get_num_procs()),
      engine_(dnnl::engine::kind::cpu, 0) {
  if (threads_ < 1) threads_ = 1;
}

}  // namespace ge
