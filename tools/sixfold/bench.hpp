// tools/sixfold/bench.hpp — the benchmark harness every op plugs into.
//
// An op registers Case factories: one (op, workload, backend) each. A Case owns its inputs
// (several rotating input sets when one set would fit in the last-level cache), its float64
// reference result, and its implementations: the naive reference loop, sixfold's kernel(s),
// and the peers present on this machine. The harness warms each implementation up, poisons the
// outputs, runs once to measure the error against the reference, then times repeated calls
// (CUDA events on the GPU, a steady clock on the CPU), rotating input sets, and reports the
// median, a noise figure, throughput, % of the measured roofline and speedups.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sixfold/runtime/ceilings.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold::bench {

enum class Backend { cpu, cuda };
enum class ImplKind { naive, sixfold, peer };

const char* name(Backend b);
const char* name(ImplKind k);

// The op's cost model: the floor time is the largest of flops / peak FLOP rate,
// min_bytes / copy bandwidth and exps / exp rate.
struct Cost {
  double flops = 0;
  double min_bytes = 0;  // each input read once, each output written once
  double exps = 0;       // transcendental evaluations (exp) the op cannot avoid
  bool tensor_core = false;  // GPU flops are bf16/f16 tensor-core work: the peak is the measured
                             // bf16 GEMM rate, not the f32 FMA rate
};

struct Impl {
  std::string name;
  ImplKind kind = ImplKind::sixfold;
  bool host_timed = false;          // a CPU-side implementation inside a GPU case
  std::function<void(int slot)> run;  // one call on input set `slot`; asynchronous on GPU
  std::function<double()> error;      // max relative error of the last output of slot 0
  int max_reps = 0;                   // cap on timed repeats (0: harness default), for slow naive rows
  int calls_per_run = 1;              // run() makes this many calls (a graph replay): times are per call
};

struct Case {
  std::string op, workload, property;
  Backend backend = Backend::cpu;
  Cost cost;
  double tolerance = 0;             // error bound for `verify`; 0 means exact
  int slots = 1;                    // rotating input sets
  std::vector<Impl> impls;
  std::function<void()> poison;     // NaN-fill every output before the checked run
  std::function<void()> sync;       // waits for queued device work (no-op on CPU)
};

struct Size {
  std::int64_t n;
  std::string label;  // "1e8"
};

struct CaseFactory {
  std::string op;
  std::string workload;   // family name, e.g. "sum f32"
  Backend backend;
  std::function<std::unique_ptr<Case>(std::int64_t n)> make;
  std::vector<Size> bench_sizes;    // what `bench` runs
  std::vector<std::int64_t> verify_sizes;  // what `verify` runs: the awkward ones
};

std::vector<CaseFactory>& registry();

struct Row {
  std::string op, workload, backend, impl, property, device;
  ImplKind kind = ImplKind::sixfold;
  int reps = 0;
  double median_ms = 0, noise_pct = 0, gbps = 0, tflops = 0, roofline_pct = 0;
  double max_rel_error = 0, tolerance = 0;
  double arithmetic_intensity = 0;  // flops / min_bytes, for the roofline plot
  std::optional<double> speedup_vs_naive, speedup_vs_peer;
  std::string bound;  // which ceiling sets the floor: "memory", "compute", "exp"
};

struct Options {
  double seconds_per_impl = 1.0;   // timing budget per implementation
  int max_reps = 50;
  int min_reps = 3;
  bool progress = false;            // plain progress lines on stderr
};

// Runs one case; rows come back in impl order with speedups filled in.
std::vector<Row> run_case(Case& c, const Ceilings& ceilings, const Options& opt);

// Output.
std::string format_table(const std::vector<Row>& rows);
std::string to_json(const std::vector<Row>& rows, const Ceilings& c, bool pretty);
std::string row_jsonl(const Row& r);
std::string roofline_svg(const std::vector<Row>& rows, const Ceilings& c);

// Helpers for cases.
// max_i |out_i − ref_i| / max_i |ref_i| (0 when both are all zero; inf on any NaN in out).
double max_rel_error(const double* ref, const double* out, std::int64_t n);
std::int64_t llc_bytes(Backend b);
// Input sets so that all of them together are at least twice the last-level cache.
int rotating_slots(Backend b, double bytes_per_set, int max_slots = 8);
// Dev filters for A/B runs: true when `item` is in the comma-separated list of environment
// variable `var`, or when the variable is unset or empty.
bool env_lists(const char* var, const std::string& item);

// GPU-side pieces (bench_cuda.cu); absent without CUDA.
double gpu_time_ms(const std::function<void()>& launch);  // events around one launch

// `calls` calls captured once into a CUDA graph on a private stream (enqueue(stream, i) makes
// call i); replay() launches the whole graph on the default stream. For ops whose run time is
// near the host's launch cost: timed per call over a replay, the GPU no longer idles while the
// host prepares each call (BENCH.md, method 3).
class GraphReplay {
 public:
  GraphReplay(const std::function<void(Stream, int)>& enqueue, int calls);
  ~GraphReplay();
  GraphReplay(const GraphReplay&) = delete;
  GraphReplay& operator=(const GraphReplay&) = delete;
  void replay() const;

 private:
  void* graph_ = nullptr;
  void* exec_ = nullptr;
};
// An implementation row that replays `calls` calls of enqueue(stream, i) from one GraphReplay
// (captured here), timed per call; the buffers the calls use must live as long as the case.
Impl graph_replay_impl(std::string name, const std::function<void(Stream, int)>& enqueue, int calls,
                       std::function<double()> error);
void register_cuda_cases();
void register_cpu_cases();
void register_norm_cases();  // cases_norm.cpp: CPU and, where usable, CUDA
void register_topk_cases();            // cases_topk.cpp
void register_selective_scan_cases();  // cases_selective_scan.cpp
void register_attention_cases();       // cases_attention.cpp

}  // namespace sixfold::bench
