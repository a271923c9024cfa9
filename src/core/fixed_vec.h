#pragma once
// A sequence whose length is set when it is made: up to N elements inline (no allocation),
// more on the heap. For what every recorded op makes a few of (tape edges, input types).
#include <array>
#include <cstddef>
#include <memory>
#include <utility>

namespace lazytrace {

template <typename T, size_t N>
class FixedVec {
 public:
  FixedVec() = default;
  explicit FixedVec(size_t n) : n_(n) {
    if (n > N) heap_ = std::make_unique<T[]>(n);
  }
  FixedVec(FixedVec&& o) noexcept
      : inline_(std::move(o.inline_)), heap_(std::move(o.heap_)), n_(std::exchange(o.n_, 0)) {}
  FixedVec& operator=(FixedVec&& o) noexcept {
    inline_ = std::move(o.inline_);
    heap_ = std::move(o.heap_);
    n_ = std::exchange(o.n_, 0);
    return *this;
  }
  FixedVec(const FixedVec&) = delete;
  FixedVec& operator=(const FixedVec&) = delete;

  size_t size() const { return n_; }
  T* begin() { return n_ <= N ? inline_.data() : heap_.get(); }
  T* end() { return begin() + n_; }
  const T* begin() const { return n_ <= N ? inline_.data() : heap_.get(); }
  const T* end() const { return begin() + n_; }
  T& operator[](size_t i) { return begin()[i]; }
  const T& operator[](size_t i) const { return begin()[i]; }

 private:
  std::array<T, N> inline_{};
  std::unique_ptr<T[]> heap_;
  size_t n_ = 0;
};

}  // namespace lazytrace
