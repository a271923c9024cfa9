// Tensors are recorded, not run; sync() compiles the pending graph once and runs it.
#include <lazytrace/lazytrace.h>
#include <iostream>

int main() {
  auto x = lt::tensor({1.0f, 2.0f, 3.0f});
  auto w = lt::tensor(std::vector<float>{1, 0, 0, 1, 1, 1}, lt::Shape{3, 2});
  auto y = lt::relu(lt::matmul(x, w) - 2.0f) * 0.5f;  // nothing has run yet
  std::cout << "pending graph:\n" << lt::debug::to_text({y});
  lt::sync();
  std::cout << "y = " << y << "\n";
  std::cout << "softmax(x) = " << lt::softmax(x) << "\n";
  std::cout << lt::metrics::report();
  // x w = [4, 5]: relu([2, 3]) * 0.5
  if (y.to_vector<float>() != std::vector<float>{1.0f, 1.5f}) {
    std::cerr << "basics: y should be [1, 1.5]\n";
    return 1;
  }
  return 0;
}
