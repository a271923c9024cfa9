#pragma once
// What the side-by-side benchmarks (gemm_bench's BM_Paired, scan_bench's BM_MlpPaired)
// share: they take minutes and answer one question each, so a program registers them only
// when its --benchmark_filter names them; and the median of their rounds.
#include <algorithm>
#include <string_view>
#include <vector>

namespace bench {

/** Whether the command line's --benchmark_filter mentions `word`. */
inline bool filter_names(int argc, char** argv, std::string_view word) {
  constexpr std::string_view kFlag = "--benchmark_filter=";
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.substr(0, kFlag.size()) == kFlag && arg.find(word) != std::string_view::npos)
      return true;
  }
  return false;
}

/** The median of `v` (the mean of the two middle values for an even count). */
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace bench
