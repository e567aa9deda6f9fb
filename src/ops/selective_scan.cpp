// Validation of selective_scan, selective_scan_varlen and selective_state_update (nothing is
// written when it fails), then the backend. A CUDA cu_seqlens is copied to the host to be
// checked (nseq + 1 ints, synchronous), as attention_varlen does.
#include "sixfold/ops/selective_scan.hpp"

#include <string>
#include <vector>

#include "selective_scan_entries.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold {
namespace {

std::string str(std::int64_t v) { return std::to_string(v); }
bool absent(const TensorView& t) { return t.data == nullptr && t.rank() == 0; }
bool io_dtype(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// A (…, L) tensor with unit stride along L, of `shape`, the dtype and device of `ref`.
void check_seq(std::string_view where, std::string_view arg, const TensorView& t, const Shape& shape,
               std::string_view ref_arg, const TensorView& ref) {
  check::not_null(where, arg, t);
  if (!(t.shape == shape))
    throw_argument_error(where, arg, "shape " + to_string(shape) + " (that of '" + std::string(ref_arg) + "')",
                         to_string(t.shape));
  check::dtype(where, arg, t, ref.dtype);
  check::same_device(where, arg, t, ref_arg, ref);
  const int last = t.rank() - 1;
  if (t.size(last) > 1 && t.stride(last) != 1)
    throw_argument_error(where, arg, "unit stride along the sequence (last) dimension",
                         "stride " + str(t.stride(last)));
  for (int i = 0; i < t.rank(); ++i)
    if (t.stride(i) < 0) throw_argument_error(where, arg, "non-negative strides", "stride " + str(t.stride(i)));
}

// An f32 contiguous parameter of `shape`, optional unless `required`.
void check_param(std::string_view where, std::string_view arg, const TensorView& t, const Shape& shape,
                 const TensorView& ref, bool required) {
  if (!required && absent(t)) return;
  check::not_null(where, arg, t);
  if (!(t.shape == shape)) throw_argument_error(where, arg, "shape " + to_string(shape), to_string(t.shape));
  check::dtype(where, arg, t, DType::f32);
  check::same_device(where, arg, t, "u", ref);
  check::contiguous(where, arg, t);
}

// An output must not overlap any input; exact aliasing (same data and strides) of the listed
// element-wise inputs is allowed (each element is read before it is written, by one thread).
void check_output_overlap(std::string_view where, std::string_view arg, const TensorView& out,
                          std::initializer_list<std::pair<const char*, const TensorView*>> aliasable,
                          std::initializer_list<std::pair<const char*, const TensorView*>> others) {
  for (auto [name, t] : aliasable) {
    if (absent(*t)) continue;
    if (out.data == t->data && out.numel() > 0 && t->numel() > 0) {
      bool same = out.rank() == t->rank();
      for (int i = 0; same && i < out.rank(); ++i) same = out.stride(i) == t->stride(i);
      if (!same)
        throw_argument_error(where, arg, "exactly '" + std::string(name) + "' (same strides) or memory apart from it",
                             "the same data with other strides");
      continue;
    }
    check::no_overlap(where, arg, out, name, *t);
  }
  for (auto [name, t] : others) {
    if (absent(*t)) continue;
    if (out.data == t->data && out.numel() > 0 && t->numel() > 0)
      throw_argument_error(where, arg, "memory apart from '" + std::string(name) + "'", "the same buffer");
    check::no_overlap(where, arg, out, name, *t);
  }
}

// Rows of an output (…, L) must not overlap each other: strides nest.
void check_rows_apart(std::string_view where, std::string_view arg, const TensorView& t) {
  std::int64_t span = t.size(t.rank() - 1);
  for (int i = t.rank() - 2; i >= 0; --i) {
    if (t.size(i) == 1) continue;
    if (t.stride(i) < span)
      throw_argument_error(where, arg, "rows that do not overlap (dimension " + str(i) + " stride >= " + str(span) + ")",
                           "stride " + str(t.stride(i)));
    span = t.stride(i) * t.size(i);
  }
}

// B or C: fixed (d, n) f32 contiguous, or input-dependent (batch?, groups, n, L) in u's dtype.
// Returns the group count (0 for fixed).
std::int64_t check_bc(std::string_view where, std::string_view arg, const TensorView& t, const TensorView& u,
                      bool varlen, std::int64_t batch, std::int64_t d, std::int64_t n, std::int64_t len) {
  check::not_null(where, arg, t);
  if (t.rank() == 2) {
    check_param(where, arg, t, Shape{d, n}, u, true);
    return 0;
  }
  const int want = varlen ? 3 : 4;
  if (t.rank() != want)
    throw_argument_error(where, arg,
                         varlen ? "rank 2 (d, n) f32 or rank 3 (groups, n, total)"
                                : "rank 2 (d, n) f32 or rank 4 (batch, groups, n, L)",
                         "rank " + str(t.rank()) + " " + to_string(t.shape));
  const std::int64_t groups = t.size(varlen ? 0 : 1);
  Shape s = varlen ? Shape{groups, n, len} : Shape{batch, groups, n, len};
  check_seq(where, arg, t, s, "u", u);
  if (groups < 1 || d % groups != 0)
    throw_argument_error(where, arg, "a group count that divides d = " + str(d), str(groups) + " groups");
  return groups;
}

void dispatch(const SelectiveScanArgs& a, const TensorView& u, Stream stream) {
  if (u.device.kind == DeviceKind::cuda) detail::selective_scan_cuda(a, u.device.index, stream);
  else detail::selective_scan_cpu(a);
}

void fill(SelectiveScanArgs& a, const SelectiveScanTensors& in, const TensorView& out,
          const TensorView& final_state, SelectiveScanParams p, bool varlen) {
  const int o = varlen ? 0 : 1;  // index of d in (batch?, d, L)
  auto strides = [&](const TensorView& t, std::int64_t (&s)[2]) {
    s[0] = varlen ? 0 : t.stride(0);
    s[1] = t.stride(o);
  };
  a.dtype = in.u.dtype;
  a.u = in.u.data; strides(in.u, a.u_stride);
  a.delta = in.delta.data; strides(in.delta, a.delta_stride);
  if (!absent(in.z)) { a.z = in.z.data; strides(in.z, a.z_stride); }
  a.out = out.data; strides(out, a.out_stride);
  a.A = static_cast<const float*>(in.A.data);
  a.D = absent(in.D) ? nullptr : static_cast<const float*>(in.D.data);
  a.delta_bias = absent(in.delta_bias) ? nullptr : static_cast<const float*>(in.delta_bias.data);
  a.var_B = in.B.rank() > 2;
  a.var_C = in.C.rank() > 2;
  a.B = in.B.data;
  a.C = in.C.data;
  // Input-dependent B/C: (batch?, groups, n, L); o indexes groups as it indexes d above.
  if (a.var_B) {
    a.B_stride[0] = varlen ? 0 : in.B.stride(0);
    a.B_stride[1] = in.B.stride(o);
    a.B_stride[2] = in.B.stride(o + 1);
  }
  if (a.var_C) {
    a.C_stride[0] = varlen ? 0 : in.C.stride(0);
    a.C_stride[1] = in.C.stride(o);
    a.C_stride[2] = in.C.stride(o + 1);
  }
  a.initial_state = absent(in.initial_state) ? nullptr : static_cast<const float*>(in.initial_state.data);
  a.final_state = absent(final_state) ? nullptr : static_cast<float*>(final_state.data);
  a.delta_softplus = p.delta_softplus;
}

void check_common(std::string_view where, const SelectiveScanTensors& in, const TensorView& out,
                  const TensorView& final_state, bool varlen, std::int64_t batch, SelectiveScanArgs& a) {
  const int rank = varlen ? 2 : 3;
  check::not_null(where, "u", in.u);
  if (in.u.rank() != rank)
    throw_argument_error(where, "u", varlen ? "rank 2 (d, total)" : "rank 3 (batch, d, L)",
                         "rank " + str(in.u.rank()) + " " + to_string(in.u.shape));
  if (!io_dtype(in.u.dtype))
    throw_argument_error(where, "u", "dtype f32, bf16 or f16", std::string(dtype_name(in.u.dtype)));
  check_seq(where, "u", in.u, in.u.shape, "u", in.u);
  const std::int64_t d = in.u.size(varlen ? 0 : 1), len = in.u.size(rank - 1);
  check_seq(where, "delta", in.delta, in.u.shape, "u", in.u);
  check::not_null(where, "A", in.A);
  if (in.A.rank() != 2 || in.A.size(0) != d)
    throw_argument_error(where, "A", "shape [" + str(d) + ", n] (d of 'u', n = d_state)", to_string(in.A.shape));
  const std::int64_t n = in.A.size(1);
  if (n < 1 || n > kSelectiveScanMaxState)
    throw_argument_error(where, "A", "d_state n in 1.." + str(kSelectiveScanMaxState), "n = " + str(n));
  check_param(where, "A", in.A, Shape{d, n}, in.u, true);
  const std::int64_t gb = check_bc(where, "B", in.B, in.u, varlen, batch, d, n, len);
  const std::int64_t gc = check_bc(where, "C", in.C, in.u, varlen, batch, d, n, len);
  if (gb && gc && gb != gc)
    throw_argument_error(where, "C", "the group count of 'B' (" + str(gb) + ")", str(gc) + " groups");
  check_param(where, "D", in.D, Shape{d}, in.u, false);
  check_param(where, "delta_bias", in.delta_bias, Shape{d}, in.u, false);
  if (!absent(in.z)) check_seq(where, "z", in.z, in.u.shape, "u", in.u);
  const Shape state_shape{batch, d, n};
  check_param(where, "initial_state", in.initial_state, state_shape, in.u, false);
  check_seq(where, "out", out, in.u.shape, "u", in.u);
  check_rows_apart(where, "out", out);
  check_output_overlap(where, "out", out, {{"u", &in.u}, {"delta", &in.delta}, {"z", &in.z}},
                       {{"A", &in.A}, {"B", &in.B}, {"C", &in.C}, {"D", &in.D},
                        {"delta_bias", &in.delta_bias}, {"initial_state", &in.initial_state}});
  if (!absent(final_state)) {
    check_param(where, "final_state", final_state, state_shape, in.u, true);
    check_output_overlap(where, "final_state", final_state, {{"initial_state", &in.initial_state}},
                         {{"u", &in.u}, {"delta", &in.delta}, {"z", &in.z}, {"A", &in.A},
                          {"B", &in.B}, {"C", &in.C}, {"D", &in.D}, {"delta_bias", &in.delta_bias},
                          {"out", &out}});
  }
  a.batch = batch;
  a.d = d;
  a.n = n;
  a.len = len;
  a.groups = gb ? gb : (gc ? gc : 1);
}

}  // namespace

void selective_scan(const SelectiveScanTensors& in, const TensorView& out,
                    const TensorView& final_state, SelectiveScanParams params, Stream stream) {
  constexpr const char* where = "sixfold::selective_scan";
  check::not_null(where, "u", in.u);
  const std::int64_t batch = in.u.rank() == 3 ? in.u.size(0) : 0;
  SelectiveScanArgs a;
  check_common(where, in, out, final_state, false, batch, a);
  fill(a, in, out, final_state, params, false);
  if (a.batch == 0 || a.d == 0) return;
  if (a.len == 0 && !a.final_state) return;
  dispatch(a, in.u, stream);
}

void selective_scan_varlen(const SelectiveScanTensors& in, const TensorView& cu_seqlens,
                           const TensorView& out, const TensorView& final_state,
                           SelectiveScanParams params, Stream stream) {
  constexpr const char* where = "sixfold::selective_scan_varlen";
  check::not_null(where, "cu_seqlens", cu_seqlens);
  check::rank(where, "cu_seqlens", cu_seqlens, 1);
  check::dtype(where, "cu_seqlens", cu_seqlens, DType::i32);
  check::not_null(where, "u", in.u);
  check::same_device(where, "cu_seqlens", cu_seqlens, "u", in.u);
  if (cu_seqlens.size(0) < 1)
    throw_argument_error(where, "cu_seqlens", "at least one entry (nseq + 1)", to_string(cu_seqlens.shape));
  if (cu_seqlens.size(0) > 1 && cu_seqlens.stride(0) != 1)
    throw_argument_error(where, "cu_seqlens", "a contiguous array", "stride " + str(cu_seqlens.stride(0)));
  const std::int64_t nseq = cu_seqlens.size(0) - 1;
  SelectiveScanArgs a;
  check_common(where, in, out, final_state, true, nseq, a);
  std::vector<std::int32_t> h(static_cast<std::size_t>(cu_seqlens.size(0)));
  copy_bytes(h.data(), Device::cpu(), cu_seqlens.data, cu_seqlens.device, cu_seqlens.size(0) * 4);
  if (h[0] != 0) throw_argument_error(where, "cu_seqlens", "a first entry of 0", str(h[0]));
  for (std::size_t i = 1; i < h.size(); ++i)
    if (h[i] < h[i - 1])
      throw_argument_error(where, "cu_seqlens", "non-decreasing offsets",
                           "entry " + str(std::int64_t(i)) + " = " + str(h[i]) + " after " + str(h[i - 1]));
  if (h.back() != a.len)
    throw_argument_error(where, "cu_seqlens", "a last entry equal to the packed length " + str(a.len),
                         str(h.back()));
  fill(a, in, out, final_state, params, true);
  a.cu_seqlens = static_cast<const std::int32_t*>(cu_seqlens.data);
  if (nseq == 0 || a.d == 0) return;
  dispatch(a, in.u, stream);
}

void selective_state_update(const TensorView& state, const StateUpdateTensors& in,
                            const TensorView& out, SelectiveScanParams params, Stream stream) {
  constexpr const char* where = "sixfold::selective_state_update";
  check::not_null(where, "state", state);
  if (state.rank() != 3)
    throw_argument_error(where, "state", "rank 3 (batch, d, n)", "rank " + str(state.rank()) + " " + to_string(state.shape));
  check::dtype(where, "state", state, DType::f32);
  check::contiguous(where, "state", state);
  const std::int64_t batch = state.size(0), d = state.size(1), n = state.size(2);
  if (n < 1 || n > kSelectiveScanMaxState)
    throw_argument_error(where, "state", "d_state n in 1.." + str(kSelectiveScanMaxState), "n = " + str(n));
  check::not_null(where, "x", in.x);
  if (!io_dtype(in.x.dtype))
    throw_argument_error(where, "x", "dtype f32, bf16 or f16", std::string(dtype_name(in.x.dtype)));
  check::same_device(where, "x", in.x, "state", state);
  const Shape bd{batch, d};
  auto vec2 = [&](const char* arg, const TensorView& t) {
    check::not_null(where, arg, t);
    if (!(t.shape == bd))
      throw_argument_error(where, arg, "shape " + to_string(bd) + " (batch, d of 'state')", to_string(t.shape));
    check::dtype(where, arg, t, in.x.dtype);
    check::same_device(where, arg, t, "state", state);
  };
  vec2("x", in.x);
  vec2("dt", in.dt);
  if (!absent(in.z)) vec2("z", in.z);
  vec2("out", out);
  check_param(where, "A", in.A, Shape{d, n}, in.x, true);
  check_param(where, "D", in.D, Shape{d}, in.x, false);
  check_param(where, "dt_bias", in.dt_bias, Shape{d}, in.x, false);
  std::int64_t groups = 0;
  for (auto [arg, t] : {std::pair<const char*, const TensorView*>{"B", &in.B}, {"C", &in.C}}) {
    check::not_null(where, arg, *t);
    if (t->rank() != 3 || t->size(0) != batch || t->size(2) != n)
      throw_argument_error(where, arg, "shape [" + str(batch) + ", groups, " + str(n) + "]", to_string(t->shape));
    const std::int64_t g = t->size(1);
    if (g < 1 || d % g != 0)
      throw_argument_error(where, arg, "a group count that divides d = " + str(d), str(g) + " groups");
    if (groups && g != groups)
      throw_argument_error(where, arg, "the group count of 'B' (" + str(groups) + ")", str(g) + " groups");
    groups = g;
    check::dtype(where, arg, *t, in.x.dtype);
    check::same_device(where, arg, *t, "state", state);
    if (n > 1 && t->stride(2) != 1)
      throw_argument_error(where, arg, "unit stride along n", "stride " + str(t->stride(2)));
  }
  {  // out's elements must be distinct: positive strides that nest one way or the other
    const std::int64_t s0 = out.stride(0), s1 = out.stride(1);
    const bool ok = (batch <= 1 || s0 >= 1) && (d <= 1 || s1 >= 1) &&
                    (batch <= 1 || d <= 1 || s0 >= d * s1 || s1 >= batch * s0);
    if (!ok) throw_argument_error(where, "out", "elements that do not overlap", "strides " + str(s0) + ", " + str(s1));
  }
  check_output_overlap(where, "out", out, {{"x", &in.x}, {"dt", &in.dt}, {"z", &in.z}},
                       {{"state", &state}, {"A", &in.A}, {"B", &in.B}, {"C", &in.C}, {"D", &in.D},
                        {"dt_bias", &in.dt_bias}});
  StateUpdateArgs a;
  a.dtype = in.x.dtype;
  a.batch = batch; a.d = d; a.n = n; a.groups = groups;
  a.state = static_cast<float*>(state.data);
  a.x = in.x.data; a.dt = in.dt.data; a.z = absent(in.z) ? nullptr : in.z.data; a.out = out.data;
  auto s2 = [](const TensorView& t, std::int64_t (&s)[2]) { s[0] = t.stride(0); s[1] = t.stride(1); };
  s2(in.x, a.x_stride); s2(in.dt, a.dt_stride); s2(out, a.out_stride);
  if (a.z) s2(in.z, a.z_stride);
  a.B = in.B.data; a.C = in.C.data;
  a.B_stride[0] = in.B.stride(0); a.B_stride[1] = in.B.stride(1);
  a.C_stride[0] = in.C.stride(0); a.C_stride[1] = in.C.stride(1);
  a.A = static_cast<const float*>(in.A.data);
  a.D = absent(in.D) ? nullptr : static_cast<const float*>(in.D.data);
  a.dt_bias = absent(in.dt_bias) ? nullptr : static_cast<const float*>(in.dt_bias.data);
  a.dt_softplus = params.delta_softplus;
  if (batch == 0 || d == 0) return;
  if (state.device.kind == DeviceKind::cuda) detail::selective_state_update_cuda(a, state.device.index, stream);
  else detail::selective_state_update_cpu(a);
}

}  // namespace sixfold

#ifndef SIXFOLD_WITH_CUDA
namespace sixfold::detail {
namespace {
[[noreturn]] void no_backend(const char* where) {
  throw_error(where, "tensors are on a CUDA device but this build has no CUDA backend");
}
}  // namespace
void selective_scan_cuda(const SelectiveScanArgs&, int, Stream) { no_backend("sixfold::selective_scan"); }
void selective_state_update_cuda(const StateUpdateArgs&, int, Stream) {
  no_backend("sixfold::selective_state_update");
}
void selective_scan_cuda_launch(const SelectiveScanArgs&, int, Stream, SelectiveScanLaunch) {
  no_backend("sixfold::selective_scan");
}
}  // namespace sixfold::detail
#endif
