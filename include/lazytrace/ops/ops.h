#pragma once
/**
 * The public ops. Each checks its inputs, promotes dtypes as PyTorch does, infers the
 * result shape and records one node; nothing runs until sync().
 */
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "lazytrace/trace/tensor.h"

namespace lazytrace {

/** A number on one side of an op: its kind (bool, integer, floating) takes part in promotion. */
class Scalar {
 public:
  Scalar(double v)
      : f_(v), i_(v > -9.2e18 && v < 9.2e18 ? static_cast<int64_t>(v) : 0), kind_(DType::float64) {}
  Scalar(float v) : Scalar(static_cast<double>(v)) { kind_ = DType::float32; }
  Scalar(int v) : f_(v), i_(v), kind_(DType::int64) {}
  Scalar(long v) : f_(static_cast<double>(v)), i_(v), kind_(DType::int64) {}
  Scalar(long long v) : f_(static_cast<double>(v)), i_(v), kind_(DType::int64) {}
  Scalar(unsigned v) : f_(v), i_(v), kind_(DType::int64) {}
  Scalar(unsigned long v)
      : f_(static_cast<double>(v)), i_(static_cast<int64_t>(v)), kind_(DType::int64) {
    if (v > static_cast<unsigned long>(INT64_MAX))
      fail("scalar", "the unsigned value ", v, " is above the largest int64, ", INT64_MAX,
           ": lazytrace's integers are signed 64-bit. Pass a value in range, or a double.");
  }
  Scalar(bool v) : f_(v), i_(v), kind_(DType::bool_) {}
  double to_double() const { return f_; }
  int64_t to_int() const { return i_; }
  /** float32 (a float) or float64 (a double), int64 for an integer, bool for a bool. */
  DType kind() const { return kind_; }

 private:
  double f_;
  int64_t i_;
  DType kind_;
};

// ---- creation
template <typename T>
Tensor tensor(const std::vector<T>& data, const Shape& shape);
Tensor tensor(std::initializer_list<float> data);
Tensor tensor(std::initializer_list<double> data);
Tensor tensor(std::initializer_list<int> data);  // int64
Tensor tensor(std::initializer_list<bool> data);
/** A 0-d tensor (float -> float32, double -> float64, int -> int64, bool -> bool). */
Tensor scalar(Scalar value);
Tensor scalar(Scalar value, DType dtype);
Tensor zeros(const Shape& shape, DType dtype = DType::float32);
Tensor ones(const Shape& shape, DType dtype = DType::float32);
Tensor full(const Shape& shape, Scalar value, DType dtype = DType::float32);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
/** [start, stop) by step; like torch.arange. */
Tensor arange(double start, double stop, double step = 1, DType dtype = DType::int64);
Tensor arange(double stop, DType dtype = DType::int64);
/** Normal(0, 1) and uniform [0, 1) draws from the global counter-based generator. */
Tensor randn(const Shape& shape, DType dtype = DType::float32);
Tensor rand(const Shape& shape, DType dtype = DType::float32);
/** Resets the generator: the same seed gives the same numbers; a new seed never recompiles. */
void manual_seed(uint64_t seed);
/**
 * Rows [first, first + shape[0]) of rand({total, shape[1], ...}): the numbers that draw
 * would give those rows, the generator moving past the whole of it as that draw would.
 * Data parallelism: a rank's slice of the global batch draws what one process would.
 */
Tensor rand_rows(const Shape& shape, int64_t first, int64_t total, DType dtype = DType::float32);
/**
 * The rows of a global batch that this thread's examples are: [first, first + count) of
 * total (lt::dist::shard sets them; count 0: none). nn::Dropout of a tensor of `count` rows
 * (batch first, or flattened example-major, as [B * T, H]) draws them with rand_rows, so an
 * example's mask depends on its index in the global batch, not on the number of ranks; in
 * another layout (sequence first) the ranks' masks still differ, but not as one process's.
 */
struct BatchRows {
  int64_t first = 0, count = 0, total = 0;
};
void set_batch_rows(BatchRows rows);
BatchRows batch_rows();

// ---- elementwise
Tensor neg(const Tensor& t);
Tensor exp(const Tensor& t);
Tensor log(const Tensor& t);
/** log(1 + t), accurate where t is small (torch.log1p). */
Tensor log1p(const Tensor& t);
Tensor sin(const Tensor& t);
Tensor cos(const Tensor& t);
Tensor tanh(const Tensor& t);
Tensor sigmoid(const Tensor& t);
Tensor relu(const Tensor& t);
/** The exact (erf) GELU, PyTorch's default. */
Tensor gelu(const Tensor& t);
Tensor silu(const Tensor& t);
Tensor sqrt(const Tensor& t);
Tensor rsqrt(const Tensor& t);
Tensor abs(const Tensor& t);
/** The error function. */
Tensor erf(const Tensor& t);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
/** True division: integer inputs give float32. */
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, Scalar b);
Tensor pow(Scalar a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
/** The angle of the point (b, a) in (-pi, pi], as std::atan2(a, b); integers give float32. */
Tensor atan2(const Tensor& a, const Tensor& b);
/**
 * Python's a // b (torch.floor_divide): the quotient rounded down, exact for integers of any
 * size; floats as Python computes them (from fmod, so 7.0 // 0.1 is 69). An integer divided
 * by 0 gives -1 (as XLA), a float gives a / b's infinity or NaN.
 */
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, Scalar b);
Tensor floor_divide(Scalar a, const Tensor& b);
/**
 * Python's a % b (torch.remainder): a - (a // b) * b with b's sign, exact for integers;
 * floats from fmod, as Python. An integer remainder by 0 is a (as XLA), a float one NaN.
 */
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, Scalar b);
Tensor remainder(Scalar a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
/** Elementwise cond ? a : b, broadcasting all three; cond must be bool. */
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
Tensor where(const Tensor& cond, Scalar a, Scalar b);
Tensor astype(const Tensor& t, DType dtype);
/** A tensor with the same value (buffers are never written in place, so none is copied). */
Tensor clone(const Tensor& t);

Tensor operator-(const Tensor& t);
#define LT_BINARY_OPERATOR(OP)                          \
  Tensor operator OP(const Tensor& a, const Tensor& b); \
  Tensor operator OP(const Tensor& a, Scalar b);        \
  Tensor operator OP(Scalar a, const Tensor& b);
LT_BINARY_OPERATOR(+)
LT_BINARY_OPERATOR(-)
LT_BINARY_OPERATOR(*)
LT_BINARY_OPERATOR(/)
LT_BINARY_OPERATOR(==)
LT_BINARY_OPERATOR(!=)
LT_BINARY_OPERATOR(<)
LT_BINARY_OPERATOR(<=)
LT_BINARY_OPERATOR(>)
LT_BINARY_OPERATOR(>=)
#undef LT_BINARY_OPERATOR

// ---- reductions: over all dims, or over `dims` (negative dims count from the end)
Tensor sum(const Tensor& t);
Tensor sum(const Tensor& t, std::vector<int> dims, bool keepdim = false);
Tensor mean(const Tensor& t);
Tensor mean(const Tensor& t, std::vector<int> dims, bool keepdim = false);
Tensor amax(const Tensor& t);
Tensor amax(const Tensor& t, std::vector<int> dims, bool keepdim = false);
/** Numerically stable (the max is subtracted first). */
Tensor softmax(const Tensor& t, int dim = -1);
Tensor log_softmax(const Tensor& t, int dim = -1);

// ---- layout
/** One dim may be -1 (inferred). */
Tensor reshape(const Tensor& t, const Shape& shape);
Tensor transpose(const Tensor& t, int dim0 = -2, int dim1 = -1);
Tensor permute(const Tensor& t, std::vector<int> perm);
Tensor broadcast_to(const Tensor& t, const Shape& shape);
/** Elements start, start+step, ... < stop along dim; negative start/stop count from the end. */
Tensor slice(const Tensor& t, int dim, int64_t start, int64_t stop, int64_t step = 1);
/** t[index] along dim, dropping that dim; index must be in range. */
Tensor select(const Tensor& t, int dim, int64_t index);
Tensor unsqueeze(const Tensor& t, int dim);
Tensor squeeze(const Tensor& t, int dim);
Tensor concat(const std::vector<Tensor>& tensors, int dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int dim = 0);
/** Rows (along dim) picked by a 1-d int32/int64 index; repeats allowed. */
Tensor index_select(const Tensor& t, int dim, const Tensor& index);
/**
 * t with source's slices added at `index` along dim (repeats accumulate), like
 * torch.index_add; source has t's shape with dim resized to the index length.
 */
Tensor index_add(const Tensor& t, int dim, const Tensor& index, const Tensor& source);

// ---- optimizer updates
/** A parameter and its AdamW moments after one step (adamw_update). */
struct AdamWState {
  Tensor param, exp_avg, exp_avg_sq;
};
/**
 * One AdamW step of one parameter in a single pass (torch's fused AdamW kernel):
 *   exp_avg'    = beta1 * exp_avg + (1 - beta1) * grad
 *   exp_avg_sq' = beta2 * exp_avg_sq + (1 - beta2) * (grad * grad)
 *   param'      = param * decay - step_size * exp_avg' / (sqrt(exp_avg_sq') * inv_sqrt_bc2 + eps)
 * with the same float operations in the same order as those ops one by one, so the results
 * are identical; it reads each input once and writes each output once. param, grad and the
 * moments have one shape and one floating dtype; decay, step_size and inv_sqrt_bc2 are 0-d
 * floating tensors (per-step numbers that never recompile). Not differentiable.
 */
AdamWState adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                        const Tensor& exp_avg_sq, const Tensor& decay, const Tensor& step_size,
                        const Tensor& inv_sqrt_bc2, double beta1, double beta2, double eps);

// ---- collectives: over the ranks of the current communicator (lazytrace/dist/dist.h);
// every rank issues the same ones, on the same shapes, in the same order. Size 1: identities.
/**
 * The reduction of t over the ranks, times scale, on every rank: op "sum", "mean" (the sum
 * times 1 / ranks), "max" or "min". Its gradient is the all_reduce (sum) of the gradients,
 * times scale: the gradient of the sum of the ranks' losses.
 */
Tensor all_reduce(const Tensor& t, std::string_view op = "sum", double scale = 1.0);
/** This rank's block of dim 0 of all_reduce(t, op, scale) (dim 0 splits evenly); its
 * gradient is the all_gather of the gradients, times scale ("sum" and "mean" only). */
Tensor reduce_scatter(const Tensor& t, std::string_view op = "sum", double scale = 1.0);
/** The ranks' t joined along dim 0, rank 0 first; its gradient is reduce_scatter (sum). */
Tensor all_gather(const Tensor& t);
/** Rank `root`'s t on every rank (not differentiable). */
Tensor broadcast(const Tensor& t, int root = 0);

// ---- linear algebra
/** NumPy matmul: 1-d operands, batch dims broadcast. */
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace lazytrace
