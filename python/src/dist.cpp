// lazytrace.distributed's C++ side: joining a job, ranks, collectives, threads as ranks.
// Whatever waits for other ranks runs without the GIL, so the other ranks' Python runs.
#include <nanobind/stl/function.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include "bindings.h"

namespace lazytrace::python {

void bind_dist(nb::module_& m) {
  nb::module_ d = m.def_submodule("_dist");
  d.def("init", [] {
    ReleaseGil release;
    return dist::init();
  });
  d.def("built_with_mpi", &dist::built_with_mpi);
  d.def("launched_by_mpi", &dist::launched_by_mpi);
  d.def("rank", &dist::rank);
  d.def("world_size", &dist::world_size);
  d.def("barrier", [] {
    ReleaseGil release;
    dist::barrier();
  });
  d.def("set_timeout", &dist::set_timeout, nb::arg("seconds"));
  d.def("timeout", &dist::timeout);
  d.def("shard", &dist::shard, nb::arg("n"));
  d.def(
      "run_threads",
      [](int n, nb::callable fn) {
        ReleaseGil release;
        dist::run_threads(n, [&](int rank) {
          AcquireGil acquire;
          fn(rank);
        });
      },
      nb::arg("n"), nb::arg("fn"));
  d.def(
      "all_reduce",
      [](const Tensor& t, const std::string& op, double scale) { return all_reduce(t, op, scale); },
      nb::arg("tensor"), nb::arg("op") = "sum", nb::arg("scale") = 1.0);
  d.def(
      "reduce_scatter",
      [](const Tensor& t, const std::string& op, double scale) {
        return reduce_scatter(t, op, scale);
      },
      nb::arg("tensor"), nb::arg("op") = "sum", nb::arg("scale") = 1.0);
  d.def("all_gather", &all_gather, nb::arg("tensor"));
  d.def("broadcast", &broadcast, nb::arg("tensor"), nb::arg("src") = 0);
}

}  // namespace lazytrace::python
