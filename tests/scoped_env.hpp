// Test helper: sets an environment variable (the kernels' dev/test hooks, e.g.
// SIXFOLD_SSCAN_KERNEL) for one scope, then puts back the value it had, or unsets it.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace sixfold::testing {

struct ScopedEnv {
  std::string name;
  std::optional<std::string> saved;
  ScopedEnv(const char* n, const std::string& value) : name(n) {
    if (const char* old = std::getenv(n)) saved = old;
    setenv(n, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (saved) setenv(name.c_str(), saved->c_str(), 1);
    else unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
};

}  // namespace sixfold::testing
