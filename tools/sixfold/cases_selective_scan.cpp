// tools/sixfold/cases_selective_scan.cpp — bench/verify cases of the selective_scan op (placeholder).
#include "bench.hpp"

namespace sixfold::bench {

void register_selective_scan_cases() {}

}  // namespace sixfold::bench
