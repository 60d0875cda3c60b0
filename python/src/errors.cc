// tessera::Error -> tessera.Error. The exception classes live in Python
// (tessera/_errors.py: one subclass per ErrorCode, e.g. InvalidArgumentError is also a
// ValueError); the package registers them here at import, and the translator raises the class
// of the error's code with the C++ message unchanged (it already names the argument, its value
// and what was expected).
#include <array>
#include <string>

#include "bindings.h"
#include "tessera/core/error.h"

namespace nb = nanobind;

namespace tessera::python {

namespace {

struct CodeKey {
  ErrorCode code;
  const char* key;  // tessera.Error.code in Python
};
constexpr std::array<CodeKey, 9> kCodeKeys = {{
    {ErrorCode::kInvalidArgument, "invalid_argument"},
    {ErrorCode::kUnsupported, "unsupported"},
    {ErrorCode::kTimeout, "timeout"},
    {ErrorCode::kPeerFailure, "peer_failure"},
    {ErrorCode::kCuda, "cuda"},
    {ErrorCode::kNccl, "nccl"},
    {ErrorCode::kNvshmem, "nvshmem"},
    {ErrorCode::kSystem, "system"},
    {ErrorCode::kInternal, "internal"},
}};

// Strong references, kept for the life of the process (exception classes are never unloaded).
std::array<PyObject*, kCodeKeys.size()> g_classes{};

PyObject* class_for(ErrorCode code) {
  for (size_t i = 0; i < kCodeKeys.size(); ++i) {
    if (kCodeKeys[i].code == code && g_classes[i] != nullptr) return g_classes[i];
  }
  return PyExc_RuntimeError;  // before the package registered its classes
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    PyErr_SetString(class_for(e.code()), e.what());
  }
}

void register_classes(const nb::dict& classes) {
  for (size_t i = 0; i < kCodeKeys.size(); ++i) {
    const char* key = kCodeKeys[i].key;
    if (!classes.contains(key)) {
      throw nb::key_error(
          ("_register_error_classes: no class for code '" + std::string(key) + "'").c_str());
    }
    nb::object cls = classes[key];
    Py_XDECREF(g_classes[i]);
    g_classes[i] = cls.release().ptr();
  }
}

}  // namespace

void bind_errors(nb::module_& m) {
  nb::register_exception_translator(translate);
  m.def("_register_error_classes", register_classes, nb::arg("classes"),
        "Registers the Python class raised for each tessera::ErrorCode (a dict keyed by "
        "tessera.Error.code).");
  nb::list keys;
  for (const CodeKey& k : kCodeKeys) keys.append(k.key);
  m.attr("error_code_keys") = keys;
}

}  // namespace tessera::python
