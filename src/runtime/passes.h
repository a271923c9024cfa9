#pragma once
// PassSet: which of the optional passes (passes.def) a compile runs. Every speed mechanism
// of the compiler and the CPU backend is one of them, so each can be switched off for its
// A/B. The set travels with the compile (it is part of the compile cache's key) and, in
// the program, to the kernels; nothing reads it from a global.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lazytrace::runtime {

enum class Pass : uint8_t {
#define LT_PASS(id, name, where, what) id,
#include "runtime/passes.def"
};

inline constexpr int kPassCount = 0
#define LT_PASS(id, name, where, what) +1
#include "runtime/passes.def"
    ;
static_assert(kPassCount <= 64, "PassSet keeps one bit per pass in 64 bits");

class PassSet {
 public:
  bool on(Pass p) const { return !(off_ >> static_cast<int>(p) & 1u); }
  void set(Pass p, bool on) {
    const uint64_t bit = uint64_t{1} << static_cast<int>(p);
    off_ = on ? off_ & ~bit : off_ | bit;
  }
  /** The bits of the passes switched off: for cache keys. */
  uint64_t off_bits() const { return off_; }
  bool operator==(const PassSet&) const = default;

  /** All on except the named ones ("all": every pass off); an unknown name is an lt::Error
   * that lists the names. */
  static PassSet without(const std::vector<std::string>& names);
  /** The names of the passes switched off. */
  std::vector<std::string> off_names() const;

 private:
  uint64_t off_ = 0;
};

const char* pass_name(Pass p);

/** The passes sync() compiles with: LAZYTRACE_DISABLE_PASSES (a comma-separated list of
 * names, or "all") at first use, then what set_current_passes gave. */
PassSet current_passes();
void set_current_passes(PassSet passes);
/** current_passes().on(p), for checks on every recorded op. */
bool current_pass_on(Pass p);

}  // namespace lazytrace::runtime
