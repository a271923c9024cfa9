#pragma once
/** Shape: the dimensions of a tensor, stored inline up to six dimensions. */
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace lazytrace {

class Shape {
 public:
  static constexpr int kInline = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(const std::vector<int64_t>& dims) {
    assign(dims.data(), dims.data() + dims.size());
  }
  template <typename It>
  Shape(It first, It last) {
    std::vector<int64_t> v(first, last);
    assign(v.data(), v.data() + v.size());
  }
  Shape(const Shape& o) { assign(o.begin(), o.end()); }
  Shape(Shape&& o) noexcept : ndim_(o.ndim_), heap_(std::move(o.heap_)) {
    for (int i = 0; i < kInline; ++i) inline_[i] = o.inline_[i];
    o.ndim_ = 0;
  }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this == &o) return *this;
    ndim_ = o.ndim_;
    heap_ = std::move(o.heap_);
    for (int i = 0; i < kInline; ++i) inline_[i] = o.inline_[i];
    o.ndim_ = 0;
    return *this;
  }

  int size() const { return ndim_; }
  int ndim() const { return ndim_; }
  bool empty() const { return ndim_ == 0; }
  int64_t operator[](int i) const { return data()[i]; }
  int64_t& operator[](int i) { return data()[i]; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + ndim_; }
  const int64_t* data() const { return ndim_ <= kInline ? inline_ : heap_.get(); }
  int64_t* data() { return ndim_ <= kInline ? inline_ : heap_.get(); }
  int64_t back() const { return data()[ndim_ - 1]; }
  void push_back(int64_t d);
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }

  /** Product of the dimensions; 1 for a 0-d shape. */
  int64_t numel() const;
  /** "[2, 3]" */
  std::string str() const;

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.ndim_ != b.ndim_) return false;
    for (int i = 0; i < a.ndim_; ++i)
      if (a[i] != b[i]) return false;
    return true;
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  // Never given this shape's own storage (operator= checks for self-assignment).
  void assign(const int64_t* first, const int64_t* last) {
    int n = static_cast<int>(last - first);
    ndim_ = n;
    if (n <= kInline) {
      if (heap_) heap_.reset();
      for (int i = 0; i < n; ++i) inline_[i] = first[i];
    } else {
      heap_.reset(new int64_t[static_cast<size_t>(n)]);
      for (int i = 0; i < n; ++i) heap_[static_cast<size_t>(i)] = first[i];
    }
  }
  int64_t inline_[kInline] = {};
  int ndim_ = 0;
  std::unique_ptr<int64_t[]> heap_;  // dims when there are more than kInline
};

/** Row-major strides (in elements) of a contiguous tensor of this shape. */
std::vector<int64_t> contiguous_strides(const Shape& s);

}  // namespace lazytrace
