// CPU backend of topk, and the streaming state behind TopKStream.
//
// Each thread owns a selection state: a buffer of candidates (order key, value, index) and the
// running threshold, the k-th best candidate kept at the last prune. Elements are filtered against
// the threshold by SIMD compares in the value domain (16 f32/i32 or 8 f64 lanes per compare on
// AVX-512; a scalar loop elsewhere), so in random data almost no element reaches the buffer
// (redundancy). When the buffer holds 2k + 256 candidates, nth_element keeps the best k and raises
// the threshold. Threads take contiguous slices of a long row (or whole rows) and their states
// are merged at the end: the k best of a union are the k best of the parts' k best
// (associativity).
//
// Exactness: the order key maps each value to an unsigned integer, greater = better (NaN → all
// ones, −0 → +0, bits flipped for `smallest`), and ties go to the lower index. Scanning forward,
// an element equal to the threshold has a higher index than the threshold's, so the filter may
// be strict (x > t); elements before the threshold's index (a chunk pushed out of index order,
// a block read in reverse) use the non-strict filter (x >= t) and the prune decides the ties.
//
// Adversarial orders (largest of ascending data): when, after twice the buffer's capacity (1024
// to 8192 elements), more than half of a chunk's elements passed the filter, the rest of the
// chunk is read from its end, in 4096-element blocks in reverse order: the best elements then
// come first, set the threshold, and the filter rejects the rest.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "rows_cpu.hpp"  // load_row (f16/bf16 → f32), AVX-512 intrinsics where built for them
#include "topk_entries.hpp"
#include "sixfold/runtime/error.hpp"

namespace sixfold::detail {
namespace {

// ---- order keys ------------------------------------------------------------------------------
template <class C>
using KeyOf = std::conditional_t<sizeof(C) == 8, std::uint64_t, std::uint32_t>;

template <class C> KeyOf<C> order_key(C v, bool largest) {
  KeyOf<C> key;
  if constexpr (std::is_floating_point_v<C>) {
    using K = KeyOf<C>;
    constexpr K sign = K(1) << (sizeof(K) * 8 - 1);
    if (v != v) {
      key = ~K(0);
    } else {
      const K u = std::bit_cast<K>(v == C(0) ? C(0) : v);
      key = u ^ ((u & sign) ? ~K(0) : sign);
    }
  } else {
    key = std::uint32_t(v) ^ 0x80000000u;
  }
  return largest ? key : KeyOf<C>(~key);
}

template <class C> C value_of_key(KeyOf<C> key, bool largest) {
  using K = KeyOf<C>;
  if (!largest) key = ~key;
  if constexpr (std::is_floating_point_v<C>) {
    constexpr K sign = K(1) << (sizeof(K) * 8 - 1);
    if (key == ~K(0)) return std::numeric_limits<C>::quiet_NaN();
    return std::bit_cast<C>((key & sign) ? K(key ^ sign) : K(~key));
  } else {
    return std::int32_t(key ^ 0x80000000u);
  }
}

// ---- filters ---------------------------------------------------------------------------------
// Which elements x may still enter the top k, given threshold t (value domain).
enum class Pred { all, none, gt_or_nan, ge_or_nan, nan, lt, le, not_nan };

template <Pred P, class C> inline bool passes(C x, C t) {
  if constexpr (P == Pred::all) return true;
  else if constexpr (P == Pred::none) return false;
  else if constexpr (P == Pred::gt_or_nan) return !(x <= t);
  else if constexpr (P == Pred::ge_or_nan) return !(x < t);
  else if constexpr (P == Pred::nan) return x != x;
  else if constexpr (P == Pred::lt) return x < t;
  else if constexpr (P == Pred::le) return x <= t;
  else return x == x;  // not_nan
}

#if defined(__AVX512F__)
template <class C> struct Lanes;
template <> struct Lanes<float> {
  static constexpr int kWidth = 16;
  using V = __m512;
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V set1(float t) { return _mm512_set1_ps(t); }
  template <Pred P> static std::uint32_t mask(V x, V t) {
    if constexpr (P == Pred::all) return 0xffffu;
    else if constexpr (P == Pred::none) return 0;
    else if constexpr (P == Pred::gt_or_nan) return _mm512_cmp_ps_mask(x, t, _CMP_NLE_UQ);
    else if constexpr (P == Pred::ge_or_nan) return _mm512_cmp_ps_mask(x, t, _CMP_NLT_UQ);
    else if constexpr (P == Pred::nan) return _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    else if constexpr (P == Pred::lt) return _mm512_cmp_ps_mask(x, t, _CMP_LT_OQ);
    else if constexpr (P == Pred::le) return _mm512_cmp_ps_mask(x, t, _CMP_LE_OQ);
    else return _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q);
  }
};
template <> struct Lanes<double> {
  static constexpr int kWidth = 8;
  using V = __m512d;
  static V load(const double* p) { return _mm512_loadu_pd(p); }
  static V set1(double t) { return _mm512_set1_pd(t); }
  template <Pred P> static std::uint32_t mask(V x, V t) {
    if constexpr (P == Pred::all) return 0xffu;
    else if constexpr (P == Pred::none) return 0;
    else if constexpr (P == Pred::gt_or_nan) return _mm512_cmp_pd_mask(x, t, _CMP_NLE_UQ);
    else if constexpr (P == Pred::ge_or_nan) return _mm512_cmp_pd_mask(x, t, _CMP_NLT_UQ);
    else if constexpr (P == Pred::nan) return _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q);
    else if constexpr (P == Pred::lt) return _mm512_cmp_pd_mask(x, t, _CMP_LT_OQ);
    else if constexpr (P == Pred::le) return _mm512_cmp_pd_mask(x, t, _CMP_LE_OQ);
    else return _mm512_cmp_pd_mask(x, x, _CMP_ORD_Q);
  }
};
template <> struct Lanes<std::int32_t> {
  static constexpr int kWidth = 16;
  using V = __m512i;
  static V load(const std::int32_t* p) { return _mm512_loadu_si512(p); }
  static V set1(std::int32_t t) { return _mm512_set1_epi32(t); }
  template <Pred P> static std::uint32_t mask(V x, V t) {
    if constexpr (P == Pred::all || P == Pred::not_nan) return 0xffffu;
    else if constexpr (P == Pred::none || P == Pred::nan) return 0;
    else if constexpr (P == Pred::gt_or_nan) return _mm512_cmp_epi32_mask(x, t, _MM_CMPINT_NLE);
    else if constexpr (P == Pred::ge_or_nan) return _mm512_cmp_epi32_mask(x, t, _MM_CMPINT_NLT);
    else if constexpr (P == Pred::lt) return _mm512_cmp_epi32_mask(x, t, _MM_CMPINT_LT);
    else return _mm512_cmp_epi32_mask(x, t, _MM_CMPINT_LE);
  }
};
#endif

// ---- the selection state over compute type C (float, double, int32) -------------------------
template <class C>
class Selector {
 public:
  using Key = KeyOf<C>;
  struct Cand {
    Key key;
    C value;
    std::int64_t index;
  };
  static bool better(const Cand& a, const Cand& b) {
    return a.key > b.key || (a.key == b.key && a.index < b.index);
  }

  Selector(std::int64_t k, bool largest)
      : k_(k), largest_(largest), cap_(std::size_t(2 * k + 256)) {
    buf_.reserve(cap_ + kSlack);
  }

  void reset() {
    buf_.clear();
    have_thr_ = false;
  }

  void push(const C* x, std::int64_t n, std::int64_t first) {
    appended_ = 0;
    // Judge the order after twice the buffer (1024 to 8192 elements): adversarial when more
    // than half of the elements since the buffer first filled passed the filter (on random
    // data about k·ln(probe/cap) of them do), or when the buffer never filled.
    const std::int64_t cap = std::int64_t(cap_);
    const std::int64_t probe = std::min(n, std::clamp<std::int64_t>(2 * cap, 1024, kProbeMax));
    // Scans [j, end) in order, pruning whenever the buffer fills.
    const auto scan_range = [&](std::int64_t j, std::int64_t end, std::int64_t prefetch) {
      while (j < end) {
        j = scan(x, j, end, first, prefetch);
        if (buf_.size() >= cap_) prune();
      }
    };
    scan_range(0, probe, kPrefetchBytes);
    const bool adversarial = probe <= cap ? appended_ >= probe : appended_ - cap > (probe - cap) / 2;
    if (!adversarial) return scan_range(probe, n, kPrefetchBytes);
    // Adversarial (the largest of ascending data, the smallest of descending data): the best
    // elements come last, so the rest is read from its end, in blocks of kBackBlock taken in
    // reverse order (each block forwards, prefetching the block before it). The first block
    // read gives the threshold, and the SIMD filter rejects the rest; elements before the
    // threshold's index are filtered non-strictly (scan() decides), so ties still go to the
    // lower index at the prune. The first block is at most twice the buffer: in a short row
    // (4096 × 32768, k = 64) most of what it holds enters the buffer, so its size is what the
    // reverse read costs.
    for (std::int64_t hi = n, block = std::min(kBackBlock, 2 * cap); hi > probe; block = kBackBlock) {
      const std::int64_t lo = std::max(probe, hi - block);
      scan_range(lo, hi, -kBackBlock * std::int64_t(sizeof(C)));
      hi = lo;
    }
  }

  void merge(const Selector& o) {
    buf_.insert(buf_.end(), o.buf_.begin(), o.buf_.end());
    if (o.have_thr_ && (!have_thr_ || better(o.thr_, thr_))) {
      // o's threshold is o's k-th best: still a valid lower bound for the union.
      thr_ = o.thr_;
      have_thr_ = true;
    }
    if (buf_.size() > std::size_t(k_)) prune();
  }

  // The min(k, size) best, best first when sorted.
  std::vector<Cand> best(bool sorted) const {
    std::vector<Cand> r(buf_);
    if (r.size() > std::size_t(k_)) {
      std::nth_element(r.begin(), r.begin() + (k_ - 1), r.end(), better);
      r.resize(std::size_t(k_));
    }
    if (sorted) std::sort(r.begin(), r.end(), better);
    return r;
  }

 private:
  static constexpr std::size_t kSlack = 64;        // a 4-vector block may overshoot cap_
  static constexpr std::int64_t kPrefetchBytes = 16384;
  static constexpr std::int64_t kProbeMax = 8192;   // the latest point to judge the order
  static constexpr std::int64_t kBackBlock = 4096;  // elements per block of a reverse read

  void append(C v, std::int64_t index) { buf_.push_back({order_key(v, largest_), v, index}); }

  void prune() {
    if (buf_.size() <= std::size_t(k_)) return;
    std::nth_element(buf_.begin(), buf_.begin() + (k_ - 1), buf_.end(), better);
    buf_.resize(std::size_t(k_));
    thr_ = buf_[std::size_t(k_ - 1)];
    have_thr_ = true;
  }

  template <Pred P>
  std::int64_t scan_with(const C* x, std::int64_t i, std::int64_t n, std::int64_t first, C t,
                         [[maybe_unused]] std::int64_t prefetch) {
    if constexpr (P == Pred::none) return n;
    const std::size_t before = buf_.size();
#if defined(__AVX512F__)
    using L = Lanes<C>;
    constexpr int W = L::kWidth;
    const auto tv = L::set1(t);
    for (; i + 4 * W <= n; i += 4 * W) {
      // Software prefetch 16 KB ahead, one line per 4 (the hardware prefetcher fills in the rest):
      // 1e8 f32 on 2 threads, quiet box, 18.5-19.0 ms against 20.4-21.2 ms with one prefetch per
      // 64-byte line 4 KB ahead (session 2's choice on one core: 55 ms without, 39 ms at 4 KB).
      // (A reverse read prefetches the block before the current one: prefetch < 0.)
      _mm_prefetch(reinterpret_cast<const char*>(x + i) + prefetch, _MM_HINT_T0);
      const std::uint32_t m0 = L::template mask<P>(L::load(x + i), tv);
      const std::uint32_t m1 = L::template mask<P>(L::load(x + i + W), tv);
      const std::uint32_t m2 = L::template mask<P>(L::load(x + i + 2 * W), tv);
      const std::uint32_t m3 = L::template mask<P>(L::load(x + i + 3 * W), tv);
      if ((m0 | m1 | m2 | m3) == 0) continue;
      const std::uint32_t m[4] = {m0, m1, m2, m3};
      for (int v = 0; v < 4; ++v)
        for (std::uint32_t b = m[v]; b; b &= b - 1) {
          const std::int64_t j = i + v * W + std::countr_zero(b);
          append(x[j], first + j);
        }
      if (buf_.size() >= cap_) {
        appended_ += std::int64_t(buf_.size() - before);
        return i + 4 * W;
      }
    }
#endif
    for (; i < n; ++i)
      if (passes<P>(x[i], t)) {
        append(x[i], first + i);
        if (buf_.size() >= cap_) { ++i; break; }
      }
    appended_ += std::int64_t(buf_.size() - before);
    return i;
  }

  // Scans x[i, n) with the tightest valid filter until the buffer is full or n is reached.
  std::int64_t scan(const C* x, std::int64_t i, std::int64_t n, std::int64_t first, std::int64_t prefetch) {
    if (!have_thr_) return scan_with<Pred::all>(x, i, n, first, C{}, prefetch);
    // Scanning forwards past the threshold's index, equal values lose to it (strict filter).
    const bool strict = first + i > thr_.index;
    const C t = value_of_key<C>(thr_.key, largest_);
    const bool t_nan = t != t;
    if (largest_) {
      if (strict) {
        if (t_nan) return scan_with<Pred::none>(x, i, n, first, t, prefetch);
        return scan_with<Pred::gt_or_nan>(x, i, n, first, t, prefetch);
      }
      if (t_nan) return scan_with<Pred::nan>(x, i, n, first, t, prefetch);
      return scan_with<Pred::ge_or_nan>(x, i, n, first, t, prefetch);
    }
    if (strict) {
      if (t_nan) return scan_with<Pred::not_nan>(x, i, n, first, t, prefetch);
      return scan_with<Pred::lt>(x, i, n, first, t, prefetch);
    }
    if (t_nan) return scan_with<Pred::all>(x, i, n, first, t, prefetch);
    return scan_with<Pred::le>(x, i, n, first, t, prefetch);
  }

  std::int64_t k_;
  bool largest_;
  std::size_t cap_;
  std::vector<Cand> buf_;
  bool have_thr_ = false;
  Cand thr_{};
  std::int64_t appended_ = 0;
};

// ---- storage dtypes --------------------------------------------------------------------------
template <class D> struct Compute { using type = D; };
template <> struct Compute<Half> { using type = float; };
template <> struct Compute<BFloat16> { using type = float; };

template <class D> D store_as(typename Compute<D>::type v) {
  if constexpr (std::is_same_v<D, Half>) return to_half(v);
  else if constexpr (std::is_same_v<D, BFloat16>) return to_bfloat16(v);
  else return v;
}

// The selector of storage dtype D: 16-bit floats are widened to f32 in L2-sized blocks.
template <class D>
class SelectorOf final : public TopKSelector {
 public:
  using C = typename Compute<D>::type;
  SelectorOf(std::int64_t k, bool largest) : sel_(k, largest) {}

  void reset() { sel_.reset(); }

  void push(const void* data, std::int64_t n, std::int64_t first) override {
    const D* x = static_cast<const D*>(data);
    if constexpr (std::is_same_v<C, D>) {
      sel_.push(x, n, first);
    } else {
      constexpr std::int64_t kBlock = 1 << 16;  // 256 KB of f32: stays in L2
      wide_.resize(std::size_t(std::min(n, kBlock)));
      for (std::int64_t b = 0; b < n; b += kBlock) {
        const std::int64_t m = std::min(kBlock, n - b);
        load_row(dtype_of_v<D>, x + b, wide_.data(), m);
        sel_.push(wide_.data(), m, first + b);
      }
    }
  }

  void merge(const TopKSelector& other) override {
    sel_.merge(static_cast<const SelectorOf&>(other).sel_);
  }

  std::unique_ptr<TopKSelector> clone() const override {
    auto c = std::make_unique<SelectorOf>(*this);
    c->wide_.clear();
    return c;
  }

  std::int64_t result(void* values, std::int64_t* indices, bool sorted) const override {
    const auto best = sel_.best(sorted);
    D* v = static_cast<D*>(values);
    for (std::size_t i = 0; i < best.size(); ++i) {
      v[i] = store_as<D>(best[i].value);
      indices[i] = best[i].index;
    }
    return std::int64_t(best.size());
  }

  // Writes into strided outputs without an intermediate copy of the values.
  void write(D* values, std::int64_t* indices, bool sorted) const {
    result(values, indices, sorted);
  }

 private:
  Selector<C> sel_;
  std::vector<float> wide_;
};

// Rows in parallel when there are enough of them, else each row split across all threads.
template <class D>
void run_rows(const TopKArgs& a) {
  const int threads = omp_get_max_threads();
  const auto* x = static_cast<const D*>(a.x.data);
  auto* values = static_cast<D*>(a.values.data);
  auto* indices = static_cast<std::int64_t*>(a.indices.data);
  constexpr std::int64_t kMinSlice = 1 << 16;  // below this a row is not split
  if (a.x.rows >= threads || a.x.n < 2 * kMinSlice || threads == 1) {
#pragma omp parallel
    {
      SelectorOf<D> sel(a.k, a.largest);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t r = 0; r < a.x.rows; ++r) {
        sel.reset();
        sel.push(x + r * a.x.row_stride, a.x.n, 0);
        sel.write(values + r * a.values.row_stride, indices + r * a.indices.row_stride, a.sorted);
      }
    }
    return;
  }
  for (std::int64_t r = 0; r < a.x.rows; ++r) {
    const int parts = int(std::min<std::int64_t>(threads, a.x.n / kMinSlice));
    std::vector<std::unique_ptr<SelectorOf<D>>> sel(static_cast<std::size_t>(parts));
    const D* row = x + r * a.x.row_stride;
#pragma omp parallel for num_threads(parts) schedule(static, 1)
    for (int t = 0; t < parts; ++t) {
      const std::int64_t lo = a.x.n * t / parts, hi = a.x.n * (t + 1) / parts;
      sel[std::size_t(t)] = std::make_unique<SelectorOf<D>>(a.k, a.largest);
      sel[std::size_t(t)]->push(row + lo, hi - lo, lo);
    }
    for (int t = 1; t < parts; ++t) sel[0]->merge(*sel[std::size_t(t)]);
    sel[0]->write(values + r * a.values.row_stride, indices + r * a.indices.row_stride, a.sorted);
  }
}

}  // namespace

void topk_cpu(const TopKArgs& a) {
  switch (a.dtype) {
    case DType::f32: return run_rows<float>(a);
    case DType::f64: return run_rows<double>(a);
    case DType::f16: return run_rows<Half>(a);
    case DType::bf16: return run_rows<BFloat16>(a);
    case DType::i32: return run_rows<std::int32_t>(a);
    default: break;
  }
  throw_error("sixfold::topk", "unsupported dtype reached the CPU backend");
}

std::unique_ptr<TopKSelector> make_topk_selector(DType dtype, std::int64_t k, bool largest) {
  switch (dtype) {
    case DType::f32: return std::make_unique<SelectorOf<float>>(k, largest);
    case DType::f64: return std::make_unique<SelectorOf<double>>(k, largest);
    case DType::f16: return std::make_unique<SelectorOf<Half>>(k, largest);
    case DType::bf16: return std::make_unique<SelectorOf<BFloat16>>(k, largest);
    case DType::i32: return std::make_unique<SelectorOf<std::int32_t>>(k, largest);
    default: break;
  }
  throw_error("sixfold::TopKStream", "unsupported dtype");
}

}  // namespace sixfold::detail
