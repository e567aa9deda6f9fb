// python/bind_topk.cpp — Python bindings of the topk op (placeholder until the op lands).
#include "bind_common.hpp"

namespace sixfold::python {

void bind_topk(nb::module_&) {}

}  // namespace sixfold::python
