// lazytrace.Tensor: the handle, its operators with Python numbers (weak types, as torch),
// autograd, and host memory (item, DLPack both ways). Argument forms that are plain Python
// (reshape(*shape), indexing, max(dim)) are added by lazytrace/_tensor.py.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_set>

#include "bindings.h"

namespace lazytrace::python {

PyTypeObject* g_tensor_type = nullptr;

namespace {
// every live PyRef (leaked: PyRefs may die during static teardown)
std::mutex& refs_mu() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::unordered_set<PyRef*>& live_refs() {
  static auto* refs = new std::unordered_set<PyRef*>();
  return *refs;
}
}  // namespace

PyRef::PyRef(nb::handle h) : ptr(h.ptr()) {
  Py_XINCREF(ptr);
  std::lock_guard<std::mutex> lock(refs_mu());
  live_refs().insert(this);
}

PyRef::~PyRef() {
  {
    std::lock_guard<std::mutex> lock(refs_mu());
    live_refs().erase(this);
  }
  if (!ptr || !Py_IsInitialized()) return;
  PyGILState_STATE s = PyGILState_Ensure();
  Py_DECREF(ptr);
  PyGILState_Release(s);
}

nb::handle PyRef::get() const {
  if (!ptr)
    throw std::runtime_error(
        "[lazytrace] the interpreter is exiting: the Python functions traced bodies held were "
        "released.");
  return ptr;
}

void PyRef::release_all() {
  std::vector<PyObject*> drop;
  {
    std::lock_guard<std::mutex> lock(refs_mu());
    for (PyRef* r : live_refs()) {
      if (r->ptr) drop.push_back(r->ptr);
      r->ptr = nullptr;
    }
  }
  for (PyObject* o : drop) Py_DECREF(o);  // may free PyRefs (erased under the lock)
}

std::string kind_of(nb::handle h) {
  if (h.is_none()) return "None";
  std::string name = nb::type_name(h.type()).c_str();
  if (name == "lazytrace._lazytrace.Tensor") return "a Tensor";
  const char first = name.empty() ? 'x' : name[0];
  const bool vowel = std::strchr("aeiouAEIOU", first) != nullptr;
  return std::string(vowel ? "an " : "a ") + name;
}

bool scalar_of(nb::handle h, Scalar& out) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o)) {
    out = Scalar(o == Py_True);
    return true;
  }
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow)
      throw nb::value_error(("[number] the integer " + nb::cast<std::string>(nb::str(h)) +
                             " does not fit in int64, the widest tensor integer; use a float "
                             "or a smaller number.")
                                .c_str());
    out = Scalar(v);
    return true;
  }
  if (PyFloat_Check(o)) {
    out = Scalar(PyFloat_AS_DOUBLE(o));
    return true;
  }
  // numpy scalars (np.float32(2)) and 0-d arrays
  if (!is_tensor(h) && nb::hasattr(h, "dtype") && nb::hasattr(h, "item") &&
      (!nb::hasattr(h, "shape") || nb::len(nb::object(h.attr("shape"))) == 0))
    return scalar_of(h.attr("item")(), out);
  return false;
}

/** Whether h is array data (numpy, torch) that an op with a tensor takes as a tensor. */
bool is_array(nb::handle h) {
  return !is_tensor(h) && (nb::hasattr(h, "__array_interface__") || nb::hasattr(h, "__dlpack__"));
}

Tensor as_tensor(nb::handle h, const char* op) {
  if (is_tensor(h)) return tensor_of(h);
  Scalar s(0.0);
  if (scalar_of(h, s)) {
    const DType d = s.kind() == DType::float64 ? DType::float32 : s.kind();
    return scalar(s, d);
  }
  // nested lists and arrays: through lazytrace.tensor (its dtype rules live in Python)
  nb::object lt = nb::module_::import_("lazytrace");
  nb::object t = lt.attr("tensor")(h);
  if (!is_tensor(t))
    throw nb::type_error(
        (std::string("[") + op + "] expected a Tensor or a number, got " + kind_of(h)).c_str());
  return nb::cast<Tensor>(t);
}

Shape shape_of(nb::handle h, const char* op) {
  std::vector<int64_t> dims;
  if (PyLong_Check(h.ptr())) {
    dims.push_back(nb::cast<int64_t>(h));
  } else if (PyTuple_Check(h.ptr()) || PyList_Check(h.ptr()) || nb::hasattr(h, "__len__")) {
    for (nb::handle d : h) {
      if (PyLong_Check(d.ptr()) && !PyBool_Check(d.ptr())) {
        int overflow = 0;
        dims.push_back(PyLong_AsLongLongAndOverflow(d.ptr(), &overflow));
        if (overflow)
          throw nb::value_error((std::string("[") + op + "] a dim does not fit in int64").c_str());
        continue;
      }
      if (PyBool_Check(d.ptr()) || !nb::hasattr(d, "__index__"))
        throw nb::type_error(
            (std::string("[") + op + "] a shape holds ints, got " + kind_of(d)).c_str());
      dims.push_back(nb::cast<int64_t>(d.attr("__index__")()));
    }
  } else {
    throw nb::type_error(
        (std::string("[") + op + "] expected a shape (ints, or a tuple of ints), got " + kind_of(h))
            .c_str());
  }
  return Shape(dims);
}

namespace {

// dims as ints (a bool or a float is not a dim; as torch, "argument 'dim' must be int")
std::vector<int> dims_of(nb::handle h, const char* op) {
  auto one = [op](nb::handle d) {
    if (!PyLong_Check(d.ptr()) || PyBool_Check(d.ptr()))
      throw nb::type_error(
          (std::string("[") + op + "] a dim must be an int, got " + kind_of(d)).c_str());
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(d.ptr(), &overflow);
    if (overflow || v < INT32_MIN || v > INT32_MAX)
      throw nb::value_error((std::string("[") + op + "] dim " + nb::cast<std::string>(nb::str(d)) +
                             " is out of range")
                                .c_str());
    return static_cast<int>(v);
  };
  std::vector<int> dims;
  if (PyLong_Check(h.ptr()) || PyBool_Check(h.ptr()) || PyFloat_Check(h.ptr())) {
    dims.push_back(one(h));
  } else {
    if (!nb::hasattr(h, "__iter__"))
      throw nb::type_error(
          (std::string("[") + op + "] dims must be an int or a sequence of ints, got " + kind_of(h))
              .c_str());
    for (nb::handle d : h) dims.push_back(one(d));
  }
  return dims;
}

std::vector<int> dims_all(const Tensor& t) {
  std::vector<int> dims(static_cast<size_t>(t.ndim()));
  for (int i = 0; i < t.ndim(); ++i) dims[static_cast<size_t>(i)] = i;
  return dims;
}

// a Python number beside a tensor in a function (lazytrace.add(t, 2)): a 0-d tensor of the
// tensor's dtype, or the default dtype of the number's kind where the tensor's cannot hold it
Tensor full_like_scalar(const Tensor& like, const Scalar& s) {
  DType d = like.dtype();
  if (s.kind() == DType::float64 && !is_floating(d)) d = DType::float32;
  if (s.kind() == DType::int64 && d == DType::bool_) d = DType::int64;
  return scalar(s, d);
}

// *args of ints, or one tuple/list of them
nb::handle shape_arg_handle(const nb::args& args) {
  if (args.size() == 1 && (PyTuple_Check(args[0].ptr()) || PyList_Check(args[0].ptr())))
    return args[0];
  return args;
}
Shape shape_arg(const nb::args& args, const char* op) {
  return shape_of(shape_arg_handle(args), op);
}

nb::tuple shape_tuple(const Shape& s) {
  nb::list l;
  for (int64_t d : s) l.append(d);
  return nb::tuple(l);
}

// a op b where b may be a Tensor or a Python number; NotImplemented for anything else, so
// Python tries the other side and then raises its own TypeError
template <typename F>
nb::object binary(const Tensor& a, nb::handle b, F f) {
  if (is_tensor(b)) return nb::cast(f(a, tensor_of(b)));
  Scalar s(0.0);
  if (b.is_none()) return nb::borrow(Py_NotImplemented);  // t == None is False, as in Python
  if (scalar_of(b, s)) return nb::cast(f(a, s));
  if (is_array(b)) {  // t + ndarray is a Tensor
    const Tensor other = as_tensor(b, "op");
    return nb::cast(f(a, other));
  }
  return nb::borrow(Py_NotImplemented);
}

// a op= b with torch's semantics: a's value is replaced (every holder sees it), a's dtype
// and shape stay
template <typename F>
nb::object inplace(nb::handle self, nb::handle b, F f) {
  Tensor& a = nb::cast<Tensor&>(self);
  // under autograd the op reads a handle of its own: the copy_ below gives `a` a new value,
  // and the op's gradient must still see the old one (h *= b: d/db is the old h)
  nb::object r = binary(is_grad_enabled() ? clone(a) : a, b, f);
  if (r.is(nb::handle(Py_NotImplemented))) return r;
  Tensor v = nb::cast<Tensor>(r);
  if ((is_floating(v.dtype()) && !is_floating(a.dtype())) ||
      (a.dtype() == DType::bool_ && v.dtype() != DType::bool_))
    fail("copy_", "an in-place op on ", a.type_str(), " gave ", v.type_str(),
         ": the result type can't be cast to the tensor's dtype in place (as in torch). Use an "
         "out-of-place op (t = t / 2) or convert first (t = t.float()).");
  if (v.shape() != a.shape())
    fail("copy_", "an in-place op on ", a.type_str(), " gave ", v.type_str(),
         ": the result must keep the tensor's shape (its operand broadcasts to it, not the "
         "other way round).");
  a.copy_(v);
  return nb::borrow(self);
}

nb::dlpack::dtype dl_dtype(DType d) {
  using nb::dlpack::dtype_code;
  switch (d) {
    case DType::float32:
      return {static_cast<uint8_t>(dtype_code::Float), 32, 1};
    case DType::float64:
      return {static_cast<uint8_t>(dtype_code::Float), 64, 1};
    case DType::float16:
      return {static_cast<uint8_t>(dtype_code::Float), 16, 1};
    case DType::bfloat16:
      return {static_cast<uint8_t>(dtype_code::Bfloat), 16, 1};
    case DType::int32:
      return {static_cast<uint8_t>(dtype_code::Int), 32, 1};
    case DType::int64:
      return {static_cast<uint8_t>(dtype_code::Int), 64, 1};
    case DType::bool_:
      return {static_cast<uint8_t>(dtype_code::Bool), 8, 1};
  }
  fail("dlpack", "unknown dtype");
}

std::optional<DType> lt_dtype(nb::dlpack::dtype d) {
  using nb::dlpack::dtype_code;
  if (d.lanes != 1) return std::nullopt;
  // an if chain, not a switch: nanobind's list of codes grows between versions
  const auto code = static_cast<dtype_code>(d.code);
  if (code == dtype_code::Float && d.bits == 32) return DType::float32;
  if (code == dtype_code::Float && d.bits == 64) return DType::float64;
  if (code == dtype_code::Float && d.bits == 16) return DType::float16;
  if (code == dtype_code::Bfloat && d.bits == 16) return DType::bfloat16;
  if (code == dtype_code::Int && d.bits == 32) return DType::int32;
  if (code == dtype_code::Int && d.bits == 64) return DType::int64;
  if (code == dtype_code::Bool && d.bits == 8) return DType::bool_;
  return std::nullopt;
}

using HostArray = nb::ndarray<nb::ro, nb::device::cpu>;

// t's elements as an ndarray over its own memory (no copy), kept alive by the array:
// Array = HostArray becomes a DLPack capsule in Python, nb::numpy a read-only numpy array
template <typename Array = HostArray>
Array host_array(const Tensor& t) {
  if (t.ndim() > 64)  // NumPy's limit (past it NumPy aborts, or gives an object array)
    throw nb::value_error(("[numpy] NumPy arrays have at most 64 dims, the tensor " + t.type_str() +
                           " has " + std::to_string(t.ndim()) + "; reshape it first.")
                              .c_str());
  std::shared_ptr<const void> data;
  {
    ReleaseGil release;
    data = host_data(t);
  }
  auto* keep = new std::shared_ptr<const void>(data);
  nb::capsule owner(keep,
                    [](void* p) noexcept { delete static_cast<std::shared_ptr<const void>*>(p); });
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  return Array(data.get(), shape.size(), shape.data(), owner, nullptr, dl_dtype(t.dtype()));
}

// A tensor over an array's memory where it is contiguous and aligned (and no copy is asked
// for); a copy otherwise
Tensor from_array(nb::handle obj, bool copy) {
  HostArray a;
  if (!nb::try_cast(obj, a))
    throw nb::type_error(("[from_dlpack] expected a CPU array with __dlpack__ or the buffer "
                          "protocol (numpy, torch), got " +
                          kind_of(obj))
                             .c_str());
  const std::optional<DType> d = lt_dtype(a.dtype());
  if (!d)
    throw nb::type_error(
        "[from_dlpack] the array's dtype has no lazytrace dtype; lazytrace has float32, "
        "float64, float16, bfloat16, int32, int64 and bool. Convert it first (a.astype(...)).");
  std::vector<int64_t> dims(a.ndim());
  int64_t expect = 1;
  bool contiguous = true;
  for (size_t i = a.ndim(); i-- > 0;) {
    dims[i] = static_cast<int64_t>(a.shape(i));
    if (a.shape(i) != 1 && a.stride(i) != expect) contiguous = false;
    expect *= static_cast<int64_t>(a.shape(i));
  }
  const Shape shape(dims);
  const size_t item = itemsize(*d);
  const bool aligned = reinterpret_cast<uintptr_t>(a.data()) % item == 0;
  if (contiguous && aligned && !copy) {
    // the array view holds what owns the memory (a numpy array, a DLPack capsule); it is
    // released with the tensor's buffer, from any thread
    auto* held = new HostArray(a);
    std::shared_ptr<const void> owner(held->data(), [held](const void*) {
      if (!Py_IsInitialized()) return;
      PyGILState_STATE s = PyGILState_Ensure();
      delete held;
      PyGILState_Release(s);
    });
    return from_blob(a.data(), shape, *d, std::move(owner));
  }
  if (contiguous) return copy_from(a.data(), shape, *d);
  // strided: gather the elements, then copy them into a buffer of our own
  std::vector<char> bytes(static_cast<size_t>(shape.numel()) * item);
  const char* base = static_cast<const char*>(a.data());
  std::vector<int64_t> idx(dims.size(), 0);
  for (int64_t n = 0; n < shape.numel(); ++n) {
    int64_t off = 0;
    for (size_t k = 0; k < dims.size(); ++k) off += idx[k] * a.stride(k);
    std::memcpy(bytes.data() + n * item, base + off * static_cast<int64_t>(item), item);
    for (size_t k = dims.size(); k-- > 0;) {
      if (++idx[k] < dims[k]) break;
      idx[k] = 0;
    }
  }
  return copy_from(bytes.data(), shape, *d);
}

nb::object item_of(const Tensor& t) {
  if (t.numel() != 1)
    fail("item", "a tensor with ", t.numel(), " elements (", t.type_str(),
         ") cannot be converted to a Python number; index it first or use tolist().");
  if (is_floating(t.dtype())) {
    double v;
    {
      ReleaseGil release;
      v = t.item<double>();
    }
    return nb::float_(v);
  }
  if (t.dtype() == DType::bool_) {
    bool v;
    {
      ReleaseGil release;
      v = t.item<bool>();
    }
    return nb::bool_(v);
  }
  int64_t v;
  {
    ReleaseGil release;
    v = t.item<int64_t>();
  }
  return nb::int_(v);
}

}  // namespace

void bind_tensor(nb::module_& m) {
  nb::enum_<DType>(m, "dtype")
      .value("float32", DType::float32)
      .value("float64", DType::float64)
      .value("float16", DType::float16)
      .value("bfloat16", DType::bfloat16)
      .value("int32", DType::int32)
      .value("int64", DType::int64)
      .value("bool", DType::bool_);
  m.def("promote_types", &promote_types);
  m.def("itemsize", &itemsize);

  using T = const Tensor&;
  nb::class_<Tensor> cls(m, "Tensor", nb::is_weak_referenceable());
  g_tensor_type = reinterpret_cast<PyTypeObject*>(cls.ptr());
  cls.def(nb::init<const Tensor&>(), "A handle to the same tensor (Parameter uses it).")
      .def_prop_ro("shape", [](T t) { return shape_tuple(t.shape()); })
      .def_prop_ro("dtype", &Tensor::dtype)
      .def_prop_ro("ndim", &Tensor::ndim)
      .def("dim", &Tensor::ndim)
      .def("numel", &Tensor::numel)
      .def("__len__",
           [](T t) {
             if (t.ndim() == 0) throw nb::type_error("len() of a 0-d tensor");
             return t.size(0);
           })
      .def("is_pending", &Tensor::is_pending, "True while the value is recorded, not computed.")
      .def("type_str", &Tensor::type_str)
      // autograd
      .def_prop_rw(
          "requires_grad", [](T t) { return t.requires_grad(); },
          [](Tensor& t, bool b) { t.requires_grad_(b); })
      .def(
          "requires_grad_",
          [](nb::handle self, bool b) {
            nb::cast<Tensor&>(self).requires_grad_(b);
            return nb::borrow(self);
          },
          nb::arg("requires_grad") = true)
      .def_prop_rw(
          "grad",
          [](T t) -> std::optional<Tensor> {
            Tensor g = t.grad();
            if (!g.defined()) return std::nullopt;
            return g;
          },
          [](Tensor& t, std::optional<Tensor> g) { t.set_grad(g ? *g : Tensor()); },
          nb::arg("grad").none())
      .def_prop_ro("is_leaf", &Tensor::is_leaf)
      .def(
          "backward",
          [](T t, std::optional<Tensor> gradient, bool retain_graph) {
            if (gradient)
              t.backward(*gradient, retain_graph);
            else if (retain_graph && t.numel() == 1)
              t.backward(ones_like(t), true);
            else
              t.backward();
          },
          nb::arg("gradient").none() = nb::none(), nb::arg("retain_graph") = false)
      .def("detach", &Tensor::detach)
      // host memory
      .def("item", &item_of)
      .def("_host", &host_array<nb::ndarray<nb::numpy, nb::ro>>,
           "The elements as a read-only numpy array over the tensor's memory.")
      .def(
          "__dlpack__", [](T t, nb::kwargs) { return host_array(t); },
          "A DLPack capsule over the tensor's memory (torch.from_dlpack, numpy.from_dlpack).")
      .def("__dlpack_device__", [](T) { return nb::make_tuple(1, 0); })  // kDLCPU, device 0
      .def(
          "copy_",
          [](nb::handle self, nb::handle src) {
            nb::cast<Tensor&>(self).copy_(as_tensor(src, "copy_"));
            return nb::borrow(self);
          },
          nb::arg("src"))
      // operators; Python numbers take the tensor's dtype where they fit it
      .def("__neg__", [](T a) { return -a; })
      .def("__pos__", [](T a) { return a; })
      .def("__abs__", [](T a) { return abs(a); })
      .def(
          "__add__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return x + y; }); },
          nb::arg("other").none())
      .def(
          "__radd__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return y + x; }); },
          nb::arg("other").none())
      .def(
          "__sub__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return x - y; }); },
          nb::arg("other").none())
      .def(
          "__rsub__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return y - x; }); },
          nb::arg("other").none())
      .def(
          "__mul__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return x * y; }); },
          nb::arg("other").none())
      .def(
          "__rmul__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return y * x; }); },
          nb::arg("other").none())
      .def(
          "__truediv__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return x / y; }); },
          nb::arg("other").none())
      .def(
          "__rtruediv__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return y / x; }); },
          nb::arg("other").none())
      .def(
          "__pow__",
          [](T a, nb::handle b) {
            return binary(a, b, [](auto& x, auto& y) { return pow(x, y); });
          },
          nb::arg("other").none())
      .def(
          "__rpow__",
          [](T a, nb::handle b) {
            return binary(a, b, [](auto& x, auto& y) { return pow(y, x); });
          },
          nb::arg("other").none())
      .def(
          "__matmul__",
          [](T a, nb::handle b) -> nb::object {  // t @ ndarray is a Tensor, as t + ndarray
            if (is_tensor(b)) return nb::cast(matmul(a, tensor_of(b)));
            if (is_array(b)) return nb::cast(matmul(a, as_tensor(b, "matmul")));
            return nb::borrow(Py_NotImplemented);
          },
          nb::arg("other").none())
      .def(
          "__rmatmul__",
          [](T a, nb::handle b) -> nb::object {
            if (is_tensor(b)) return nb::cast(matmul(tensor_of(b), a));
            if (is_array(b)) return nb::cast(matmul(as_tensor(b, "matmul"), a));
            return nb::borrow(Py_NotImplemented);
          },
          nb::arg("other").none())
      .def(
          "__eq__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return x == y; }); },
          nb::arg("other").none())
      .def(
          "__ne__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return x != y; }); },
          nb::arg("other").none())
      .def(
          "__lt__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return x < y; }); },
          nb::arg("other").none())
      .def(
          "__le__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return x <= y; }); },
          nb::arg("other").none())
      .def(
          "__gt__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return x > y; }); },
          nb::arg("other").none())
      .def(
          "__ge__",
          [](T a, nb::handle b) { return binary(a, b, [](auto& x, auto& y) { return x >= y; }); },
          nb::arg("other").none())
      .def(
          "__iadd__",
          [](nb::handle s, nb::handle b) {
            return inplace(s, b, [](auto& x, auto& y) { return x + y; });
          },
          nb::arg("other").none())
      .def(
          "__isub__",
          [](nb::handle s, nb::handle b) {
            return inplace(s, b, [](auto& x, auto& y) { return x - y; });
          },
          nb::arg("other").none())
      .def(
          "__imul__",
          [](nb::handle s, nb::handle b) {
            return inplace(s, b, [](auto& x, auto& y) { return x * y; });
          },
          nb::arg("other").none())
      .def(
          "__itruediv__",
          [](nb::handle s, nb::handle b) {
            return inplace(s, b, [](auto& x, auto& y) { return x / y; });
          },
          nb::arg("other").none())
      .def("add_",
           [](nb::handle s, nb::handle b) {
             return inplace(s, b, [](auto& x, auto& y) { return x + y; });
           })
      .def("sub_",
           [](nb::handle s, nb::handle b) {
             return inplace(s, b, [](auto& x, auto& y) { return x - y; });
           })
      .def("mul_",
           [](nb::handle s, nb::handle b) {
             return inplace(s, b, [](auto& x, auto& y) { return x * y; });
           })
      .def("div_",
           [](nb::handle s, nb::handle b) {
             return inplace(s, b, [](auto& x, auto& y) { return x / y; });
           })
      .def("__hash__", [](T t) { return reinterpret_cast<intptr_t>(t.impl().get()); })
      // the layout methods a model calls per layer, with torch's argument forms
      .def("reshape", [](T t, nb::args shape) { return reshape(t, shape_arg(shape, "reshape")); })
      .def("view", [](T t, nb::args shape) { return reshape(t, shape_arg(shape, "view")); })
      .def(
          "permute",
          [](T t, nb::args dims) { return permute(t, dims_of(shape_arg_handle(dims), "permute")); })
      .def(
          "transpose", [](T t, int d0, int d1) { return transpose(t, d0, d1); }, nb::arg("dim0"),
          nb::arg("dim1"))
      .def(
          "unsqueeze", [](T t, int d) { return unsqueeze(t, d); }, nb::arg("dim"));

  // ---- functions over tensors (the methods and lazytrace.* functions wrap these)
  m.def("from_dlpack", &from_array, nb::arg("x"), nb::arg("copy") = false,
        "A tensor over the memory of any CPU DLPack producer or buffer (no copy where it is "
        "contiguous); a copy where it is not.");
  m.def("scalar", [](nb::handle v, DType d) {
    Scalar s(0.0);
    if (!scalar_of(v, s)) throw nb::type_error(("expected a number, got " + kind_of(v)).c_str());
    return scalar(s, d);
  });
  m.def("zeros", [](nb::handle shape, DType d) { return zeros(shape_of(shape, "zeros"), d); });
  m.def("ones", [](nb::handle shape, DType d) { return ones(shape_of(shape, "ones"), d); });
  m.def("full", [](nb::handle shape, nb::handle v, DType d) {
    Scalar s(0.0);
    if (!scalar_of(v, s))
      throw nb::type_error(("[full] fill_value must be a number, got " + kind_of(v)).c_str());
    return full(shape_of(shape, "full"), s, d);
  });
  m.def("arange", [](double start, double stop, double step, DType d) {
    return arange(start, stop, step, d);
  });
  m.def("randn", [](nb::handle shape, DType d) { return randn(shape_of(shape, "randn"), d); });
  m.def("rand", [](nb::handle shape, DType d) { return rand(shape_of(shape, "rand"), d); });
  m.def("manual_seed", &manual_seed);
  m.def("rand_rows", [](nb::handle shape, int64_t first, int64_t total, DType d) {
    return rand_rows(shape_of(shape, "rand_rows"), first, total, d);
  });
  m.def("batch_rows", [] {
    const BatchRows r = batch_rows();
    return nb::make_tuple(r.first, r.count, r.total);
  });
  m.def("set_batch_rows", [](int64_t first, int64_t count, int64_t total) {
    set_batch_rows({.first = first, .count = count, .total = total});
  });

#define LT_UNARY_FN(name) m.def(#name, [](T t) { return name(t); });
  LT_UNARY_FN(neg)
  LT_UNARY_FN(exp)
  LT_UNARY_FN(log)
  LT_UNARY_FN(log1p)
  LT_UNARY_FN(sin)
  LT_UNARY_FN(cos)
  LT_UNARY_FN(tanh)
  LT_UNARY_FN(sigmoid)
  LT_UNARY_FN(relu)
  LT_UNARY_FN(gelu)
  LT_UNARY_FN(silu)
  LT_UNARY_FN(sqrt)
  LT_UNARY_FN(rsqrt)
  LT_UNARY_FN(abs)
  LT_UNARY_FN(erf)
  LT_UNARY_FN(clone)
#undef LT_UNARY_FN

#define LT_BINARY_FN(name)                                                                   \
  m.def(#name, [](nb::handle a, nb::handle b) {                                              \
    if (!is_tensor(a) && is_tensor(b)) {                                                     \
      Scalar s(0.0);                                                                         \
      if (scalar_of(a, s)) return name(full_like_scalar(nb::cast<T>(b), s), nb::cast<T>(b)); \
    }                                                                                        \
    Tensor x = as_tensor(a, #name);                                                          \
    Scalar s(0.0);                                                                           \
    if (!is_tensor(b) && scalar_of(b, s)) return name(x, full_like_scalar(x, s));            \
    return name(x, as_tensor(b, #name));                                                     \
  });
  LT_BINARY_FN(add)
  LT_BINARY_FN(sub)
  LT_BINARY_FN(mul)
  LT_BINARY_FN(div)
  LT_BINARY_FN(maximum)
  LT_BINARY_FN(minimum)
  LT_BINARY_FN(atan2)
  LT_BINARY_FN(floor_divide)
  LT_BINARY_FN(remainder)
  LT_BINARY_FN(eq)
  LT_BINARY_FN(ne)
  LT_BINARY_FN(lt)
  LT_BINARY_FN(le)
  LT_BINARY_FN(gt)
  LT_BINARY_FN(ge)
#undef LT_BINARY_FN
  m.def("pow", [](nb::handle a, nb::handle b) -> Tensor {
    Scalar s(0.0);
    if (is_tensor(a) && !is_tensor(b) && scalar_of(b, s)) return pow(nb::cast<T>(a), s);
    if (!is_tensor(a) && is_tensor(b) && scalar_of(a, s)) return pow(s, nb::cast<T>(b));
    return pow(as_tensor(a, "pow"), as_tensor(b, "pow"));
  });
  m.def("matmul", [](T a, T b) { return matmul(a, b); });
  m.def("where", [](T c, nb::handle a, nb::handle b) -> Tensor {
    Scalar s(0.0);
    const bool ta = is_tensor(a), tb = is_tensor(b);
    if (ta && !tb && scalar_of(b, s)) return where(c, nb::cast<T>(a), s);
    if (!ta && tb && scalar_of(a, s)) return where(c, s, nb::cast<T>(b));
    return where(c, as_tensor(a, "where"), as_tensor(b, "where"));
  });
  m.def("astype", [](T t, DType d) { return astype(t, d); });
  m.def(
      "sum",
      [](T t, nb::handle dims, bool keepdim) {
        return dims.is_none() ? (keepdim ? sum(t, dims_all(t), true) : sum(t))
                              : sum(t, dims_of(dims, "sum"), keepdim);
      },
      nb::arg("t"), nb::arg("dims").none() = nb::none(), nb::arg("keepdim") = false);
  m.def(
      "mean",
      [](T t, nb::handle dims, bool keepdim) {
        return dims.is_none() ? (keepdim ? mean(t, dims_all(t), true) : mean(t))
                              : mean(t, dims_of(dims, "mean"), keepdim);
      },
      nb::arg("t"), nb::arg("dims").none() = nb::none(), nb::arg("keepdim") = false);
  m.def(
      "amax",
      [](T t, nb::handle dims, bool keepdim) {
        return dims.is_none() ? (keepdim ? amax(t, dims_all(t), true) : amax(t))
                              : amax(t, dims_of(dims, "amax"), keepdim);
      },
      nb::arg("t"), nb::arg("dims").none() = nb::none(), nb::arg("keepdim") = false);
  m.def("softmax", [](T t, int dim) { return softmax(t, dim); });
  m.def("log_softmax", [](T t, int dim) { return log_softmax(t, dim); });
  m.def("reshape", [](T t, nb::handle shape) { return reshape(t, shape_of(shape, "reshape")); });
  m.def("transpose", [](T t, int d0, int d1) { return transpose(t, d0, d1); });
  m.def("permute", [](T t, nb::handle dims) { return permute(t, dims_of(dims, "permute")); });
  m.def("broadcast_to",
        [](T t, nb::handle shape) { return broadcast_to(t, shape_of(shape, "broadcast_to")); });
  m.def("slice", [](T t, int dim, int64_t start, int64_t stop, int64_t step) {
    return slice(t, dim, start, stop, step);
  });
  m.def("select", [](T t, int dim, int64_t index) { return select(t, dim, index); });
  m.def("unsqueeze", [](T t, int dim) { return unsqueeze(t, dim); });
  m.def("squeeze", [](T t, int dim) { return squeeze(t, dim); });
  m.def("concat", [](const std::vector<Tensor>& ts, int dim) { return concat(ts, dim); });
  m.def("stack", [](const std::vector<Tensor>& ts, int dim) { return stack(ts, dim); });
  m.def("index_select", [](T t, int dim, T index) { return index_select(t, dim, index); });
  m.def("index_add",
        [](T t, int dim, T index, T source) { return index_add(t, dim, index, source); });
  auto reduction = [](const std::string& r, const char* op) {
    if (r == "mean") return nn::Reduction::Mean;
    if (r == "sum") return nn::Reduction::Sum;
    if (r == "none") return nn::Reduction::None;
    fail(op, "reduction must be 'mean', 'sum' or 'none', got '", r, "'.");
  };
  m.def(
      "cross_entropy",
      [=](T logits, T targets, int64_t ignore_index, const std::string& r) {
        return nn::cross_entropy(logits, targets, ignore_index, reduction(r, "cross_entropy"));
      },
      nb::arg("logits"), nb::arg("targets"), nb::arg("ignore_index") = -100,
      nb::arg("reduction") = "mean");
  m.def(
      "nll_loss",
      [=](T log_probs, T targets, int64_t ignore_index, const std::string& r) {
        return nn::nll_loss(log_probs, targets, ignore_index, reduction(r, "nll_loss"));
      },
      nb::arg("log_probs"), nb::arg("targets"), nb::arg("ignore_index") = -100,
      nb::arg("reduction") = "mean");
  m.def("mse_loss", [](T a, T b) { return nn::mse_loss(a, b); });
}

}  // namespace lazytrace::python
