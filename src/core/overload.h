#pragma once
// Overload{lambdas...}: one visitor from several lambdas, for std::visit over a variant.
// A visit that misses an alternative does not compile: a new kind cannot be skipped.

namespace lazytrace {

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

}  // namespace lazytrace
