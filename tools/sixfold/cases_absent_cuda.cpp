// A CPU-only build of the tool: no GPU cases, and no event timer to call.
#include "bench.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold::bench {

double gpu_time_ms(const std::function<void()>&) {
  throw_error("sixfold bench", "GPU timing requested in a build without the CUDA backend");
}

GraphReplay::GraphReplay(const std::function<void(Stream, int)>&, int) {
  throw_error("sixfold bench", "CUDA graphs requested in a build without the CUDA backend");
}
GraphReplay::~GraphReplay() = default;
void GraphReplay::replay() const {}

void register_cuda_cases() {}

}  // namespace sixfold::bench
