// The backends built into this runtime: the one list a new backend is added to (its
// Device implementation, its kernels, its sources under src/<backend>/). Nothing else in
// the runtime or the compiler names a backend: the Python module lists them
// (_runtime.backends()) and the compiler makes a Target of each (engine/target.py).
#include <memory>

#include "device.h"
#include "host/host_device.h"
#include "ref/ref_device.h"

namespace ge {

void register_builtin_backends(const std::function<void(const std::string&, DeviceFactory)>& add) {
  add("host", [](int threads) -> std::shared_ptr<Device> { return std::make_shared<HostDevice>(threads); });
  add("ref", [](int threads) -> std::shared_ptr<Device> { return std::make_shared<RefDevice>(threads); });
}

}  // namespace ge
