// python/bind_selective_scan.cpp — Python bindings of the selective_scan op (placeholder until the op lands).
#include "bind_common.hpp"

namespace sixfold::python {

void bind_selective_scan(nb::module_&) {}

}  // namespace sixfold::python
