// Internal: what the runtime needs from the CUDA backend. Defined in src/cuda/runtime.cu when
// the backend is built, and in src/runtime/cuda_absent.cpp (which throws) when it is not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "sixfold/runtime/tensor.hpp"

namespace sixfold::detail {

bool cuda_backend_built();
std::shared_ptr<void> cuda_allocate(int device, std::int64_t bytes);
void cuda_copy(void* dst, const void* src, std::int64_t bytes);  // cudaMemcpyDefault, synchronous
bool cuda_usable();
Device cuda_device_of_pointer(const void* p);
std::string cuda_device_name(int device);
void cuda_synchronize(int device);

}  // namespace sixfold::detail
