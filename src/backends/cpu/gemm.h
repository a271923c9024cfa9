#pragma once
// float32 products by whichever kernel is fastest for them on this machine: lazytrace's
// small-product kernels (small_gemm.h), OpenBLAS, oneDNN's sgemm and libxsmm's JIT kernels,
// each where the build has it (gemm_libs.cpp). GemmChoice times every kernel that takes a
// product at the product's first run and keeps the fastest (gemm_choice.cpp; matmul.cpp runs
// the product's blocks on it); without it (the gemm_choice pass switched off) the rule is
// fixed: the small kernels where they take the layout, OpenBLAS otherwise.
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/small_gemm.h"
#include "lazytrace/core/half.h"

namespace lazytrace::cpu {

/**
 * One operand as BLAS sees it: `trans` and leading dimension `ld`, and its row and column
 * strides (rs, cs) as lazytrace's kernels read them.
 */
struct GemmOperand {
  bool trans = false;
  int64_t ld = 0;
  int64_t rs = 0, cs = 0;
};

/** C[m, n] (row stride ldc, overwritten) = A[m, k] B[k, n]; m, n, k > 0. */
struct GemmArgs {
  int64_t m, n, k;
  const float* a;
  GemmOperand oa;
  const float* b;
  GemmOperand ob;
  float* c;
  int64_t ldc;
  // what a loop asks lazytrace's kernels to read ahead (small_gemm.h); no other kernel can
  ReadAhead* ahead = nullptr;
  Shadows shadows;
};

// Lazytrace: the fixed rule (lazytrace's small kernels where they take the product, OpenBLAS
// else), which takes every product.
enum class GemmLib : uint8_t { Lazytrace, OpenBlas, OneDnn, Xsmm };
inline constexpr int kGemmLibs = 4;

/** "lazytrace", "openblas", "onednn", "libxsmm". */
const char* gemm_lib_name(GemmLib lib);

/** Whether this build has `lib` and it runs on this CPU. */
bool gemm_lib_available(GemmLib lib);

/**
 * Runs the product with `lib` and returns true, or returns false, touching nothing, where
 * `lib` is not available or does not take this layout or size.
 */
bool run_gemm_with(GemmLib lib, const GemmArgs& g);

/** The fixed rule: lazytrace's small kernels where they take the product, OpenBLAS else. */
void run_gemm_fixed(const GemmArgs& g);

/**
 * C[m, n] (row stride ldc, overwritten) = A[m, k] B[k, n] in bfloat16 (m, n, k > 0) on the
 * CPU's bfloat16 dot-product instructions (AVX512_BF16, by oneDNN's matmul, summing in float32
 * and rounding C once): returns true, or false, touching nothing, where the build has no
 * oneDNN or the CPU no such instructions. The fixed rule for bfloat16 (matmul.cpp: the small
 * bfloat16 kernel, or the operands widened for float32's kernels) and this are GemmChoice's
 * GemmLib::Lazytrace and GemmLib::OneDnn for such products.
 */
bool run_gemm_bf16(int64_t m, int64_t n, int64_t k, const BFloat16* a, const GemmOperand& oa,
                   const BFloat16* b, const GemmOperand& ob, BFloat16* c, int64_t ldc);

/** C = A B in float64, by OpenBLAS (A and B as BLAS operands). */
void run_dgemm(int64_t m, int64_t n, int64_t k, const double* a, const GemmOperand& oa,
               const double* b, const GemmOperand& ob, double* c, int64_t ldc);

/**
 * How a product runs: its kernel, and whether its blocks over the threads are cut the other
 * way than matmul.cpp's rule cuts them (columns where the rule takes rows, rows where it
 * takes columns). A library run on its own threads cuts a product its own way; one thread
 * per block of lazytrace's cut, the cut is part of the kernel's speed.
 */
struct GemmPlan {
  GemmLib lib = GemmLib::Lazytrace;
  // the product's blocks cut the other way than the rule's; for a product the rule runs
  // whole on one thread, cut into blocks over the threads (matmul.cpp, gemm_cut_small)
  bool other_split = false;
  bool operator==(const GemmPlan&) const = default;
};

/** Sets the libraries up, once: each call on one thread (lazytrace's pool shares the cores). */
void init_gemm_libs();

/**
 * The fastest kernel and cut (GemmPlan) per product, measured at the product's first run
 * and kept. A product is its dtype, sizes, strides, batch count and thread count (and whether
 * its cut may be chosen); the caller runs
 * all of it (every block, on every thread, as it always will) with one plan and reports
 * whether its kernel took every block. GemmLib::Lazytrace on the rule's cut stands for the
 * fixed rule. Thread-safe: one product is measured at a time, and every run of a product,
 * the first included, ends on the plan kept for it.
 */
class GemmChoice {
 public:
  // Products of fewer multiply-adds per matrix follow the fixed rule: timing them would
  // cost more than any choice could gain.
  static constexpr int64_t kMinWork = int64_t{1} << 15;

  struct Key {
    int64_t v[11];
    bool operator==(const Key&) const = default;
  };
  /** The plan kept for `key`, if it was measured. */
  std::optional<GemmPlan> find(const Key& key) const;
  /**
   * Measures the product `key` and keeps its fastest plan (or returns the one another
   * thread kept meanwhile). `run(plan)` runs all of it so and returns false where the
   * plan's kernel declined a block. `splits`: the product is cut into blocks over the
   * threads, so the other split is a candidate too. `shape` names the product in
   * entries(); `flops` its work. `stored`: a plan in the file keep_in() named is taken from
   * there untimed, and a plan measured now is added to it (the gemm_choice_cache pass).
   */
  GemmPlan measure(const Key& key, const std::function<bool(GemmPlan)>& run, bool splits,
                   const std::string& shape, double flops, bool stored = false);
  /**
   * The file measure() keeps plans in across processes (empty: none): a line per product,
   * appended as it is measured. Its name must say which machine and build chose them
   * (gemm_choice_file()); a line that does not parse, or names a library this build lacks,
   * is left out.
   */
  void keep_in(std::string path);

  struct Entry {
    std::string shape;  // "m x k @ k x n (NT, 2 threads)"
    GemmPlan plan;
    // measured, [other_split][lib]; 0 where the kernel did not take every block or the
    // plan was not a candidate
    double gflops[2][kGemmLibs];
    bool stored = false;  // taken from keep_in()'s file, not timed
  };
  /** The products measured so far, in the order they were. */
  std::vector<Entry> entries() const;
  void clear();

 private:
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  mutable std::shared_mutex mu_;
  std::mutex measuring_;
  std::unordered_map<Key, GemmPlan, KeyHash> chosen_;
  std::vector<Entry> entries_;
  void keep(const Key& key, Entry e);
  void load();
  void append(const Key& key, GemmPlan plan, const std::string& shape);

  std::string path_;  // keep_in()'s file, read at the first measure() that may use it
  bool loaded_ = false;
  std::unordered_map<Key, GemmPlan, KeyHash> stored_;
};

/**
 * $LAZYTRACE_CACHE_DIR/gemm-choices-<id>.txt, the id a hash of this machine (its CPU's model
 * and the instruction sets in use) and this build of lazytrace (the binary holding it: path,
 * size, time); empty where LAZYTRACE_CACHE_DIR is unset or empty.
 */
std::string gemm_choice_file();

}  // namespace lazytrace::cpu
