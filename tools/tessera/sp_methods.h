// The sequence-parallel method list the CLI takes (`--methods ring,usp,torus:one-sided,...`),
// shared by `bench sp` and `plan`.
#pragma once

#include <string>
#include <vector>

#include "tessera/sp/planners.h"

namespace tessera::cli {

struct MethodSpec {
  std::string label;  // as given: "torus:one-sided"
  sp::Method method = sp::Method::kAuto;
  sp::CommMode comm = sp::CommMode::kTwoSided;
};

// Every method, two-sided and (where the method has one) one-sided, then auto.
extern const char* const kDefaultMethods;

// "torus:one-sided" -> {torus, one-sided}; throws kInvalidArgument naming --methods.
MethodSpec parse_method_spec(const std::string& text);

// A dtype attention takes (bf16, f16, f32 and their aliases); throws kInvalidArgument naming
// `what` and those three otherwise (u8, i32, ... are dtypes, but not of attention).
DType parse_attention_dtype(const std::string& text, const std::string& what);

}  // namespace tessera::cli
