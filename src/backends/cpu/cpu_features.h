#pragma once
// The instruction sets the CPU kernels pick at run time, each checked once. The float32
// loops and small products have copies built for AVX2 and AVX-512 (the *_avx2.cpp and
// *_avx512.cpp files, the only ones built with those flags); the rest is baseline code.
// LAZYTRACE_NO_AVX512 makes a CPU look like one without AVX-512, and LAZYTRACE_NO_AVX2 like
// one with neither (tests run each path; A/B timing).

namespace lazytrace::cpu {

/** AVX2: the AdamW loops' AVX2 copies. */
bool has_avx2();
/** AVX2 and FMA: the float32 elementwise loops' and the small products' AVX2 copies. */
bool has_avx2_fma();
/** AVX-512 (F and DQ) as well: the loops' and the small products' AVX-512 copies. */
bool has_avx512();
/** AVX-512 with BW and VL as well: the small bfloat16 products (small_gemm_bf16_avx512.cpp). */
bool has_avx512_bw_vl();
/** PREFETCHW (prefetch a line to write it): AdamW's read-ahead of the lines it updates. */
bool has_prefetchw();
/** CLFLUSHOPT (evict a line, unordered): a loop's weights, once read, on far cores (loop.cpp). */
bool has_clflushopt();
/** Bytes of L2 per core, as the C library reports it; 1 MB where it reports none. */
long l2_cache_bytes();
/** Bytes of the last-level cache the first core shares, from sysfs; 32 MB where it says none. */
long last_level_cache_bytes();

}  // namespace lazytrace::cpu
