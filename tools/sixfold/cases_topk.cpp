// tools/sixfold/cases_topk.cpp — bench/verify cases of the topk op (placeholder).
#include "bench.hpp"

namespace sixfold::bench {

void register_topk_cases() {}

}  // namespace sixfold::bench
