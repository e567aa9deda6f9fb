// src/cuda/attention.cu — the CUDA backend of attention and merge_attention_states.
//
// out_i = Σ_j softmax_j(scale · q_i·k_j) v_j over the visible keys j, computed tile by tile: the
// online-softmax state (m, l, o) is a monoid, so key tiles fold in any grouping and the scores
// never leave registers (associativity + locality). The same monoid merges the partial results
// of split key ranges: (o₁, lse₁) ⊕ (o₂, lse₂) = ((e^{lse₁} o₁ + e^{lse₂} o₂) / e^{lse}, lse) with
// lse = log(e^{lse₁} + e^{lse₂}).
//
// Kernels (bf16 / f16 operands, f32 accumulation), chosen per call:
//   q_len ≤ 16          attn_decode_mma         GQA-packed rows, key range split over blocks and
//                                               warps, splits merged by attn_combine_splits
//                                               (flash-decoding)
//   D 64/128/256 dense  attn_prefill_wgmma_tma  wgmma, TMA producer, ping-pong warpgroups
//   D 64/128 varlen     attn_prefill_wgmma_pp   wgmma, cp.async stages, ping-pong warpgroups
//   D 256 varlen        attn_prefill_wgmma      wgmma, cp.async, block barrier per tile
//   D 96                attn_prefill_mma        mma.sync, FlashAttention-2 style
// The kernels read 16-byte chunks: views with 16-byte aligned bases and strides that are multiples
// of 8 elements (every dense BHLD/BLHD layout) are used in place; any other strided view is
// gathered into a contiguous scratch copy first (out: written through one).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "../ops/attention_entries.hpp"
#include "attention_common.cuh"
#include "attention_mma.cuh"
#include "attention_wgmma.cuh"
#include "sixfold/parallel/cuda.cuh"
#include "sixfold/runtime/error.hpp"

namespace sixfold::detail {
namespace attn {

using parallel::cuda::check_cuda;
constexpr const char* kWhere = "sixfold::attention (cuda)";
constexpr const char* kWhereMerge = "sixfold::merge_attention_states (cuda)";

// ---- Merging (o, lse) states -------------------------------------------------------------------

template <class T> __device__ __forceinline__ float load_f32(const T* p) {
  if constexpr (std::is_same_v<T, float>) return *p;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(*p);
  else return __half2float(*p);
}
template <class T> __device__ __forceinline__ void store_f32(T* p, float x) {
  if constexpr (std::is_same_v<T, float>) *p = x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) *p = __float2bfloat16_rn(x);
  else *p = __float2half_rn(x);
}

// Split partials → final rows: one block per (batch, head, query) row. The block first turns the
// splits' lse values into weights w_z = exp(lse_z − max) in shared memory, then each thread sums
// w_z · o_z over the splits for its columns (coalesced across threads, loads unrolled).
constexpr int kCombineThreads = 128, kMaxSplits = 1024;

template <class T>
__global__ void __launch_bounds__(kCombineThreads) attn_combine_splits(const Problem p, int D) {
  __shared__ float w[kMaxSplits];
  __shared__ float red[kCombineThreads / 32];
  const i64 row = blockIdx.x;
  const i64 rows = i64(p.batch) * p.q_heads * p.q_len;
  const int i = int(row % p.q_len), h = int(row / p.q_len % p.q_heads), b = int(row / (i64(p.q_len) * p.q_heads));
  const Seq sq = seq_of(p, b);
  if (i >= sq.lq) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Launched as a programmatic dependent of the decode grid: wait for its partials (a no-op
  // when launched plainly).
  parallel::cuda::wait_dependencies();
  auto block_reduce = [&](float x, bool is_max) {
    for (int off = 16; off; off >>= 1) {
      const float y = __shfl_xor_sync(0xffffffffu, x, off);
      x = is_max ? fmaxf(x, y) : x + y;
    }
    __syncthreads();  // red[] may still be read from the previous reduction
    if (lane == 0) red[warp] = x;
    __syncthreads();
    x = red[0];
    for (int k = 1; k < kCombineThreads / 32; ++k) x = is_max ? fmaxf(x, red[k]) : x + red[k];
    return x;
  };
  float mx = kNegInf;
  for (int z = tid; z < p.num_splits; z += kCombineThreads) mx = fmaxf(mx, p.part_lse[z * rows + row]);
  mx = block_reduce(mx, true);
  float part = 0.0f;
  for (int z = tid; z < p.num_splits; z += kCombineThreads) {
    const float lz = p.part_lse[z * rows + row];
    w[z] = mx == kNegInf || lz == kNegInf ? 0.0f : __expf(lz - mx);  // an empty split weighs 0
    part += w[z];
  }
  const float total = block_reduce(part, false);  // its barriers also publish w[]
  const float inv = total > 0.0f ? 1.0f / total : 0.0f;
  T* O = static_cast<T*>(p.out) + sq.o_off + h * p.os[1] + i64(i) * p.os[2];
  for (int c = tid; c < D; c += kCombineThreads) {
    float acc = 0.0f;
#pragma unroll 8
    for (int z = 0; z < p.num_splits; ++z)
      if (w[z] != 0.0f) acc += w[z] * p.part_o[(z * rows + row) * D + c];
    store_f32<T>(O + c, acc * inv);
  }
  if (p.lse && tid == 0) p.lse[sq.l_off + h * p.ls[1] + i64(i) * p.ls[2]] = total > 0.0f ? mx + __logf(total) : kNegInf;
}

// The public two-way merge: one warp per row. Every lane reads both lse values before lane 0
// writes lse_out (which may alias lse1 or lse2); each o element is read and then written by the
// same lane, so out may alias o1 or o2.
template <class T>
__global__ void attn_merge_states(const MergeArgs a) {
  const i64 row = i64(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= a.rows) return;
  const float l1 = a.lse1[row * a.lse1_stride], l2 = a.lse2[row * a.lse2_stride];
  const float mx = fmaxf(l1, l2);
  const bool none = mx == kNegInf;
  const float w1 = none || l1 == kNegInf ? 0.0f : __expf(l1 - mx);
  const float w2 = none || l2 == kNegInf ? 0.0f : __expf(l2 - mx);
  const float sum = w1 + w2, inv = none ? 0.0f : 1.0f / sum;
  const T* o1 = static_cast<const T*>(a.o1) + row * a.o1_stride;
  const T* o2 = static_cast<const T*>(a.o2) + row * a.o2_stride;
  T* out = static_cast<T*>(a.out) + row * a.out_stride;
  for (i64 c = lane; c < a.head_dim; c += 32) {
    float x = 0.0f;
    if (w1 > 0.0f) x += w1 * load_f32(o1 + c);
    if (w2 > 0.0f) x += w2 * load_f32(o2 + c);
    store_f32<T>(out + c, x * inv);
  }
  __syncwarp();
  if (a.lse_out && lane == 0) a.lse_out[row * a.lse_out_stride] = none ? kNegInf : mx + __logf(sum);
}

// ---- Host side ---------------------------------------------------------------------------------

using parallel::cuda::DeviceGuard;

inline i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

// Launches `kernel`, raising its dynamic shared-memory limit once per device.
template <auto kernel>
void launch(dim3 grid, int threads, int smem, cudaStream_t stream, const Problem& p, int device) {
  static std::atomic<std::uint64_t> configured{0};  // bit d: done on device d
  const std::uint64_t bit = device < 64 ? std::uint64_t(1) << device : 0;
  if (smem > 48 * 1024 && !(configured.load(std::memory_order_relaxed) & bit)) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), kWhere);
    configured.fetch_or(bit, std::memory_order_relaxed);
  }
  kernel<<<grid, threads, smem, stream>>>(p);
  check_cuda(cudaGetLastError(), kWhere);
}

int multiprocessors(int device) { return parallel::cuda::sm_count(device, kWhere); }

// Splits of the key range for decode: one block per SM (half the resident slots for D ≤ 128),
// splits = SMs / blocks (each split at least 4 tiles of 64 keys); a launch that already fills
// the SMs is not split. H200 sweep (docs/perf/attention_cuda.md, decode 6), b8 × 8k / b2 × 32k /
// b1 × 128k keys, graph replay: one block per SM 86.1 / 85.8 / 92.0% of copy, a full wave of
// two per SM 82.5 / 81.8 / 89.5%, more waves less still (each block's prologue, Q load and
// partial-row write are paid per block, and the merge reads more partials).
int decode_splits(const Problem& p, int device) {
  const i64 row_blocks = ceil_div(i64(p.group) * p.q_len, 16);
  const i64 blocks = i64(p.batch) * p.kv_heads * row_blocks;
  const i64 tiles = ceil_div(p.kv_len, 64);
  const i64 sms = multiprocessors(device);
  return int(std::clamp<i64>(std::min(sms / blocks, tiles / 4), 1, kMaxSplits));
}

template <class T, int D>
void run_decode(Problem p, int device, cudaStream_t stream, int splits) {
  using Tr = DecodeMmaTraits<D>;
  p.num_splits = splits > 0 ? splits : decode_splits(p, device);
  const dim3 grid(unsigned(i64(p.batch) * p.kv_heads), unsigned(ceil_div(i64(p.group) * p.q_len, Tr::kRows)),
                  unsigned(p.num_splits));
  if (p.num_splits == 1) return launch<attn_decode_mma<T, D>>(grid, Tr::kThreads, Tr::kSmemBytes, stream, p, device);
  const i64 rows = i64(p.batch) * p.q_heads * p.q_len;
  parallel::cuda::detail::Scratch scratch(std::size_t(p.num_splits) * rows * (D + 1) * sizeof(float), stream,
                                          kWhere);
  p.part_o = static_cast<float*>(scratch.get());
  p.part_lse = p.part_o + std::size_t(p.num_splits) * rows * D;
  launch<attn_decode_mma<T, D>>(grid, Tr::kThreads, Tr::kSmemBytes, stream, p, device);
  // The merge is a programmatic dependent launch (Hopper): its blocks are scheduled as the last
  // decode blocks start and wait on the device, instead of the launch starting after the decode
  // grid drains. Dev hook for A/B timing: SIXFOLD_ATTENTION_CUDA_NO_PDL set → plain launch.
  static const bool pdl = std::getenv("SIXFOLD_ATTENTION_CUDA_NO_PDL") == nullptr;
  parallel::cuda::launch_dependent(attn_combine_splits<T>, dim3(unsigned(rows)), dim3(kCombineThreads), 0, stream,
                                   pdl, kWhere, p, int(D));
}

template <class T, int D>
void run_prefill_mma(const Problem& p, cudaStream_t stream, int device) {
  using Tr = PrefillMmaTraits<D>;
  const dim3 grid(unsigned(ceil_div(p.q_len, Tr::kBM)), unsigned(p.q_heads), unsigned(p.batch));
  launch<attn_prefill_mma<T, D>>(grid, Tr::kThreads, Tr::kSmemBytes, stream, p, device);
}

template <class T, int D>
void run_prefill_wgmma(const Problem& p, cudaStream_t stream, int device) {
  using Tr = PrefillWgmmaTraits<D>;
  const dim3 grid(unsigned(ceil_div(p.q_len, Tr::kBM)), unsigned(p.q_heads), unsigned(p.batch));
  launch<attn_prefill_wgmma<T, D>>(grid, Tr::kThreads, Tr::kSmemBytes, stream, p, device);
}

template <class T, int D>
void run_prefill_pingpong(const Problem& p, cudaStream_t stream, int device) {
  using Tr = PrefillPingpongTraits<D>;
  const dim3 grid(unsigned(ceil_div(p.q_len, Tr::kBM)), unsigned(p.q_heads), unsigned(p.batch));
  launch<attn_prefill_wgmma_pp<T, D>>(grid, Tr::kThreads, Tr::kSmemBytes, stream, p, device);
}

// ---- Tensor maps for the TMA kernel ----

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A dense (batch, heads, tokens, D) view as the 4-D map (D, tokens | heads, heads | tokens, batch),
// token and head dims in ascending stride order, box (64 columns, box_rows tokens), 128-byte
// swizzle. A size-1 dim gets a stride just past the dim before it. False: the driver refused.
bool encode_map(CUtensorMap& map, TmaOrder& order, const void* base, DType dt, i64 D, i64 tokens, i64 heads,
                i64 batch, const std::int64_t (&st)[3], int box_rows) {
  const auto encode = tensor_map_encoder();
  if (!encode) return false;
  const bool token_first = tokens > 1 && (heads == 1 || st[2] <= st[1]);
  order.token_dim = token_first ? 1 : 2;
  order.head_dim = token_first ? 2 : 1;
  const i64 size1 = token_first ? tokens : heads, size2 = token_first ? heads : tokens;
  i64 s1 = (token_first ? st[2] : st[1]) * 2, s2 = (token_first ? st[1] : st[2]) * 2, s3 = st[0] * 2;
  if (size1 == 1) s1 = D * 2;
  if (size2 == 1) s2 = s1 * size1;
  if (batch == 1) s3 = s2 * size2;
  if (s1 % 16 || s2 % 16 || s3 % 16 || s1 <= 0 || s2 <= 0 || s3 <= 0) return false;
  const cuuint64_t dims[4] = {cuuint64_t(D), cuuint64_t(size1), cuuint64_t(size2), cuuint64_t(batch)};
  const cuuint64_t strides[3] = {cuuint64_t(s1), cuuint64_t(s2), cuuint64_t(s3)};
  const cuuint32_t box[4] = {64, token_first ? cuuint32_t(box_rows) : 1u, token_first ? 1u : cuuint32_t(box_rows), 1};
  const cuuint32_t unit[4] = {1, 1, 1, 1};
  return encode(&map, dt == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
                const_cast<void*>(base), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The TMA kernel serves dense calls whose views the driver accepts; false: use another kernel.
template <class T, int D>
bool run_prefill_tma(const Problem& p, const AttentionArgs& a, cudaStream_t stream, int device) {
  using Tr = PrefillTmaTraits<D>;
  if (a.cu_q) return false;  // the packed token count is not known here
  TmaMaps maps{};
  if (!encode_map(maps.q, maps.oq, a.q, a.dtype, D, a.q_len, a.q_heads, a.batch, a.q_stride, Tr::kBM) ||
      !encode_map(maps.k, maps.ok, a.k, a.dtype, D, a.kv_len, a.kv_heads, a.batch, a.k_stride, Tr::kBN) ||
      !encode_map(maps.v, maps.ov, a.v, a.dtype, D, a.kv_len, a.kv_heads, a.batch, a.v_stride, Tr::kBN))
    return false;
  static std::atomic<std::uint64_t> configured{0};
  const std::uint64_t bit = device < 64 ? std::uint64_t(1) << device : 0;
  if (!(configured.load(std::memory_order_relaxed) & bit)) {
    check_cuda(cudaFuncSetAttribute(attn_prefill_wgmma_tma<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    Tr::kSmemBytes), kWhere);
    configured.fetch_or(bit, std::memory_order_relaxed);
  }
  const dim3 grid(unsigned(ceil_div(p.q_len, Tr::kBM)), unsigned(p.q_heads), unsigned(p.batch));
  attn_prefill_wgmma_tma<T, D><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, maps);
  check_cuda(cudaGetLastError(), kWhere);
  return true;
}

template <class T, int D>
void run(const Problem& p, const AttentionArgs& a, int device, cudaStream_t stream, Kernel kernel, int splits) {
  if (kernel == Kernel::automatic)
    kernel = p.q_len <= 16 ? Kernel::decode
             : D == 96   ? Kernel::prefill_mma
                         : Kernel::prefill_wgmma_tma;  // varlen: ping-pong (D 64/128), wgmma (256)
  switch (kernel) {
    case Kernel::decode: return run_decode<T, D>(p, device, stream, splits);
    case Kernel::prefill_mma: return run_prefill_mma<T, D>(p, stream, device);
    case Kernel::prefill_wgmma_tma:
      if constexpr (D != 96)
        if (run_prefill_tma<T, D>(p, a, stream, device)) return;
      [[fallthrough]];
    case Kernel::prefill_wgmma_pp:
      if constexpr (D == 64 || D == 128) return run_prefill_pingpong<T, D>(p, stream, device);
      [[fallthrough]];
    default:
      if constexpr (D == 96) return run_prefill_mma<T, D>(p, stream, device);
      else return run_prefill_wgmma<T, D>(p, stream, device);
  }
}

// ---- Layouts the 16-byte copies cannot read ------------------------------------------------------
// The kernels move 16-byte chunks, so they need 16-byte aligned bases and strides that are
// multiples of 8 elements (strides of size-1 dimensions do not matter). Any other layout is
// gathered into a contiguous scratch copy first (and out is written through one): correct for
// every strided view, at the price of one extra pass over that tensor.

struct Layout3 {  // (batch, heads, tokens) of a q/k/v/out view; the last dim is unit-stride
  i64 size[3];
};

bool aligned(const void* ptr, const std::int64_t (&stride)[3], const Layout3& l) {
  bool ok = reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0;
  for (int d = 0; d < 3; ++d) ok = ok && (l.size[d] <= 1 || stride[d] % 8 == 0);
  return ok;
}

__global__ void attn_copy_strided(const std::uint16_t* src, i64 s0, i64 s1, i64 s2, std::uint16_t* dst, i64 d0,
                                  i64 d1, i64 d2, i64 heads, i64 tokens, i64 cols, i64 total) {
  for (i64 x = blockIdx.x * i64(blockDim.x) + threadIdx.x; x < total; x += i64(gridDim.x) * blockDim.x) {
    const i64 c = x % cols, t = x / cols % tokens, h = x / cols / tokens % heads, b = x / cols / tokens / heads;
    dst[b * d0 + h * d1 + t * d2 + c] = src[b * s0 + h * s1 + t * s2 + c];
  }
}

void copy_strided(const void* src, const std::int64_t (&ss)[3], void* dst, const std::int64_t (&ds)[3],
                  const Layout3& l, i64 cols, cudaStream_t stream) {
  const i64 total = l.size[0] * l.size[1] * l.size[2] * cols;
  if (total == 0) return;
  const unsigned blocks = unsigned(std::min<i64>(ceil_div(total, 256), 65535));
  attn_copy_strided<<<blocks, 256, 0, stream>>>(static_cast<const std::uint16_t*>(src), ss[0], ss[1], ss[2],
                                                static_cast<std::uint16_t*>(dst), ds[0], ds[1], ds[2], l.size[1],
                                                l.size[2], cols, total);
  check_cuda(cudaGetLastError(), kWhere);
}

// Token count of a varlen tensor: the last cumulative offset (one synchronous 4-byte read; only
// on the gather path).
i64 varlen_tokens(const std::int32_t* cu, i64 batch, cudaStream_t stream) {
  std::int32_t total = 0;
  check_cuda(cudaMemcpyAsync(&total, cu + batch, 4, cudaMemcpyDeviceToHost, stream), kWhere);
  check_cuda(cudaStreamSynchronize(stream), kWhere);
  return total;
}

Problem make_problem(const AttentionArgs& a) {
  Problem p{};
  p.q = a.q; p.k = a.k; p.v = a.v; p.out = a.out; p.lse = a.lse;
  for (int d = 0; d < 3; ++d) {
    p.qs[d] = a.q_stride[d]; p.ks[d] = a.k_stride[d]; p.vs[d] = a.v_stride[d];
    p.os[d] = a.out_stride[d]; p.ls[d] = a.lse_stride[d];
  }
  p.cu_q = a.cu_q; p.cu_k = a.cu_k;
  p.batch = int(a.batch); p.q_heads = int(a.q_heads); p.kv_heads = int(a.kv_heads);
  p.group = int(a.q_heads / a.kv_heads); p.q_len = int(a.q_len); p.kv_len = int(a.kv_len);
  p.scale_log2 = a.scale * 1.4426950408889634f;
  // Bands wider than any sequence are unbounded; causal is the band's right edge at 0.
  const i64 span = a.q_len + a.kv_len;
  p.left = a.window_left < 0 || a.window_left > span ? -1 : int(a.window_left);
  const i64 right = a.causal ? 0 : a.window_right;
  p.right = right < 0 || right > span ? -1 : int(right);
  p.num_splits = 1;
  return p;
}

}  // namespace attn

void run_problem(const AttentionArgs& a, int device, cudaStream_t s, attn::Kernel kernel, int splits);

void attention_cuda_kernel(const AttentionArgs& a, int device, Stream stream, attn::Kernel kernel, int splits) {
  using namespace attn;
  DeviceGuard guard(device, kWhere);
  if (a.dtype != DType::bf16 && a.dtype != DType::f16)
    throw_argument_error(kWhere, "q", "dtype bf16 or f16 on CUDA", std::string(dtype_name(a.dtype)));
  if (a.head_dim != 64 && a.head_dim != 96 && a.head_dim != 128 && a.head_dim != 256)
    throw_argument_error(kWhere, "q", "head_dim 64, 96, 128 or 256 on CUDA", std::to_string(a.head_dim));
  if (a.q_len > 0x7fffffff || a.kv_len > 0x7fffffff || a.batch > 65535 || a.q_heads > 65535)
    throw_argument_error(kWhere, "q", "q_len, kv_len < 2^31 and batch, heads ≤ 65535 on CUDA", "more");
  if (a.batch == 0 || a.q_heads == 0 || a.q_len == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream.handle);
  const bool varlen = a.cu_q != nullptr;
  auto layout = [&](i64 heads, i64 len) {
    return Layout3{{varlen ? 1 : a.batch, heads, varlen ? -1 : len}};  // varlen tokens: on demand
  };
  Layout3 lq = layout(a.q_heads, a.q_len), lk = layout(a.kv_heads, a.kv_len);
  auto known = [&](Layout3& l, const std::int32_t* cu) {
    if (l.size[2] < 0) l.size[2] = varlen_tokens(cu, a.batch, s);
  };
  auto probe = [&](const Layout3& l) {  // token sizes unknown yet: treat as > 1
    Layout3 x = l;
    if (x.size[2] < 0) x.size[2] = 2;
    return x;
  };
  AttentionArgs b = a;
  std::unique_ptr<parallel::cuda::detail::Scratch> scratch[4];
  auto contiguous = [&](Layout3& l, const std::int32_t* cu, std::int64_t (&st)[3], int slot) -> void* {
    known(l, cu);
    st[2] = a.head_dim;
    st[1] = l.size[2] * a.head_dim;
    st[0] = l.size[1] * st[1];
    scratch[slot] = std::make_unique<parallel::cuda::detail::Scratch>(
        std::size_t(l.size[0] * st[0]) * 2 + 16, s, kWhere);
    return scratch[slot]->get();
  };
  if (!aligned(a.q, a.q_stride, probe(lq))) {
    b.q = contiguous(lq, a.cu_q, b.q_stride, 0);
    copy_strided(a.q, a.q_stride, const_cast<void*>(b.q), b.q_stride, lq, a.head_dim, s);
  }
  if (!aligned(a.k, a.k_stride, probe(lk))) {
    b.k = contiguous(lk, a.cu_k, b.k_stride, 1);
    copy_strided(a.k, a.k_stride, const_cast<void*>(b.k), b.k_stride, lk, a.head_dim, s);
  }
  if (!aligned(a.v, a.v_stride, probe(lk))) {
    b.v = contiguous(lk, a.cu_k, b.v_stride, 2);
    copy_strided(a.v, a.v_stride, const_cast<void*>(b.v), b.v_stride, lk, a.head_dim, s);
  }
  const bool out_copy = !aligned(a.out, a.out_stride, probe(lq));
  if (out_copy) b.out = contiguous(lq, a.cu_q, b.out_stride, 3);
  if (varlen) {  // packed tensors: the batch stride is unused
    b.q_stride[0] = b.k_stride[0] = b.v_stride[0] = b.out_stride[0] = 0;
  }
  run_problem(b, device, s, kernel, splits);
  if (out_copy) copy_strided(b.out, b.out_stride, a.out, a.out_stride, lq, a.head_dim, s);
}

void run_problem(const AttentionArgs& a, int device, cudaStream_t s, attn::Kernel kernel, int splits) {
  using namespace attn;
  const Problem p = make_problem(a);
  auto by_dim = [&]<class T>() {
    switch (a.head_dim) {
      case 64: return run<T, 64>(p, a, device, s, kernel, splits);
      case 96: return run<T, 96>(p, a, device, s, kernel, splits);
      case 128: return run<T, 128>(p, a, device, s, kernel, splits);
      default: return run<T, 256>(p, a, device, s, kernel, splits);
    }
  };
  if (a.dtype == DType::bf16) by_dim.template operator()<__nv_bfloat16>();
  else by_dim.template operator()<__half>();
}

// Test hooks, read per call: SIXFOLD_ATTENTION_CUDA_KERNEL = mma | wgmma | pingpong | tma | decode forces
// a kernel (any of them computes every supported case; pingpong falls back to wgmma / mma for head
// dims it lacks), SIXFOLD_ATTENTION_CUDA_SPLITS = n forces n key splits on the decode kernel.
void attention_cuda(const AttentionArgs& a, int device, Stream stream) {
  attn::Kernel kernel = attn::Kernel::automatic;
  if (const char* e = std::getenv("SIXFOLD_ATTENTION_CUDA_KERNEL")) {
    const std::string k(e);
    if (k == "mma") kernel = attn::Kernel::prefill_mma;
    else if (k == "wgmma") kernel = attn::Kernel::prefill_wgmma;
    else if (k == "pingpong") kernel = attn::Kernel::prefill_wgmma_pp;
    else if (k == "tma") kernel = attn::Kernel::prefill_wgmma_tma;
    else if (k == "decode") kernel = attn::Kernel::decode;
  }
  int splits = 0;
  if (const char* e = std::getenv("SIXFOLD_ATTENTION_CUDA_SPLITS"))
    splits = std::clamp(std::atoi(e), 0, attn::kMaxSplits);
  attention_cuda_kernel(a, device, stream, kernel, splits);
}

void merge_attention_states_cuda(const MergeArgs& a, int device, Stream stream) {
  using namespace attn;
  DeviceGuard guard(device, kWhereMerge);
  if (a.rows == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream.handle);
  const unsigned blocks = unsigned(ceil_div(a.rows, 8));
  switch (a.dtype) {
    case DType::f32: attn_merge_states<float><<<blocks, 256, 0, s>>>(a); break;
    case DType::bf16: attn_merge_states<__nv_bfloat16><<<blocks, 256, 0, s>>>(a); break;
    case DType::f16: attn_merge_states<__half><<<blocks, 256, 0, s>>>(a); break;
    default: throw_argument_error(kWhereMerge, "o1", "dtype f32, bf16 or f16", std::string(dtype_name(a.dtype)));
  }
  check_cuda(cudaGetLastError(), kWhereMerge);
}

}  // namespace sixfold::detail
