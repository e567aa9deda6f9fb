// The per-machine cache of measured ceilings: one key=value text file per machine key.
#include <omp.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "sixfold/runtime/ceilings.hpp"
#include "cuda_hooks.hpp"
#include "sixfold/runtime/tensor.hpp"

namespace sixfold {

std::string ceilings_cache_path() {
  std::filesystem::path dir;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) dir = x;
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::filesystem::path(h) / ".cache";
  else dir = std::filesystem::temp_directory_path();
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::ifstream f("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) { model = line; break; }
  // Hostnames of lent machines change per boot; the key is what the measurement depends on.
  const std::size_t key = std::hash<std::string>{}(model + "/" + std::to_string(omp_get_max_threads()));
  std::ostringstream name;
  name << "ceilings-" << std::hex << key << ".txt";
  return (dir / "sixfold" / name.str()).string();
}

namespace {

using KV = std::map<std::string, std::string>;

KV read_kv(const std::string& path) {
  KV kv;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    auto p = line.find('=');
    if (p != std::string::npos) kv[line.substr(0, p)] = line.substr(p + 1);
  }
  return kv;
}

double num(const KV& kv, const std::string& k) {
  auto it = kv.find(k);
  return it == kv.end() ? 0.0 : std::atof(it->second.c_str());
}

}  // namespace

Ceilings machine_ceilings(bool with_gpu, bool remeasure) {
  const std::string path = ceilings_cache_path();
  KV kv = remeasure ? KV{} : read_kv(path);
  Ceilings c;
  bool dirty = false;
  if (num(kv, "cpu.copy_gbps") > 0) {
    c.cpu = CpuCeilings{kv["cpu.model"], int(num(kv, "cpu.threads")), num(kv, "cpu.copy_gbps"),
                        num(kv, "cpu.fma_gflops"), num(kv, "cpu.exp_gops")};
  } else {
    c.cpu = measure_cpu_ceilings();
    kv["cpu.model"] = c.cpu->model;
    kv["cpu.threads"] = std::to_string(c.cpu->threads);
    kv["cpu.copy_gbps"] = std::to_string(c.cpu->copy_gbps);
    kv["cpu.fma_gflops"] = std::to_string(c.cpu->fma_gflops);
    kv["cpu.exp_gops"] = std::to_string(c.cpu->exp_gops);
    dirty = true;
  }
  if (with_gpu && cuda_available()) {
    if (num(kv, "gpu.copy_gbps") > 0 && kv["gpu.name"] == detail::cuda_device_name(0)) {
      c.gpu = GpuCeilings{kv["gpu.name"], int(num(kv, "gpu.sms")), num(kv, "gpu.copy_gbps"),
                          num(kv, "gpu.fma_tflops"), num(kv, "gpu.exp_gops"),
                          num(kv, "gpu.bf16_gemm_tflops")};
    } else {
      c.gpu = measure_gpu_ceilings(0);
      kv["gpu.name"] = c.gpu->name;
      kv["gpu.sms"] = std::to_string(c.gpu->sms);
      kv["gpu.copy_gbps"] = std::to_string(c.gpu->copy_gbps);
      kv["gpu.fma_tflops"] = std::to_string(c.gpu->fma_tflops);
      kv["gpu.exp_gops"] = std::to_string(c.gpu->exp_gops);
      kv["gpu.bf16_gemm_tflops"] = std::to_string(c.gpu->bf16_gemm_tflops);
      dirty = true;
    }
  }
  if (dirty) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    std::ofstream f(path);
    for (const auto& [k, v] : kv) f << k << '=' << v << '\n';
  }
  return c;
}

}  // namespace sixfold
