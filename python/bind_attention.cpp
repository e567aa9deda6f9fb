// python/bind_attention.cpp — Python bindings of the attention op (placeholder until the op lands).
#include "bind_common.hpp"

namespace sixfold::python {

void bind_attention(nb::module_&) {}

}  // namespace sixfold::python
