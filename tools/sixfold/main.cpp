// sixfold — the command-line tool: measured ceilings, monoid laws, verification, benchmarks.
//
//   sixfold ceilings [--remeasure] [--json]
//   sixfold laws [--trials N] [--counterexamples]
//   sixfold verify [OPS...] [--backend cpu|cuda|all]
//   sixfold bench  [OPS...] [--backend cpu|cuda|all] [--n N] [--json | --jsonl] [--svg FILE]
//
// Results go to stdout; progress and context to stderr (progress only when stderr is a terminal).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fmt/format.h>
#include <fstream>
#include <set>

#include "bench.hpp"
#include "sixfold/algebra/laws.hpp"
#include "sixfold/runtime/ceilings.hpp"
#include "sixfold/runtime/error.hpp"
#include "sixfold/runtime/tensor.hpp"

using namespace sixfold;
using namespace sixfold::bench;

namespace {

bool wanted(const CaseFactory& f, const std::vector<std::string>& ops, const std::string& backend) {
  if (!ops.empty() && std::find(ops.begin(), ops.end(), f.op) == ops.end()) return false;
  return backend == "all" || backend == name(f.backend);
}

std::string size_label(std::int64_t n) {
  if (n >= 1000000 && n % 1000000 == 0) {
    std::int64_t m = n, e = 0;
    while (m % 10 == 0) { m /= 10; ++e; }
    return fmt::format("{}e{}", m, e);
  }
  return std::to_string(n);
}

void print_ceilings(const Ceilings& c) {
  if (c.cpu)
    fmt::print("cpu  {} ({} threads): copy {:.1f} GB/s, f32 FMA {:.1f} GFLOP/s, f32 exp {:.2f} G/s\n",
               c.cpu->model, c.cpu->threads, c.cpu->copy_gbps, c.cpu->fma_gflops, c.cpu->exp_gops);
  if (c.gpu)
    fmt::print("gpu  {} ({} SMs): copy {:.0f} GB/s, f32 FMA {:.1f} TFLOP/s, exp {:.0f} G/s, bf16 GEMM {:.0f} TFLOP/s\n",
               c.gpu->name, c.gpu->sms, c.gpu->copy_gbps, c.gpu->fma_tflops, c.gpu->exp_gops,
               c.gpu->bf16_gemm_tflops);
}

int cmd_laws(int trials, bool counterexamples) {
  bool ok = true;
  for (const auto& r : algebra::check_library_monoids(trials, std::random_device{}())) {
    fmt::print("{}", algebra::format_report(r));
    ok = ok && r.passed();
  }
  if (counterexamples) {
    fmt::print("\nNot monoids (each must fail, with a counterexample):\n");
    for (const auto& r : algebra::check_counterexamples(trials, std::random_device{}())) {
      fmt::print("{}", algebra::format_report(r));
      ok = ok && !r.passed();
    }
  }
  fmt::print("{}\n", ok ? "all laws hold" : "LAW CHECK FAILED");
  return ok ? 0 : 1;
}

int cmd_verify(const std::vector<std::string>& ops, const std::string& backend) {
  int failures = 0, checks = 0;
  for (auto& f : registry()) {
    if (!wanted(f, ops, backend)) continue;
    for (std::int64_t n : f.verify_sizes) {
      auto c = f.make(n);
      for (auto& impl : c->impls) {
        if (impl.kind == ImplKind::naive) continue;
        if (c->poison) c->poison();
        impl.run(0);
        if (c->sync) c->sync();
        const double err = impl.error();
        const bool pass = err <= c->tolerance;
        // A peer over the tolerance is reported (it is how users compute this today), but only
        // sixfold's own implementations fail the run.
        const bool ours = impl.kind == ImplKind::sixfold;
        ++checks;
        failures += !pass && ours;
        fmt::print("{:<4} {:<7} {:<12} {:<5} n={:<9} {:<24} max_rel_error {:.2e} (tol {:.0e})\n",
                   pass ? "ok" : (ours ? "FAIL" : "over"), f.op, f.workload, name(f.backend), n,
                   impl.name, err, c->tolerance);
      }
    }
  }
  fmt::print("{} checks, {} failed\n", checks, failures);
  return failures ? 1 : 0;
}

int cmd_bench(const std::vector<std::string>& ops, const std::string& backend, std::int64_t n_override,
              bool json, bool jsonl, const std::string& svg, const std::string& json_file,
              double seconds) {
  const bool tty = isatty(2);
  const bool with_gpu = backend != "cpu";
  if (tty) fmt::print(stderr, "measuring or loading ceilings ({})...\n", ceilings_cache_path());
  const Ceilings ceil = machine_ceilings(with_gpu);
  if (!json && !jsonl) print_ceilings(ceil);
  Options opt;
  opt.progress = tty;
  opt.seconds_per_impl = seconds;
  std::vector<Row> rows;
  for (auto& f : registry()) {
    if (!wanted(f, ops, backend)) continue;
    std::vector<Size> sizes = f.bench_sizes;
    if (n_override > 0) sizes = {{n_override, size_label(n_override)}};
    for (const auto& sz : sizes) {
      auto c = f.make(sz.n);
      if (c->workload.find(sz.label) == std::string::npos) c->workload = f.workload + " n=" + sz.label;
      for (const Row& r : run_case(*c, ceil, opt)) {
        rows.push_back(r);
        if (jsonl) fmt::print("{}\n", row_jsonl(r));
      }
      std::fflush(stdout);
    }
  }
  if (json) fmt::print("{}\n", to_json(rows, ceil, true));
  else if (!jsonl) fmt::print("\n{}", format_table(rows));
  if (!json_file.empty()) std::ofstream(json_file) << to_json(rows, ceil, true) << '\n';
  if (!svg.empty()) {
    std::ofstream(svg) << roofline_svg(rows, ceil);
    fmt::print(stderr, "roofline written to {}\n", svg);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sixfold: verified kernels licensed by algebra, placed on this machine's roofline"};
  app.require_subcommand(1);

  auto* ceilings = app.add_subcommand("ceilings", "Measure (or show the cached) machine ceilings");
  bool remeasure = false, ceil_json = false;
  ceilings->add_flag("--remeasure", remeasure, "Measure again and replace the cache");
  ceilings->add_flag("--json", ceil_json, "JSON output");

  auto* laws = app.add_subcommand("laws", "Check the monoid laws of every monoid in the library");
  int trials = 2000;
  bool counterexamples = false;
  laws->add_option("--trials", trials, "Random trials per law")->check(CLI::PositiveNumber);
  laws->add_flag("--counterexamples", counterexamples,
                 "Also feed non-monoids to the checker and show their counterexamples");

  auto* verify = app.add_subcommand("verify", "Check every implementation against the float64 reference on awkward sizes");
  std::vector<std::string> verify_ops;
  std::string verify_backend = "all";
  verify->add_option("ops", verify_ops, "Ops to verify (default: all)");
  verify->add_option("--backend", verify_backend, "cpu, cuda or all")->check(CLI::IsMember({"cpu", "cuda", "all"}));

  auto* bench = app.add_subcommand("bench", "Time naive, sixfold and peers side by side; report against the roofline");
  std::vector<std::string> bench_ops;
  std::string bench_backend = "all", svg, json_file;
  std::int64_t n = 0;
  bool json = false, jsonl = false;
  double seconds = 1.0;
  bench->add_option("ops", bench_ops, "Ops to bench (default: all)");
  bench->add_option("--backend", bench_backend, "cpu, cuda or all")->check(CLI::IsMember({"cpu", "cuda", "all"}));
  bench->add_option("--n", n, "Problem size instead of the defaults")->check(CLI::PositiveNumber);
  bench->add_option("--seconds", seconds, "Timing budget per implementation")->check(CLI::PositiveNumber);
  auto* jf = bench->add_flag("--json", json, "One JSON document on stdout");
  bench->add_flag("--jsonl", jsonl, "One JSON object per row, streamed")->excludes(jf);
  bench->add_option("--svg", svg, "Write the roofline plot to this SVG file");
  bench->add_option("--json-file", json_file, "Also write the JSON document to this file");

  CLI11_PARSE(app, argc, argv);
  try {
    register_cpu_cases();
    register_cuda_cases();
    register_norm_cases();
    register_topk_cases();
    register_selective_scan_cases();
    register_attention_cases();
    std::set<std::string> known;
    for (const auto& f : registry()) known.insert(f.op);
    for (const auto* list : {&verify_ops, &bench_ops})
      for (const auto& op : *list)
        if (!known.count(op)) {
          std::string all;
          for (const auto& k : known) all += (all.empty() ? "" : ", ") + k;
          fmt::print(stderr, "sixfold: unknown op '{}' (known: {})\n", op, all);
          return 2;
        }
    if (*ceilings) {
      const Ceilings c = machine_ceilings(true, remeasure);
      if (ceil_json) fmt::print("{}\n", to_json({}, c, true));
      else print_ceilings(c);
      return 0;
    }
    if (*laws) return cmd_laws(trials, counterexamples);
    if (*verify) return cmd_verify(verify_ops, verify_backend);
    if (*bench) return cmd_bench(bench_ops, bench_backend, n, json, jsonl, svg, json_file, seconds);
  } catch (const Error& e) {
    fmt::print(stderr, "sixfold: {}\n", e.what());
    return 1;
  }
  return 0;
}
