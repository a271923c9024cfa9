#pragma once
// LT_CHECK(cond, invariant): an internal invariant of lazytrace, not a user mistake. When
// it breaks, lt::Error names the invariant and where, so the report points at the bug.
// LT_UNREACHABLE(what): a path the invariants exclude (an op switch's other cases).

namespace lazytrace::detail {

/** Throws lt::Error. Out of line (check.cpp): the instruction-set copies of the kernels
 * include this header and must define no symbol of their own (tests/isa_symbols.cmake). */
[[noreturn, gnu::cold]] void check_failed(const char* invariant, const char* cond, const char* file,
                                          int line);

}  // namespace lazytrace::detail

#define LT_CHECK(cond, invariant)                                              \
  do {                                                                         \
    if (!(cond)) [[unlikely]]                                                  \
      ::lazytrace::detail::check_failed(invariant, #cond, __FILE__, __LINE__); \
  } while (0)

#define LT_UNREACHABLE(what) ::lazytrace::detail::check_failed(what, "reached", __FILE__, __LINE__)
