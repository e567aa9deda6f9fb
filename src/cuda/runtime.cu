// The CUDA hooks of the runtime: device memory, copies and pointer queries.
#include <cuda_runtime.h>

#include <string>

#include "../runtime/cuda_hooks.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold::detail {

namespace {
void check(cudaError_t e, const char* where) {
  if (e != cudaSuccess) throw_error(where, std::string("CUDA error: ") + cudaGetErrorString(e));
}
}  // namespace

bool cuda_backend_built() { return true; }

std::shared_ptr<void> cuda_allocate(int device, std::int64_t bytes) {
  int previous = 0;
  check(cudaGetDevice(&previous), "sixfold::allocate");
  check(cudaSetDevice(device), "sixfold::allocate");
  void* p = nullptr;
  const cudaError_t e = bytes ? cudaMalloc(&p, std::size_t(bytes)) : cudaSuccess;
  cudaSetDevice(previous);
  check(e, "sixfold::allocate");
  return std::shared_ptr<void>(p, [](void* q) { if (q) cudaFree(q); });
}

void cuda_copy(void* dst, const void* src, std::int64_t bytes) {
  check(cudaMemcpy(dst, src, std::size_t(bytes), cudaMemcpyDefault), "sixfold::copy_bytes");
}

bool cuda_usable() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return n > 0;
}

Device cuda_device_of_pointer(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return Device::cpu();
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? Device::cuda(a.device)
                                                                          : Device::cpu();
}

void cuda_synchronize(int device) {
  int previous = 0;
  check(cudaGetDevice(&previous), "sixfold::synchronize");
  check(cudaSetDevice(device), "sixfold::synchronize");
  const cudaError_t e = cudaDeviceSynchronize();
  cudaSetDevice(previous);
  check(e, "sixfold::synchronize");
}

std::string cuda_device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return prop.name;
}

}  // namespace sixfold::detail
