// RMSNorm's pass C alone (bf16, pair order, the library's instruction sequence) over a 4096-element
// row held in L1: stores to an L1 buffer, non-temporal stores to a 64 MB stream, or none. Session 23,
// dev box (quiet): 2.41-2.49 / 2.57-2.89 / 2.42-2.46 ns a 32-element chunk (~8.7 cycles: the port
// estimate), against ~16 cycles a chunk for the whole op with rows in L2 (docs/perf/norm.md).
//   g++ -O2 -march=native dev/norm/passc_probe.cpp -o /tmp/passc && /tmp/passc
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
static inline __m512i round_hi(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
  __m512i t = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
  return _mm512_mask_add_epi32(t, odd, t, _mm512_set1_epi32(1));
}
alignas(64) static const uint16_t kI[32] = {1,33,3,35,5,37,7,39,9,41,11,43,13,45,15,47,17,49,19,51,21,53,23,55,25,57,27,59,29,61,31,63};
template <int Mode>  // 0: storeu to L1 buffer, 1: nt store to a streaming buffer, 2: no store (xor)
__attribute__((noinline)) __m512i passc(const uint16_t* x, const uint16_t* w, uint16_t* y, long n, float rs) {
  const __m512 r = _mm512_set1_ps(rs); const __m512i hm = _mm512_set1_epi32(int(0xffff0000u));
  const __m512i idx = _mm512_load_si512(kI); __m512i acc = _mm512_setzero_si512();
  for (long i = 0; i < n; i += 32) {
    const __m512i zx = _mm512_loadu_si512(x + i), zw = _mm512_loadu_si512(w + i);
    __m512 a = _mm512_castsi512_ps(_mm512_slli_epi32(zx, 16)), b = _mm512_castsi512_ps(_mm512_and_si512(zx, hm));
    __m512 wa = _mm512_castsi512_ps(_mm512_slli_epi32(zw, 16)), wb = _mm512_castsi512_ps(_mm512_and_si512(zw, hm));
    a = _mm512_mul_ps(_mm512_mul_ps(a, r), wa); b = _mm512_mul_ps(_mm512_mul_ps(b, r), wb);
    const __m512i h = _mm512_permutex2var_epi16(round_hi(a), idx, round_hi(b));
    if (Mode == 0) _mm512_storeu_si512(y + i, h);
    else if (Mode == 1) _mm512_stream_si512((__m512i*)(y + i), h);
    else acc = _mm512_xor_si512(acc, h);
  }
  return acc;
}
int main() {
  const long n = 4096, rows_big = 8192;  // big: 64 MB of output
  uint16_t* x = (uint16_t*)aligned_alloc(64, n * 2); uint16_t* w = (uint16_t*)aligned_alloc(64, n * 2);
  uint16_t* y = (uint16_t*)aligned_alloc(64, n * 2); uint16_t* big = (uint16_t*)aligned_alloc(64, n * 2 * rows_big);
  for (long i = 0; i < n; ++i) x[i] = 0x3f80 + (i & 255), w[i] = 0x3f80;
  memset(big, 0, n * 2 * rows_big);
  volatile long sink = 0;
  for (int rep = 0; rep < 2; ++rep) for (int mode = 0; mode < 3; ++mode) {
    const long R = 20000; auto t0 = std::chrono::steady_clock::now();
    for (long r = 0; r < R; ++r) {
      uint16_t* dst = mode == 1 ? big + (r % rows_big) * n : y;
      __m512i a = mode == 0 ? passc<0>(x, w, dst, n, 0.5f) : mode == 1 ? passc<1>(x, w, dst, n, 0.5f) : passc<2>(x, w, dst, n, 0.5f);
      sink += _mm512_reduce_add_epi32(a);
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("mode %d (%s): %.3f ns a 32-element chunk, %.3f ns an element\n", mode, mode == 0 ? "store to L1" : mode == 1 ? "nt store, streaming" : "no store", s / R / (n / 32) * 1e9, s / R / n * 1e9);
  }
}
