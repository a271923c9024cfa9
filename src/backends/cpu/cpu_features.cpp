#include "backends/cpu/cpu_features.h"

#include <cstdlib>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

namespace lazytrace::cpu {

bool has_avx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = __builtin_cpu_supports("avx2") && !std::getenv("LAZYTRACE_NO_AVX2");
  return yes;
#else
  return false;
#endif
}

bool has_avx2_fma() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = has_avx2() && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

bool has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = has_avx2_fma() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512dq") && !std::getenv("LAZYTRACE_NO_AVX512");
  return yes;
#else
  return false;
#endif
}

bool has_prefetchw() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & (1u << 8)) != 0;  // PRFCHW
  }();
  return yes;
#else
  return false;
#endif
}

bool has_clflushopt() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 23)) != 0;  // CLFLUSHOPT
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace lazytrace::cpu
