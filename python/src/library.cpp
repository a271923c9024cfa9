// The rest of the library for Python: grad mode, autograd.grad, optimizers, safetensors,
// metrics and debug dumps.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"

namespace lazytrace::python {
namespace {

nb::dict dict_of(const nn::ParamMap& m) {
  nb::dict d;
  for (const auto& [name, t] : m) d[nb::str(name.data(), name.size())] = nb::cast(t);
  return d;
}

nn::ParamMap map_of(nb::handle d, const char* op) {
  if (!PyDict_Check(d.ptr()))
    throw nb::type_error(
        (std::string("[") + op + "] expected a dict of name -> Tensor, got " + kind_of(d)).c_str());
  nn::ParamMap m;
  for (auto [k, v] : nb::cast<nb::dict>(d)) {
    if (!nb::isinstance<nb::str>(k) || !is_tensor(v))
      throw nb::type_error((std::string("[") + op + "] entry " +
                            nb::cast<std::string>(nb::repr(k)) + ": expected str -> Tensor, got " +
                            kind_of(k) + " -> " + kind_of(v))
                               .c_str());
    Py_ssize_t n = 0;
    const char* utf8 = PyUnicode_AsUTF8AndSize(k.ptr(), &n);
    if (!utf8) {  // a lone surrogate: not UTF-8, which safetensors' names are
      PyErr_Clear();
      throw nb::value_error((std::string("[") + op + "] the name " +
                             nb::cast<std::string>(nb::repr(k)) +
                             " cannot be encoded as UTF-8; give names of valid Unicode text")
                                .c_str());
    }
    m.insert(std::string(utf8, static_cast<size_t>(n)), nb::cast<Tensor>(v));
  }
  return m;
}

}  // namespace

void bind_library(nb::module_& m) {
  // ---- grad mode
  m.def("is_grad_enabled", &is_grad_enabled);
  m.def("_set_grad_enabled", &set_grad_enabled);
  // ---- autocast (lazytrace.autocast holds a guard per block or call)
  nb::class_<AutocastGuard>(m, "_AutocastGuard").def(nb::init<bool, DType>());
  m.def("is_autocast_enabled", &is_autocast_enabled);
  m.def("get_autocast_dtype", &autocast_dtype);
  m.def("_autocast_float32", &ops::autocast_float32);
  m.def(
      "grad",
      [](const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
         std::optional<std::vector<Tensor>> grad_outputs, bool retain_graph, bool create_graph,
         bool zeros_for_unused) {
        std::vector<Tensor> gs =
            autograd::grad(outputs, inputs, grad_outputs ? *grad_outputs : std::vector<Tensor>{},
                           {retain_graph, create_graph, zeros_for_unused});
        nb::list out;  // None where an input was not used (zeros_for_unused off)
        for (const Tensor& g : gs) out.append(g.defined() ? nb::cast(g) : nb::none());
        return out;
      },
      nb::arg("outputs"), nb::arg("inputs"), nb::arg("grad_outputs").none() = nb::none(),
      nb::arg("retain_graph") = false, nb::arg("create_graph") = false,
      nb::arg("zeros_for_unused") = true);
  // lazytrace.autograd.Function: `backward(grads, outputs)` is the Python backward over lists
  m.def(
      "custom_function",
      [](const std::string& name, const std::vector<Tensor>& inputs,
         const std::vector<Tensor>& outputs, nb::handle backward) {
        auto fn = std::make_shared<PyRef>(backward);  // released with the GIL taken
        return autograd::custom_function(
            name, inputs, outputs,
            [fn, name](const std::vector<Tensor>& grads, const std::vector<Tensor>& outs) {
              AcquireGil gil;
              nb::list gs, os;
              for (const Tensor& g : grads) gs.append(nb::cast(g));
              for (const Tensor& o : outs) os.append(nb::cast(o));
              nb::object r = fn->get()(gs, os);
              std::vector<Tensor> out;
              for (nb::handle h : r) {
                if (!h.is_none() && !is_tensor(h))
                  fail(name, "backward returned ", kind_of(h), " for input ", out.size(),
                       "; return a Tensor (or None) per input of forward.");
                out.push_back(h.is_none() ? Tensor() : nb::cast<Tensor>(h));
              }
              return out;
            });
      },
      nb::arg("name"), nb::arg("inputs"), nb::arg("outputs"), nb::arg("backward"));

  // ---- optimizers (lazytrace/optim.py keeps param_groups over them)
  nb::class_<optim::Optimizer>(m, "_Optimizer")
      .def("step", &optim::Optimizer::step)
      .def("zero_grad", &optim::Optimizer::zero_grad)
      .def_prop_rw("lr", &optim::Optimizer::lr, &optim::Optimizer::set_lr)
      .def_prop_ro("params", &optim::Optimizer::params)
      .def("state", &optim::Optimizer::state)
      .def(
          "load_state",
          [](optim::Optimizer& self, const std::vector<optim::Optimizer::State>& state) {
            ReleaseGil release;  // a sync
            self.load_state(state);
          },
          nb::arg("state"));
  nb::class_<optim::SGD, optim::Optimizer>(m, "_SGD").def(
      "__init__",
      [](optim::SGD* self, std::vector<Tensor> params, double lr, double momentum, double dampening,
         double weight_decay, bool nesterov) {
        ReleaseGil release;  // materializes its state: a sync
        new (self) optim::SGD(std::move(params), {.lr = lr,
                                                  .momentum = momentum,
                                                  .weight_decay = weight_decay,
                                                  .dampening = dampening,
                                                  .nesterov = nesterov});
      },
      nb::arg("params"), nb::arg("lr"), nb::arg("momentum"), nb::arg("dampening"),
      nb::arg("weight_decay"), nb::arg("nesterov"));
  nb::class_<optim::AdamW, optim::Optimizer>(m, "_AdamW")
      .def(
          "__init__",
          [](optim::AdamW* self, std::vector<Tensor> params, double lr, double beta1, double beta2,
             double eps, double weight_decay) {
            ReleaseGil release;  // materializes its state: a sync
            new (self) optim::AdamW(std::move(params), {.lr = lr,
                                                        .beta1 = beta1,
                                                        .beta2 = beta2,
                                                        .eps = eps,
                                                        .weight_decay = weight_decay});
          },
          nb::arg("params"), nb::arg("lr"), nb::arg("beta1"), nb::arg("beta2"), nb::arg("eps"),
          nb::arg("weight_decay"))
      .def_prop_ro("steps", &optim::AdamW::steps);

  // ---- safetensors
  m.def(
      "save_file",
      [](nb::handle tensors, const std::string& path,
         std::optional<std::map<std::string, std::string>> metadata) {
        nn::ParamMap map = map_of(tensors, "save_file");
        ReleaseGil release;
        nn::save_file(map, path, metadata ? *metadata : std::map<std::string, std::string>{});
      },
      nb::arg("tensors"), nb::arg("path"), nb::arg("metadata").none() = nb::none());
  m.def(
      "load_file",
      [](const std::string& path) {
        nn::ParamMap map;
        {
          ReleaseGil release;
          map = nn::load_file(path);
        }
        return dict_of(map);
      },
      nb::arg("path"));
  m.def("load_metadata", &nn::load_metadata, nb::arg("path"));

  // ---- metrics and debug
  nb::module_ mt = m.def_submodule("_metrics");
  mt.def("report", &metrics::report);
  mt.def("counter", [](const std::string& name) { return metrics::counter(name); });
  mt.def("timer_ns", &metrics::timer_ns);
  mt.def("counter_names", &metrics::counter_names);
  mt.def("timer_names", &metrics::timer_names);
  mt.def("reset", &metrics::reset);
  mt.def("memory_bytes", &metrics::memory_bytes);
  mt.def("peak_memory_bytes", &metrics::peak_memory_bytes);
  mt.def("reset_peak_memory", &metrics::reset_peak_memory);
  nb::module_ dbg = m.def_submodule("_debug");
  dbg.def("to_text", &debug::to_text);
  dbg.def("to_dot", &debug::to_dot);
  dbg.def("to_program", &debug::to_program);
  dbg.def("set_disabled_passes", &debug::set_disabled_passes);
  dbg.def("disabled_passes", &debug::disabled_passes);
  dbg.def("pass_names", &debug::pass_names);
  dbg.def("kernel_choices", &debug::kernel_choices);
}

}  // namespace lazytrace::python
