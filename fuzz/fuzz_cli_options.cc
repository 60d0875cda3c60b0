// Fuzzes the CLI's option handling (tools/tessera/options.h and the parsers the commands
// call on option text): a command line built from the declared options, edge-case numbers
// and raw text is parsed, then every accessor and parser is asked for its value. Each must
// return a value inside the range it promises or throw tessera::Error; a crash, UB, another
// exception, or a value outside its range is a finding.
#include <cmath>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "options.h"
#include "rank_launch.h"
#include "sp_methods.h"
#include "tessera/core/error.h"
#include "tessera/sp/cost_model.h"

using namespace tessera;
using namespace tessera::cli;

namespace {

// Declared the way the commands declare theirs (numbers, byte sizes, lists, flags).
std::vector<OptionSpec> declared_options() {
  return {{"seq", "36864", "comma list of sequence lengths"},
          {"heads", "24", "query heads"},
          {"nranks", "", "ranks"},
          {"min-bytes", "1M", "smallest size"},
          {"max-bytes", "64M", "largest size"},
          {"link-gbps", "0", "link bandwidth"},
          {"methods", kDefaultMethods, "methods"},
          {"dtype", "bf16", "dtype"},
          {"cost", "", "cost model overrides"},
          {"link", "nic400", "link preset"},
          {"causal", "", "causal mask", true},
          {"explain", "", "explain", true}};
}

const char* const kWords[] = {"--seq",       "--heads",
                              "--nranks",    "--min-bytes",
                              "--max-bytes", "--link-gbps",
                              "--methods",   "--dtype",
                              "--cost",      "--link",
                              "--causal",    "--explain",
                              "--help",      "-h",
                              "--causal=1",  "--seq=",
                              "--",          "--=",
                              "4096",        "-1",
                              "0",           "64K",
                              "1G",          "1e300",
                              "nan",         "inf",
                              "-0",          "0x10",
                              "1.5M",        "9223372036854775808",
                              "ring,usp",    "torus:one-sided",
                              "mesh:",       "bf16",
                              "fp64",        "num_sms=1e300",
                              "nic400",      "paper",
                              ",",           " 7",
                              "7 ",          "1,,2"};

std::string word(FuzzedDataProvider& in) {
  if (in.ConsumeBool()) return kWords[in.ConsumeIntegralInRange<size_t>(0, std::size(kWords) - 1)];
  return in.ConsumeRandomLengthString(24);
}

void expect(bool ok, const std::string& what) {
  if (!ok) fuzz::fail(what);
}

void check_integer(int64_t v, int64_t lo, int64_t hi, const std::string& text) {
  expect(v >= lo && v <= hi, str("parse_integer('", text, "', ", lo, ", ", hi, ") = ", v));
  expect(parse_integer(str(v), "--x", lo, hi) == v, str("integer ", v, " does not read back"));
}

void check_bytes(size_t bytes, const std::string& text) {
  expect(bytes <= (size_t(1) << 62), str("parse_bytes('", text, "') = ", bytes, " > 2^62"));
  // Exact in a double up to 2^53: those sizes must survive printing and reading back.
  if (bytes < (size_t(1) << 53)) {
    const std::string printed = format_bytes(bytes);
    expect(parse_bytes(printed, "--x") == bytes,
           str("format_bytes(", bytes, ") = '", printed, "' reads back differently"));
  }
}

// The parsed command line, asked for every option in every form.
void query_options(FuzzedDataProvider& in, const Options& opt) {
  for (const OptionSpec& s : declared_options()) {
    (void)opt.given(s.name);
    if (s.is_flag) {
      (void)opt.flag(s.name);
      continue;
    }
    const std::string& text = opt.text(s.name);
    const int64_t lo = fuzz::draw(in, 0, 4);
    const int64_t hi = fuzz::draw(in, lo, 1 << 20);
    try {
      check_integer(opt.integer(s.name, lo, hi), lo, hi, text);
    } catch (const Error&) {
    }
    try {
      const double v = opt.number(s.name, -1e9, 1e9);
      expect(std::isfinite(v) && v >= -1e9 && v <= 1e9, str("number('", text, "') = ", v));
    } catch (const Error&) {
    }
    try {
      const std::vector<int64_t> values = opt.integers(s.name, lo, hi);
      expect(!values.empty(), str("integers('", text, "') is empty"));
      for (int64_t v : values) check_integer(v, lo, hi, text);
    } catch (const Error&) {
    }
    try {
      check_bytes(opt.bytes(s.name), text);
    } catch (const Error&) {
    }
    for (const std::string& item : opt.list(s.name)) {
      expect(!item.empty() && item.find(',') == std::string::npos,
             str("list('", text, "') has item '", item, "'"));
    }
  }
  (void)opt.usage();
}

// The parsers commands apply to option text, one per call.
void parse_one(FuzzedDataProvider& in) {
  const std::string text = word(in);
  switch (in.ConsumeIntegralInRange<int>(0, 8)) {
    case 0: {
      const MethodSpec m = parse_method_spec(text);
      expect(m.label == text, "parse_method_spec lost its label");
      break;
    }
    case 1: {
      const DType d = parse_attention_dtype(text, "--dtype");
      expect(d == DType::kBF16 || d == DType::kF16 || d == DType::kF32,
             str("--dtype '", text, "' gave ", dtype_name(d)));
      break;
    }
    case 2: {
      sp::CostModel model;
      model.apply(text);
      model.validate();  // apply() promises a valid model
      (void)model.describe();
      break;
    }
    case 3: {
      ContextOptions options;
      const double gbps = fuzz::draw_double(in);
      const double latency = fuzz::draw_double(in);
      apply_emulation_options(fuzz::draw_int(in, 1, 8), text, gbps, latency, options);
      expect(options.emulated_link.bandwidth_gbps > 0 && options.emulated_link.latency_us >= 0,
             "apply_emulation_options accepted a link without bandwidth");
      break;
    }
    case 4: {
      const int n = nranks_option(text);
      expect(n >= 0 && n <= 4096, str("--nranks '", text, "' = ", n));
      break;
    }
    case 5: {
      const size_t a = size_t(fuzz::draw(in, 0, 1 << 20));
      const size_t b = size_t(fuzz::draw(in, 0, 1 << 20));
      const size_t c = size_t(fuzz::draw(in, 0, 1 << 20));
      unsigned __int128 exact = (unsigned __int128)a * b * c;
      const bool overflows = (b != 0 && c != 0 && a > std::numeric_limits<size_t>::max() / b) ||
                             exact > std::numeric_limits<size_t>::max();
      const size_t p = saturating_product({a, b, c});
      expect(overflows ? p == std::numeric_limits<size_t>::max() : p == size_t(exact),
             str("saturating_product(", a, ", ", b, ", ", c, ") = ", p));
      break;
    }
    case 6: {
      const size_t lo = size_t(fuzz::draw(in, 1, 1 << 20));
      const size_t hi = size_t(fuzz::draw(in, 1, int64_t(1) << 40));
      const std::vector<size_t> sizes = power_of_two_range(lo, hi);
      expect(!sizes.empty() && sizes.size() <= 63 && sizes.front() == lo && sizes.back() <= hi,
             str("power_of_two_range(", lo, ", ", hi, ") has ", sizes.size(), " sizes"));
      break;
    }
    case 7:
      check_bytes(parse_bytes(text, "--max-bytes"), text);
      break;
    default: {
      const int64_t lo = fuzz::draw(in, -10, 10);
      const int64_t hi = fuzz::draw(in, lo, 1 << 30);
      check_integer(parse_integer(text, "--seq", lo, hi), lo, hi, text);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  try {
    std::vector<std::string> args;
    const int count = in.ConsumeIntegralInRange<int>(0, 12);
    for (int i = 0; i < count; ++i) args.push_back(word(in));
    Options opt("fuzz", declared_options());
    try {
      opt.parse(args);
      query_options(in, opt);
    } catch (const Error&) {
    }
    while (in.remaining_bytes() > 0) {
      try {
        parse_one(in);
      } catch (const Error&) {
      }
    }
  } catch (const std::exception& e) {
    fuzz::fail(str("a non-tessera exception: ", e.what()));
  }
  return 0;
}
