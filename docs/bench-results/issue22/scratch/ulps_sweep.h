// What exp_tanh_sigmoid_accuracy.cpp and exp_degree_compare.cpp share: a float's error in
// ulps of the correctly rounded value, and a sweep over every float of a range.
#pragma once
#include <cmath>
#include <cstdio>

inline double ulps(float got, double want) {
  const float w = (float)want;
  if (got == w) return 0;
  if (std::isnan(got) || std::isnan(w)) return 1e9;
  float ulp = std::nextafter(std::fabs(w), INFINITY) - std::fabs(w);
  if (ulp == 0 || !std::isfinite(ulp)) ulp = 1e-45f;
  return std::fabs((double)got - want) / ulp;
}

// worst ulps of f against ref over every float in [lo, hi], and how many are above 1
template <class F, class R>
void run(const char* name, float lo, float hi, F f, R ref) {
  double worst = 0;
  float at = 0;
  long above1 = 0, n = 0;
  for (float x = lo; x <= hi; x = std::nextafter(x, INFINITY)) {
    double u = ulps(f(x), ref(x));
    ++n;
    if (u > 1) ++above1;
    if (u > worst) {
      worst = u;
      at = x;
    }
  }
  std::printf("%-28s [%g, %g]: worst %.3f ulps at %.9g, %ld of %ld above 1\n", name, lo, hi, worst,
              at, above1, n);
}
