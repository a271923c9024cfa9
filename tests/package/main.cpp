#include <lazytrace/lazytrace.h>

#include <cstdio>

int main() {
  auto a = lt::tensor({1.0f, 2.0f, 3.0f});
  auto b = lt::sum(a * a);
  float v = b.item<float>();
  std::printf("sum of squares = %g\n", v);
  return v == 14.0f ? 0 : 1;
}
