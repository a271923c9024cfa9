// The functions lazytrace.nn.functional and the decoder call per layer, each recorded in
// one call from Python (the op sequence is the same as the Python would record), and
// lazytrace.nn.utils' gradient clipping.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"

namespace lazytrace::python {
namespace {

std::vector<int> last_dims(int n) {
  std::vector<int> dims;
  for (int i = -n; i < 0; ++i) dims.push_back(i);
  return dims;
}

// 16-bit inputs are normalized in float32, as the C++ layers do
Tensor widen(const Tensor& x) {
  return x.dtype() == DType::float16 || x.dtype() == DType::bfloat16 ? astype(x, DType::float32)
                                                                     : x;
}

}  // namespace

void bind_functional(nb::module_& m) {
  m.def(
      "linear",
      [](const Tensor& x, const Tensor& w, std::optional<Tensor> b) {
        if (w.ndim() != 2 || x.ndim() == 0 || x.shape()[x.ndim() - 1] != w.shape()[1])
          fail("linear", "input ", x.type_str(), " has ", x.ndim() ? x.shape()[x.ndim() - 1] : 0,
               " features but weight ", w.type_str(), " takes ",
               w.ndim() ? w.shape()[w.ndim() - 1] : 0,
               " (weight is [out_features, in_features]): give the input in_features as its "
               "last dim.");
        // under autocast: the weight cast as stored (a read in order), the bias too (torch's)
        Tensor y = matmul(x, transpose(ops::autocast_lower(w), 0, 1));
        return b ? y + ops::autocast_lower(*b) : y;
      },
      nb::arg("input"), nb::arg("weight"), nb::arg("bias").none() = nb::none(),
      "input @ weight.T + bias, weight [out_features, in_features] as torch's.");
  m.def(
      "rms_norm",
      [](const Tensor& x, int ndims, std::optional<Tensor> w, double eps) {
        Tensor h = widen(x);
        Tensor y = h * rsqrt(mean(h * h, last_dims(ndims), true) + eps);
        if (w) y = y * *w;
        return astype(y, x.dtype());
      },
      nb::arg("input"), nb::arg("ndims"), nb::arg("weight").none(), nb::arg("eps"));
  m.def(
      "layer_norm",
      [](const Tensor& x, int ndims, std::optional<Tensor> w, std::optional<Tensor> b, double eps) {
        Tensor h = widen(x);
        const std::vector<int> dims = last_dims(ndims);
        Tensor c = h - mean(h, dims, true);
        Tensor y = c * rsqrt(mean(c * c, dims, true) + eps);
        if (w) y = y * *w;
        if (b) y = y + *b;
        return astype(y, x.dtype());
      },
      nb::arg("input"), nb::arg("ndims"), nb::arg("weight").none(), nb::arg("bias").none(),
      nb::arg("eps"));
  m.def("embedding", &nn::embedding, nb::arg("input"), nb::arg("weight"),
        "Rows of weight [num, dim] picked by integer indices: input.shape + [dim]; an index "
        "outside [0, num) raises.");
  m.def("apply_rotary", &nn::apply_rotary, nb::arg("x"), nb::arg("theta"),
        "Llama's rotary position embedding of x [..., seq, head_dim], positions 0..seq-1.");
  // lazytrace.nn.utils
  m.def("total_norm", &nn::total_norm, nb::arg("tensors"), nb::arg("norm_type"));
  m.def("grad_norm", &nn::grad_norm, nb::arg("params"), nb::arg("norm_type"));
  m.def("clip_grads_with_norm_", &nn::clip_grads_with_norm_, nb::arg("params"), nb::arg("max_norm"),
        nb::arg("total_norm"));
  m.def("clip_grad_value_", &nn::clip_grad_value_, nb::arg("params"), nb::arg("clip_value"));
}

}  // namespace lazytrace::python
