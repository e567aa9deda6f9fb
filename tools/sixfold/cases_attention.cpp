// tools/sixfold/cases_attention.cpp — bench/verify cases of the attention op (placeholder).
#include "bench.hpp"

namespace sixfold::bench {

void register_attention_cases() {}

}  // namespace sixfold::bench
