#include "runtime/device.h"

#include <atomic>
#include <mutex>

#include "lazytrace/core/error.h"

namespace lazytrace::runtime {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<Device*> devices;  // the first is the default
};

thread_local bool registering_builtins = false;

// The registry, with the built-in backends registered first (once; a function-local static,
// as std::call_once's thread-locals do not link into the library's TLS model).
Registry& registry() {
  static auto* r = new Registry();  // devices live as long as the process
  if (!registering_builtins) {
    static const bool registered = [] {
      registering_builtins = true;
      register_builtin_devices();
      registering_builtins = false;
      return true;
    }();
    (void)registered;
  }
  return *r;
}

}  // namespace

Device& default_device() {
  // the first device registered stays first: found once, then read without the lock
  static std::atomic<Device*> first{nullptr};
  if (Device* d = first.load(std::memory_order_acquire)) return *d;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.devices.empty())
    fail("device", "no device is registered: the library was built without a backend.");
  first.store(r.devices.front(), std::memory_order_release);
  return *r.devices.front();
}

Device* find_device(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (Device* d : r.devices)
    if (name == d->name()) return d;
  return nullptr;
}

void clear_device_caches() {
  Registry& r = registry();
  std::vector<Device*> devices;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    devices = r.devices;
  }
  for (Device* d : devices) d->clear_caches();
}

void register_device(Device& device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (Device* d : r.devices)
    if (std::string_view(d->name()) == device.name())
      fail("device", "a device named '", device.name(), "' is registered already.");
  r.devices.push_back(&device);
}

}  // namespace lazytrace::runtime
