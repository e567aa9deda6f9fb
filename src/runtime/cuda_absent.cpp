// The CUDA hooks of a CPU-only build: every request for device memory is an error that says so.
#include "cuda_hooks.hpp"
#include "../ops/activation_entries.hpp"
#include "../ops/norm_entries.hpp"
#include "../parallel/entries.hpp"
#include "sixfold/runtime/ceilings.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold::detail {

bool cuda_backend_built() { return false; }

std::shared_ptr<void> cuda_allocate(int, std::int64_t) {
  throw_error("sixfold", "this build has no CUDA backend (nvcc was not found at configure time)");
}

void cuda_copy(void*, const void*, std::int64_t) {
  throw_error("sixfold", "this build has no CUDA backend (nvcc was not found at configure time)");
}

bool cuda_usable() { return false; }

Device cuda_device_of_pointer(const void*) { return Device::cpu(); }

std::string cuda_device_name(int) { return {}; }

void cuda_synchronize(int) {}

namespace {
[[noreturn]] void no_backend(const char* where) {
  throw_error(where, "tensors are on a CUDA device but this build has no CUDA backend");
}
}  // namespace

void cuda_reduce(const TensorView&, const TensorView&, MonoidOp, Stream) {
  no_backend("sixfold::reduce");
}
void cuda_scan(bool, const TensorView&, const TensorView&, MonoidOp, Stream) {
  no_backend("sixfold::inclusive_scan");
}
void cuda_segmented_reduce(const TensorView&, const TensorView&, const TensorView&, MonoidOp,
                           Stream) {
  no_backend("sixfold::segmented_reduce");
}
void norm_cuda(const NormArgs&, int, Stream) { no_backend("sixfold norm op"); }
void norm_backward_cuda(const NormBackwardArgs&, int, Stream) { no_backend("sixfold norm backward"); }
void activation_cuda(const ActivationArgs&, int, Stream) { no_backend("sixfold activation op"); }

}  // namespace sixfold::detail

namespace sixfold {
GpuCeilings measure_gpu_ceilings(int) {
  throw_error("sixfold::measure_gpu_ceilings", "this build has no CUDA backend");
}
}  // namespace sixfold
