// dev/activation/ulp_probe.cpp — ulp distance of sixfold's 16-bit bias_gelu (both forms) and
// silu_gate (b = 1) from the correctly rounded float64 value, over every finite bf16 / f16 input
// with |u| < 12 (silu: |a| < 100). Build against a CPU
// libsixfold.a from the repository root:
//   g++ -O2 -std=c++20 -march=native -Iinclude -I. dev/activation/ulp_probe.cpp build-cpu/libsixfold.a -fopenmp
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#include "sixfold/ops/activation.hpp"
#include "sixfold/runtime/dtype.hpp"
#include "src/reference/activation_reference.hpp"
using namespace sixfold;
int main() {
  for (DType t : {DType::bf16, DType::f16})
    for (int form = 0; form < 3; ++form) {  // erf, tanh, silu
      std::vector<std::uint16_t> x, y;
      // every finite 16-bit value with |u| < 12
      for (unsigned b = 0; b < 65536; ++b) {
        const double v = t == DType::bf16 ? to_float(BFloat16{std::uint16_t(b)}) : to_float(Half{std::uint16_t(b)});
        if (std::isfinite(v) && std::fabs(v) < (form == 2 ? 100 : 12)) x.push_back(std::uint16_t(b));
      }
      const std::int64_t n = std::int64_t(x.size());
      y.assign(x.size(), 0);
      TensorView tx = TensorView::contiguous(x.data(), t, {n}), ty = TensorView::contiguous(y.data(), t, {n});
      std::vector<std::uint16_t> one(x.size(), t == DType::bf16 ? 0x3f80 : 0x3c00);
      if (form == 2) silu_gate(tx, TensorView::contiguous(one.data(), t, {n}), ty);
      else bias_gelu(tx, TensorView{}, ty, {form ? GeluForm::tanh : GeluForm::erf});
      long off1 = 0, off2 = 0; double worst = 0, wu = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double u = t == DType::bf16 ? to_float(BFloat16{x[i]}) : to_float(Half{x[i]});
        const double want = reference::activation(form == 2 ? ActivationKind::silu_gate : form ? ActivationKind::gelu_tanh : ActivationKind::gelu_erf, u, 1.0);
        const std::uint16_t wb = t == DType::bf16 ? to_bfloat16(float(want)).bits : to_half(float(want)).bits;
        // ulp distance in the sign-magnitude ordering
        auto ord = [](std::uint16_t b) { return (b & 0x8000) ? -int(b & 0x7fff) : int(b); };
        const int d = std::abs(ord(y[i]) - ord(wb));
        if (d >= 1) ++off1;
        if (d >= 2) { ++off2; }
        if (d > worst) worst = d, wu = u;
      }
      std::printf("%s %s: %ld values, off by 1+: %ld, 2+: %ld, worst %g ulp at u=%g\n", t == DType::bf16 ? "bf16" : "f16",
                  form == 2 ? "silu" : form ? "tanh" : "erf", long(n), off1, off2, worst, wu);
    }
}
