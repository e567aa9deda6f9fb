// sixfold/runtime/error.hpp — the one exception type every public entry throws.
//
// Messages follow one shape so users can act on them without reading our source:
//   "<function>: argument '<name>': expected <what>, got <what was given>"
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

namespace sixfold {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error("<where>: argument '<arg>': expected <expected>, got <given>").
[[noreturn]] void throw_argument_error(std::string_view where, std::string_view arg,
                                       std::string_view expected, std::string_view given);

// Throws Error("<where>: <message>") for failures that are not about one argument
// (a CUDA call that failed, a backend that was not built).
[[noreturn]] void throw_error(std::string_view where, std::string_view message);

}  // namespace sixfold
