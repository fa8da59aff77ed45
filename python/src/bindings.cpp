// File: python/src/bindings.cpp
//
// frameshard._C: the units under python/src are the only ones that include
// pybind11 (bind_config, bind_plan, bind_runtime; bindings.h). It exposes the
// C++ library to the pure-Python layer (python/frameshard/*.py), which adds the
// type hints, the dataclasses and the docstrings users see:
//
//   _C.build_info()                          version, git revision, torch...
//   _C.fit_quadratic(samples), _C.calibration_text(a, b, c, comment)
//   _C.make_config(overrides, cp_size)       validated config fields (dict)
//   _C.parse_config(yaml_text, source)       (cp_size, fields) of a YAML text
//   _C.plan(grid_thw, overrides, cp_size, merge, temporal, tower_dims)
//   _C.cost_model(cost_alpha, tower_dims)    the cost model of a tower
//   _C.config_fields()                       the schema's frame_sharding keys
//   _C.chunk_positions(seq_len, cp_size, rank, split), _C.padded_length(...)
//   _C.all_gather_rows(local, counts, group, timeout_ms)     collective
//   _C.agree(fn, names, values, group, timeout_ms)           collective
//   _C.encode(tower, pixel_values, grid_thw, group, ...)     collective
//   _C.workload(name, seed, scale)           a preset's or file's grid
//
// Tensors and torch.distributed ProcessGroups cross with torch's own pybind11
// type casters (torch/csrc/utils/pybind.h): the extension is compiled with
// torch's bundled pybind11 so both share one pybind11 internals record, and
// `import torch` must come first (frameshard/__init__.py does it).
//
// GIL: released during every collective. encode calls the Python tower back
// from C++, so the tower callback re-acquires it; the gather's backward runs
// inside torch's autograd engine, which releases the GIL itself.
//
// Errors: frameshard::Error and c10::Error leave as frameshard.FrameshardError
// (a ValueError and a RuntimeError) with the C++ message (c10's backtrace
// stripped); an exception raised by the Python tower keeps its text inside
// the message every rank raises.
#include "bindings.h"

#include <frameshard/error.h>

#include <c10/util/Exception.h>

#include <exception>

namespace py = pybind11;

namespace frameshard {
namespace python {
namespace {

/// frameshard.FrameshardError, created at import (module attribute).
PyObject* g_error_type = nullptr;

void translate_errors(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (const Error& e) {
    PyErr_SetString(g_error_type, e.what());
  } catch (const c10::Error& e) {
    PyErr_SetString(g_error_type, e.what_without_backtrace());
  }
}

}  // namespace
}  // namespace python
}  // namespace frameshard

PYBIND11_MODULE(_C, m) {
  namespace fp = frameshard::python;
  m.doc() = "frameshard C++ core (use the `frameshard` package instead)";
  // One class that is both a ValueError (a caller mistake) and a
  // RuntimeError (what torch raises for c10::Error).
  py::object error = py::reinterpret_borrow<py::object>(
      reinterpret_cast<PyObject*>(&PyType_Type))(
      "FrameshardError",
      py::make_tuple(
          py::handle(PyExc_ValueError), py::handle(PyExc_RuntimeError)),
      py::dict(
          py::arg("__module__") = "frameshard",
          py::arg("__doc__") =
              "An error raised by frameshard's C++ core, with its message."));
  fp::g_error_type = error.release().ptr();  // lives as long as the process
  m.attr("FrameshardError") = py::handle(fp::g_error_type);
  py::register_local_exception_translator(&fp::translate_errors);
  m.attr("torch_version") = FRAMESHARD_TORCH_VERSION;
  fp::init_build_info(m);
  fp::init_calibrate(m);
  fp::init_config(m);
  fp::init_plan(m);
  fp::init_online(m);
  fp::init_runtime(m);
  fp::init_report(m);
}
