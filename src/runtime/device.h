#pragma once
// The Device and Executable interfaces: a device turns a Graph into an Executable; an
// executable runs over parameter buffers and scalar values and returns result buffers.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "runtime/buffer.h"
#include "runtime/passes.h"

namespace lazytrace::runtime {

/** A scalar parameter's value, kept in both forms so int64 values stay exact. */
struct ScalarArg {
  double f = 0;
  int64_t i = 0;
};

class Executable {
 public:
  virtual ~Executable() = default;
  /**
   * One buffer per graph result; a result may be one of the parameter buffers. donated[k]
   * set: nothing reads parameter k's buffer after this run, so an output may be written
   * into it (in place, as XLA's donated arguments); empty: none.
   */
  virtual std::vector<BufferPtr> run(const std::vector<BufferPtr>& params,
                                     const std::vector<ScalarArg>& scalars,
                                     const std::vector<char>& donated = {}) = 0;
  /** Kernel list and buffer plan, for debugging. */
  virtual std::string describe() const = 0;
  /** Bytes of scratch memory a run takes (and gives back when it ends). */
  virtual int64_t arena_bytes() const = 0;
  /** The collectives a run issues (runtime/communicator.h), itself or in its bodies, as a
   * hash of their order, kinds, sizes and attributes (what every rank must agree on); 0:
   * none. */
  virtual uint64_t collectives() const { return 0; }
  /** Those collectives in words ("all_reduce sum f32[1024], ..."), for errors. */
  virtual std::string describe_collectives() const { return {}; }
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const char* name() const = 0;
  /** An executable for `g` (optimized and verified), built with the optional passes that
   * `passes` has on. */
  virtual std::shared_ptr<Executable> compile(const ir::Graph& g, const PassSet& passes) = 0;
  /** Forgets what the device compiled and keeps beside its executables (lt::clear_caches). */
  virtual void clear_caches() {}
  /** The kernels the device chose by measuring, one line each (lt::debug::kernel_choices). */
  virtual std::string kernel_choices() const { return {}; }
};

// The devices graphs are compiled for. The backends built into the library register at the
// first lookup (register_builtin_devices, defined by the backends layer in
// backends/builtin.cpp); the first one registered is the default. trace/ and compiler/ know
// devices only through this registry, so a backend is added without touching them.

/** The device sync() compiles for: the first registered (the CPU device). */
Device& default_device();
/** The registered device of that name, or null. */
Device* find_device(std::string_view name);
/** Calls clear_caches() of every registered device. */
void clear_device_caches();
/** Registers a device (it lives as long as the process). A second one of a name is an error. */
void register_device(Device& device);
/** Registers the backends built into the library; defined in backends/builtin.cpp. */
void register_builtin_devices();

}  // namespace lazytrace::runtime
