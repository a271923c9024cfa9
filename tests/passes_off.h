#pragma once
// Switches optional passes off for a scope, and puts them back however a test ends.
#include <lazytrace/lazytrace.h>

#include <string>
#include <vector>

namespace lt_test {

struct PassesOff {
  std::vector<std::string> before;
  explicit PassesOff(const std::vector<std::string>& names)
      : before(lt::debug::set_disabled_passes(names)) {}
  ~PassesOff() { lt::debug::set_disabled_passes(before); }
};

}  // namespace lt_test
