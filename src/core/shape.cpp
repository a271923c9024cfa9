#include "lazytrace/core/shape.h"

#include <algorithm>
#include <sstream>

namespace lazytrace {

void Shape::push_back(int64_t d) {
  if (ndim_ < kInline) {
    inline_[ndim_++] = d;
    return;
  }
  std::unique_ptr<int64_t[]> grown(new int64_t[static_cast<size_t>(ndim_ + 1)]);
  std::copy(begin(), end(), grown.get());
  grown[static_cast<size_t>(ndim_)] = d;
  heap_ = std::move(grown);
  ++ndim_;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : *this) n *= d;
  return n;
}

std::string Shape::str() const {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < ndim_; ++i) os << (i ? ", " : "") << (*this)[i];
  os << "]";
  return os.str();
}

std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (int i = s.size() - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= s[i];
  }
  return st;
}

}  // namespace lazytrace
