#include "backends/cpu/cpu_features.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace lazytrace::cpu {
namespace {

// LAZYTRACE_NO_AVX2=1 and the like: set to anything but "" or "0"
bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

#if defined(__x86_64__)
// One CPUID feature bit (register 0..3: eax, ebx, ecx, edx); clang 14's
// __builtin_cpu_supports does not know every feature GCC's does.
bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  const bool ok = leaf >= 0x80000000u ? __get_cpuid(leaf, &r[0], &r[1], &r[2], &r[3])
                                      : __get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3]);
  return ok && ((r[reg] >> bit) & 1u);
}
#endif

}  // namespace

bool has_avx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = __builtin_cpu_supports("avx2") && !env_on("LAZYTRACE_NO_AVX2");
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
                          __builtin_cpu_supports("avx512dq") && !env_on("LAZYTRACE_NO_AVX512");
  return yes;
#else
  return false;
#endif
}

bool has_avx512_bw_vl() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes =
      has_avx512() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
#else
  return false;
#endif
}

bool has_prefetchw() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = cpuid_bit(0x80000001u, 0, 2, 8);  // ecx bit 8: PREFETCHW
  return yes;
#else
  return false;
#endif
}

bool has_clflushopt() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = cpuid_bit(7, 0, 1, 23);  // leaf 7 ebx bit 23: CLFLUSHOPT
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

long last_level_cache_bytes() {
  static const long bytes = [] {
    // sysfs describes the cache that cpu0 shares (a core complex's L3); the C library may
    // report the socket's or the host's
    for (const char* index : {"index3", "index2"}) {
      std::ifstream f(std::string("/sys/devices/system/cpu/cpu0/cache/") + index + "/size");
      long size = 0;
      char unit = 0;
      if (f >> size && size > 0) {
        f >> unit;
        return unit == 'K' ? size << 10 : unit == 'M' ? size << 20 : size;
      }
    }
    return 32L << 20;
  }();
  return bytes;
}

}  // namespace lazytrace::cpu
