// Creation ops: host data, constants, ranges and random draws.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/op_helpers.h"

namespace lazytrace {
namespace {

void check_shape(const char* op, const Shape& shape, DType dtype) {
  for (int64_t d : shape)
    if (d < 0)
      fail(op, "negative dimension ", d, " in shape ", shape.str(), "; sizes must be >= 0.");
  ir::check_size(op, dtype, shape);
}

template <typename T>
Tensor from_host(const T* data, size_t n, DType dtype, const Shape& shape) {
  auto buf = runtime::make_buffer(n * itemsize(dtype));
  if constexpr (std::is_same_v<T, bool>) {
    auto* out = static_cast<bool*>(buf->data());
    for (size_t i = 0; i < n; ++i) out[i] = data[i];
  } else {
    if (n > 0) std::memcpy(buf->data(), data, n * sizeof(T));  // an empty vector may have no data
  }
  return trace::make_materialized(std::move(buf), dtype, shape);
}

}  // namespace

template <typename T>
Tensor tensor(const std::vector<T>& data, const Shape& shape) {
  check_shape("tensor", shape, dtype_of<T>());
  if (static_cast<int64_t>(data.size()) != shape.numel())
    fail("tensor", "got ", data.size(), " values for shape ", shape.str(), ", which holds ",
         shape.numel(), "; pass exactly one value per element.");
  if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> is packed: copy one by one
    auto buf = runtime::make_buffer(data.size());
    for (size_t i = 0; i < data.size(); ++i) static_cast<bool*>(buf->data())[i] = data[i];
    return trace::make_materialized(std::move(buf), DType::bool_, shape);
  } else {
    return from_host(data.data(), data.size(), dtype_of<T>(), shape);
  }
}

template Tensor tensor<float>(const std::vector<float>&, const Shape&);
template Tensor tensor<double>(const std::vector<double>&, const Shape&);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, const Shape&);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, const Shape&);
template Tensor tensor<bool>(const std::vector<bool>&, const Shape&);

Tensor tensor(std::initializer_list<float> data) {
  return from_host(data.begin(), data.size(), DType::float32,
                   Shape{static_cast<int64_t>(data.size())});
}
Tensor tensor(std::initializer_list<double> data) {
  return from_host(data.begin(), data.size(), DType::float64,
                   Shape{static_cast<int64_t>(data.size())});
}
Tensor tensor(std::initializer_list<int> data) {
  std::vector<int64_t> v(data.begin(), data.end());
  return tensor(v, Shape{static_cast<int64_t>(v.size())});
}
Tensor tensor(std::initializer_list<bool> data) {
  return tensor(std::vector<bool>(data), Shape{static_cast<int64_t>(data.size())});
}

Tensor scalar(Scalar value, DType dtype) {
  trace::OpScope scope;
  return trace::make_pending(ops::scalar_node(value, dtype));
}

Tensor scalar(Scalar value) {
  DType d = value.kind();
  return scalar(value, d);
}

Tensor full(const Shape& shape, Scalar value, DType dtype) {
  trace::OpScope scope;
  check_shape("full", shape, dtype);
  if (is_floating(dtype) && dtype != DType::float64) {  // as torch: an error, not inf
    const double v = value.to_double();
    const double top = dtype == DType::float16    ? 65504.0
                       : dtype == DType::bfloat16 ? 3.3895313892515355e38
                                                  : 3.4028234663852886e38;
    if (std::isfinite(v) && std::abs(v) > top)
      fail("full", "the number ", v, " cannot be converted to ", dtype_name(dtype),
           " without overflow (its largest is ", top, "); use a wider dtype.");
  }
  if (shape.size() == 0) return trace::make_pending(ops::scalar_node(value, dtype, "full"));
  return trace::make_pending(ir::make_node(ir::OpKind::BroadcastTo, dtype, shape,
                                           ops::scalar_operand(value, dtype, "full")));
}

Tensor zeros(const Shape& shape, DType dtype) {
  return full(shape, 0, dtype);
}
Tensor ones(const Shape& shape, DType dtype) {
  return full(shape, 1, dtype);
}
Tensor zeros_like(const Tensor& t) {
  ops::check_defined("zeros_like", t);
  return zeros(t.shape(), t.dtype());
}
Tensor ones_like(const Tensor& t) {
  ops::check_defined("ones_like", t);
  return ones(t.shape(), t.dtype());
}

Tensor arange(double start, double stop, double step, DType dtype) {
  trace::OpScope scope;
  if (step == 0 || !std::isfinite(step) || !std::isfinite(start) || !std::isfinite(stop))
    fail("arange", "start, stop and step must be finite and step non-zero; got start=", start,
         ", stop=", stop, ", step=", step, ".");
  if ((stop - start) * step < 0)
    fail("arange", "the range [", start, ", ", stop, ") is empty going by step ", step,
         "; swap start and stop or flip the sign of step.");
  if (dtype == DType::bool_)
    fail("arange", "dtype bool is not supported; use int64 or a float dtype.");
  const double count = std::ceil((stop - start) / step);
  if (!(count < 9.2e18))  // (also a count that overflowed a double)
    fail("arange", "the range [", start, ", ", stop, ") by step ", step, " has ", count,
         " elements, more than a tensor can hold; use a shorter range or a larger step.");
  const auto n = static_cast<int64_t>(count);
  ir::Attrs a;
  a.push_double(start);
  a.push_double(step);
  return trace::make_pending(ir::make_node(ir::OpKind::Iota, dtype, Shape{n}, a));
}

Tensor arange(double stop, DType dtype) {
  return arange(0, stop, 1, dtype);
}

namespace {
thread_local BatchRows t_batch_rows;

// `shape`'s draws from `skip` elements into a draw of `total` elements.
Tensor random(ir::OpKind op, const char* name, const Shape& shape, DType dtype, int64_t total = -1,
              int64_t skip = 0) {
  trace::OpScope scope;
  check_shape(name, shape, dtype);
  if (!is_floating(dtype))
    fail(name, "dtype ", dtype_name(dtype),
         " is not a floating type; draw floats and convert with astype(t, lt::int64).");
  // seed and offset are always parameters (or, in a traced function, its inputs), so a new
  // seed or draw never recompiles
  auto [seed, offset] =
      trace::random_operands(static_cast<uint64_t>(total < 0 ? shape.numel() : total));
  if (skip > 0)
    offset = ir::make_node(ir::OpKind::Add, DType::int64, Shape{}, std::move(offset),
                           ir::make_scalar(static_cast<double>(skip), skip, DType::int64));
  return trace::make_pending(ir::make_node(op, dtype, shape, std::move(seed), std::move(offset)));
}
}  // namespace

Tensor randn(const Shape& shape, DType dtype) {
  return random(ir::OpKind::RandNormal, "randn", shape, dtype);
}
Tensor rand(const Shape& shape, DType dtype) {
  return random(ir::OpKind::RandUniform, "rand", shape, dtype);
}

void manual_seed(uint64_t seed) {
  trace::seed_random(seed);
}

Tensor rand_rows(const Shape& shape, int64_t first, int64_t total, DType dtype) {
  if (shape.empty() || first < 0 || first + shape[0] > total)
    fail("rand_rows", "rows [", first, ", ", first + (shape.empty() ? 0 : shape[0]), ") of shape ",
         shape.str(), " are not within the ", total,
         " rows of the whole draw; give a shape of at least one dim and 0 <= first, first + "
         "shape[0] <= total.");
  const int64_t row = shape.numel() / std::max<int64_t>(shape[0], 1);
  return random(ir::OpKind::RandUniform, "rand_rows", shape, dtype, total * row, first * row);
}

void set_batch_rows(BatchRows rows) {
  if (rows.count < 0 || rows.first < 0 || rows.first + rows.count > rows.total)
    fail("set_batch_rows", "rows [", rows.first, ", ", rows.first + rows.count,
         ") are not within a batch of ", rows.total, ".");
  t_batch_rows = rows;
}

BatchRows batch_rows() {
  return t_batch_rows;
}

}  // namespace lazytrace
