// Guard checks for torchsmith's capture, each one call where the Python form reads several attributes:
// - `check(tensor, spec)` says whether a tensor has the class, dtype, device, requires_grad, sizes and
//   strides that `make_spec` recorded, reading them from the tensor itself;
// - `without_hooks(module)` says whether a module's four hook tables are empty and its instance does
//   not replace `forward`, reading its instance dict once;
// - `same_function(fn, type, code, defaults, kwdefaults, globals)` says whether a function has that
//   class, code and globals (identity) and equal defaults, reading the function object's fields.
// Built and loaded by native_guards.py.
#include <Python.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <new>
#include <vector>

namespace {

struct Spec {
  PyObject_HEAD
  PyObject* type;  // the tensor's exact class (torch.Tensor or torch.nn.Parameter)
  at::ScalarType dtype;
  c10::Device device;
  bool requires_grad;
  std::vector<int64_t>* sizes;
  std::vector<int64_t>* strides;
};

PyTypeObject SpecType = {PyVarObject_HEAD_INIT(nullptr, 0) "torchsmith_guard_checks.Spec"};

void spec_dealloc(PyObject* self) {
  Spec* spec = reinterpret_cast<Spec*>(self);
  Py_XDECREF(spec->type);
  delete spec->sizes;
  delete spec->strides;
  Py_TYPE(self)->tp_free(self);
}

bool read_ints(PyObject* sequence, std::vector<int64_t>* out) {
  PyObject* items = PySequence_Fast(sequence, "sizes and strides must be sequences of ints");
  if (items == nullptr) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long value = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(items, i));
    if (value == -1 && PyErr_Occurred()) {
      Py_DECREF(items);
      return false;
    }
    out->push_back(value);
  }
  Py_DECREF(items);
  return true;
}

// make_spec(type, dtype, device, requires_grad, sizes, strides) -> Spec
PyObject* make_spec(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6 || !PyType_Check(args[0]) || !THPDtype_Check(args[1]) || !THPDevice_Check(args[2]) ||
      !PyBool_Check(args[3])) {
    PyErr_SetString(PyExc_TypeError,
                    "make_spec(type, dtype, device, requires_grad: bool, sizes, strides) expected");
    return nullptr;
  }
  Spec* spec = PyObject_New(Spec, &SpecType);
  if (spec == nullptr) return nullptr;
  spec->type = nullptr;
  spec->sizes = new std::vector<int64_t>();
  spec->strides = new std::vector<int64_t>();
  new (&spec->device) c10::Device(reinterpret_cast<THPDevice*>(args[2])->device);
  spec->dtype = reinterpret_cast<THPDtype*>(args[1])->scalar_type;
  spec->requires_grad = args[3] == Py_True;
  if (!read_ints(args[4], spec->sizes) || !read_ints(args[5], spec->strides) ||
      spec->sizes->size() != spec->strides->size()) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "sizes and strides differ in length");
    Py_DECREF(spec);
    return nullptr;
  }
  Py_INCREF(args[0]);
  spec->type = args[0];
  return reinterpret_cast<PyObject*>(spec);
}

bool matches(PyObject* object, const Spec* spec) {
  // The exact class first: only then is `object` a tensor whose attributes are the C++ ones.
  if (reinterpret_cast<PyObject*>(Py_TYPE(object)) != spec->type) return false;
  const at::Tensor& tensor = THPVariable_Unpack(object);
  if (!tensor.defined() || tensor.scalar_type() != spec->dtype || tensor.device() != spec->device ||
      tensor.requires_grad() != spec->requires_grad) {
    return false;
  }
  const c10::IntArrayRef sizes = tensor.sizes();
  const c10::IntArrayRef strides = tensor.strides();
  const size_t dim = spec->sizes->size();
  if (sizes.size() != dim || strides.size() != dim) return false;
  for (size_t d = 0; d < dim; ++d) {
    if (sizes[d] != (*spec->sizes)[d] || strides[d] != (*spec->strides)[d]) return false;
  }
  return true;
}

// check(tensor, spec) -> bool; False where reading the tensor fails (as the Python guard's except).
PyObject* check(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || Py_TYPE(args[1]) != &SpecType) {
    PyErr_SetString(PyExc_TypeError, "check(tensor, spec) expected");
    return nullptr;
  }
  bool ok = false;
  try {
    ok = matches(args[0], reinterpret_cast<const Spec*>(args[1]));
  } catch (...) {
    ok = false;
  }
  if (ok) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

// The instance-dict keys `without_hooks` reads, interned once.
PyObject* kHookTables[4];
PyObject* kForward;

// without_hooks(module) -> bool: module.__dict__'s hook tables all empty and no 'forward' in it; False
// where a table is missing or reading the dict fails (as the Python guard's except).
PyObject* without_hooks(PyObject*, PyObject* module) {
  PyObject* dict = PyObject_GenericGetDict(module, nullptr);
  if (dict == nullptr) {
    PyErr_Clear();
    Py_RETURN_FALSE;
  }
  bool ok = PyDict_Check(dict);
  for (PyObject* name : kHookTables) {
    if (!ok) break;
    PyObject* table = PyDict_GetItemWithError(dict, name);  // borrowed
    const int truth = table == nullptr ? -1 : PyObject_IsTrue(table);
    ok = truth == 0;
  }
  if (ok) ok = PyDict_Contains(dict, kForward) == 0;
  Py_DECREF(dict);
  PyErr_Clear();
  if (ok) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

// Python's `fn.__defaults__` / `fn.__kwdefaults__`: None where the function has none.
PyObject* or_none(PyObject* value) { return value == nullptr ? Py_None : value; }

// same_function(fn, type, code, defaults, kwdefaults, globals) -> bool: `type(fn) is type and
// fn.__code__ is code and fn.__defaults__ == defaults and fn.__kwdefaults__ == kwdefaults and
// fn.__globals__ is globals`; False where a comparison raises (as the Python guard's except).
PyObject* same_function(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "same_function takes fn, type, code, defaults, kwdefaults, globals");
    return nullptr;
  }
  PyObject* fn = args[0];
  if (reinterpret_cast<PyObject*>(Py_TYPE(fn)) != args[1] || !PyFunction_Check(fn)) Py_RETURN_FALSE;
  if (PyFunction_GetCode(fn) != args[2] || PyFunction_GetGlobals(fn) != args[5]) Py_RETURN_FALSE;
  const int defaults = PyObject_RichCompareBool(or_none(PyFunction_GetDefaults(fn)), args[3], Py_EQ);
  const int kwdefaults =
      defaults == 1 ? PyObject_RichCompareBool(or_none(PyFunction_GetKwDefaults(fn)), args[4], Py_EQ) : 0;
  PyErr_Clear();
  if (defaults == 1 && kwdefaults == 1) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

PyMethodDef methods[] = {
    {"without_hooks", without_hooks, METH_O, "without_hooks(module) -> bool"},
    {"same_function", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(same_function)), METH_FASTCALL,
     "same_function(fn, type, code, defaults, kwdefaults, globals) -> bool"},
    {"make_spec", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(make_spec)), METH_FASTCALL,
     "make_spec(type, dtype, device, requires_grad, sizes, strides)"},
    {"check", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(check)), METH_FASTCALL,
     "check(tensor, spec) -> bool"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "torchsmith_guard_checks", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_torchsmith_guard_checks() {
  SpecType.tp_basicsize = sizeof(Spec);
  SpecType.tp_dealloc = spec_dealloc;
  SpecType.tp_flags = Py_TPFLAGS_DEFAULT;
  SpecType.tp_doc = "What a tensor guard expects of one tensor.";
  if (PyType_Ready(&SpecType) < 0) return nullptr;
  const char* tables[4] = {"_forward_pre_hooks", "_forward_hooks", "_backward_hooks", "_backward_pre_hooks"};
  for (int i = 0; i < 4; ++i) {
    if ((kHookTables[i] = PyUnicode_InternFromString(tables[i])) == nullptr) return nullptr;
  }
  if ((kForward = PyUnicode_InternFromString("forward")) == nullptr) return nullptr;
  return PyModule_Create(&module_def);
}
