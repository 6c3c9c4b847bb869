// call(address, tensor, ...): run the C++ kernel at `address` on the tensors' data pointers.
//
// A generated kernel is `extern "C" void kernel(void*, ..., void*)`, one pointer per buffer. Through
// ctypes each call converts every argument (and Python reads each `data_ptr()` first), microseconds
// per kernel; here the pointers are read from the tensors directly and the kernel is called through
// a function pointer of its arity. The GIL is released while it runs, as ctypes does.
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>
#include <utility>

namespace {

constexpr size_t kMaxArity = 64;

using Pointers = std::array<void*, kMaxArity>;
using Caller = void (*)(void*, const Pointers&);

template <size_t>
using Pointer = void*;

template <size_t... I>
void call_with(void* address, const Pointers& p, std::index_sequence<I...>) {
  reinterpret_cast<void (*)(Pointer<I>...)>(address)(p[I]...);
}

template <size_t N>
void call_arity(void* address, const Pointers& p) {
  call_with(address, p, std::make_index_sequence<N>{});
}

template <size_t... N>
constexpr std::array<Caller, sizeof...(N)> callers(std::index_sequence<N...>) {
  return {&call_arity<N>...};
}

constexpr auto kCallers = callers(std::make_index_sequence<kMaxArity + 1>{});

PyObject* call(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs < 1 || static_cast<size_t>(nargs - 1) > kMaxArity) {
    PyErr_Format(PyExc_TypeError, "call(address, *tensors) takes an address and at most %zu tensors", kMaxArity);
    return nullptr;
  }
  void* address = PyLong_AsVoidPtr(args[0]);
  if (address == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "call: the kernel's address is null");
    return nullptr;
  }
  Pointers pointers{};
  const size_t arity = static_cast<size_t>(nargs - 1);
  try {
    for (size_t i = 0; i < arity; ++i) {
      PyObject* object = args[i + 1];
      if (!THPVariable_Check(object)) {
        PyErr_Format(PyExc_TypeError, "call: argument %zu is a %s, not a tensor", i + 1, Py_TYPE(object)->tp_name);
        return nullptr;
      }
      pointers[i] = THPVariable_Unpack(object).data_ptr();
    }
  } catch (const std::exception& error) {
    PyErr_SetString(PyExc_RuntimeError, error.what());
    return nullptr;
  }
  Py_BEGIN_ALLOW_THREADS
  kCallers[arity](address, pointers);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

PyObject* max_arity(PyObject*, PyObject*) { return PyLong_FromSize_t(kMaxArity); }

PyMethodDef methods[] = {
    {"call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(call)), METH_FASTCALL,
     "call(address, *tensors): the kernel at address on the tensors' data pointers"},
    {"max_arity", max_arity, METH_NOARGS, "the most tensors one call takes"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "torchsmith_kernel_calls", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit_torchsmith_kernel_calls() { return PyModule_Create(&module_def); }
