// sixfold/algebra/laws.hpp — property-based checking of the monoid laws.
//
// check_laws draws random elements with the spec's generator and checks
//   closure        combine(a, b) is a valid element (e.g. finite) for valid a, b
//   identity       combine(e, a) == a == combine(a, e)
//   associativity  combine(combine(a, b), c) == combine(a, combine(b, c))
//   commutativity  combine(a, b) == combine(b, a)      (only if the monoid is tagged so)
//   idempotence    combine(a, a) == a                  (only if tagged so)
//   power          power(a, n) == a combined n times   (checks power() itself)
// "==" is the spec's equality: bit-exact for exact monoids, within a stated tolerance for
// floating point. The first failure of each law is kept with its operands, printed by the
// spec's `show`, so a failing report is a counterexample that can be replayed by hand.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "sixfold/algebra/monoid.hpp"
#include "sixfold/algebra/power.hpp"

namespace sixfold::algebra {

template <Monoid M>
struct LawSpec {
  using V = typename M::value_type;
  std::string name;       // "Sum<f32>"
  M monoid;
  std::function<V(std::mt19937_64&)> draw;
  std::function<bool(const V&, const V&)> equal;
  std::function<std::string(const V&)> show;
  std::function<bool(const V&)> valid = [](const V&) { return true; };
  std::string tolerance = "exact";  // how `equal` compares, for the report
};

struct LawResult {
  std::string law;
  bool passed = true;
  int trials = 0;
  std::string counterexample;  // empty when passed
};

struct LawReport {
  std::string monoid;
  std::string tags;       // "commutative, idempotent, exact"
  std::string tolerance;
  std::vector<LawResult> laws;
  bool passed() const {
    for (const auto& l : laws)
      if (!l.passed) return false;
    return true;
  }
};

template <Monoid M>
LawReport check_laws(const LawSpec<M>& spec, int trials = 1000, std::uint64_t seed = 0x5eed) {
  using V = typename M::value_type;
  const M& m = spec.monoid;
  std::mt19937_64 rng(seed);
  LawReport report;
  report.monoid = spec.name;
  report.tolerance = spec.tolerance;
  for (auto [on, tag] : {std::pair{is_commutative_v<M>, "commutative"},
                         std::pair{is_idempotent_v<M>, "idempotent"},
                         std::pair{is_exact_v<M>, "exact"}})
    if (on) report.tags += (report.tags.empty() ? "" : ", ") + std::string(tag);

  auto law = [&](const char* name, auto&& trial) {
    LawResult r{name, true, 0, {}};
    for (int t = 0; t < trials && r.passed; ++t, ++r.trials) {
      std::string why = trial();
      if (!why.empty()) {
        r.passed = false;
        r.counterexample = std::move(why);
      }
    }
    report.laws.push_back(std::move(r));
  };
  auto mismatch = [&](const std::string& lhs_expr, const V& lhs, const std::string& rhs_expr,
                      const V& rhs, const std::string& operands) -> std::string {
    if (spec.equal(lhs, rhs)) return {};
    return operands + "; " + lhs_expr + " = " + spec.show(lhs) + " but " + rhs_expr + " = " +
           spec.show(rhs);
  };

  law("closure", [&] {
    const V a = spec.draw(rng), b = spec.draw(rng);
    const V ab = m.combine(a, b);
    if (spec.valid(ab)) return std::string();
    return "a = " + spec.show(a) + ", b = " + spec.show(b) + "; a·b = " + spec.show(ab) +
           " is not a valid element";
  });
  law("identity", [&] {
    const V a = spec.draw(rng), e = m.identity();
    const std::string ops = "a = " + spec.show(a) + ", e = " + spec.show(e);
    std::string why = mismatch("e·a", m.combine(e, a), "a", a, ops);
    return why.empty() ? mismatch("a·e", m.combine(a, e), "a", a, ops) : why;
  });
  law("associativity", [&] {
    const V a = spec.draw(rng), b = spec.draw(rng), c = spec.draw(rng);
    return mismatch("(a·b)·c", m.combine(m.combine(a, b), c), "a·(b·c)",
                    m.combine(a, m.combine(b, c)),
                    "a = " + spec.show(a) + ", b = " + spec.show(b) + ", c = " + spec.show(c));
  });
  if constexpr (is_commutative_v<M>) {
    law("commutativity", [&] {
      const V a = spec.draw(rng), b = spec.draw(rng);
      return mismatch("a·b", m.combine(a, b), "b·a", m.combine(b, a),
                      "a = " + spec.show(a) + ", b = " + spec.show(b));
    });
  }
  if constexpr (is_idempotent_v<M>) {
    law("idempotence", [&] {
      const V a = spec.draw(rng);
      return mismatch("a·a", m.combine(a, a), "a", a, "a = " + spec.show(a));
    });
  }
  law("power", [&] {
    const V a = spec.draw(rng);
    const int n = int(rng() % 12);
    V folded = m.identity();
    for (int i = 0; i < n; ++i) folded = m.combine(folded, a);
    return mismatch("power(a, " + std::to_string(n) + ")", power(a, std::uint64_t(n), m),
                    "a·…·a", folded, "a = " + spec.show(a));
  });
  return report;
}

// Every monoid the library ships, law-checked (algebra/law_specs.cpp).
std::vector<LawReport> check_library_monoids(int trials = 1000, std::uint64_t seed = 0x5eed);

// Operations that are NOT monoids, each fed to the same checker; every report must fail.
// subtraction; an average of two values without a count; a softmax state without the max.
std::vector<LawReport> check_counterexamples(int trials = 1000, std::uint64_t seed = 0x5eed);

std::string format_report(const LawReport& r);  // one line per law, for logs and the CLI

}  // namespace sixfold::algebra
