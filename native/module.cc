// broker_core._native: the Python binding of front::Front (front.h).
//
// drain() turns every waiting event into a tuple with the GIL taken once;
// submit() takes a whole list of answers and hands them to gRPC with the GIL
// released.
#include <Python.h>
#include <absl/synchronization/mutex.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "front.h"

namespace py = pybind11;

namespace {

PyObject* Str(const std::string& s) {
  return PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
}

PyObject* Bytes(const std::string& s) {
  return PyBytes_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
}

bool EndsWithBin(const std::string& k) {
  return k.size() >= 4 && k.compare(k.size() - 4, 4, "-bin") == 0;
}

// (kind, id, method, metadata, peer, timeout, data)
PyObject* EventTuple(const front::Event& e) {
  PyObject* t = PyTuple_New(7);
  PyTuple_SET_ITEM(t, 0, PyLong_FromLong(e.kind));
  PyTuple_SET_ITEM(t, 1, PyLong_FromUnsignedLongLong(e.id));
  PyTuple_SET_ITEM(t, 2, PyLong_FromLong(e.method));
  if (e.kind == front::kNewCall) {
    PyObject* md = PyTuple_New(static_cast<Py_ssize_t>(e.metadata.size()));
    for (size_t i = 0; i < e.metadata.size(); i++) {
      const auto& kv = e.metadata[i];
      PyObject* pair = PyTuple_New(2);
      PyTuple_SET_ITEM(pair, 0, Str(kv.first));
      PyTuple_SET_ITEM(pair, 1, EndsWithBin(kv.first) ? Bytes(kv.second) : Str(kv.second));
      PyTuple_SET_ITEM(md, static_cast<Py_ssize_t>(i), pair);
    }
    PyTuple_SET_ITEM(t, 3, md);
    PyTuple_SET_ITEM(t, 4, Str(e.peer));
    if (e.timeout < 0) {
      Py_INCREF(Py_None);
      PyTuple_SET_ITEM(t, 5, Py_None);
    } else {
      PyTuple_SET_ITEM(t, 5, PyFloat_FromDouble(e.timeout));
    }
  } else {
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(t, 3, Py_None);
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(t, 4, Py_None);
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(t, 5, Py_None);
  }
  if (e.kind == front::kNewCall || e.kind == front::kMessage) {
    PyTuple_SET_ITEM(t, 6, Bytes(e.data));
  } else {
    Py_INCREF(Py_None);
    PyTuple_SET_ITEM(t, 6, Py_None);
  }
  return t;
}

py::list Drain(front::Front& f) {
  std::vector<front::Event> events;
  {
    py::gil_scoped_release release;
    f.Drain(&events);
  }
  PyObject* out = PyList_New(static_cast<Py_ssize_t>(events.size()));
  for (size_t i = 0; i < events.size(); i++)
    PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), EventTuple(events[i]));
  return py::reinterpret_steal<py::list>(out);
}

// ops: a list of (id, kind, data: bytes | None, code, message)
void Submit(front::Front& f, const py::list& ops) {
  std::vector<front::Op> out;
  out.reserve(ops.size());
  for (auto item : ops) {
    PyObject* t = item.ptr();
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 5)
      throw py::type_error("an op is (id, kind, data, code, message)");
    front::Op op;
    op.id = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(t, 0));
    op.kind = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(t, 1)));
    PyObject* data = PyTuple_GET_ITEM(t, 2);
    if (data != Py_None) {
      char* buf;
      Py_ssize_t n;
      if (PyBytes_AsStringAndSize(data, &buf, &n) < 0) throw py::error_already_set();
      op.has_data = true;
      op.data.assign(buf, static_cast<size_t>(n));
    }
    op.code = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(t, 3)));
    PyObject* msg = PyTuple_GET_ITEM(t, 4);
    if (msg != Py_None) {
      Py_ssize_t n;
      const char* s = PyUnicode_AsUTF8AndSize(msg, &n);
      if (s == nullptr) throw py::error_already_set();
      op.message.assign(s, static_cast<size_t>(n));
    }
    if (PyErr_Occurred()) throw py::error_already_set();
    out.push_back(std::move(op));
  }
  py::gil_scoped_release release;
  f.Submit(std::move(out));
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "The native gRPC front of the RocketMQ endpoint (native/front.h).";
  // Debian's abseil checks every mutex acquisition for lock-order cycles
  // (GraphCycles::GetId was 1.2% of the endpoint's CPU under load): gRPC's
  // own tests run it, a server does not need it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  m.attr("NEW_CALL") = static_cast<int>(front::kNewCall);
  m.attr("MESSAGE") = static_cast<int>(front::kMessage);
  m.attr("HALF_CLOSE") = static_cast<int>(front::kHalfClose);
  m.attr("CANCELLED") = static_cast<int>(front::kCancelled);
  m.attr("WRITE") = static_cast<int>(front::kWrite);
  m.attr("FINISH") = static_cast<int>(front::kFinish);
  py::class_<front::Front>(m, "Front")
      .def(py::init<std::vector<std::string>, std::vector<bool>, int, bool, int>(),
           py::arg("methods"), py::arg("bidi"), py::arg("max_message"),
           py::arg("reuseport") = false, py::arg("coalesce_us") = 0)
      .def("add_port", &front::Front::AddPort, py::arg("address"),
           py::arg("key_pem") = "", py::arg("cert_pem") = "")
      .def("start", &front::Front::Start, py::arg("threads") = 1,
           py::call_guard<py::gil_scoped_release>())
      .def("bound_ports", &front::Front::BoundPorts)
      .def("shutdown", &front::Front::Shutdown, py::arg("grace") = 0.0,
           py::call_guard<py::gil_scoped_release>())
      .def("fileno", &front::Front::fd)
      .def("poll", &front::Front::Poll, py::arg("timeout") = -1.0,
           py::call_guard<py::gil_scoped_release>())
      .def("poke", &front::Front::Poke, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("polling", &front::Front::polling)
      .def("drain", &Drain)
      .def("submit", &Submit)
      .def("live_calls", &front::Front::live_calls)
      .def("stats", [](front::Front& f) {
        auto s = f.stats();
        py::dict d;
        d["calls"] = s.calls;
        d["events"] = s.events;
        d["drains"] = s.drains;
        d["ops"] = s.ops;
        d["submits"] = s.submits;
        return d;
      });
}
