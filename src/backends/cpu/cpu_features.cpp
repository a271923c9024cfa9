#include "backends/cpu/cpu_features.h"

#include <unistd.h>

#include <cstdlib>

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
  static const bool yes = __builtin_cpu_supports("prfchw");
  return yes;
#else
  return false;
#endif
}

bool has_clflushopt() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = __builtin_cpu_supports("clflushopt");
  return yes;
#else
  return false;
#endif
}

long l2_cache_bytes() {
#if defined(_SC_LEVEL2_CACHE_SIZE)
  static const long bytes = [] {
    const long b = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return b > 0 ? b : 1L << 20;
  }();
  return bytes;
#else
  return 1L << 20;
#endif
}

}  // namespace lazytrace::cpu
