// The harness: warm-up, checked run, timed runs with rotation, statistics and speedups.
#include "bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>

namespace sixfold::bench {

const char* name(Backend b) { return b == Backend::cpu ? "cpu" : "cuda"; }
const char* name(ImplKind k) {
  switch (k) {
    case ImplKind::naive: return "naive";
    case ImplKind::sixfold: return "sixfold";
    case ImplKind::peer: return "peer";
  }
  return "?";
}

Impl graph_replay_impl(std::string name, const std::function<void(Stream, int)>& enqueue, int calls,
                       std::function<double()> error) {
  auto graph = std::make_shared<GraphReplay>(enqueue, calls);
  Impl impl{std::move(name), ImplKind::sixfold, false, [graph](int) { graph->replay(); }, std::move(error)};
  impl.calls_per_run = calls;
  return impl;
}

std::vector<CaseFactory>& registry() {
  static std::vector<CaseFactory> r;
  return r;
}

double max_rel_error(const double* ref, const double* out, std::int64_t n) {
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isnan(out[i]) != std::isnan(ref[i])) return INFINITY;
    if (std::isnan(ref[i])) continue;
    num = std::max(num, std::fabs(out[i] - ref[i]));
    den = std::max(den, std::fabs(ref[i]));
  }
  return den == 0 ? num : num / den;
}

std::int64_t llc_bytes(Backend b) {
  if (b == Backend::cuda) return std::int64_t(60) << 20;  // H200's L2 is 60 MB, H100's 50 MB
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? l3 : std::int64_t(32) << 20;
}

int rotating_slots(Backend b, double bytes_per_set, int max_slots) {
  const double need = 2.0 * double(llc_bytes(b));
  return std::clamp(int(std::ceil(need / std::max(bytes_per_set, 1.0))), 1, max_slots);
}

bool env_lists(const char* var, const std::string& item) {
  const char* env = std::getenv(var);
  if (!env || !*env) return true;
  const std::string list = std::string(",") + env + ",";
  return list.find("," + item + ",") != std::string::npos;
}

namespace {

double host_ms(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Noise: half the spread between the 10th and 90th percentile, as % of the median.
double noise_pct(std::vector<double> v, double med) {
  if (v.size() < 3 || med <= 0) return 0;
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) { return v[std::size_t(q * double(v.size() - 1) + 0.5)]; };
  return 50.0 * (at(0.9) - at(0.1)) / med;
}

}  // namespace

std::vector<Row> run_case(Case& c, const Ceilings& ceil, const Options& opt) {
  std::vector<Row> rows;
  const bool gpu = c.backend == Backend::cuda;
  double bw = 0, peak = 0, exps = 0;
  std::string device;
  if (gpu && ceil.gpu) {
    bw = ceil.gpu->copy_gbps * 1e9;
    peak = (c.cost.tensor_core && ceil.gpu->bf16_gemm_tflops > 0 ? ceil.gpu->bf16_gemm_tflops
                                                                 : ceil.gpu->fma_tflops) * 1e12;
    exps = ceil.gpu->exp_gops * 1e9;
    device = ceil.gpu->name;
  } else if (ceil.cpu) {
    bw = ceil.cpu->copy_gbps * 1e9;
    peak = ceil.cpu->fma_gflops * 1e9;
    exps = ceil.cpu->exp_gops * 1e9;
    device = ceil.cpu->model;
  }
  const double t_mem = bw > 0 ? c.cost.min_bytes / bw : 0;
  const double t_flop = peak > 0 ? c.cost.flops / peak : 0;
  const double t_exp = exps > 0 ? c.cost.exps / exps : 0;
  const double floor_s = std::max({t_mem, t_flop, t_exp});
  const char* bound = floor_s == t_mem ? "memory" : (floor_s == t_flop ? "compute" : "exp");

  for (Impl& impl : c.impls) {
    if (opt.progress)
      std::fprintf(stderr, "  %s / %s / %s / %s ...\n", c.op.c_str(), c.workload.c_str(),
                   name(c.backend), impl.name.c_str());
    const bool events = gpu && !impl.host_timed;
    auto time_one = [&](int slot) {
      return events ? gpu_time_ms([&] { impl.run(slot); }) : host_ms([&] {
        impl.run(slot);
        if (c.sync) c.sync();
      });
    };
    // Checked run: outputs poisoned first, so an unwritten element shows up as NaN.
    if (c.poison) c.poison();
    impl.run(0);
    if (c.sync) c.sync();
    const double err = impl.error ? impl.error() : 0.0;
    // Warm-up on the other slots, then timed runs rotating through all of them.
    for (int s = 1; s < c.slots; ++s) time_one(s);
    std::vector<double> ms;
    double spent = 0;
    const int max_reps = impl.max_reps > 0 ? std::min(impl.max_reps, opt.max_reps) : opt.max_reps;
    const int min_reps = std::min(opt.min_reps, max_reps);
    for (int r = 0; r < max_reps && (r < min_reps || spent < opt.seconds_per_impl * 1e3); ++r) {
      const double t = time_one((r + 1) % c.slots);
      ms.push_back(t / impl.calls_per_run);
      spent += t;
    }
    Row row;
    row.op = c.op;
    row.workload = c.workload;
    row.backend = impl.host_timed ? "cpu" : name(c.backend);
    row.impl = impl.name;
    row.kind = impl.kind;
    row.property = impl.kind == ImplKind::sixfold ? c.property : "";
    row.device = impl.host_timed ? (ceil.cpu ? ceil.cpu->model : "") : device;
    row.reps = int(ms.size());
    row.median_ms = median(ms);
    row.noise_pct = noise_pct(ms, row.median_ms);
    const double s = row.median_ms * 1e-3;
    row.gbps = c.cost.min_bytes / s / 1e9;
    row.tflops = c.cost.flops / s / 1e12;
    row.roofline_pct = impl.host_timed ? 0 : 100.0 * floor_s / s;
    if (impl.host_timed && ceil.cpu) {
      const double f = std::max({c.cost.min_bytes / (ceil.cpu->copy_gbps * 1e9),
                                 c.cost.flops / (ceil.cpu->fma_gflops * 1e9)});
      row.roofline_pct = 100.0 * f / s;
    }
    row.max_rel_error = err;
    row.tolerance = c.tolerance;
    row.arithmetic_intensity = c.cost.min_bytes > 0 ? c.cost.flops / c.cost.min_bytes : 0;
    row.bound = bound;
    rows.push_back(row);
  }
  // Speedups: over the naive row, and over the fastest peer.
  std::optional<double> naive_ms, peer_ms;
  for (const Row& r : rows) {
    if (r.kind == ImplKind::naive) naive_ms = r.median_ms;
    if (r.kind == ImplKind::peer) peer_ms = std::min(peer_ms.value_or(INFINITY), r.median_ms);
  }
  for (Row& r : rows) {
    if (naive_ms) r.speedup_vs_naive = *naive_ms / r.median_ms;
    if (peer_ms) r.speedup_vs_peer = *peer_ms / r.median_ms;
  }
  return rows;
}

}  // namespace sixfold::bench
