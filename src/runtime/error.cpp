// Error message construction for sixfold::Error.
#include "sixfold/runtime/error.hpp"

#include <string>

namespace sixfold {

void throw_argument_error(std::string_view where, std::string_view arg,
                          std::string_view expected, std::string_view given) {
  std::string m;
  m.append(where).append(": argument '").append(arg).append("': expected ");
  m.append(expected).append(", got ").append(given);
  throw Error(m);
}

void throw_error(std::string_view where, std::string_view message) {
  std::string m;
  m.append(where).append(": ").append(message);
  throw Error(m);
}

}  // namespace sixfold
