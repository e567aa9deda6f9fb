// Throughput of single AVX-512 instructions on this CPU (instructions per cycle, eight
// independent chains each), to tell which execution ports the CPU norms' hot loops contend for.
// Session 23 (dev box, Intel Xeon with AVX-512 / AVX512_BF16, KVM, ~3.56 GHz): FP mul / add /
// FMA, vpandd, vpaddd, vpternlogd 2 a cycle (ports 0 and 5); shifts by immediate 1 (port 0);
// vptestmd, vpermw, vpermt2ps / vpermt2d 1 (port 5); vpermt2w 0.5, vpermi2w 0.35, vpermt2b 0.5,
// vcvtne2ps2bf16 0.5.
//
//   g++ -O2 -march=native dev/norm/port_probe.cpp -o /tmp/port_probe && /tmp/port_probe [GHz]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#define CH(op, args) op " " args "\n\t"
#define R8(op)                                                                                     \
  CH(op, "%%zmm0, %%zmm1, %%zmm2") CH(op, "%%zmm0, %%zmm1, %%zmm3") CH(op, "%%zmm0, %%zmm1, %%zmm4") \
  CH(op, "%%zmm0, %%zmm1, %%zmm5") CH(op, "%%zmm0, %%zmm1, %%zmm6") CH(op, "%%zmm0, %%zmm1, %%zmm7") \
  CH(op, "%%zmm0, %%zmm1, %%zmm8") CH(op, "%%zmm0, %%zmm1, %%zmm9")
#define SH8(op)                                                                                  \
  CH(op, "$1, %%zmm2, %%zmm2") CH(op, "$1, %%zmm3, %%zmm3") CH(op, "$1, %%zmm4, %%zmm4")         \
  CH(op, "$1, %%zmm5, %%zmm5") CH(op, "$1, %%zmm6, %%zmm6") CH(op, "$1, %%zmm7, %%zmm7")         \
  CH(op, "$1, %%zmm8, %%zmm8") CH(op, "$1, %%zmm9, %%zmm9")
#define K8(op)                                                                                   \
  CH(op, "%%zmm0, %%zmm2, %%k1") CH(op, "%%zmm0, %%zmm3, %%k2") CH(op, "%%zmm0, %%zmm4, %%k3")   \
  CH(op, "%%zmm0, %%zmm5, %%k4") CH(op, "%%zmm0, %%zmm6, %%k5") CH(op, "%%zmm0, %%zmm7, %%k6")   \
  CH(op, "%%zmm0, %%zmm8, %%k7") CH(op, "%%zmm0, %%zmm9, %%k1")
#define BENCH(name, body)                                                                          \
  {                                                                                                \
    const long n = 50000000;                                                                       \
    const auto t0 = std::chrono::steady_clock::now();                                              \
    for (long k = 0; k < n; ++k)                                                                   \
      asm volatile(body ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", \
                   "xmm9", "k1", "k2", "k3", "k4", "k5", "k6", "k7");                              \
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); \
    std::printf("%-18s %.2f a cycle\n", name, n * 8.0 / s / (ghz * 1e9));                          \
  }

int main(int argc, char** argv) {
  const double ghz = argc > 1 ? std::atof(argv[1]) : 3.56;
  asm volatile("vxorps %%zmm0, %%zmm0, %%zmm0\n\tvxorps %%zmm1, %%zmm1, %%zmm1" ::: "xmm0", "xmm1");
  BENCH("vfmadd231ps", R8("vfmadd231ps"))
  BENCH("vmulps", R8("vmulps"))
  BENCH("vpandd", R8("vpandd"))
  BENCH("vpaddd", R8("vpaddd"))
  BENCH("vpternlogd", R8("vpternlogd $0x96,"))
  BENCH("vpslld imm", SH8("vpslld"))
  BENCH("vptestmd", K8("vptestmd"))
  BENCH("vpermw", R8("vpermw"))
  BENCH("vpermt2w", R8("vpermt2w"))
  BENCH("vpermt2ps", R8("vpermt2ps"))
  BENCH("vcvtne2ps2bf16", R8("vcvtne2ps2bf16"))
}
