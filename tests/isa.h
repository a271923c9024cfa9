#pragma once
// Tests of instruction-set copies skip where the CPU lacks the set, unless
// LAZYTRACE_REQUIRE_ISA=avx2|avx512 says the machine must have it (CI on a known machine):
// there a missing set fails the test instead of skipping it silently.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace lt_test {

/** True where LAZYTRACE_REQUIRE_ISA asks for `isa` ("avx512" asks for "avx2" too). */
inline bool isa_required(const std::string& isa) {
  const char* e = std::getenv("LAZYTRACE_REQUIRE_ISA");
  const std::string want = e ? e : "";
  return want == isa || (isa == "avx2" && want == "avx512");
}

}  // namespace lt_test

/** Skips the test without `isa` (has is false), or fails it where the set is required. */
#define LT_SKIP_WITHOUT_ISA(has, isa, why)                                                        \
  if (!(has)) {                                                                                   \
    if (lt_test::isa_required(isa))                                                               \
      GTEST_FAIL() << "LAZYTRACE_REQUIRE_ISA=" << std::getenv("LAZYTRACE_REQUIRE_ISA") << " but " \
                   << (why);                                                                      \
    GTEST_SKIP() << (why);                                                                        \
  }
