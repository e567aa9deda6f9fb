// sixfold/parallel/cpu.hpp — reduce, scans and segmented reduce over any Monoid, on all cores.
//
//   reduce(x)            = x_0 · x_1 · … · x_{n−1}            (e for n = 0)
//   inclusive_scan(x)_i  = x_0 · … · x_i
//   exclusive_scan(x)_i  = e · x_0 · … · x_{i−1}
//   segmented_reduce     = reduce over [offsets[s], offsets[s+1]) for every segment s
//
// Associativity licenses the split: the input is cut into blocks, each block is folded where it
// lies, and block results are combined left to right. Operands are never reordered, so
// non-commutative monoids (Affine, matrix products) are correct. The scan streams the input in
// cache-sized superblocks: every thread first folds its block (reading DRAM into its L2), the
// threads agree on carries after one barrier, then each thread rescans its block out of L2 and
// writes it. DRAM sees each input byte read once and each output byte written once.
//
// Contracts: sizes are 64-bit (beyond 2^31 elements); in == out (in place) is allowed for the
// scans; any other overlap is undefined. Floating-point results depend on the thread count
// (the association order does), not on timing: the same machine gives the same bits.
// Subnormal results are flushed to zero while these algorithms run (the x86 FTZ bit, restored
// on return; inputs are not flushed, so comparisons such as Max see every value as it is).
// Without it a decaying product — the `a` of an Affine scan with |a| < 1 — sticks at the
// smallest subnormal, and every later multiply takes the slow microcode path: 44 ns instead of
// 3 ns per element on the Xeon we measure on. GPUs behave this way in their fast modes too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <omp.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "sixfold/algebra/instances.hpp"
#include "sixfold/algebra/monoid.hpp"
#include "sixfold/parallel/cpu_simd.hpp"

namespace sixfold::parallel::cpu {

using algebra::Monoid;

namespace detail {

// Sets flush-to-zero for this thread for its lifetime (see the file comment).
class FlushToZero {
 public:
#if defined(__SSE__)
  FlushToZero() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | _MM_FLUSH_ZERO_ON); }
  ~FlushToZero() { _mm_setcsr(saved_); }
 private:
  unsigned saved_;
#endif
};

// Below this many elements one thread does the work: a parallel region costs ~µs.
inline constexpr std::int64_t kSerialCutoff = std::int64_t(1) << 15;

// Elements per thread per superblock of the scan: 256 KiB of input, well inside a 1–2 MiB L2,
// so the second read of the block hits cache. (1e8 f32 on the 2-core Xeon: 64 KiB blocks were
// 6% slower from the extra barriers; 1 MiB blocks spilled to L3.)
template <class V> constexpr std::int64_t scan_block_elems() {
  return std::max<std::int64_t>(1024, (std::int64_t(256) << 10) / std::int64_t(sizeof(V)));
}

inline int threads_for(std::int64_t n) {
  if (n < kSerialCutoff) return 1;
  return int(std::min<std::int64_t>(omp_get_max_threads(), n / (kSerialCutoff / 2)));
}

// Sequential fold of lift(i) for i in [lo, hi), starting from acc.
template <Monoid M, class Lift>
typename M::value_type fold(const M& m, typename M::value_type acc, std::int64_t lo,
                            std::int64_t hi, const Lift& lift) {
  for (std::int64_t i = lo; i < hi; ++i) acc = m.combine(acc, lift(i));
  return acc;
}

// Generic monoids have a loop-carried dependency through combine (Affine: a multiply and an
// FMA, ~8 cycles). Folding kLanes contiguous stretches of a block in one interleaved loop keeps
// kLanes independent chains in flight; the stretches are combined left to right afterwards,
// so operand order is kept. (Affine f32, 2-core Xeon: 3.0 -> 1.1 ns per element and thread.)
inline constexpr int kLanes = 4;

template <Monoid M>
typename M::value_type fold_lanes(const M& m, const typename M::value_type* x, std::int64_t n) {
  using V = typename M::value_type;
  if (n < 64 * kLanes) return fold(m, m.identity(), 0, n, [x](std::int64_t i) { return x[i]; });
  const std::int64_t q = n / kLanes;
  V acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = m.identity();
  for (std::int64_t i = 0; i < q; ++i)
    for (int j = 0; j < kLanes; ++j) acc[j] = m.combine(acc[j], x[j * q + i]);
  for (std::int64_t i = kLanes * q; i < n; ++i) acc[kLanes - 1] = m.combine(acc[kLanes - 1], x[i]);
  V r = acc[0];
  for (int j = 1; j < kLanes; ++j) r = m.combine(r, acc[j]);
  return r;
}

// Fold of a contiguous block; vectorized where the monoid and element type allow.
template <Monoid M>
typename M::value_type fold_block(const M& m, const typename M::value_type* x, std::int64_t n) {
  if constexpr (simd::has_block_kernels<M>) return simd::BlockKernels<M>::fold(x, n);
  else return fold_lanes(m, x, n);
}

// Scan of a contiguous block after `carry`; returns the carry after the block.
template <bool Exclusive, Monoid M>
typename M::value_type scan_block(const M& m, const typename M::value_type* x,
                                  typename M::value_type* y, std::int64_t n,
                                  typename M::value_type carry, bool stream_stores) {
  if constexpr (simd::has_block_kernels<M>) {
    return simd::BlockKernels<M>::template scan<Exclusive>(x, y, n, carry, stream_stores);
  } else {
    (void)stream_stores;
    using V = typename M::value_type;
    // Lane j scans the j-th stretch from its own carry-in: carry · (stretches before j).
    const std::int64_t q = n < 64 * kLanes ? 0 : n / kLanes;
    V c[kLanes];
    c[0] = carry;
    for (int j = 1; j < kLanes; ++j) c[j] = m.combine(c[j - 1], fold_lanes(m, x + (j - 1) * q, q));
    for (std::int64_t i = 0; i < q; ++i)
      for (int j = 0; j < kLanes; ++j) {
        const V next = m.combine(c[j], x[j * q + i]);  // read x before writing y: in place
        y[j * q + i] = Exclusive ? c[j] : next;
        c[j] = next;
      }
    V last = q ? c[kLanes - 1] : carry;
    for (std::int64_t i = kLanes * q; i < n; ++i) {
      const V next = m.combine(last, x[i]);
      y[i] = Exclusive ? last : next;
      last = next;
    }
    return last;
  }
}

template <bool Exclusive, Monoid M>
void scan(std::span<const typename M::value_type> in, std::span<typename M::value_type> out,
          const M& m) {
  using V = typename M::value_type;
  const std::int64_t n = std::int64_t(in.size());
  const V* x = in.data();
  V* y = out.data();
  const int nt = threads_for(n);
  const bool stream = n * std::int64_t(sizeof(V)) >= simd::streaming_store_threshold_bytes();
  if (nt <= 1) {
    FlushToZero ftz;
    scan_block<Exclusive>(m, x, y, n, m.identity(), stream);
    return;
  }
  const std::int64_t block = scan_block_elems<V>();
  const std::int64_t super = block * nt;
  std::vector<V> partial(2 * std::size_t(nt));  // double-buffered: one barrier per superblock
#pragma omp parallel num_threads(nt)
  {
    FlushToZero ftz;
    const int t = omp_get_thread_num();
    V carry = m.identity();  // every thread tracks the same running carry
    std::int64_t step = 0;
    for (std::int64_t base = 0; base < n; base += super, ++step) {
      V* part = partial.data() + (step & 1) * nt;
      const std::int64_t lo = std::min(n, base + t * block), hi = std::min(n, lo + block);
      part[t] = fold_block(m, x + lo, hi - lo);
#pragma omp barrier
      V mine = carry;
      for (int u = 0; u < nt; ++u) {
        if (u == t) mine = carry;
        carry = m.combine(carry, part[u]);
      }
      scan_block<Exclusive>(m, x + lo, y + lo, hi - lo, mine, stream);
    }
  }
}

}  // namespace detail

// Fold of lift(0), …, lift(n−1): reads nothing but what lift reads, so it also reduces
// generated sequences and strided data.
template <Monoid M, class Lift>
typename M::value_type reduce_lifted(std::int64_t n, const Lift& lift, const M& m = M{}) {
  using V = typename M::value_type;
  const int nt = detail::threads_for(n);
  if (nt <= 1) {
    detail::FlushToZero ftz;
    return detail::fold(m, m.identity(), 0, n, lift);
  }
  std::vector<V> partial(std::size_t(nt), m.identity());
#pragma omp parallel num_threads(nt)
  {
    detail::FlushToZero ftz;
    const int t = omp_get_thread_num();
    const std::int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
    partial[std::size_t(t)] = detail::fold(m, m.identity(), lo, hi, lift);
  }
  detail::FlushToZero ftz;
  V acc = m.identity();
  for (const V& p : partial) acc = m.combine(acc, p);
  return acc;
}

template <Monoid M>
typename M::value_type reduce(std::span<const typename M::value_type> in, const M& m = M{}) {
  using V = typename M::value_type;
  const std::int64_t n = std::int64_t(in.size());
  const V* x = in.data();
  const int nt = detail::threads_for(n);
  if (nt <= 1) {
    detail::FlushToZero ftz;
    return detail::fold_block(m, x, n);
  }
  std::vector<V> partial(std::size_t(nt), m.identity());
#pragma omp parallel num_threads(nt)
  {
    detail::FlushToZero ftz;
    const int t = omp_get_thread_num();
    const std::int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
    partial[std::size_t(t)] = detail::fold_block(m, x + lo, hi - lo);
  }
  V acc = m.identity();
  for (const V& p : partial) acc = m.combine(acc, p);
  return acc;
}

// out may equal in (in place); out.size() must equal in.size().
template <Monoid M>
void inclusive_scan(std::span<const typename M::value_type> in,
                    std::span<typename M::value_type> out, const M& m = M{}) {
  detail::scan<false>(in, out, m);
}

template <Monoid M>
void exclusive_scan(std::span<const typename M::value_type> in,
                    std::span<typename M::value_type> out, const M& m = M{}) {
  detail::scan<true>(in, out, m);
}

// out[s] = reduce(in[offsets[s] : offsets[s+1]]) for s < out.size(); offsets has out.size() + 1
// non-decreasing entries within [0, in.size()] (the tensor entry checks this; this one trusts it).
template <Monoid M, class Offset>
void segmented_reduce(std::span<const typename M::value_type> in, std::span<const Offset> offsets,
                      std::span<typename M::value_type> out, const M& m = M{}) {
  const std::int64_t segments = std::int64_t(out.size());
  const int nt = omp_get_max_threads();
  if (segments >= 4 * std::int64_t(nt) || std::int64_t(in.size()) < detail::kSerialCutoff) {
    // Many segments: whole segments per thread, dynamically balanced.
#pragma omp parallel if (std::int64_t(in.size()) >= detail::kSerialCutoff)
    {
      detail::FlushToZero ftz;
#pragma omp for schedule(dynamic, 64)
      for (std::int64_t s = 0; s < segments; ++s)
        out[std::size_t(s)] = detail::fold_block(m, in.data() + offsets[s],
                                                 std::int64_t(offsets[s + 1] - offsets[s]));
    }
  } else {
    // Few (possibly huge) segments: every segment gets all threads.
    for (std::int64_t s = 0; s < segments; ++s)
      out[std::size_t(s)] = reduce(in.subspan(std::size_t(offsets[s]),
                                              std::size_t(offsets[s + 1] - offsets[s])), m);
  }
}

}  // namespace sixfold::parallel::cpu
