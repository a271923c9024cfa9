// The extension module lazytrace._lazytrace, and how lt::Error reaches Python: the same
// message, as ValueError for bad shapes, dtypes and arguments, RuntimeError for what is
// wrong at run time (a read inside a traced function, a backward that cannot run, an
// impure function, a graph limit), MemoryError for an allocation the system refused.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <regex>
#include <string_view>
#include <thread>
#include <typeinfo>

#include "bindings.h"

namespace nb = nanobind;

namespace lazytrace::python {
namespace {

bool is_runtime_error(std::string_view msg) {
  static constexpr std::string_view kRuntimeOps[] = {
      "[backward]", "[requires_grad_]", "[set_grad]", "[grad]", "[compile]", "[sync]", "[cpu]",
      "[ir]",       "[verify]",         "[loop]",     "[call]"};
  for (std::string_view op : kRuntimeOps)
    if (msg.substr(0, op.size()) == op) return true;
  for (std::string_view what :
       {"is not pure", "reverse-mode differentiation", "max_different_graphs",
        "inside a traced function", "outside a call", "cannot be written in place", "can't be cast",
        "s for the other", "different collectives", " failed: ", "backward() inside the traced",
        "higher-order gradients"})
    if (msg.find(what) != std::string_view::npos) return true;
  return false;
}

// The C++ advice in a message in Python's words: astype(t, lt::float32) -> t.to(lt.float32),
// lt::NoGradGuard -> lt.no_grad(), retain_graph = true -> retain_graph=True, lt::x -> lt.x.
std::string pythonic(std::string msg) {
  static const std::regex astype_lt(R"(astype\((\w+), lt::(\w+)\))"),
      astype(R"(astype\((\w+), (\w+)\))");
  msg = std::regex_replace(msg, astype_lt, "$1.to(lt.$2)");
  msg = std::regex_replace(msg, astype, "$1.to($2)");
  const std::pair<std::string_view, std::string_view> words[] = {
      {"lt.bool_", "lt.bool"},
      {"lt::NoGradGuard", "lt.no_grad()"},
      {"under NoGradGuard", "under lt.no_grad()"},
      {"reshape({-1})", "reshape(-1)"},
      {"lt::scalar(v)", "lt.tensor(v)"},
      {"retain_graph = true", "retain_graph=True"},
      {"lt::dist::set_timeout", "lazytrace.distributed.set_timeout"},
      {"lt::Error", "an exception"},
      {"lt::debug::", "lt.debug."},
      {"lt::dist::", "lazytrace.distributed."},
      {"lt::", "lt."}};
  for (const auto& [from, to] : words)
    for (size_t at = msg.find(from); at != std::string::npos; at = msg.find(from, at + to.size()))
      msg.replace(at, from.size(), to);
  return msg;
}

}  // namespace

// Python 3.11 to 3.13 end a thread that waits for the GIL once the interpreter finalizes
// (pthread_exit), and no C++ frame can unwind that (std::terminate). So while the interpreter
// exits, threads never wait for the GIL under the library's frames: each library call or
// callback into Python is counted (g_inside); one that ends while the interpreter exits parks
// its thread (g_parked) until finalization starts, then for good; and the exiting thread
// lets the GIL go until every counted thread is parked, so none is left waiting for it.
#if PY_VERSION_HEX >= 0x030D0000
#define LAZYTRACE_PY_FINALIZING() Py_IsFinalizing()
#else
#define LAZYTRACE_PY_FINALIZING() _Py_IsFinalizing()
#endif
std::atomic<bool> g_exiting{false};  // the interpreter runs its exit handlers
std::thread::id g_exiting_thread;
std::atomic<int> g_inside{0}, g_parked{0};

namespace {
// Before this thread (which does not hold the GIL) waits for it.
void before_waiting_for_the_gil() {
  if (g_exiting.load() && std::this_thread::get_id() != g_exiting_thread) {
    g_parked.fetch_add(1);
    // only 2 s: an exit handler may wait for a lock this thread holds
    for (int ms = 0; ms < 2000 && !LAZYTRACE_PY_FINALIZING(); ++ms)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    g_parked.fetch_sub(1);
  }
  if (LAZYTRACE_PY_FINALIZING())
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}
}  // namespace

void interpreter_exits() {
  g_exiting_thread = std::this_thread::get_id();
  g_exiting.store(true);
  if (g_inside.load() == 0) return;
  PyThreadState* state = PyEval_SaveThread();  // (the threads waiting for it get it)
  for (int ms = 0; ms < 500 && g_parked.load() < g_inside.load(); ++ms)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  PyEval_RestoreThread(state);
}

// Ctrl-C while a while_loop runs (lt::set_interrupt_check), where SIGINT has Python's own
// handler: its flag is tested and cleared (PyOS_InterruptOccurred), and the translator raises
// the KeyboardInterrupt that handler would have. No Python code runs inside the sync (a
// handler that read a tensor there would wait for the sync itself): whether the handler is
// Python's own is read as the main thread lets the GIL go (ReleaseGil), and while it is in
// the library no Python code can change it. A handler of the program's own, and every other
// signal's, runs after the sync, as before.
namespace {
unsigned long g_main_thread = 0;  // threading.main_thread(): the one that handles signals
PyObject *g_default_int_handler = nullptr, *g_getsignal = nullptr;  // signal's, held for good
std::atomic<bool> g_default_int{false};  // SIGINT's handler is signal.default_int_handler

void read_int_handler() {
  if (g_getsignal == nullptr || PyThread_get_thread_ident() != g_main_thread) return;
  PyObject* handler = PyObject_CallFunction(g_getsignal, "i", SIGINT);
  g_default_int.store(handler != nullptr && handler == g_default_int_handler);
  if (handler == nullptr) PyErr_Clear();
  Py_XDECREF(handler);
}
}  // namespace

ReleaseGil::ReleaseGil() {
  read_int_handler();
  state_ = PyEval_SaveThread();
  g_inside.fetch_add(1);
}

ReleaseGil::~ReleaseGil() {
  before_waiting_for_the_gil();
  PyEval_RestoreThread(state_);
  g_inside.fetch_sub(1);
}

AcquireGil::AcquireGil() {
  if (!PyGILState_Check()) before_waiting_for_the_gil();
  state_ = PyGILState_Ensure();
  g_inside.fetch_add(1);
}

AcquireGil::~AcquireGil() {
  g_inside.fetch_sub(1);
  PyGILState_Release(state_);
}

namespace {

bool ctrl_c_pressed() {
  // only the main thread runs signal handlers (another would wait for the GIL for nothing)
  if (PyThread_get_thread_ident() != g_main_thread || !g_default_int.load() || g_exiting.load() ||
      LAZYTRACE_PY_FINALIZING())
    return false;
  AcquireGil gil;
  return PyOS_InterruptOccurred() != 0;  // SIGINT's flag, tested and cleared
}

}  // namespace

}  // namespace lazytrace::python

NB_MODULE(_lazytrace, m) {
  namespace py = lazytrace::python;
  m.doc() = "lazytrace: tensor programs traced lazily and compiled once (the C++ library)";
  // held for the life of the process (never released: translators run until exit)
  static PyObject* trace_read_error = PyErr_NewExceptionWithDoc(
      "lazytrace.TraceReadError", "A traced function asked for a tensor's value.",
      PyExc_RuntimeError, nullptr);
  m.attr("TraceReadError") = nb::borrow(trace_read_error);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const lazytrace::TraceReadError& e) {
      PyErr_SetString(trace_read_error, py::pythonic(e.what()).c_str());
    } catch (const lazytrace::Interrupted&) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
    } catch (const lazytrace::Error& e) {
      const bool memory = std::strstr(e.what(), "] cannot allocate ") != nullptr;
      PyErr_SetString(memory                           ? PyExc_MemoryError
                      : py::is_runtime_error(e.what()) ? PyExc_RuntimeError
                                                       : PyExc_ValueError,
                      py::pythonic(e.what()).c_str());
    } catch (const std::bad_cast&) {  // nanobind's cast of an argument: a bug of ours
      PyErr_SetString(PyExc_TypeError,
                      "an argument could not be converted to the type the operation takes (a "
                      "float where an int is expected, or an int out of range)");
    }
  });
  py::g_main_thread = nb::cast<unsigned long>(
      nb::module_::import_("threading").attr("main_thread")().attr("ident"));
  nb::module_ signal = nb::module_::import_("signal");  // both held for the life of the process
  py::g_default_int_handler = signal.attr("default_int_handler").inc_ref().ptr();
  py::g_getsignal = signal.attr("getsignal").inc_ref().ptr();
  lazytrace::set_interrupt_check(&py::ctrl_c_pressed);
  py::bind_tensor(m);
  py::bind_functional(m);
  py::bind_pytree(m);
  py::bind_tools(m);
  py::bind_library(m);
  py::bind_dist(m);
}
