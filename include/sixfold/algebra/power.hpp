// sixfold/algebra/power.hpp — x combined with itself n times, in O(log n) combines.
//
// Associativity lets x^n be built from squares (Stepanov's power algorithm, as in Elements of
// Programming): x^13 = x^8 · x^4 · x. Works for non-commutative monoids because every factor is
// a power of the same x, and powers of one element commute with each other.
#pragma once

#include <cstdint>

#include "sixfold/algebra/monoid.hpp"

namespace sixfold::algebra {

template <Monoid M>
SIXFOLD_HD typename M::value_type power(typename M::value_type x, std::uint64_t n, const M& m) {
  typename M::value_type acc = m.identity();
  while (n != 0) {
    if (n & 1u) acc = m.combine(acc, x);
    n >>= 1;
    if (n != 0) x = m.combine(x, x);
  }
  return acc;
}

}  // namespace sixfold::algebra
