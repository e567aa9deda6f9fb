// The reduce/scan bench workloads, shared by the CPU cases and the CUDA cases: how to draw an
// input element, the float64 monoid that serves as the reference, and how an element is
// flattened to doubles for the error measure.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "bench.hpp"
#include "sixfold/algebra/instances.hpp"

namespace sixfold::bench::scan_workloads {

using namespace sixfold::algebra;

// Sum of f32 values uniform in [−1, 1): commutative, vectorizable.
struct SumF32 {
  using M = Sum<float>;
  using M64 = Sum<double>;
  static constexpr int kWidth = 1;
  static constexpr const char* kName = "sum f32";
  static constexpr double kFlopsPerCombine = 1;
  static constexpr double kTolerance = 1e-4;  // vs the f64 prefix, relative to max |prefix|
  static float draw(std::mt19937_64& r) { return std::uniform_real_distribution<float>(-1, 1)(r); }
  static double up(float v) { return v; }
  static void flat(double v, double* o) { o[0] = v; }
};

// Affine maps x -> a·x + b with a in [0.5, 1), b in [−1, 1): the linear recurrence of a state-
// space model; non-commutative.
struct AffineF32 {
  using M = Affine<float>;
  using M64 = Affine<double>;
  static constexpr int kWidth = 2;
  static constexpr const char* kName = "affine f32";
  static constexpr double kFlopsPerCombine = 3;
  static constexpr double kTolerance = 1e-5;
  static AffineMap<float> draw(std::mt19937_64& r) {
    return {std::uniform_real_distribution<float>(0.5f, 1.0f)(r),
            std::uniform_real_distribution<float>(-1, 1)(r)};
  }
  static AffineMap<double> up(AffineMap<float> v) { return {v.a, v.b}; }
  static void flat(AffineMap<double> v, double* o) { o[0] = v.a; o[1] = v.b; }
};

template <class W>
using V = typename W::M::value_type;

// Random input sets, drawn in parallel blocks (fresh on every run of the tool).
template <class W>
std::vector<std::vector<V<W>>> draw_inputs(int slots, std::int64_t n) {
  std::vector<std::vector<V<W>>> sets(static_cast<std::size_t>(slots));
  const std::uint64_t seed = std::random_device{}();
  for (int s = 0; s < slots; ++s) {
    auto& x = sets[std::size_t(s)];
    x.resize(std::size_t(n));
    const std::int64_t blocks = (n + 65535) / 65536;
#pragma omp parallel for schedule(static)
    for (std::int64_t b = 0; b < blocks; ++b) {
      std::mt19937_64 r(seed ^ (std::uint64_t(s) << 48) ^ std::uint64_t(b) * 0x9e3779b97f4a7c15ull);
      for (std::int64_t i = b * 65536; i < std::min(n, (b + 1) * 65536); ++i) x[std::size_t(i)] = W::draw(r);
    }
  }
  return sets;
}

// The naive version: a sequential loop in float64 (scan when `scan`, else reduce). Writes the
// flattened results to `out` (n·kWidth doubles for a scan, kWidth for a reduce).
template <class W>
void reference(const std::vector<V<W>>& x, bool scan, double* out) {
  typename W::M64 m;
  auto acc = m.identity();
  for (std::size_t i = 0; i < x.size(); ++i) {
    acc = m.combine(acc, W::up(x[i]));
    if (scan) W::flat(acc, out + i * W::kWidth);
  }
  if (!scan) W::flat(acc, out);
}

template <class W>
double error_vs(const std::vector<double>& ref, const V<W>* out, std::int64_t count) {
  std::vector<double> flat(std::size_t(count) * W::kWidth);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) W::flat(W::up(out[i]), flat.data() + i * W::kWidth);
  return max_rel_error(ref.data(), flat.data(), std::int64_t(flat.size()));
}

template <class W>
Cost cost(std::int64_t n, bool scan) {
  const double bytes = double(n) * sizeof(V<W>) * (scan ? 2 : 1);
  return {W::kFlopsPerCombine * double(n), bytes, 0};
}

inline const char* property(bool commutative) {
  return commutative ? "associativity (+ commutativity: SIMD lanes)"
                     : "associativity (order kept: non-commutative)";
}

}  // namespace sixfold::bench::scan_workloads
