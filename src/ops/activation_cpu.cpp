// CPU backend of the activations: rows over all cores, each row converted into per-thread f32
// buffers (L1-resident), transformed, converted and written once.
#include <omp.h>

#include <cmath>
#include <vector>

#include "activation_entries.hpp"
#include "rows_cpu.hpp"
#include "sixfold/runtime/vec_math.hpp"

namespace sixfold::detail {

void activation_cpu(const ActivationArgs& a) {
  const std::int64_t n = a.x.n;
  const std::size_t es = std::size_t(dtype_bits(a.dtype) / 8);
  std::vector<float> bias;
  if (a.bias) {
    bias.resize(std::size_t(n));
    load_row(a.dtype, a.bias, bias.data(), n);
  }
  const float* bp = a.bias ? bias.data() : nullptr;
  const bool parallel = a.x.rows > 1 && a.x.rows * n >= (1 << 15);
#pragma omp parallel if (parallel)
  {
    std::vector<float> u(static_cast<std::size_t>(n)), g;
    if (a.kind == ActivationKind::silu_gate) g.resize(std::size_t(n));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < a.x.rows; ++r) {
      load_row(a.dtype, static_cast<const char*>(a.x.data) + std::size_t(r * a.x.row_stride) * es, u.data(), n);
      switch (a.kind) {
        case ActivationKind::gelu_erf:
          for (std::int64_t i = 0; i < n; ++i) {
            const float v = bp ? u[i] + bp[i] : u[i];
            u[i] = 0.5f * v * (1.0f + std::erf(v * ActivationMath::kSqrtHalf));
          }
          break;
        case ActivationKind::gelu_tanh:
          for (std::int64_t i = 0; i < n; ++i) {  // tanh(t) = 1 − 2 / (exp(2t) + 1), vectorizable
            const float v = bp ? u[i] + bp[i] : u[i];
            const float t = ActivationMath::kSqrt2OverPi * (v + 0.044715f * v * v * v);
            u[i] = 0.5f * v * (2.0f - 2.0f / (exp_f32(2.0f * t) + 1.0f));
          }
          break;
        case ActivationKind::silu_gate:
          load_row(a.dtype, static_cast<const char*>(a.b.data) + std::size_t(r * a.b.row_stride) * es, g.data(), n);
          for (std::int64_t i = 0; i < n; ++i) u[i] = u[i] / (1.0f + exp_f32(-u[i])) * g[i];
          break;
      }
      store_row(a.dtype, u.data(), static_cast<char*>(a.out.data) + std::size_t(r * a.out.row_stride) * es, n);
    }
  }
}

}  // namespace sixfold::detail
