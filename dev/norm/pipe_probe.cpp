// Probe (session 25): the same row work timed three ways, bf16, all threads, rows in 3 rotating
// slots. mode 0: two passes a row (pass A: Σ over x and dy from memory; pass C: re-read, compute,
// non-temporal store); mode 1: pass C of row r fused chunk by chunk with pass A of row r + 1 (what
// write_row_beside in src/ops/rows_cpu.hpp does); mode 2: one pass (no re-read), the streaming
// ceiling. ONE=1: one input stream (dy = x), as the forward. Dev box, 16384×8192, % of copy:
// 64 / 80–82 / 82–83.
//   g++ -O3 -march=native -fopenmp -std=c++20 dev/norm/pipe_probe.cpp -o pipe_probe
//   ./pipe_probe ROWS N MODE [PREFETCH_BYTES]
#include <immintrin.h>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <algorithm>
#include <vector>
using u16 = std::uint16_t;
static inline __m512 lo(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
static inline __m512 hi(__m512i v) { return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u)))); }
static inline float hs(__m512 v) { return _mm512_reduce_add_ps(v); }
static int PF = 4096;
static inline void passA_chunk(const u16* x, const u16* d, long i, __m512 (&a)[4]) {
  _mm_prefetch((const char*)(x + i) + PF, _MM_HINT_T0); _mm_prefetch((const char*)(d + i) + PF, _MM_HINT_T0);
  __m512i xv = _mm512_loadu_si512(x + i), dv = _mm512_loadu_si512(d + i);
  a[0] = _mm512_fmadd_ps(lo(xv), lo(dv), a[0]); a[1] = _mm512_fmadd_ps(hi(xv), hi(dv), a[1]);
  a[2] = _mm512_add_ps(lo(dv), a[2]); a[3] = _mm512_add_ps(hi(dv), a[3]);
}
float passA(const u16* x, const u16* d, long n) {
  __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (long i = 0; i < n; i += 32) passA_chunk(x, d, i, a);
  return hs(a[0]) + hs(a[1]) + hs(a[2]) + hs(a[3]);
}
static inline void passC_chunk(const u16* x, const u16* d, u16* o, long i, const float* w, float k, float rs) {
  __m512i xv = _mm512_loadu_si512(x + i), dv = _mm512_loadu_si512(d + i);
  __m512 w0 = _mm512_loadu_ps(w + i), w1 = _mm512_loadu_ps(w + i + 16);
  __m512 o0 = _mm512_mul_ps(_mm512_set1_ps(rs), _mm512_fnmadd_ps(lo(xv), _mm512_set1_ps(k), _mm512_mul_ps(lo(dv), w0)));
  __m512 o1 = _mm512_mul_ps(_mm512_set1_ps(rs), _mm512_fnmadd_ps(hi(xv), _mm512_set1_ps(k), _mm512_mul_ps(hi(dv), w1)));
  __m512i p = (__m512i)_mm512_cvtne2ps_pbh(o1, o0);
  _mm512_stream_si512((__m512i*)(o + i), p);
}
void passC(const u16* x, const u16* d, u16* o, long n, const float* w, float k, float rs) {
  for (long i = 0; i < n; i += 32) passC_chunk(x, d, o, i, w, k, rs);
}
int main(int argc, char** argv) {
  long rows = atol(argv[1]), n = atol(argv[2]); int mode = atoi(argv[3]); if (argc > 4) PF = atoi(argv[4]);
  long N = rows * n; int slots = 3;
  std::vector<u16*> X(slots), D(slots), O(slots);
  for (int s = 0; s < slots; ++s) {
    X[s] = (u16*)std::aligned_alloc(4096, N * 2); D[s] = (u16*)std::aligned_alloc(4096, N * 2); O[s] = (u16*)std::aligned_alloc(4096, N * 2);
#pragma omp parallel for
    for (long i = 0; i < N; ++i) X[s][i] = 0x3f80 + (i & 63), D[s][i] = 0x3f00 + (i & 31), O[s][i] = 0;
  }
  std::vector<float> w(n, 1.0f);
  double best = 1e9; volatile float sink = 0;
  for (int it = 0; it < 12; ++it) {
    const int s = it % slots; if (getenv("ONE")) D[s] = X[s];
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
    {
      int t = omp_get_thread_num(), nt = omp_get_num_threads();
      long lo_ = rows * t / nt, hi_ = rows * (t + 1) / nt;
      float acc = 0;
      if (mode == 0) {  // two passes per row
        for (long r = lo_; r < hi_; ++r) {
          const u16* x = X[s] + r * n; const u16* d = D[s] + r * n;
          float k = passA(x, d, n) * 1e-9f;
          passC(x, d, O[s] + r * n, n, w.data(), k, 0.5f);
        }
      } else if (mode == 1) {  // interleaved: A(r+1) with C(r)
        float k = passA(X[s] + lo_ * n, D[s] + lo_ * n, n) * 1e-9f;
        for (long r = lo_; r < hi_; ++r) {
          const u16* x = X[s] + r * n; const u16* d = D[s] + r * n; u16* o = O[s] + r * n;
          if (r + 1 < hi_) {
            const u16* x1 = x + n; const u16* d1 = d + n;
            __m512 a[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (long i = 0; i < n; i += 32) {
              passA_chunk(x1, d1, i, a);
              passC_chunk(x, d, o, i, w.data(), k, 0.5f);
            }
            k = (hs(a[0]) + hs(a[1]) + hs(a[2]) + hs(a[3])) * 1e-9f;
          } else passC(x, d, o, n, w.data(), k, 0.5f);
        }
      } else {  // single pass (no re-read): the streaming ceiling
        for (long r = lo_; r < hi_; ++r) passC(X[s] + r * n, D[s] + r * n, O[s] + r * n, n, w.data(), 1e-9f, 0.5f);
      }
      _mm_sfence();
      sink = sink + acc;
    }
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (it > 1) best = std::min(best, sec);
  }
  printf("mode %d rows %ld n %ld PF %d: %.3f ms  %.1f%% of 49.8\n", mode, rows, n, PF, best * 1e3, (getenv("ONE") ? 4.0 : 6.0) * N / best / 1e9 / 49.8 * 100);
}
