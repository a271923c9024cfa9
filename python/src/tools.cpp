// The spec's tools for Python functions, each over the C++ tool: assume_pure and compile
// (the C++ FunctionCache), scan (tools::run_scan), while_loop (tools::run_while), sync, and
// grad mode. Python functions are traced with the GIL held; graphs run without it.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <set>

#include "pytree.h"

namespace lazytrace::python {
namespace {

// Python exceptions raised while a Python function is traced travel through C++ as
// nb::python_error; a read inside the function comes back as the C++ TraceReadError, so
// compile (and an enclosing tool) sees it for what it is.
PyObject* g_trace_read_error = nullptr;  // lazytrace.TraceReadError, held for the process

template <typename F>
auto call_python(F&& f) {
  try {
    return f();
  } catch (nb::python_error& e) {
    if (g_trace_read_error && e.matches(g_trace_read_error))
      throw TraceReadError(nb::cast<std::string>(nb::str(e.value())));
    throw;
  }
}

// The function being called through a cache, set for the duration of each call: the
// traced entries never hold the Python function (so nothing C++ holds hides a cycle from
// Python's GC), and they only run it during a call.
struct FnSlot {
  PyObject* fn = nullptr;
};
struct SlotScope {
  FnSlot& slot;
  PyObject* prev;
  SlotScope(FnSlot& s, nb::handle fn) : slot(s), prev(s.fn) { s.fn = fn.ptr(); }
  ~SlotScope() { slot.fn = prev; }
};

// A reference to fn that keeps it alive only where it cannot be referenced weakly: the
// function's wrapper holds it, and a strong reference from a trace (which Python's GC cannot
// see) would close a cycle through its globals.
std::shared_ptr<PyRef> weak_or_strong(nb::handle fn) {
  PyObject* weak = PyWeakref_NewRef(fn.ptr(), nullptr);
  if (!weak) {
    PyErr_Clear();
    return std::make_shared<PyRef>(fn);
  }
  auto ref = std::make_shared<PyRef>(nb::handle(weak));
  Py_DECREF(weak);  // PyRef took its own reference
  return ref;
}
// The function behind such a reference, or null where it has been freed.
PyObject* resolve(const PyRef& ref) {
  if (!ref.ptr || !PyWeakref_Check(ref.ptr)) return ref.ptr;
  PyObject* fn = PyWeakref_GetObject(ref.ptr);
  return fn == Py_None ? nullptr : fn;
}

void flatten_call(nb::handle args, nb::handle kwargs, pytree::Flat& flat, TreeDef* a, TreeDef* k,
                  const char* tool, nb::list* keep = nullptr, DictMemos* memos = nullptr) {
  flatten_tree(args, flat, a, "args", tool, keep, memos);
  flatten_tree(kwargs, flat, k, "kwargs", tool, keep, memos);
}

// While alive, the train()/eval() flags Python modules read go to `guard` (a
// lazytrace._modes.Guard; None: nowhere), as lazytrace._modes records them.
struct ModesRecorded {
  nb::handle guard;
  explicit ModesRecorded(nb::handle g) : guard(g) {
    if (guard.is_valid() && !guard.is_none()) guard.attr("_push")();
  }
  ~ModesRecorded() {
    try {
      if (guard.is_valid() && !guard.is_none()) guard.attr("_pop")();
    } catch (...) {  // a destructor must not throw; _pop only pops a list
    }
  }
  ModesRecorded(const ModesRecorded&) = delete;
  ModesRecorded& operator=(const ModesRecorded&) = delete;
};

// assume_pure's and compile's per-function cache
struct PyFunction {
  std::shared_ptr<tools::FunctionCache> cache;
  std::shared_ptr<FnSlot> slot = std::make_shared<FnSlot>();
  const char* tool;
  // compile: the function is held by its traces, since a backward through a call's results
  // after the call traces it again (assume_pure's VJP comes from the forward's run)
  bool hold_fn = false;
  CompileOptions options;
  std::set<uint64_t> eager;  // signatures whose function reads values: run as plain code
  DictMemos dicts;           // the large dicts of tensors its calls were given

  // the hot path's flattening of a call's arguments
  void flatten_args(nb::handle args, nb::handle kwargs, pytree::Flat& flat) {
    flatten_call(args, kwargs, flat, nullptr, nullptr, tool, nullptr,
                 debug::pass_on("memo_dicts") ? &dicts : nullptr);
  }

  // `modes`: the function's train()/eval() guard (lazytrace._modes.Guard), told of the flags
  // read while it is traced; `flipped`: which of them have flipped since (0: none), part of
  // the key
  nb::object call_cached(nb::handle fn, nb::tuple args, nb::dict kwargs, nb::handle modes,
                         uint64_t flipped) {
    SlotScope in(*slot, fn);
    pytree::Flat flat;
    flatten_args(args, kwargs, flat);
    if (flipped) flat.mix(flipped);
    auto describe = [&] {
      pytree::Flat d;
      d.describing = true;
      flatten_call(args, kwargs, d, nullptr, nullptr, tool);
      return d;
    };
    tools::CachedCall call(*cache, std::move(flat), tools::DescribeFn::of(describe));
    nb::list keep;  // the leaves, while the function (which may drop them) is traced
    if (call.needs_trace()) {
      auto defs = std::make_shared<std::pair<TreeDef, TreeDef>>();
      pytree::Flat tmp;  // no Python ran since `flat`: the same leaves, now held by `keep`
      flatten_call(args, kwargs, tmp, &defs->first, &defs->second, tool, &keep);
      std::shared_ptr<PyRef> held = hold_fn ? weak_or_strong(fn) : nullptr;
      nb::object guard = nb::borrow(modes);
      call.trace([defs, s = slot, held, tool = tool, guard](const std::vector<Tensor>& leaves) {
        AcquireGil gil;
        PyObject* f = s->fn ? s->fn : held ? resolve(*held) : nullptr;
        if (!f)
          fail(tool,
               "the function was traced again after it was freed (a backward through "
               "its results); keep the compiled function while its results are used.");
        size_t at = 0;
        nb::object a = defs->first.build(leaves, at);
        nb::object k = defs->second.build(leaves, at);
        ModesRecorded recorded(guard);
        nb::object r = call_python([&] { return nb::handle(f)(*a, **k); });
        auto out = std::make_shared<TreeDef>();
        pytree::Flat of;
        flatten_tree(r, of, out.get(), "result", tool);
        tools::Traced t;
        t.outputs = of.tensors();
        t.result = out;
        return t;
      });
    }
    std::vector<Tensor> outs = call.record();
    return static_cast<const TreeDef*>(call.result())->build(outs);
  }

  nb::object call_compiled(nb::handle fn, nb::tuple args, nb::dict kwargs, nb::handle modes,
                           uint64_t flipped) {
    {
      ReleaseGil release;
      tools::sync_named(nullptr, options.name + "_clear_pending");
    }
    pytree::Flat flat;
    flatten_args(args, kwargs, flat);
    nb::object result;
    if (!eager.count(flat.hash())) {
      const bool traced = tools::run_traced(
          [&] { result = call_cached(fn, args, kwargs, modes, flipped); }, options);
      if (!traced) eager.insert(flat.hash());
    }
    if (!result.is_valid()) result = fn(*args, **kwargs);
    ReleaseGil release;
    tools::sync_named(nullptr, options.name);  // the results and what the call wrote
    return result;
  }
};

// A loop body traced from Python: rebuilds the carry and the slice, calls the function.
struct LoopFn {
  std::shared_ptr<PyRef> fn;  // held: a backward traces the body again, after the call
  TreeDef carry, x;
  uint64_t carry_hash = 0;
  const char* tool;
};

[[noreturn]] void carry_changed(const char* tool, nb::handle before, nb::handle after,
                                const char* root) {
  pytree::Flat a, b;
  a.describing = b.describing = true;
  flatten_tree(before, a, nullptr, root, tool);
  flatten_tree(after, b, nullptr, root, tool);
  tools::carry_mismatch(tool, a, b);
}

}  // namespace

void bind_tools(nb::module_& m) {
  g_trace_read_error = nb::object(m.attr("TraceReadError")).release().ptr();

  nb::class_<PyFunction>(m, "_FunctionCache")
      .def(
          "__init__",
          [](PyFunction* self, const std::string& tool, const std::string& name, bool full_graph,
             int max_different_graphs) {
            new (self) PyFunction();
            if (tool == "compile") {
              self->tool = "compile";
              self->hold_fn = true;
              self->options = CompileOptions{full_graph, name.empty() ? "compiled" : name,
                                             max_different_graphs};
              self->cache =
                  tools::make_function_cache({.tool = "compile",
                                              .name = self->options.name,
                                              .max_different_graphs = max_different_graphs,
                                              .count_as_compile = true,
                                              .functional_writes = true});
            } else {
              self->tool = "assume_pure";
              self->cache = tools::make_function_cache(
                  {.tool = "assume_pure", .name = name, .trace_once = true});
            }
          },
          nb::arg("tool"), nb::arg("name"), nb::arg("full_graph") = false,
          nb::arg("max_different_graphs") = 0)
      .def("call", &PyFunction::call_cached, nb::arg("fn"), nb::arg("args"), nb::arg("kwargs"),
           nb::arg("modes").none() = nb::none(), nb::arg("flipped") = 0)
      .def("call_compiled", &PyFunction::call_compiled, nb::arg("fn"), nb::arg("args"),
           nb::arg("kwargs"), nb::arg("modes").none() = nb::none(), nb::arg("flipped") = 0);

  m.def(
      "scan",
      [](nb::handle fn, nb::handle init, nb::handle xs, bool is_fn_pure, bool reverse,
         const std::string& remat, const std::string& tool_name, nb::handle modes,
         uint64_t flipped) {
        const char* tool = tool_name == "scan_layers" ? "scan_layers"
                           : tool_name == "fori_loop" ? "fori_loop"
                                                      : "scan";
        if (remat != "save" && remat != "recompute")
          throw nb::value_error(("[" + std::string(tool) + "] remat must be \"save\" or " +
                                 "\"recompute\", got \"" + remat + "\"")
                                    .c_str());
        auto body = std::make_shared<LoopFn>();
        body->fn = std::make_shared<PyRef>(fn);
        body->tool = tool;
        pytree::Flat fc, fx;
        nb::list keep;  // the leaves, while the body (which may drop them) is traced
        flatten_tree(init, fc, &body->carry, "init", tool, &keep);
        flatten_tree(xs, fx, &body->x, "xs", tool, &keep);
        if (fx.leaves.empty())
          fail(tool, "xs has no tensors to scan over (", body->x.str(),
               "); pass at least one tensor whose first dim is the number of iterations.");
        body->carry_hash = fc.hash();
        tools::ScanArgs args;
        args.init = fc.leaves;
        args.xs = fx.leaves;
        args.options =
            ScanOptions{reverse, is_fn_pure, remat == "save" ? Remat::save : Remat::recompute};
        args.tool = tool;
        if (is_fn_pure) {
          // the function by identity: a cached body holds it, so its id is not reused
          pytree::Flat key;
          key.mix(reinterpret_cast<uint64_t>(fn.ptr()));
          if (flipped) key.mix(flipped);
          key.mix(fc.hash());
          key.mix(fx.hash());
          args.cache_key = key.hash() | 1;
        }
        nb::object xs_ref = nb::borrow(xs);
        args.xs_paths = [xs_ref, tool] {
          AcquireGil gil;
          pytree::Flat d;
          d.describing = true;
          flatten_tree(xs_ref, d, nullptr, "xs", tool);
          return d.leaf_paths;
        };
        nb::object guard = nb::borrow(modes);
        tools::LoopTraceFn trace = [body, guard](const std::vector<Tensor>& c,
                                                 const std::vector<Tensor>& x,
                                                 const std::vector<Tensor>&) {
          AcquireGil gil;
          ModesRecorded recorded(guard);
          const char* tool = body->tool;
          nb::object carry = body->carry.build(c);
          nb::object slice = body->x.build(x);
          nb::object r = call_python([&] { return body->fn->get()(carry, slice); });
          if (!(PyTuple_Check(r.ptr()) || PyList_Check(r.ptr())) || nb::len(r) != 2)
            fail(tool, "the body function must return a pair (new_carry, y), got ", kind_of(r),
                 ". Return (carry, None) where there is no y.");
          nb::object nc = r[0], y = r[1];
          pytree::Flat fnc;
          flatten_tree(nc, fnc, nullptr, "carry", tool);
          if (fnc.hash() != body->carry_hash) carry_changed(tool, carry, nc, "carry");
          auto ys_def = std::make_shared<TreeDef>();
          pytree::Flat fy;
          flatten_tree(y, fy, ys_def.get(), "y", tool);
          tools::LoopTraced t;
          t.carry = fnc.tensors();
          t.ys = fy.tensors();
          t.ys_like = ys_def;
          return t;
        };
        tools::ScanOutputs o = tools::run_scan(args, trace);
        nb::object carry = body->carry.build(o.carry);
        nb::object ys = static_cast<const TreeDef*>(o.ys_like.get())->build(o.ys);
        return nb::make_tuple(carry, ys);
      },
      nb::arg("fn"), nb::arg("init").none(), nb::arg("xs").none(), nb::arg("is_fn_pure") = false,
      nb::arg("reverse") = false, nb::arg("remat") = "save", nb::arg("tool") = "scan",
      nb::arg("modes").none() = nb::none(), nb::arg("flipped") = 0);

  m.def(
      "while_loop",
      [](nb::handle cond_fn, nb::handle body_fn, nb::handle carried) {
        const char* tool = "while_loop";
        if (!PyTuple_Check(carried.ptr()) && !PyList_Check(carried.ptr()))
          throw nb::type_error(("[while_loop] carried_inputs must be a tuple (passed to "
                                "cond_fn and body_fn unpacked), got " +
                                kind_of(carried))
                                   .c_str());
        nb::tuple init = nb::tuple(carried);
        TreeDef def;
        pytree::Flat fi;
        nb::list keep;  // the leaves, while cond and body (which may drop them) are traced
        flatten_tree(init, fi, &def, "carried_inputs", tool, &keep);
        const uint64_t init_hash = fi.hash();
        tools::LoopTraceFn trace = [&](const std::vector<Tensor>& c, const std::vector<Tensor>&,
                                       const std::vector<Tensor>&) {
          nb::object carry = def.build(c);
          nb::object cond = call_python([&] { return cond_fn(*carry); });
          if (!is_tensor(cond))
            fail(tool, "cond_fn must return a bool Tensor with one element, got ", kind_of(cond),
                 ". Compute the condition with tensor ops (i < n), not Python values.");
          nb::object next = call_python([&] { return body_fn(*carry); });
          if (is_tensor(next) && nb::len(init) == 1) next = nb::make_tuple(next);
          if (PyList_Check(next.ptr())) next = nb::tuple(next);
          pytree::Flat fn;
          flatten_tree(next, fn, nullptr, "carried_inputs", tool);
          if (fn.hash() != init_hash) carry_changed(tool, carry, next, "carried_inputs");
          tools::LoopTraced t;
          t.carry = fn.tensors();
          t.ys = {nb::cast<Tensor>(cond)};
          return t;
        };
        std::vector<Tensor> out = tools::run_while(fi.leaves, trace);
        return def.build(out);
      },
      nb::arg("cond_fn"), nb::arg("body_fn"), nb::arg("carried_inputs"));

  m.def(
      "sync",
      [](std::optional<std::vector<Tensor>> tensors) {
        ReleaseGil release;
        if (tensors)
          sync(*tensors);
        else
          sync();
      },
      nb::arg("tensors").none() = nb::none());
  m.def(
      "sync_named",
      [](std::optional<std::vector<Tensor>> tensors, const std::string& name) {
        ReleaseGil release;
        tools::sync_named(tensors ? &*tensors : nullptr, name);
      },
      nb::arg("tensors").none(), nb::arg("name"));
  m.def("clear_caches", [] {
    tools::clear_scan_cache();  // with the GIL: the bodies it drops hold Python functions
    ReleaseGil release;
    clear_caches();
  });
  // atexit: other threads' calls into lazytrace park (interpreter_exits), then the caches, then
  // every Python object C++ still holds (PyRef::release_all)
  m.def(
      "_at_exit",
      [](bool threads_left) {
        interpreter_exits();
        // a daemon thread's frames hold tensors for good: not a reference count's mistake
        if (threads_left) nb::set_leak_warnings(false);
        tools::clear_scan_cache();
        {
          ReleaseGil release;
          clear_caches();
        }
        PyRef::release_all();
      },
      nb::arg("threads_left"));
  m.def("live_traces", &tools::live_traces,
        "Traced signatures alive in every assume_pure and compile cache.");
}

}  // namespace lazytrace::python
