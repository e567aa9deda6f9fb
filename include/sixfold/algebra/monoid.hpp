// sixfold/algebra/monoid.hpp — the Monoid concept and its optional tags.
//
// A monoid is a set with an associative combine and an identity:
//   combine(combine(a, b), c) == combine(a, combine(b, c)),  combine(e, a) == a == combine(a, e).
// Associativity is what licenses every parallel algorithm in sixfold: a reduction or scan may
// split its input anywhere, fold the pieces on different cores, blocks or GPUs, and combine the
// partial results. Commutativity is NOT assumed; algorithms keep operands in input order.
//
// A monoid type M is a small copyable object (it may carry parameters, e.g. TopK's k) with
//   using value_type = ...;                        // trivially copyable, usable on the device
//   SIXFOLD_HD value_type identity() const;
//   SIXFOLD_HD value_type combine(value_type a, value_type b) const;   // a comes first
// and optional static tags (absent means false):
//   static constexpr bool commutative, idempotent, exact;
// `exact` means combine is exact in its arithmetic (integers, max/min, selection), so laws hold
// bit for bit; otherwise they hold up to floating-point rounding.
#pragma once

#include <concepts>
#include <string_view>
#include <type_traits>

#include "sixfold/runtime/config.hpp"

namespace sixfold::algebra {

template <class M>
concept Monoid = std::copyable<M> && requires(const M m, typename M::value_type a) {
  typename M::value_type;
  requires std::is_trivially_copyable_v<typename M::value_type>;
  { m.identity() } -> std::same_as<typename M::value_type>;
  { m.combine(a, a) } -> std::same_as<typename M::value_type>;
};

namespace detail {
template <class M> constexpr bool commutative() {
  if constexpr (requires { M::commutative; }) return M::commutative; else return false;
}
template <class M> constexpr bool idempotent() {
  if constexpr (requires { M::idempotent; }) return M::idempotent; else return false;
}
template <class M> constexpr bool exact() {
  if constexpr (requires { M::exact; }) return M::exact; else return false;
}
}  // namespace detail

template <class M> inline constexpr bool is_commutative_v = detail::commutative<M>();
template <class M> inline constexpr bool is_idempotent_v = detail::idempotent<M>();
template <class M> inline constexpr bool is_exact_v = detail::exact<M>();

// A monoid's combine as a binary function object, the form CUB and the standard library expect.
template <Monoid M>
struct CombineOp {
  M m;
  SIXFOLD_HD typename M::value_type operator()(const typename M::value_type& a,
                                               const typename M::value_type& b) const {
    return m.combine(a, b);
  }
};

}  // namespace sixfold::algebra
