// `sixfold bench topk`: exact top-k of f32 data — one long row of 1e8 (k 10, 1000, 100000) and
// 4096 rows of 32768 (k 8, 64, 1024); random (normal), sorted ascending, sorted descending and
// all-equal data. CPU rows: the naive full stable sort (float64 reference, on the random data),
// sixfold::topk, std::partial_sort and std::nth_element + sort over an index array (rows spread
// over the cores with OpenMP; a single row is one std call). GPU rows: sixfold::topk (torch.topk
// and torch.sort are timed beside it by bench/torch_topk.py; cub::DeviceTopK is not in the CCCL
// of CUDA 13.0). Errors: the fraction of result positions whose index or value differs from the
// reference (0 = exact; the tolerance is 0).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "../../src/reference/topk_reference.hpp"
#include "bench.hpp"
#include "sixfold/ops/topk.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold::bench {
namespace {

enum class Data { random, ascending, descending, all_equal };
const char* data_name(Data d) {
  const char* names[] = {"random", "ascending", "descending", "all-equal"};
  return names[int(d)];
}

void fill(std::vector<float>& x, Data d) {
  const std::int64_t n = std::int64_t(x.size());
  const unsigned seed = std::random_device{}();
#pragma omp parallel
  {
    std::mt19937 rng(seed + 7919u * unsigned(omp_get_thread_num()));
    std::normal_distribution<float> nd(0.0f, 1.0f);
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      switch (d) {
        case Data::random: x[std::size_t(i)] = nd(rng); break;
        case Data::ascending: x[std::size_t(i)] = float(i) * 0.25f; break;
        case Data::descending: x[std::size_t(i)] = -float(i) * 0.25f; break;
        case Data::all_equal: x[std::size_t(i)] = 1.0f; break;
      }
    }
  }
}

bool before(float a, float b) { return reference::topk_before(a, b, true); }

// Exact top-k indices of each row (largest, lower index first among equals), best first, in
// O(n) per row: the k-th value by nth_element, then everything better and the first equals.
std::vector<std::int64_t> reference_topk(const std::vector<float>& x, std::int64_t rows,
                                         std::int64_t n, std::int64_t k) {
  std::vector<std::int64_t> out(std::size_t(rows * k));
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * n;
    std::vector<float> v(row, row + n);
    std::nth_element(v.begin(), v.begin() + (k - 1), v.end(), before);
    const float t = v[std::size_t(k - 1)];
    std::vector<std::int64_t> sel;
    sel.reserve(std::size_t(k));
    std::int64_t better = 0;
    for (std::int64_t i = 0; i < n; ++i) better += before(row[i], t);
    std::int64_t ties = k - better;
    for (std::int64_t i = 0; i < n; ++i) {
      if (before(row[i], t)) sel.push_back(i);
      else if (!before(t, row[i]) && ties > 0) { sel.push_back(i); --ties; }
    }
    std::sort(sel.begin(), sel.end(), [&](std::int64_t a, std::int64_t b) {
      return before(row[a], row[b]) || (!before(row[b], row[a]) && a < b);
    });
    std::copy(sel.begin(), sel.end(), out.begin() + r * k);
  }
  return out;
}

// Fraction of positions whose index (or value) differs from the reference.
double mismatch(const std::vector<float>& x, std::int64_t n, const std::vector<std::int64_t>& ref,
                const std::int64_t* idx, const float* val, std::int64_t k) {
  std::int64_t bad = 0;
  for (std::size_t j = 0; j < ref.size(); ++j) {
    const std::int64_t r = std::int64_t(j) / k;
    const float want = x[std::size_t(r * n + ref[j])];
    const bool same = idx[j] == ref[j] &&
                      (std::memcmp(&val[j], &want, 4) == 0 || (std::isnan(val[j]) && std::isnan(want)));
    bad += !same;
  }
  return double(bad) / double(std::max<std::size_t>(ref.size(), 1));
}

struct Workload {
  std::int64_t rows, n, k;
  Data data;
  bool naive;  // time the full stable sort too (slow: only on the random data)
};

std::string label(const Workload& w) {
  return (w.rows == 1 ? std::string("1x") : std::to_string(w.rows) + "x") +
         (w.n == 100000000 ? std::string("1e8") : std::to_string(w.n)) + " f32 " + data_name(w.data) +
         " k=" + std::to_string(w.k);
}

std::unique_ptr<Case> make_topk_case(Workload w, Backend backend) {
  const Device dev = backend == Backend::cuda ? Device::cuda(0) : Device::cpu();
  w.k = std::min(w.k, w.n);
  const std::int64_t numel = w.rows * w.n, outs = w.rows * w.k;
  auto c = std::make_unique<Case>();
  c->op = "topk";
  c->workload = label(w);
  c->backend = backend;
  c->cost = {0, double(numel) * 4 + double(outs) * 12, 0};
  c->tolerance = 0;
  c->property = backend == Backend::cuda
                    ? "redundancy (radix digits reject all but the k-th bucket) + associativity"
                    : "redundancy (SIMD threshold filter) + associativity (per-thread states merged)";
  c->slots = 1;  // one input set: 400+ MB, larger than any last-level cache
  auto x = std::make_shared<std::vector<float>>(std::size_t(numel));
  fill(*x, w.data);
  auto ref = std::make_shared<std::vector<std::int64_t>>(reference_topk(*x, w.rows, w.n, w.k));
  auto dx = allocate(dev, numel * 4);
  copy_bytes(dx.get(), dev, x->data(), Device::cpu(), numel * 4);
  auto dv = allocate(dev, outs * 4), di = allocate(dev, outs * 8);
  c->poison = [=] {
    std::vector<std::uint8_t> ff(std::size_t(outs) * 8, 0xff);
    copy_bytes(dv.get(), dev, ff.data(), Device::cpu(), outs * 4);
    copy_bytes(di.get(), dev, ff.data(), Device::cpu(), outs * 8);
  };
  c->sync = [dev] { synchronize(dev); };
  auto check_device = [=] {
    std::vector<std::int64_t> hi(static_cast<std::size_t>(outs));
    std::vector<float> hv(static_cast<std::size_t>(outs));
    copy_bytes(hi.data(), Device::cpu(), di.get(), dev, outs * 8);
    copy_bytes(hv.data(), Device::cpu(), dv.get(), dev, outs * 4);
    return mismatch(*x, w.n, *ref, hi.data(), hv.data(), w.k);
  };
  const TensorView tx = TensorView::contiguous(dx.get(), DType::f32, {w.rows, w.n}, dev);
  const TensorView tv = TensorView::contiguous(dv.get(), DType::f32, {w.rows, w.k}, dev);
  const TensorView ti = TensorView::contiguous(di.get(), DType::i64, {w.rows, w.k}, dev);

  if (w.naive && backend == Backend::cpu) {
    auto nidx = std::make_shared<std::vector<std::int64_t>>();
    c->impls.push_back({"full stable sort (float64)", ImplKind::naive, false,
                        [=](int) {
                          const std::vector<double> xd(x->begin(), x->end());
                          *nidx = reference::topk(xd, w.rows, w.n, w.k, true);
                        },
                        [=] {
                          std::vector<float> v(nidx->size());
                          for (std::size_t j = 0; j < v.size(); ++j)
                            v[j] = (*x)[std::size_t(std::int64_t(j) / w.k * w.n + (*nidx)[j])];
                          return mismatch(*x, w.n, *ref, nidx->data(), v.data(), w.k);
                        },
                        1});
  }
  c->impls.push_back({"sixfold::topk", ImplKind::sixfold, false,
                      [=, keep = std::vector{dx, dv, di}](int) {
                        (void)keep;
                        topk(tx, w.k, tv, ti);
                      },
                      check_device});
  if (backend == Backend::cuda) {
    // The same call replayed from a CUDA graph: the GPU's time per call without the host's
    // launch work (checks, scratch, four launches), which an idle GPU waits for when every
    // call is timed alone (a call inside a busy stream hides it).
    c->impls.push_back(graph_replay_impl(
        "sixfold::topk, CUDA graph replay", [=](Stream st, int) { topk(tx, w.k, tv, ti, TopKParams{}, st); },
        4, check_device));
  }
  if (backend == Backend::cpu) {
    // std baselines over an index array per row; rows spread over the cores.
    auto order = std::make_shared<std::vector<std::int64_t>>(std::size_t(numel));
    auto std_impl = [=](bool partial) {
      return [=](int) {
        float* vals = static_cast<float*>(dv.get());
        std::int64_t* inds = static_cast<std::int64_t*>(di.get());
#pragma omp parallel for schedule(dynamic, 1)
        for (std::int64_t r = 0; r < w.rows; ++r) {
          const float* row = x->data() + r * w.n;
          auto b = order->begin() + r * w.n, e = b + w.n;
          std::iota(b, e, std::int64_t(0));
          auto cmp = [row](std::int64_t a, std::int64_t c2) {
            return before(row[a], row[c2]) || (!before(row[c2], row[a]) && a < c2);
          };
          if (partial) {
            std::partial_sort(b, b + w.k, e, cmp);
          } else {
            std::nth_element(b, b + (w.k - 1), e, cmp);
            std::sort(b, b + w.k, cmp);
          }
          for (std::int64_t j = 0; j < w.k; ++j) {
            inds[r * w.k + j] = b[j];
            vals[r * w.k + j] = row[b[j]];
          }
        }
      };
    };
    c->impls.push_back({"std::partial_sort", ImplKind::peer, false, std_impl(true), check_device, 3});
    c->impls.push_back({"std::nth_element + sort", ImplKind::peer, false, std_impl(false), check_device, 3});
  }
  return c;
}

}  // namespace

void register_topk_cases() {
  std::vector<Workload> ws;
  for (std::int64_t k : {10, 1000, 100000}) ws.push_back({1, 100000000, k, Data::random, k == 1000});
  for (Data d : {Data::ascending, Data::descending, Data::all_equal}) ws.push_back({1, 100000000, 1000, d, false});
  for (std::int64_t k : {8, 64, 1024}) ws.push_back({4096, 32768, k, Data::random, k == 64});
  for (Data d : {Data::ascending, Data::descending, Data::all_equal}) ws.push_back({4096, 32768, 64, d, false});
  // SIXFOLD_TOPK_CASES=single or =batched: only those rows (for A/B timing).
  const char* only = std::getenv("SIXFOLD_TOPK_CASES");
  const std::string pick = only ? only : "";
  for (Backend backend : {Backend::cpu, Backend::cuda}) {
    if (backend == Backend::cuda && !cuda_available()) continue;
    for (const Workload& w : ws) {
      if ((pick == "single" && w.rows > 1) || (pick == "batched" && w.rows == 1)) continue;
      // `bench` runs the workload's shape; `verify` shrinks it (the size is the row length, or
      // the row count of the batched shapes) to awkward sizes.
      const bool batched = w.rows > 1;
      registry().push_back({"topk", label(w), backend,
                            [=](std::int64_t size) {
                              Workload v = w;
                              if (batched) v.rows = size; else v.n = size;
                              return make_topk_case(v, backend);
                            },
                            {{batched ? w.rows : w.n, batched ? "4096" : "1e8"}},
                            batched ? std::vector<std::int64_t>{1, 7} : std::vector<std::int64_t>{1, 4097, 1000003}});
    }
  }
}

}  // namespace sixfold::bench
