#pragma once
/**
 * Mixed precision, as torch.autocast(device_type="cpu"): while an AutocastGuard is alive on
 * this thread, products (lt::matmul, and so nn::Linear, attention and the decoder's head) run
 * in bfloat16 (or float16): each floating operand but a float64 one is cast first (a
 * recorded cast, whose gradient casts back, so float32 parameters get float32 gradients)
 * and the product's result has the lower dtype. On a CPU with bfloat16 dot products
 * (AVX512_BF16) such a product runs about twice as fast as in float32. The losses
 * (nn::cross_entropy, nn::nll_loss, nn::mse_loss) take float32, as torch's autocast casts
 * them. Everything else runs in the dtype its operands promote to: a bfloat16 product added
 * to a float32 residual gives float32.
 *
 *   {
 *     lt::AutocastGuard autocast;              // bfloat16
 *     loss = lt::nn::cross_entropy(model(x), y);
 *   }
 *   loss.backward();                           // outside, as torch's
 *
 * The state is part of every trace cache's key (assume_pure, compile, a pure scan): a
 * function traced under autocast is traced again without it. A backward's products run in
 * their forward's dtypes, never cast again, wherever backward() runs. Guards nest;
 * AutocastGuard(false) turns autocast off inside one.
 */
#include "lazytrace/core/dtype.h"
#include "lazytrace/trace/tensor.h"

namespace lazytrace {

class AutocastGuard {
 public:
  /** dtype: bfloat16 or float16, else lt::Error. */
  explicit AutocastGuard(bool enabled = true, DType dtype = DType::bfloat16);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

/** Whether autocast is on on this thread. */
bool is_autocast_enabled();
/** The dtype products run in under autocast on this thread (bfloat16 unless a guard set it). */
DType autocast_dtype();

namespace ops {
/** `t` for an op autocast runs in float32 (a loss): cast up where autocast is on and `t` is a
 * lower-precision float; `t` otherwise. */
Tensor autocast_float32(const Tensor& t);
/** `t` for a product under autocast: cast to autocast_dtype() where autocast is on and `t`
 * is floating but not float64 (torch's rule); `t` otherwise. */
Tensor autocast_lower(const Tensor& t);
}  // namespace ops

}  // namespace lazytrace
