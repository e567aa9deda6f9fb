// Validation of attention, attention_varlen and merge_attention_states (nothing is written when
// it fails), then the backend: the tensors' device picks attention_cpu or attention_cuda.
//
// What is checked: ranks and shapes (head dims equal across q/k/v/out, q_heads a multiple of
// kv_heads, batch and token counts that agree), dtypes per backend (CPU f32/bf16, CUDA bf16/f16;
// merge: f32/bf16/f16), a unit last stride, non-negative strides, outputs that do not overlap
// themselves or the inputs, one device for every tensor, the window and scale parameters, and
// cu_seqlens (int32, batch + 1 entries, starting at 0, non-decreasing, ending at the token
// count; a CUDA cu_seqlens is copied to the host to be checked — batch + 1 ints, synchronous).
#include "sixfold/ops/attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attention_entries.hpp"
#include "rows.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold {
namespace {

using detail::absent;

std::string str(std::int64_t v) { return std::to_string(v); }

void check_dtype_for(std::string_view where, std::string_view arg, const TensorView& t) {
  if (t.device.kind == DeviceKind::cuda) {
    if (t.dtype != DType::bf16 && t.dtype != DType::f16)
      throw_argument_error(where, arg, "dtype bf16 or f16 (CUDA backend)",
                           std::string(dtype_name(t.dtype)));
  } else if (t.dtype != DType::f32 && t.dtype != DType::bf16) {
    throw_argument_error(where, arg, "dtype f32 or bf16 (CPU backend)",
                         std::string(dtype_name(t.dtype)));
  }
}

// Last dimension unit stride (when it has more than one element), every stride non-negative.
void check_strides(std::string_view where, std::string_view arg, const TensorView& t) {
  const int last = t.rank() - 1;
  if (t.size(last) > 1 && t.stride(last) != 1)
    throw_argument_error(where, arg, "unit stride in the last dimension (head_dim)",
                         "stride " + str(t.stride(last)));
  for (int i = 0; i < t.rank(); ++i)
    if (t.stride(i) < 0 && t.size(i) > 1)
      throw_argument_error(where, arg, "non-negative strides",
                           "stride " + str(t.stride(i)) + " in dimension " + std::to_string(i));
}

// An output's elements must be distinct memory: sorted by stride, each dimension's stride must
// reach past the span of the dimensions inside it (a sufficient condition, true for every
// permuted dense layout).
void check_no_self_overlap(std::string_view where, std::string_view arg, const TensorView& t) {
  if (t.numel() <= 1) return;
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (stride, size)
  for (int i = 0; i < t.rank(); ++i)
    if (t.size(i) > 1) dims.push_back({t.stride(i), t.size(i)});
  std::sort(dims.begin(), dims.end());
  std::int64_t span = 0;  // largest offset reached by the inner dimensions
  for (auto [stride, size] : dims) {
    if (stride <= span)
      throw_argument_error(where, arg, "a layout whose elements do not overlap each other",
                           "stride " + str(stride) + " inside a span of " + str(span + 1));
    span += (size - 1) * stride;
  }
}

// Outputs may not share memory with any input (not even exactly: a query tile of another head
// may still be reading it).
void check_disjoint(std::string_view where, std::string_view arg, const TensorView& t,
                    std::string_view other_arg, const TensorView& other) {
  if (t.numel() == 0 || other.numel() == 0) return;
  if (t.data == other.data)
    throw_argument_error(where, arg, "memory separate from '" + std::string(other_arg) + "'",
                         "the same buffer");
  check::no_overlap(where, arg, t, other_arg, other);
}

float resolve_scale(std::string_view where, const AttentionParams& p, std::int64_t head_dim) {
  if (!std::isfinite(p.scale))
    throw_argument_error(where, "params.scale", "a finite number (0: 1/sqrt(head_dim))",
                         std::to_string(p.scale));
  if (p.scale != 0.0f) return p.scale;
  return float(1.0 / std::sqrt(double(head_dim)));
}

void check_window(std::string_view where, const AttentionParams& p) {
  if (p.window_left < -1)
    throw_argument_error(where, "params.window_left", "-1 (unbounded) or a count >= 0",
                         str(p.window_left));
  if (p.window_right < -1)
    throw_argument_error(where, "params.window_right", "-1 (unbounded) or a count >= 0",
                         str(p.window_right));
  if (p.causal && p.window_right > 0)
    throw_argument_error(where, "params.window_right",
                         "0 or -1 with causal (causal already hides every key to the right)",
                         str(p.window_right) + " together with causal = true");
}

void check_head_dim(std::string_view where, const TensorView& q, std::int64_t d) {
  if (q.device.kind == DeviceKind::cuda) {
    if (d != 64 && d != 96 && d != 128 && d != 256)
      throw_argument_error(where, "q", "head_dim 64, 96, 128 or 256 (CUDA backend)",
                           "head_dim " + str(d));
  } else if (d < 1 || d > 256) {
    throw_argument_error(where, "q", "head_dim in 1..256 (CPU backend)", "head_dim " + str(d));
  }
}

// The checks shared by both entries: q/k/v/out of rank `rank` with head_dim last and heads at
// `head_axis`; returns nothing, throws on the first problem.
void check_qkv_out(std::string_view where, const TensorView& q, const TensorView& k,
                   const TensorView& v, const TensorView& out, int rank, int head_axis) {
  const std::pair<const char*, const TensorView*> all[] = {{"q", &q}, {"k", &k}, {"v", &v},
                                                           {"out", &out}};
  for (auto [name, t] : all) {
    check::not_null(where, name, *t);
    check::rank(where, name, *t, rank);
  }
  for (auto [name, t] : all) {
    if (t != &q) check::same_device(where, name, *t, "q", q);
    check_dtype_for(where, name, *t);
    if (t != &q) check::dtype(where, name, *t, q.dtype);
    check_strides(where, name, *t);
  }
  const int d_axis = rank - 1;
  const std::int64_t d = q.size(d_axis);
  check_head_dim(where, q, d);
  if (k.size(d_axis) != d)
    throw_argument_error(where, "k", "head_dim " + str(d) + " (that of 'q')",
                         "head_dim " + str(k.size(d_axis)) + " in shape " + to_string(k.shape));
  check::same_shape(where, "v", v, "k", k);
  check::same_shape(where, "out", out, "q", q);
  const std::int64_t hq = q.size(head_axis), hkv = k.size(head_axis);
  if (hkv < 1 || hq % hkv != 0)
    throw_argument_error(where, "k", "kv_heads >= 1 dividing q_heads = " + str(hq) + " (GQA/MQA)",
                         "kv_heads " + str(hkv));
  check_no_self_overlap(where, "out", out);
  check_disjoint(where, "out", out, "q", q);
  check_disjoint(where, "out", out, "k", k);
  check_disjoint(where, "out", out, "v", v);
}

void check_lse(std::string_view where, const TensorView& lse, const Shape& expected,
               const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out) {
  check::not_null(where, "lse", lse);
  if (!(lse.shape == expected))
    throw_argument_error(where, "lse", "shape " + to_string(expected), to_string(lse.shape));
  check::dtype(where, "lse", lse, DType::f32);
  check::same_device(where, "lse", lse, "q", q);
  for (int i = 0; i < lse.rank(); ++i)
    if (lse.stride(i) < 0 && lse.size(i) > 1)
      throw_argument_error(where, "lse", "non-negative strides", "stride " + str(lse.stride(i)));
  check_no_self_overlap(where, "lse", lse);
  check_disjoint(where, "lse", lse, "q", q);
  check_disjoint(where, "lse", lse, "k", k);
  check_disjoint(where, "lse", lse, "v", v);
  check_disjoint(where, "lse", lse, "out", out);
}

void dispatch(const AttentionArgs& a, const TensorView& q, Stream stream) {
  if (q.device.kind == DeviceKind::cuda) detail::attention_cuda(a, q.device.index, stream);
  else detail::attention_cpu(a);
}

// cu_seqlens: int32 (batch + 1), unit stride, 0 … total, non-decreasing. Returns the largest
// sequence length. A CUDA array is copied to the host to be checked.
std::int64_t check_cu_seqlens(std::string_view where, std::string_view arg, const TensorView& cu,
                              const TensorView& q, std::int64_t batch, std::int64_t total) {
  check::not_null(where, arg, cu);
  check::rank(where, arg, cu, 1);
  check::dtype(where, arg, cu, DType::i32);
  check::same_device(where, arg, cu, "q", q);
  if (cu.size(0) < 1)
    throw_argument_error(where, arg, "batch + 1 >= 1 entries", to_string(cu.shape));
  if (batch >= 0 && cu.size(0) != batch + 1)
    throw_argument_error(where, arg,
                         str(batch + 1) + " entries (those of 'cu_seqlens_q')",
                         to_string(cu.shape));
  if (cu.size(0) > 1 && cu.stride(0) != 1)
    throw_argument_error(where, arg, "a contiguous array", "stride " + str(cu.stride(0)));
  std::vector<std::int32_t> h(static_cast<std::size_t>(cu.size(0)));
  copy_bytes(h.data(), Device::cpu(), cu.data, cu.device, cu.size(0) * 4);
  if (h[0] != 0) throw_argument_error(where, arg, "a first entry of 0", str(h[0]));
  std::int64_t longest = 0;
  for (std::size_t i = 1; i < h.size(); ++i) {
    if (h[i] < h[i - 1])
      throw_argument_error(where, arg, "non-decreasing offsets",
                           str(h[i - 1]) + " then " + str(h[i]) + " at entry " + str(std::int64_t(i)));
    longest = std::max<std::int64_t>(longest, h[i] - h[i - 1]);
  }
  if (h.back() != total)
    throw_argument_error(where, arg, "a last entry equal to the token count " + str(total),
                         str(h.back()));
  return longest;
}

void fill_common(AttentionArgs& a, const TensorView& q, const TensorView& k, const TensorView& v,
                 const TensorView& out, const AttentionParams& p, float scale) {
  a.dtype = q.dtype;
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.out = out.data;
  a.scale = scale;
  a.causal = p.causal;
  a.window_left = p.window_left;
  a.window_right = p.window_right;
}

}  // namespace

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const TensorView& lse, const AttentionParams& params, Stream stream) {
  constexpr const char* where = "sixfold::attention";
  check_qkv_out(where, q, k, v, out, 4, 1);
  if (k.size(0) != q.size(0))
    throw_argument_error(where, "k", "batch " + str(q.size(0)) + " (that of 'q')",
                         "batch " + str(k.size(0)));
  check_window(where, params);
  const float scale = resolve_scale(where, params, q.size(3));
  const bool want_lse = !absent(lse);
  if (want_lse) check_lse(where, lse, Shape{q.size(0), q.size(1), q.size(2)}, q, k, v, out);

  AttentionArgs a;
  fill_common(a, q, k, v, out, params, scale);
  a.lse = want_lse ? static_cast<float*>(lse.data) : nullptr;
  a.batch = q.size(0);
  a.q_heads = q.size(1);
  a.kv_heads = k.size(1);
  a.q_len = q.size(2);
  a.kv_len = k.size(2);
  a.head_dim = q.size(3);
  for (int i = 0; i < 3; ++i) {
    a.q_stride[i] = q.stride(i);
    a.k_stride[i] = k.stride(i);
    a.v_stride[i] = v.stride(i);
    a.out_stride[i] = out.stride(i);
    a.lse_stride[i] = want_lse ? lse.stride(i) : 0;
  }
  if (a.batch == 0 || a.q_heads == 0 || a.q_len == 0) return;
  dispatch(a, q, stream);
}

void attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k,
                      const TensorView& out, const TensorView& lse,
                      const AttentionParams& params, Stream stream) {
  constexpr const char* where = "sixfold::attention_varlen";
  check_qkv_out(where, q, k, v, out, 3, 1);
  check_window(where, params);
  const float scale = resolve_scale(where, params, q.size(2));
  const bool want_lse = !absent(lse);
  if (want_lse) check_lse(where, lse, Shape{q.size(1), q.size(0)}, q, k, v, out);
  const std::int64_t max_q = check_cu_seqlens(where, "cu_seqlens_q", cu_seqlens_q, q, -1, q.size(0));
  const std::int64_t batch = cu_seqlens_q.size(0) - 1;
  const std::int64_t max_k =
      check_cu_seqlens(where, "cu_seqlens_k", cu_seqlens_k, q, batch, k.size(0));

  AttentionArgs a;
  fill_common(a, q, k, v, out, params, scale);
  a.lse = want_lse ? static_cast<float*>(lse.data) : nullptr;
  a.batch = batch;
  a.q_heads = q.size(1);
  a.kv_heads = k.size(1);
  a.q_len = max_q;
  a.kv_len = max_k;
  a.head_dim = q.size(2);
  // [batch (unused), head, token]
  a.q_stride[1] = q.stride(1), a.q_stride[2] = q.stride(0);
  a.k_stride[1] = k.stride(1), a.k_stride[2] = k.stride(0);
  a.v_stride[1] = v.stride(1), a.v_stride[2] = v.stride(0);
  a.out_stride[1] = out.stride(1), a.out_stride[2] = out.stride(0);
  if (want_lse) a.lse_stride[1] = lse.stride(0), a.lse_stride[2] = lse.stride(1);
  a.cu_q = static_cast<const std::int32_t*>(cu_seqlens_q.data);
  a.cu_k = static_cast<const std::int32_t*>(cu_seqlens_k.data);
  if (batch == 0 || a.q_heads == 0 || q.size(0) == 0) return;
  dispatch(a, q, stream);
}

namespace {

// The single stride of a tensor's flattened index (dimensions of size 1 carry none; the others
// must nest). Throws if they do not collapse.
std::int64_t collapsed_stride(std::string_view where, std::string_view arg, const TensorView& t,
                              int rank, std::int64_t inner_extent) {
  std::int64_t stride = inner_extent;
  int prev = -1;
  for (int i = 0; i < rank; ++i) {
    if (t.size(i) == 1) continue;
    if (prev >= 0 && t.stride(prev) != t.stride(i) * t.size(i))
      throw_argument_error(where, arg, "leading dimensions that collapse into one stride",
                           "strides that do not (dimension " + std::to_string(prev) + ")");
    prev = i;
  }
  for (int i = rank - 1; i >= 0; --i)
    if (t.size(i) != 1) { stride = t.stride(i); break; }
  return stride;
}

Shape leading_shape(const TensorView& o) {
  Shape s;
  s.rank = o.rank() - 1;
  for (int i = 0; i < s.rank; ++i) s.dims[i] = o.size(i);
  return s;
}

}  // namespace

void merge_attention_states(const TensorView& o1, const TensorView& lse1, const TensorView& o2,
                            const TensorView& lse2, const TensorView& out, const TensorView& lse_out,
                            Stream stream) {
  constexpr const char* where = "sixfold::merge_attention_states";
  const RowsView r1 = detail::rows_of(where, "o1", o1);
  if (o1.dtype != DType::f32 && o1.dtype != DType::bf16 && o1.dtype != DType::f16)
    throw_argument_error(where, "o1", "dtype f32, bf16 or f16", std::string(dtype_name(o1.dtype)));
  check::not_null(where, "o2", o2);
  check::same_shape(where, "o2", o2, "o1", o1);
  check::dtype(where, "o2", o2, o1.dtype);
  check::same_device(where, "o2", o2, "o1", o1);
  const RowsView r2 = detail::rows_of(where, "o2", o2);
  check::not_null(where, "out", out);
  check::same_shape(where, "out", out, "o1", o1);
  check::dtype(where, "out", out, o1.dtype);
  check::same_device(where, "out", out, "o1", o1);
  const RowsView ro = detail::rows_of(where, "out", out);
  if (ro.rows > 1 && ro.row_stride < ro.n)
    throw_argument_error(where, "out",
                         "rows that do not overlap (row stride >= head_dim " + str(ro.n) + ")",
                         "row stride " + str(ro.row_stride));
  // out may be o1 or o2 exactly (same rows), never a partial overlap.
  auto same_rows = [](const RowsView& a, const RowsView& b) {
    return a.data == b.data && (a.rows <= 1 || a.row_stride == b.row_stride);
  };
  if (!same_rows(ro, r1)) check::no_overlap(where, "out", out, "o1", o1);
  if (!same_rows(ro, r2)) check::no_overlap(where, "out", out, "o2", o2);
  if (ro.data == r1.data && !same_rows(ro, r1))
    throw_argument_error(where, "out", "o1 exactly (the same row stride) or separate memory",
                         "the same buffer with another row stride");
  if (ro.data == r2.data && !same_rows(ro, r2))
    throw_argument_error(where, "out", "o2 exactly (the same row stride) or separate memory",
                         "the same buffer with another row stride");

  const Shape lead = leading_shape(o1);
  const int lr = lead.rank;
  auto lse_of = [&](std::string_view arg, const TensorView& l) {
    check::not_null(where, arg, l);
    if (!(l.shape == lead))
      throw_argument_error(where, arg, "shape " + to_string(lead) + " (the leading shape of 'o1')",
                           to_string(l.shape));
    check::dtype(where, arg, l, DType::f32);
    check::same_device(where, arg, l, "o1", o1);
    return collapsed_stride(where, arg, l, lr, 1);
  };
  detail::MergeArgs m;
  m.dtype = o1.dtype;
  m.rows = r1.rows;
  m.head_dim = r1.n;
  m.o1 = o1.data, m.o2 = o2.data, m.out = out.data;
  m.o1_stride = r1.row_stride, m.o2_stride = r2.row_stride, m.out_stride = ro.row_stride;
  m.lse1 = static_cast<const float*>(lse1.data);
  m.lse2 = static_cast<const float*>(lse2.data);
  m.lse1_stride = lse_of("lse1", lse1);
  m.lse2_stride = lse_of("lse2", lse2);
  if (!absent(lse_out)) {
    m.lse_out_stride = lse_of("lse_out", lse_out);
    if (m.rows > 1 && m.lse_out_stride < 1)
      throw_argument_error(where, "lse_out", "entries that do not overlap (stride >= 1)",
                           "stride " + str(m.lse_out_stride));
    m.lse_out = static_cast<float*>(lse_out.data);
    auto exact = [&](const float* p, std::int64_t s) {
      return lse_out.data == p && (m.rows <= 1 || m.lse_out_stride == s);
    };
    if (!exact(m.lse1, m.lse1_stride)) {
      if (lse_out.data == lse1.data)
        throw_argument_error(where, "lse_out", "lse1 exactly or separate memory",
                             "the same buffer with another stride");
      check::no_overlap(where, "lse_out", lse_out, "lse1", lse1);
    }
    if (!exact(m.lse2, m.lse2_stride)) {
      if (lse_out.data == lse2.data)
        throw_argument_error(where, "lse_out", "lse2 exactly or separate memory",
                             "the same buffer with another stride");
      check::no_overlap(where, "lse_out", lse_out, "lse2", lse2);
    }
    check_disjoint(where, "lse_out", lse_out, "out", out);
    check_disjoint(where, "lse_out", lse_out, "o1", o1);
    check_disjoint(where, "lse_out", lse_out, "o2", o2);
  }
  if (m.rows == 0 || m.head_dim == 0) return;
  if (o1.device.kind == DeviceKind::cuda)
    detail::merge_attention_states_cuda(m, o1.device.index, stream);
  else
    detail::merge_attention_states_cpu(m);
}

}  // namespace sixfold

#if !defined(SIXFOLD_WITH_CUDA)
// CPU-only build: tensors on a CUDA device cannot exist, but the entries must link.
namespace sixfold::detail {
void attention_cuda(const AttentionArgs&, int, Stream) {
  throw_error("sixfold attention op", "tensors are on a CUDA device but this build has no CUDA backend");
}
void merge_attention_states_cuda(const MergeArgs&, int, Stream) {
  throw_error("sixfold attention op", "tensors are on a CUDA device but this build has no CUDA backend");
}
}  // namespace sixfold::detail
#endif
