#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
static float tanh_r(float x) {
  const float c = 9.2f;
  float xc = x > c ? c : (x < -c ? -c : x);
  float z = xc * xc;
  float p = 1.300212737e-08f;
  p = std::fma(p, z, 2.035335638e-05f);
  p = std::fma(p, z, 3.479997162e-03f);
  p = std::fma(p, z, 1.336788237e-01f);
  p = std::fma(p, z, 1.0f);
  float q = 7.631874723e-07f;
  q = std::fma(q, z, 3.260172089e-04f);
  q = std::fma(q, z, 2.581761964e-02f);
  q = std::fma(q, z, 4.670119584e-01f);
  q = std::fma(q, z, 1.0f);
  return (xc * p) / q;
}
static double ulp_err(float got, double ref) {
  float r = (float)ref;
  float next = std::nextafter(r, INFINITY);
  double u = (double)next - (double)r;
  if (r == 0) return got == 0 ? 0 : 1e9;
  return std::fabs((double)got - ref) / u;
}
int main() {
  double worst = 0;
  float wx = 0;
  long bad = 0, n = 0;
  for (uint32_t b = 0x00800000u; b < 0x41300000u; b += 3) {  // 2^-126 .. 11
    float x;
    std::memcpy(&x, &b, 4);
    double e = ulp_err(tanh_r(x), std::tanh((double)x));
    ++n;
    if (e > worst) {
      worst = e;
      wx = x;
    }
    if (e > 1.0) ++bad;
  }
  printf("worst %.3f ulp at x=%.9g; %ld of %ld over 1 ulp\n", worst, wx, bad, n);
  // the float32 result rounded from the true value: 0.5 ulp is the best possible
  printf("tanh(9.2)=%.9g tanh_r(20)=%.9g tanh_r(-20)=%.9g tanh_r(nan)=%f tanh_r(1e-30)=%g\n",
         tanh_r(9.2f), tanh_r(20), tanh_r(-20), tanh_r(NAN), tanh_r(1e-30f));
}
