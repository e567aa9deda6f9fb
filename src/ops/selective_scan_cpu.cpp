// CPU backend of the selective scan: channels across all cores, SIMD across the state.
//
// Work items are (sequence, group, block of up to 16 channels of that group). An item walks its
// sequence in time chunks: the chunk of input-dependent B and C is converted once into (t, n)
// f32 tiles shared by the block's channels (so the state loop reads them with unit stride), and
// each channel's u, Δ, z are converted once into f32 rows; per step the n states update as one
// vector loop (2^x on A pre-scaled by log2 e), the y products go to 16 lanes summed after the
// step loop, and D·u and silu(z) are applied to the whole chunk before it is written once.
//
// When there are fewer channels than cores, sequences are also cut along time (associativity):
// every segment first computes its affine map h_in -> h_out per state (a = Π exp(ΔA), b = the
// state reached from 0), the maps are composed in order with the Affine monoid to give each
// segment its incoming state, then each segment is run again from that state and writes out.
// That costs the exponentials twice and pays off only when cores would otherwise idle.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "rows_cpu.hpp"
#include "selective_scan_entries.hpp"
#include "sixfold/algebra/instances.hpp"
#include "sixfold/runtime/vec_math.hpp"

namespace sixfold::detail {
namespace {

constexpr std::int64_t kChannelBlock = 16;

// log(1 + e^x) without overflow, taken as x above 20 (as torch and mamba-ssm); vectorizable:
// max(x, 0) + log1p(e^−|x|), log1p(e) = 2·atanh(e / (2 + e)) by its odd series (e ≤ 1, so
// r ≤ 1/3 and 7 terms reach f32 precision; small e stays exact, no 1 + e rounding).
inline float softplus_f32(float x) {
  const float e = exp_f32(-std::fabs(x));
  const float r = e / (2.0f + e), r2 = r * r;
  float p = 1.0f / 13.0f;
  p = p * r2 + 1.0f / 11.0f;
  p = p * r2 + 1.0f / 9.0f;
  p = p * r2 + 1.0f / 7.0f;
  p = p * r2 + 1.0f / 5.0f;
  p = p * r2 + 1.0f / 3.0f;
  p = p * r2 + 1.0f;
  const float y = (x > 0.0f ? x : 0.0f) + 2.0f * r * p;
  return x > 20.0f ? x : y;
}

// 2^x for the step loop, whose A is pre-scaled by log2 e once per channel: x = k + f with
// |f| ≤ 1/2, 2^f by its degree-6 Taylor polynomial (max relative error 2.2e-7 on [−126, 127]),
// 2^k as exponent bits; below −126 it returns 0. Vectorizes; ~8 vector instructions fewer per
// 16 states than exp_f32's Cody–Waite path (the step loop 10–20% faster in isolation).
inline float exp2_f32(float x) {
  const float xc = x < -126.0f ? -126.0f : (x > 127.0f ? 127.0f : x);
  const float k = __builtin_rintf(xc);
  const float f = xc - k;
  float p = 1.5403530393e-4f;
  p = p * f + 1.3333558146e-3f;
  p = p * f + 9.6181291076e-3f;
  p = p * f + 5.5504108665e-2f;
  p = p * f + 2.4022650696e-1f;
  p = p * f + 6.9314718056e-1f;
  p = p * f + 1.0f;
  const float y = p * std::bit_cast<float>((std::int32_t(k) + 127) << 23);
  return x < -126.0f ? 0.0f : (x != x ? x : y);
}

struct Scratch {
  std::int64_t T = 0, n = 0;
  std::vector<float> u, dt, z, y, Bt, Ct, prod, lanes, A2;
  Scratch(std::int64_t T_, std::int64_t n_) : T(T_), n(n_), u(std::size_t(T_)), dt(std::size_t(T_)),
      z(std::size_t(T_)), y(std::size_t(T_)), Bt(std::size_t(T_ * n_)),
      Ct(std::size_t(T_ * n_)), prod(std::size_t(n_)), lanes(std::size_t(T_ * 16)), A2(std::size_t(n_)) {}
};

// Time chunk: B and C tiles of (T, n) f32 stay within ~128 KB together.
std::int64_t chunk_len(std::int64_t n) { return std::clamp<std::int64_t>(16384 / n, 64, 1024); }

const void* at(const void* base, DType t, std::int64_t offset) {
  return static_cast<const char*>(base) + std::size_t(offset) * std::size_t(dtype_bits(t) / 8);
}

struct Seq {
  std::int64_t start = 0, len = 0;
};

Seq sequence(const SelectiveScanArgs& a, std::int64_t b) {
  if (!a.cu_seqlens) return {0, a.len};
  return {a.cu_seqlens[b], a.cu_seqlens[b + 1] - a.cu_seqlens[b]};
}

// (T, n) tile of an input-dependent B or C: rows (b, g, s) of the chunk [t0, t0 + T). Step-major
// with the n rows read side by side: contiguous stores, n sequential load streams (8× faster at
// n = 16 than converting one row at a time and scattering it with stride n).
void load_tile(const SelectiveScanArgs& a, const void* base, const std::int64_t (&st)[3], std::int64_t b,
               std::int64_t g, std::int64_t t0, std::int64_t T, float* tile) {
  const std::int64_t n = a.n, ss = st[2], off = b * st[0] + g * st[1] + t0;
  switch (a.dtype) {
    case DType::f32: {
      const float* p = static_cast<const float*>(base) + off;
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t s = 0; s < n; ++s) tile[t * n + s] = p[s * ss + t];
      return;
    }
    case DType::bf16: {
      const std::uint16_t* p = static_cast<const std::uint16_t*>(base) + off;
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t s = 0; s < n; ++s)
          tile[t * n + s] = std::bit_cast<float>(std::uint32_t(p[s * ss + t]) << 16);
      return;
    }
    case DType::f16: {
      const std::uint16_t* p = static_cast<const std::uint16_t*>(base) + off;
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t s = 0; s < n; ++s) tile[t * n + s] = to_float(Half{p[s * ss + t]});
      return;
    }
    default:
      return;
  }
}

// The recurrence of one channel over T steps in f32, states updated in place in h[n]; A is
// pre-scaled by log2 e (decay = 2^(Δ·A·log2 e)).
// kOut: y[t] = Σ_s C·h, the products kept in 16 lanes per step (lanes[t][16]) and summed after
// the loop, so no horizontal reduction sits in the step loop (1.7× faster per step at n = 16
// than a reduction per step, 1 thread); kProd: prod[s] *= Π_t exp(ΔA) (the segment's map).
constexpr std::int64_t kLanes = 16;

template <bool kOut, bool kProd>
void run_steps(const float* __restrict A, const float* __restrict dt, const float* __restrict u,
               const float* __restrict B, std::int64_t b_step, const float* __restrict C,
               std::int64_t c_step, std::int64_t T, std::int64_t n, float* __restrict h,
               float* __restrict y, float* __restrict prod, float* __restrict lanes) {
  const std::int64_t n16 = n / kLanes * kLanes;
  for (std::int64_t t = 0; t < T; ++t) {
    const float d = dt[t], du = d * u[t];
    const float* Bt = B + t * b_step;
    const float* Ct = C + t * c_step;
    float* acc = lanes + t * kLanes;
    if constexpr (kOut) {
#pragma omp simd
      for (std::int64_t l = 0; l < kLanes; ++l) acc[l] = 0.0f;
    }
    for (std::int64_t s0 = 0; s0 < n16; s0 += kLanes) {
#pragma omp simd
      for (std::int64_t l = 0; l < kLanes; ++l) {
        const std::int64_t s = s0 + l;
        const float decay = exp2_f32(d * A[s]);
        const float hv = decay * h[s] + du * Bt[s];
        h[s] = hv;
        if constexpr (kOut) acc[l] += hv * Ct[s];
        if constexpr (kProd) prod[s] *= decay;
      }
    }
#pragma omp simd
    for (std::int64_t s = n16; s < n; ++s) {  // n % 16 tail
      const float decay = exp2_f32(d * A[s]);
      const float hv = decay * h[s] + du * Bt[s];
      h[s] = hv;
      if constexpr (kOut) acc[s - n16] += hv * Ct[s];
      if constexpr (kProd) prod[s] *= decay;
    }
  }
  if constexpr (kOut)
    for (std::int64_t t = 0; t < T; ++t) {
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (std::int64_t l = 0; l < kLanes; ++l) sum += lanes[t * kLanes + l];
      y[t] = sum;
    }
}

enum class Mode { out, aggregate };

// Channels [c0, c1) of one group of sequence b over its steps [t_begin, t_end), states in
// h[(c − c0)·n + s]. Mode::out writes out; Mode::aggregate multiplies prod[(c − c0)·n + s] by the
// decay product and writes nothing.
void run_block(const SelectiveScanArgs& a, Scratch& w, std::int64_t b, std::int64_t c0, std::int64_t c1,
               std::int64_t t_begin, std::int64_t t_end, float* h, float* prod, Mode mode) {
  const std::int64_t n = a.n, g = c0 / (a.d / a.groups);
  const Seq seq = sequence(a, b);
  const float* Bfix = static_cast<const float*>(a.B);
  const float* Cfix = static_cast<const float*>(a.C);
  for (std::int64_t t0 = t_begin; t0 < t_end; t0 += w.T) {
    const std::int64_t T = std::min(w.T, t_end - t0), tg = seq.start + t0;  // tg: packed index
    if (a.var_B) load_tile(a, a.B, a.B_stride, b, g, tg, T, w.Bt.data());
    if (a.var_C && mode == Mode::out) load_tile(a, a.C, a.C_stride, b, g, tg, T, w.Ct.data());
    for (std::int64_t c = c0; c < c1; ++c) {
      load_row(a.dtype, at(a.u, a.dtype, b * a.u_stride[0] + c * a.u_stride[1] + tg), w.u.data(), T);
      load_row(a.dtype, at(a.delta, a.dtype, b * a.delta_stride[0] + c * a.delta_stride[1] + tg), w.dt.data(), T);
      const float bias = a.delta_bias ? a.delta_bias[c] : 0.0f;
      float* dt = w.dt.data();
      if (a.delta_softplus) {
        for (std::int64_t t = 0; t < T; ++t) dt[t] = softplus_f32(dt[t] + bias);
      } else if (bias != 0.0f) {
        for (std::int64_t t = 0; t < T; ++t) dt[t] += bias;
      }
      float* A = w.A2.data();  // A·log2 e for exp2_f32
      for (std::int64_t k = 0; k < n; ++k) A[k] = a.A[c * n + k] * 1.4426950408889634f;
      const float* B = a.var_B ? w.Bt.data() : Bfix + c * n;
      const float* C = a.var_C ? w.Ct.data() : Cfix + c * n;
      const std::int64_t bs = a.var_B ? n : 0, cs = a.var_C ? n : 0;
      float* hc = h + (c - c0) * n;
      if (mode == Mode::aggregate) {
        run_steps<false, true>(A, dt, w.u.data(), B, bs, C, cs, T, n, hc, nullptr, prod + (c - c0) * n, nullptr);
        continue;
      }
      float* y = w.y.data();
      run_steps<true, false>(A, dt, w.u.data(), B, bs, C, cs, T, n, hc, y, nullptr, w.lanes.data());
      if (a.D) {
        const float Dv = a.D[c];
        const float* u = w.u.data();
        for (std::int64_t t = 0; t < T; ++t) y[t] += Dv * u[t];
      }
      if (a.z) {
        float* z = w.z.data();
        load_row(a.dtype, at(a.z, a.dtype, b * a.z_stride[0] + c * a.z_stride[1] + tg), z, T);
        for (std::int64_t t = 0; t < T; ++t) y[t] *= z[t] / (1.0f + exp_f32(-z[t]));
      }
      void* dst = static_cast<char*>(a.out) +
                  std::size_t(b * a.out_stride[0] + c * a.out_stride[1] + tg) * std::size_t(dtype_bits(a.dtype) / 8);
      store_row(a.dtype, y, dst, T);
    }
  }
}

void init_state(const SelectiveScanArgs& a, std::int64_t b, std::int64_t c0, std::int64_t c1, float* h) {
  const std::size_t count = std::size_t((c1 - c0) * a.n);
  if (a.initial_state) std::copy_n(a.initial_state + (b * a.d + c0) * a.n, count, h);
  else std::fill_n(h, count, 0.0f);
}

void store_state(const SelectiveScanArgs& a, std::int64_t b, std::int64_t c0, std::int64_t c1, const float* h) {
  if (a.final_state) std::copy_n(h, std::size_t((c1 - c0) * a.n), a.final_state + (b * a.d + c0) * a.n);
}

// Channels across cores: items (sequence, group, channel block).
void scan_by_channels(const SelectiveScanArgs& a) {
  const std::int64_t per_group = a.d / a.groups;
  const std::int64_t blocks = (per_group + kChannelBlock - 1) / kChannelBlock;
  const std::int64_t items = a.batch * a.groups * blocks;
#pragma omp parallel if (items > 1)
  {
    Scratch w(chunk_len(a.n), a.n);
    std::vector<float> h(std::size_t(kChannelBlock * a.n));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < items; ++i) {
      const std::int64_t b = i / (a.groups * blocks), r = i % (a.groups * blocks);
      const std::int64_t c0 = (r / blocks) * per_group + (r % blocks) * kChannelBlock;
      const std::int64_t c1 = std::min(c0 + kChannelBlock, (r / blocks + 1) * per_group);
      init_state(a, b, c0, c1, h.data());
      run_block(a, w, b, c0, c1, 0, sequence(a, b).len, h.data(), nullptr, Mode::out);
      store_state(a, b, c0, c1, h.data());
    }
  }
}

// Few channels: each sequence of each channel cut into `parts` time segments (see the header).
void scan_by_segments(const SelectiveScanArgs& a, int parts) {
  const std::int64_t n = a.n, channels = a.batch * a.d;
  const std::int64_t items = channels * parts;
  using Map = algebra::AffineMap<float>;
  const algebra::Affine<float> affine;
  std::vector<Map> maps(std::size_t(items * n));     // (channel, part, n): the part's map
  std::vector<float> h_in(std::size_t(items * n));   // (channel, part, n): its incoming state
  auto range = [&](std::int64_t b, std::int64_t p) {
    const std::int64_t len = sequence(a, b).len;
    return std::pair{len * p / parts, len * (p + 1) / parts};
  };
#pragma omp parallel
  {
    Scratch w(chunk_len(n), n);
    std::vector<float> h(static_cast<std::size_t>(n)), prod(static_cast<std::size_t>(n));
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < items; ++i) {  // pass 1: each part's affine map per state
      const std::int64_t ch = i / parts, p = i % parts, b = ch / a.d, c = ch % a.d;
      const auto [t0, t1] = range(b, p);
      std::fill(h.begin(), h.end(), 0.0f);
      std::fill(prod.begin(), prod.end(), 1.0f);
      run_block(a, w, b, c, c + 1, t0, t1, h.data(), prod.data(), Mode::aggregate);
      for (std::int64_t s = 0; s < n; ++s) maps[std::size_t(i * n + s)] = {prod[std::size_t(s)], h[std::size_t(s)]};
    }
#pragma omp for schedule(static)
    for (std::int64_t ch = 0; ch < channels; ++ch) {  // compose the maps in order
      const std::int64_t b = ch / a.d, c = ch % a.d;
      for (std::int64_t s = 0; s < n; ++s) {
        Map acc = affine.identity();
        const float h0 = a.initial_state ? a.initial_state[(b * a.d + c) * n + s] : 0.0f;
        for (std::int64_t p = 0; p < parts; ++p) {
          const std::size_t k = std::size_t((ch * parts + p) * n + s);
          h_in[k] = acc.a * h0 + acc.b;
          acc = affine.combine(acc, maps[k]);
        }
      }
    }
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < items; ++i) {  // pass 2: rerun from the true incoming state
      const std::int64_t ch = i / parts, p = i % parts, b = ch / a.d, c = ch % a.d;
      const auto [t0, t1] = range(b, p);
      std::copy_n(h_in.data() + i * n, std::size_t(n), h.data());
      run_block(a, w, b, c, c + 1, t0, t1, h.data(), nullptr, Mode::out);
      if (p == parts - 1) store_state(a, b, c, c + 1, h.data());
    }
  }
}

}  // namespace

void selective_scan_cpu(const SelectiveScanArgs& a) {
  const int threads = omp_get_max_threads();
  std::int64_t total = 0;
  for (std::int64_t b = 0; b < a.batch; ++b) total += sequence(a, b).len;
  // Cut along time only when channels cannot fill the cores and there is time to cut.
  if (a.batch * a.d < 2 * std::int64_t(threads) && total >= 2048 * a.batch)
    scan_by_segments(a, std::max(2, 2 * threads));
  else
    scan_by_channels(a);
}

void selective_state_update_cpu(const StateUpdateArgs& a) {
  // Rows in blocks of 64 channels of one batch row: softplus, D·x and silu(z) run as vector
  // loops across the block, the state update as a vector loop across the state of each row.
  constexpr std::int64_t kBlock = 64;
  const std::int64_t n = a.n, per_group = a.d / a.groups;
  const std::int64_t blocks_per_b = (a.d + kBlock - 1) / kBlock, blocks = a.batch * blocks_per_b;
  auto load1 = [&](const void* base, std::int64_t off) {
    float v = 0.f;  // written by load_row (GCC 12 could not see it)
    load_row(a.dtype, at(base, a.dtype, off), &v, 1);
    return v;
  };
#pragma omp parallel if (a.batch * a.d * n >= (1 << 15))
  {
    std::vector<float> Bv(static_cast<std::size_t>(n)), Cv(static_cast<std::size_t>(n));
    float xs[kBlock], dts[kBlock], ys[kBlock], zs[kBlock];
    std::int64_t loaded = -1;  // the (batch, group) whose B and C rows Bv, Cv hold
#pragma omp for schedule(static)
    for (std::int64_t k = 0; k < blocks; ++k) {
      const std::int64_t b = k / blocks_per_b, c0 = (k % blocks_per_b) * kBlock;
      const std::int64_t m = std::min(kBlock, a.d - c0);
      for (std::int64_t i = 0; i < m; ++i) {
        xs[i] = load1(a.x, b * a.x_stride[0] + (c0 + i) * a.x_stride[1]);
        dts[i] = load1(a.dt, b * a.dt_stride[0] + (c0 + i) * a.dt_stride[1]) + (a.dt_bias ? a.dt_bias[c0 + i] : 0.0f);
      }
      if (a.dt_softplus)
        for (std::int64_t i = 0; i < m; ++i) dts[i] = softplus_f32(dts[i]);
      for (std::int64_t i = 0; i < m; ++i) {
        const std::int64_t c = c0 + i, g = c / per_group;
        if (b * a.groups + g != loaded) {
          load_row(a.dtype, at(a.B, a.dtype, b * a.B_stride[0] + g * a.B_stride[1]), Bv.data(), n);
          load_row(a.dtype, at(a.C, a.dtype, b * a.C_stride[0] + g * a.C_stride[1]), Cv.data(), n);
          loaded = b * a.groups + g;
        }
        float* h = a.state + (b * a.d + c) * n;
        const float* A = a.A + c * n;
        const float dt = dts[i], dx = dt * xs[i];
        float y = 0.0f;
#pragma omp simd reduction(+ : y)
        for (std::int64_t s = 0; s < n; ++s) {
          const float hv = exp_f32(dt * A[s]) * h[s] + dx * Bv[std::size_t(s)];
          h[s] = hv;
          y += hv * Cv[std::size_t(s)];
        }
        ys[i] = y;
      }
      if (a.D)
        for (std::int64_t i = 0; i < m; ++i) ys[i] += a.D[c0 + i] * xs[i];
      if (a.z) {
        for (std::int64_t i = 0; i < m; ++i) zs[i] = load1(a.z, b * a.z_stride[0] + (c0 + i) * a.z_stride[1]);
        for (std::int64_t i = 0; i < m; ++i) ys[i] *= zs[i] / (1.0f + exp_f32(-zs[i]));
      }
      for (std::int64_t i = 0; i < m; ++i) {
        void* dst = static_cast<char*>(a.out) +
                    std::size_t(b * a.out_stride[0] + (c0 + i) * a.out_stride[1]) * std::size_t(dtype_bits(a.dtype) / 8);
        store_row(a.dtype, &ys[i], dst, 1);
      }
    }
  }
}

}  // namespace sixfold::detail
