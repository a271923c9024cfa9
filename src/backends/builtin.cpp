// The backends built into the library, registered with runtime's device registry at its
// first lookup; the first is the default device. A new backend adds its line here.
#include "backends/cpu/cpu_device.h"
#include "runtime/device.h"

namespace lazytrace::runtime {

void register_builtin_devices() {
  register_device(cpu::cpu_device());
}

}  // namespace lazytrace::runtime
