// CPU reduce/scan cases: naive float64 loop, sixfold's parallel monoid algorithms, and the
// standard library (std::inclusive_scan, std::reduce, std::accumulate) as peers.
#include <cstring>
#include <numeric>

#include "bench.hpp"
#include "scan_workloads.hpp"
#include "sixfold/parallel/cpu.hpp"

namespace sixfold::bench {

namespace {

using namespace scan_workloads;

template <class W>
std::unique_ptr<Case> make_cpu_case(std::int64_t n, bool scan) {
  using T = V<W>;
  auto c = std::make_unique<Case>();
  c->op = scan ? "scan" : "reduce";
  c->workload = std::string(W::kName);
  c->backend = Backend::cpu;
  c->cost = cost<W>(n, scan);
  c->tolerance = W::kTolerance;
  c->property = property(algebra::is_commutative_v<typename W::M>);
  c->slots = rotating_slots(Backend::cpu, double(c->cost.min_bytes));
  auto in = std::make_shared<std::vector<std::vector<T>>>(draw_inputs<W>(c->slots, n));
  const std::int64_t outs = scan ? n : 1;
  auto out = std::make_shared<std::vector<T>>(std::size_t(outs));
  auto ref = std::make_shared<std::vector<double>>(std::size_t(outs) * W::kWidth);
  auto naive_out = std::make_shared<std::vector<double>>(std::size_t(outs) * W::kWidth);
  reference<W>((*in)[0], scan, ref->data());
  c->poison = [out, naive_out] {
    std::memset(out->data(), 0xff, out->size() * sizeof(T));  // all-ones bits: NaN in every float field
    std::fill(naive_out->begin(), naive_out->end(), NAN);
  };
  auto err = [out, ref, outs] { return error_vs<W>(*ref, out->data(), outs); };
  const typename W::M m;
  c->impls.push_back({"float64 loop", ImplKind::naive, false,
                      [in, scan, naive_out](int s) { reference<W>((*in)[std::size_t(s)], scan, naive_out->data()); },
                      [naive_out, ref] { return max_rel_error(ref->data(), naive_out->data(), std::int64_t(ref->size())); }});
  const algebra::CombineOp<typename W::M> op{m};
  if (scan) {
    c->impls.push_back({"std::inclusive_scan", ImplKind::peer, false,
                        [in, out, op](int s) {
                          const auto& x = (*in)[std::size_t(s)];
                          std::inclusive_scan(x.begin(), x.end(), out->begin(), op);
                        }, err});
    c->impls.push_back({"sixfold::inclusive_scan", ImplKind::sixfold, false,
                        [in, out, m](int s) {
                          parallel::cpu::inclusive_scan(std::span<const T>((*in)[std::size_t(s)]),
                                                        std::span<T>(*out), m);
                        }, err});
  } else {
    if constexpr (algebra::is_commutative_v<typename W::M>)
      c->impls.push_back({"std::reduce", ImplKind::peer, false,
                          [in, out, op, m](int s) {
                            const auto& x = (*in)[std::size_t(s)];
                            (*out)[0] = std::reduce(x.begin(), x.end(), m.identity(), op);
                          }, err});
    else  // std::reduce may reorder operands: only std::accumulate is correct here
      c->impls.push_back({"std::accumulate", ImplKind::peer, false,
                          [in, out, op, m](int s) {
                            const auto& x = (*in)[std::size_t(s)];
                            (*out)[0] = std::accumulate(x.begin(), x.end(), m.identity(), op);
                          }, err});
    c->impls.push_back({"sixfold::reduce", ImplKind::sixfold, false,
                        [in, out, m](int s) {
                          (*out)[0] = parallel::cpu::reduce(std::span<const T>((*in)[std::size_t(s)]), m);
                        }, err});
  }
  return c;
}

const std::vector<std::int64_t> kVerifySizes = {1, 17, 4097, 65537, 1'000'003};

template <class W>
void add(bool scan) {
  registry().push_back({scan ? "scan" : "reduce", W::kName, Backend::cpu,
                        [scan](std::int64_t n) { return make_cpu_case<W>(n, scan); },
                        {{100'000'000, "1e8"}}, kVerifySizes});
}

}  // namespace

void register_cpu_cases() {
  add<SumF32>(false);
  add<AffineF32>(false);
  add<SumF32>(true);
  add<AffineF32>(true);
}

}  // namespace sixfold::bench
