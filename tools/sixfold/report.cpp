// Bench output: the human table, JSON / JSON lines, and the roofline plot as SVG.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "bench.hpp"

namespace sixfold::bench {

namespace {

std::string speedup(const std::optional<double>& s) {
  return s ? fmt::format("{:.2f}x", *s) : "-";
}

nlohmann::json row_json(const Row& r) {
  nlohmann::json j = {
      {"op", r.op},
      {"workload", r.workload},
      {"backend", r.backend},
      {"device", r.device},
      {"impl", r.impl},
      {"kind", name(r.kind)},
      {"reps", r.reps},
      {"median_ms", r.median_ms},
      {"noise_pct", r.noise_pct},
      {"gbps", r.gbps},
      {"tflops", r.tflops},
      {"roofline_pct", r.roofline_pct},
      {"bound", r.bound},
      {"max_rel_error", r.max_rel_error},
      {"tolerance", r.tolerance},
      {"arithmetic_intensity", r.arithmetic_intensity},
      {"property", r.property},
  };
  j["speedup_vs_naive"] = r.speedup_vs_naive ? nlohmann::json(*r.speedup_vs_naive) : nlohmann::json();
  j["speedup_vs_peer"] = r.speedup_vs_peer ? nlohmann::json(*r.speedup_vs_peer) : nlohmann::json();
  return j;
}

}  // namespace

std::string format_table(const std::vector<Row>& rows) {
  std::string out = fmt::format("{:<6} {:<26} {:<5} {:<24} {:>10} {:>6} {:>8} {:>9} {:>7} {:>9} {:>8} {:>9}  {}\n",
                                "op", "workload", "dev", "impl", "median ms", "noise", "GB/s",
                                "GFLOP/s", "roof%", "vs naive", "vs peer", "max err", "property");
  for (const Row& r : rows)
    out += fmt::format("{:<6} {:<26} {:<5} {:<24} {:>10.3f} {:>5.1f}% {:>8.1f} {:>9.1f} {:>6.1f}% {:>9} {:>8} {:>9.2e}  {}\n",
                       r.op, r.workload, r.backend, r.impl, r.median_ms, r.noise_pct, r.gbps,
                       r.tflops * 1e3, r.roofline_pct, speedup(r.speedup_vs_naive),
                       speedup(r.speedup_vs_peer), r.max_rel_error, r.property);
  return out;
}

std::string row_jsonl(const Row& r) { return row_json(r).dump(); }

std::string to_json(const std::vector<Row>& rows, const Ceilings& c, bool pretty) {
  nlohmann::json j;
  if (c.cpu)
    j["ceilings"]["cpu"] = {{"model", c.cpu->model},          {"threads", c.cpu->threads},
                            {"copy_gbps", c.cpu->copy_gbps},  {"fma_gflops", c.cpu->fma_gflops},
                            {"exp_gops", c.cpu->exp_gops}};
  if (c.gpu)
    j["ceilings"]["gpu"] = {{"name", c.gpu->name},
                            {"sms", c.gpu->sms},
                            {"copy_gbps", c.gpu->copy_gbps},
                            {"fma_tflops", c.gpu->fma_tflops},
                            {"exp_gops", c.gpu->exp_gops},
                            {"bf16_gemm_tflops", c.gpu->bf16_gemm_tflops}};
  j["rows"] = nlohmann::json::array();
  for (const Row& r : rows) j["rows"].push_back(row_json(r));
  return j.dump(pretty ? 2 : -1);
}

// Log-log roofline: x = arithmetic intensity (FLOP/byte), y = attained FLOP/s. Each backend's
// roof is min(peak FLOP/s, copy bandwidth · x); each row is a point under its backend's roof.
std::string roofline_svg(const std::vector<Row>& rows, const Ceilings& c) {
  const double W = 900, H = 600, L = 80, R = 30, T = 40, B = 60;
  double xmin = 1e-3, xmax = 1e3, ymin = 1e8, ymax = 1e15;
  auto X = [&](double v) { return L + (std::log10(v) - std::log10(xmin)) / (std::log10(xmax) - std::log10(xmin)) * (W - L - R); };
  auto Y = [&](double v) { return H - B - (std::log10(v) - std::log10(ymin)) / (std::log10(ymax) - std::log10(ymin)) * (H - T - B); };
  std::string s = fmt::format(
      "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' font-family='sans-serif' font-size='12'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n"
      "<text x='{}' y='24' font-size='16'>sixfold roofline (measured ceilings)</text>\n",
      W, H, L);
  for (int e = -3; e <= 3; ++e) {
    const double x = X(std::pow(10.0, e));
    s += fmt::format("<line x1='{0}' y1='{1}' x2='{0}' y2='{2}' stroke='#eee'/><text x='{0}' y='{3}' text-anchor='middle'>1e{4}</text>\n",
                     x, T, H - B, H - B + 16, e);
  }
  for (int e = 8; e <= 15; ++e) {
    const double y = Y(std::pow(10.0, e));
    s += fmt::format("<line x1='{0}' y1='{1}' x2='{2}' y2='{1}' stroke='#eee'/><text x='{3}' y='{4}' text-anchor='end'>1e{5}</text>\n",
                     L, y, W - R, L - 6, y + 4, e);
  }
  s += fmt::format("<text x='{}' y='{}' text-anchor='middle'>arithmetic intensity (FLOP / minimum byte)</text>\n", (L + W - R) / 2, H - 20);
  s += fmt::format("<text x='20' y='{}' transform='rotate(-90 20 {})' text-anchor='middle'>attained FLOP/s</text>\n", (T + H - B) / 2, (T + H - B) / 2);
  auto roof = [&](double bw, double peak, const char* color, const std::string& label) {
    std::string pts;
    for (int i = 0; i <= 120; ++i) {
      const double ai = std::pow(10.0, -3.0 + 6.0 * i / 120.0);
      const double y = std::clamp(std::min(peak, bw * ai), ymin, ymax);
      pts += fmt::format("{:.1f},{:.1f} ", X(ai), Y(y));
    }
    s += fmt::format("<polyline points='{}' fill='none' stroke='{}' stroke-width='2'/>\n", pts, color);
    s += fmt::format("<text x='{}' y='{}' fill='{}'>{}</text>\n", X(xmax) - 4, Y(std::min(peak, bw * xmax)) - 6, color, label);
  };
  if (c.cpu) roof(c.cpu->copy_gbps * 1e9, c.cpu->fma_gflops * 1e9, "#555",
                  fmt::format("CPU: {:.0f} GB/s, {:.0f} GFLOP/s", c.cpu->copy_gbps, c.cpu->fma_gflops));
  if (c.gpu) roof(c.gpu->copy_gbps * 1e9, c.gpu->fma_tflops * 1e12, "#2a7",
                  fmt::format("GPU: {:.0f} GB/s, {:.1f} TFLOP/s f32", c.gpu->copy_gbps, c.gpu->fma_tflops));
  int k = 0;
  for (const Row& r : rows) {
    if (r.arithmetic_intensity <= 0 || r.tflops <= 0) continue;
    const char* color = r.kind == ImplKind::sixfold ? "#1f5fbf" : (r.kind == ImplKind::peer ? "#e07b00" : "#999");
    const double x = X(std::clamp(r.arithmetic_intensity, xmin, xmax)) + 6.0 * (k % 5);
    const double y = Y(std::clamp(r.tflops * 1e12, ymin, ymax));
    if (r.backend == "cuda")
      s += fmt::format("<rect x='{}' y='{}' width='8' height='8' fill='{}'><title>{}</title></rect>\n", x - 4, y - 4, color,
                       fmt::format("{} {} {} {}: {:.1f}% of roofline", r.op, r.workload, r.backend, r.impl, r.roofline_pct));
    else
      s += fmt::format("<circle cx='{}' cy='{}' r='4' fill='{}'><title>{}</title></circle>\n", x, y, color,
                       fmt::format("{} {} {} {}: {:.1f}% of roofline", r.op, r.workload, r.backend, r.impl, r.roofline_pct));
    if (r.kind == ImplKind::sixfold)
      s += fmt::format("<text x='{}' y='{}' font-size='10' fill='{}'>{} {} ({:.0f}%)</text>\n", x + 8, y + 3 + 11 * (k % 3),
                       color, r.op, r.workload, r.roofline_pct);
    ++k;
  }
  s += fmt::format("<text x='{}' y='{}' font-size='11'>● CPU  ■ GPU   <tspan fill='#1f5fbf'>sixfold</tspan>  <tspan fill='#e07b00'>peer</tspan>  <tspan fill='#999'>naive</tspan></text>\n",
                   L + 10, T + 14);
  return s + "</svg>\n";
}

}  // namespace sixfold::bench
