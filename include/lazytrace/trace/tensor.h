#pragma once
/** Tensor: a handle to a lazily computed array. Ops record; sync() computes. */
#include <cstdint>
#include <memory>
#include <new>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "lazytrace/core/dtype.h"
#include "lazytrace/core/error.h"
#include "lazytrace/core/shape.h"

namespace lazytrace {

struct TensorImpl;

class Tensor {
 public:
  /** An undefined tensor; using it in an op throws lt::Error. */
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  DType dtype() const;
  int ndim() const { return shape().size(); }
  int64_t numel() const { return shape().numel(); }
  /** Size of one dim; negative dims count from the end. */
  int64_t size(int dim) const;
  /** True while the tensor's value is a recorded computation not yet run. */
  bool is_pending() const;

  /** All elements in row-major order, converted to T; materializes the tensor. */
  template <typename T>
  std::vector<T> to_vector() const {
    std::vector<T> out;
    try {
      out.resize(host_elements("to_vector", sizeof(T)));
    } catch (const std::bad_alloc&) {
      host_out_of_memory("to_vector", sizeof(T));
    }
    read_into(dtype_of<T>(), out.data(), "to_vector");
    return out;
  }
  /** The value of a one-element tensor, converted to T; materializes the tensor. */
  template <typename T>
  T item() const {
    check_one_element("item");
    T v{};
    read_into(dtype_of<T>(), &v, "item");
    return v;
  }
  /** A host-side `if (t)`: materializes a one-element tensor (a footgun inside a step). */
  explicit operator bool() const { return item<bool>(); }

  /**
   * Replaces this tensor's contents with src (broadcast and cast to this tensor's shape
   * and dtype), lazily. Every holder of this tensor sees the new value.
   */
  Tensor& copy_(const Tensor& src);

  // ---- autograd (PyTorch's semantics; defined in src/autograd/)
  /**
   * Makes this leaf tensor record the ops that use it, so backward() can fill grad().
   * Only floating tensors can require grad.
   */
  Tensor& requires_grad_(bool requires_grad = true);
  bool requires_grad() const;
  /** True for a tensor made by the user (not by an op that recorded a gradient rule). */
  bool is_leaf() const;
  /**
   * Accumulates d(this)/d(leaf) into grad() of every leaf this tensor depends on. Without
   * an argument the tensor must have one element (a loss); otherwise `grad` is the
   * gradient flowing into this tensor (its shape). The gradients are lazy tensors: the
   * backward pass is recorded like the forward and runs at the next sync. The graph is
   * freed as it is used unless retain_graph is true.
   */
  void backward() const;
  void backward(const Tensor& grad, bool retain_graph = false) const;
  /** The accumulated gradient of a leaf (undefined until a backward reaches it). */
  Tensor grad() const;
  /** Replaces the accumulated gradient; an undefined tensor clears it (zero_grad). */
  void set_grad(const Tensor& grad);
  /** The same value with no gradient history; never requires grad. */
  Tensor detach() const;

  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  /** "f32[2, 3]" */
  std::string type_str() const;

 private:
  void read_into(DType as, void* out, const char* op) const;
  // Materializes the tensor and returns its element count (lt::Error where a host copy of
  // elements of `itemsize` bytes could not be counted in 64 bits).
  size_t host_elements(const char* op, size_t itemsize) const;
  // The lt::Error for a host copy the system has no memory for.
  [[noreturn]] void host_out_of_memory(const char* op, size_t itemsize) const;
  void check_one_element(const char* op) const;
  std::shared_ptr<TensorImpl> impl_;
};

template <>
inline std::vector<bool> Tensor::to_vector<bool>() const {
  std::vector<char> tmp;
  try {
    tmp.resize(host_elements("to_vector", 1));
  } catch (const std::bad_alloc&) {
    host_out_of_memory("to_vector", 1);
  }
  read_into(DType::bool_, tmp.data(), "to_vector");
  return std::vector<bool>(tmp.begin(), tmp.end());
}

/** Prints values (materializing the tensor), e.g. "tensor([1, 2], dtype=float32)". */
std::ostream& operator<<(std::ostream& os, const Tensor& t);

/** Computes every live pending tensor in one graph, like torch_xla.sync(). */
void sync();
/** Computes these tensors (and what they need), in one graph. What it computes on the way
 * that something else still holds (a tensor, the tape, a pending op) is kept too, as MLX's
 * eval does, so no later sync computes it again. A C++ temporary is held to the end of its
 * full expression: `lt::sum(a * 2.0f).item<float>()` keeps `a * 2.0f` for that long, where
 * `Tensor s = lt::sum(a * 2.0f); s.item<float>()` does not. */
void sync(const std::vector<Tensor>& tensors);
/** Forgets every compiled graph and traced-body program (like jax.clear_caches()): the
 * next sync compiles again. (Their scratch memory is taken per run, never held.) */
void clear_caches();

/**
 * Stops the while_loops the running syncs run at their next iteration, which then throw
 * lt::Interrupted; async-signal-safe, for a SIGINT handler. A sync that starts later clears
 * it. (A scan, or a while_loop whose collectives other ranks wait for, runs to its end.) A
 * buffer the interrupted sync was given for its results (an input no one else reads) may be
 * half written: a later sync that needs it is an lt::Error, not a wrong value.
 */
void interrupt();
/**
 * A function the running while_loops call about every 250 ms, on the thread that runs them:
 * true stops them as interrupt() does (the Python package's checks for Ctrl-C). Null: none.
 */
void set_interrupt_check(bool (*check)());

namespace debug {
/** The pending graph of these tensors as text (one line per node). */
std::string to_text(const std::vector<Tensor>& tensors);
/** The pending graph of these tensors in Graphviz DOT. */
std::string to_dot(const std::vector<Tensor>& tensors);
/** The compiled kernel list and buffer plan that syncing these tensors would run. */
std::string to_program(const std::vector<Tensor>& tensors);

/**
 * The optional passes: every mechanism of the compiler and the backend that exists for speed
 * alone (fusion, views, CSE, arena reuse, donation, the loop's read-ahead, ...), each of which
 * can be switched off for an A/B, or to rule it out when a result looks wrong. Syncs from now
 * on compile without the named ones ("all": every one); an unknown name is an lt::Error that
 * lists them. The environment's LAZYTRACE_DISABLE_PASSES=name,... sets the same at start.
 * Returns the names switched off before.
 */
std::vector<std::string> set_disabled_passes(const std::vector<std::string>& names);
/** The names of the passes switched off now. */
std::vector<std::string> disabled_passes();
/** Whether the named pass is on now (an unknown name is an lt::Error that lists them). */
bool pass_on(std::string_view name);
/** The names of every optional pass. */
std::vector<std::string> pass_names();
/**
 * The kernels the backend chose by timing them on this machine (the gemm_choice pass), one
 * line each: "matmul 16 x 128 @ 128 x 1024 (NT, 2 threads): onednn (GFLOP/s lazytrace 52.1
 * openblas 40.3 onednn 61.0)", where "lazytrace" is the fixed rule (lazytrace's small-product
 * kernels where they take the product, OpenBLAS else).
 */
std::string kernel_choices();
}  // namespace debug

}  // namespace lazytrace
