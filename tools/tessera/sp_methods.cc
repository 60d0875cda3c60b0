#include "sp_methods.h"

#include "tessera/core/error.h"

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

DType parse_attention_dtype(const std::string& text, const std::string& what) {
  const char* expected = "': expected bf16, f16 or f32 (attention's dtypes)";
  DType dtype;
  try {
    dtype = parse_dtype(text, what);
  } catch (const Error&) {
    throw_error(ErrorCode::kInvalidArgument, str(what, " = '", text, expected));
  }
  TESSERA_CHECK_ARG(dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32, what,
                    " = '", text, expected);
  return dtype;
}

}  // namespace tessera::cli
