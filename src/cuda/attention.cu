// src/cuda/attention.cu — the CUDA backend of attention and merge_attention_states.
//
// out_i = Σ_j softmax_j(scale · q_i·k_j) v_j over the visible keys j, computed tile by tile: the
// online-softmax state (m, l, o) is a monoid, so key tiles fold in any grouping and the scores
// never leave registers (associativity + locality). The same monoid merges the partial results
// of split key ranges: (o₁, lse₁) ⊕ (o₂, lse₂) = ((e^{lse₁} o₁ + e^{lse₂} o₂) / e^{lse}, lse) with
// lse = log(e^{lse₁} + e^{lse₂}).
//
// Kernels (bf16 / f16 operands, f32 accumulation):
//   q_len ≤ 16         attn_decode_mma     GQA-packed rows, key range split over blocks and warps,
//                                          splits merged by attn_combine_splits (flash-decoding)
//   D ∈ {64, 128, 256} attn_prefill_wgmma  Hopper warpgroup MMAs, softmax overlapped with the MMAs
//   otherwise (D 96)   attn_prefill_mma    mma.sync, FlashAttention-2 style
// Inputs need 16-byte aligned base pointers and token/head/batch strides (cp.async moves 16-byte
// chunks); other layouts are rejected with an error naming the tensor.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
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

// Split partials → final rows: one warp per (batch, head, query) row, lanes across head_dim.
template <class T>
__global__ void attn_combine_splits(const Problem p, int D) {
  const i64 row = i64(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  const i64 rows = i64(p.batch) * p.q_heads * p.q_len;
  if (row >= rows) return;
  const int i = int(row % p.q_len), h = int(row / p.q_len % p.q_heads), b = int(row / (i64(p.q_len) * p.q_heads));
  const Seq sq = seq_of(p, b);
  if (i >= sq.lq) return;
  float mx = kNegInf;
  for (int z = 0; z < p.num_splits; ++z) mx = fmaxf(mx, p.part_lse[z * rows + row]);
  T* O = static_cast<T*>(p.out) + sq.o_off + h * p.os[1] + i64(i) * p.os[2];
  for (int c = lane; c < D; c += 32) {
    float acc = 0.0f, sum = 0.0f;
    if (mx != kNegInf) {
      for (int z = 0; z < p.num_splits; ++z) {
        const float lz = p.part_lse[z * rows + row];
        if (lz == kNegInf) continue;  // an empty split contributes nothing (its o is 0)
        const float w = __expf(lz - mx);
        acc += w * p.part_o[(z * rows + row) * D + c];
        sum += w;
      }
    }
    store_f32<T>(O + c, sum > 0.0f ? acc / sum : 0.0f);
  }
  if (p.lse && lane == 0) {
    float total = 0.0f;
    if (mx != kNegInf)
      for (int z = 0; z < p.num_splits; ++z) {
        const float lz = p.part_lse[z * rows + row];
        if (lz != kNegInf) total += __expf(lz - mx);
      }
    p.lse[sq.l_off + h * p.ls[1] + i64(i) * p.ls[2]] = total > 0.0f ? mx + __logf(total) : kNegInf;
  }
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

class DeviceGuard {
 public:
  explicit DeviceGuard(int device, const char* where) {
    check_cuda(cudaGetDevice(&previous_), where);
    if (device != previous_) check_cuda(cudaSetDevice(device), where);
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

inline i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

template <class Kernel>
void launch(Kernel kernel, dim3 grid, int threads, int smem, cudaStream_t stream, const Problem& p) {
  if (smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), kWhere);
  kernel<<<grid, threads, smem, stream>>>(p);
  check_cuda(cudaGetLastError(), kWhere);
}

int multiprocessors(int device) {
  int sms = 0;
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), kWhere);
  return sms;
}

// Splits of the key range for decode: enough blocks for ~2 per multiprocessor, at least 4
// tiles (256 keys) per split.
int decode_splits(const Problem& p, int device) {
  const i64 row_blocks = ceil_div(i64(p.group) * p.q_len, 16);
  const i64 blocks = i64(p.batch) * p.kv_heads * row_blocks;
  const i64 tiles = ceil_div(p.kv_len, 64);
  const i64 want = ceil_div(2 * i64(multiprocessors(device)), blocks);
  return int(std::clamp<i64>(std::min(want, tiles / 4), 1, 256));
}

template <class T, int D>
void run_decode(Problem p, int device, cudaStream_t stream, int splits) {
  using Tr = DecodeMmaTraits<D>;
  p.num_splits = splits > 0 ? splits : decode_splits(p, device);
  const dim3 grid(unsigned(ceil_div(i64(p.group) * p.q_len, Tr::kRows)), unsigned(p.batch * p.kv_heads),
                  unsigned(p.num_splits));
  if (p.num_splits == 1) return launch(attn_decode_mma<T, D>, grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
  const i64 rows = i64(p.batch) * p.q_heads * p.q_len;
  parallel::cuda::detail::Scratch scratch(std::size_t(p.num_splits) * rows * (D + 1) * sizeof(float), stream,
                                          kWhere);
  p.part_o = static_cast<float*>(scratch.get());
  p.part_lse = p.part_o + std::size_t(p.num_splits) * rows * D;
  launch(attn_decode_mma<T, D>, grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
  attn_combine_splits<T><<<unsigned(ceil_div(rows, 8)), 256, 0, stream>>>(p, D);
  check_cuda(cudaGetLastError(), kWhere);
}

template <class T, int D>
void run_prefill_mma(const Problem& p, cudaStream_t stream) {
  using Tr = PrefillMmaTraits<D>;
  const dim3 grid(unsigned(ceil_div(p.q_len, Tr::kBM)), unsigned(p.q_heads), unsigned(p.batch));
  launch(attn_prefill_mma<T, D>, grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
}

template <class T, int D>
void run_prefill_wgmma(const Problem& p, cudaStream_t stream) {
  using Tr = PrefillWgmmaTraits<D>;
  const dim3 grid(unsigned(ceil_div(p.q_len, Tr::kBM)), unsigned(p.q_heads), unsigned(p.batch));
  launch(attn_prefill_wgmma<T, D>, grid, Tr::kThreads, Tr::kSmemBytes, stream, p);
}

template <class T, int D>
void run(const Problem& p, int device, cudaStream_t stream, Kernel kernel, int splits) {
  if (kernel == Kernel::automatic)
    kernel = p.q_len <= 16 ? Kernel::decode : (D == 96 ? Kernel::prefill_mma : Kernel::prefill_wgmma);
  switch (kernel) {
    case Kernel::decode: return run_decode<T, D>(p, device, stream, splits);
    case Kernel::prefill_mma: return run_prefill_mma<T, D>(p, stream);
    default:
      if constexpr (D == 96) return run_prefill_mma<T, D>(p, stream);
      else return run_prefill_wgmma<T, D>(p, stream);
  }
}

void check_aligned(const void* ptr, const std::int64_t (&stride)[3], bool varlen, const char* arg) {
  bool ok = reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0;
  for (int d = varlen ? 1 : 0; d < 3; ++d) ok = ok && stride[d] % 8 == 0;
  if (!ok)
    throw_argument_error(kWhere, arg, "a 16-byte aligned base and strides that are multiples of 8 elements",
                         "an unaligned layout");
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

void attention_cuda_kernel(const AttentionArgs& a, int device, Stream stream, attn::Kernel kernel, int splits) {
  using namespace attn;
  DeviceGuard guard(device, kWhere);
  if (a.dtype != DType::bf16 && a.dtype != DType::f16)
    throw_argument_error(kWhere, "q", "dtype bf16 or f16 on CUDA", std::string(dtype_name(a.dtype)));
  if (a.head_dim != 64 && a.head_dim != 96 && a.head_dim != 128 && a.head_dim != 256)
    throw_argument_error(kWhere, "q", "head_dim 64, 96, 128 or 256 on CUDA", std::to_string(a.head_dim));
  if (a.q_len > 0x7fffffff || a.kv_len > 0x7fffffff || a.batch > 65535 || a.q_heads > 65535)
    throw_argument_error(kWhere, "q", "q_len, kv_len < 2^31 and batch, heads ≤ 65535 on CUDA", "more");
  const bool varlen = a.cu_q != nullptr;
  check_aligned(a.q, a.q_stride, varlen, "q");
  check_aligned(a.k, a.k_stride, varlen, "k");
  check_aligned(a.v, a.v_stride, varlen, "v");
  check_aligned(a.out, a.out_stride, varlen, "out");
  if (a.batch == 0 || a.q_heads == 0 || a.q_len == 0) return;
  const Problem p = make_problem(a);
  const cudaStream_t s = static_cast<cudaStream_t>(stream.handle);
  auto by_dim = [&]<class T>() {
    switch (a.head_dim) {
      case 64: return run<T, 64>(p, device, s, kernel, splits);
      case 96: return run<T, 96>(p, device, s, kernel, splits);
      case 128: return run<T, 128>(p, device, s, kernel, splits);
      default: return run<T, 256>(p, device, s, kernel, splits);
    }
  };
  if (a.dtype == DType::bf16) by_dim.template operator()<__nv_bfloat16>();
  else by_dim.template operator()<__half>();
}

void attention_cuda(const AttentionArgs& a, int device, Stream stream) {
  attention_cuda_kernel(a, device, stream, attn::Kernel::automatic, 0);
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
