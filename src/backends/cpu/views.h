#pragma once
// Layout ops as stride arithmetic on a View: nothing is copied until a kernel needs it.
#include <optional>

#include "backends/cpu/program.h"

namespace lazytrace::cpu {

View contiguous_view(int storage, DType dtype, const Shape& shape);
/** Right-aligned NumPy broadcast: stride 0 for new dims and expanded size-1 dims. */
View broadcast_view(const View& v, const Shape& target);
View permute_view(const View& v, const int64_t* perm);
View slice_view(const View& v, int dim, int64_t start, int64_t step, int64_t size);
/** A view of the same elements in another shape, if the strides allow one without a copy. */
std::optional<View> reshape_view(const View& v, const Shape& target);

}  // namespace lazytrace::cpu
