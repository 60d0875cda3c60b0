#include "sp_methods.h"

namespace tessera::cli {

const char* const kDefaultMethods =
    "ring,ring:one-sided,ulysses,ulysses:one-sided,usp,tas,tas:one-sided,torus,torus:one-sided,"
    "mesh,auto";

MethodSpec parse_method_spec(const std::string& text) {
  MethodSpec m;
  m.label = text;
  const size_t colon = text.find(':');
  m.method = sp::parse_method(text.substr(0, colon), "--methods");
  if (colon != std::string::npos) {
    m.comm = sp::parse_comm_mode(text.substr(colon + 1), "--methods");
  }
  return m;
}

}  // namespace tessera::cli
