// Fuzzes what Tessera reads from the environment: the registered TESSERA_* parameters
// (core/params.h: check_params, get, override, ranges and choices) and the launcher variables
// detect_launch() reads (torchrun, Open MPI, MPICH/PMIx, Slurm, the CLI's workers). The input
// decides which variables are set and to what. Every read must give a value inside its
// declared range or throw tessera::Error naming the variable; a crash, UB, another exception
// or an out-of-range value is a finding.
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "tessera/comm/bootstrap.h"
#include "tessera/core/error.h"
#include "tessera/core/params.h"

using namespace tessera;

namespace {

// Parameters of every type, declared once (the registry keeps pointers to them).
const Param<int64_t> kFuzzInteger("TESSERA_FUZZ_INTEGER", 7, "fuzz: integer in range", -5, 1000);
const Param<double> kFuzzNumber("TESSERA_FUZZ_NUMBER", 1.0, "fuzz: number in range", 0.5, 2.5);
const Param<bool> kFuzzSwitch("TESSERA_FUZZ_SWITCH", false, "fuzz: switch");
const Param<std::string> kFuzzWord("TESSERA_FUZZ_WORD", "b", "fuzz: word", {"a", "b", "cc"});

const char* const kLaunchVariables[] = {"LOCAL_RANK",
                                        "LOCAL_WORLD_SIZE",
                                        "MASTER_ADDR",
                                        "MASTER_PORT",
                                        "MPI_LOCALNRANKS",
                                        "MPI_LOCALRANKID",
                                        "OMPI_COMM_WORLD_LOCAL_RANK",
                                        "OMPI_COMM_WORLD_LOCAL_SIZE",
                                        "OMPI_COMM_WORLD_RANK",
                                        "OMPI_COMM_WORLD_SIZE",
                                        "PMIX_RANK",
                                        "PMI_LOCAL_RANK",
                                        "PMI_LOCAL_SIZE",
                                        "PMI_RANK",
                                        "PMI_SIZE",
                                        "RANK",
                                        "SLURM_LOCALID",
                                        "SLURM_NNODES",
                                        "SLURM_NODEID",
                                        "SLURM_NTASKS",
                                        "SLURM_NTASKS_PER_NODE",
                                        "SLURM_PROCID",
                                        "SLURM_TASKS_PER_NODE",
                                        "TESSERA_BOOTSTRAP_ADDR",
                                        "TESSERA_LOCAL_RANK",
                                        "TESSERA_LOCAL_SIZE",
                                        "TESSERA_RANK",
                                        "TESSERA_WORLD_SIZE",
                                        "TORCHELASTIC_USE_AGENT_STORE",
                                        "WORLD_SIZE"};

const char* const kTexts[] = {"0",
                              "1",
                              "2",
                              "3",
                              "-1",
                              "4(x2),3",
                              "2(x3)",
                              "1(x2147483647),1",
                              "(x2)",
                              "127.0.0.1",
                              "[::1]:29500",
                              "host:29500",
                              "host:0",
                              "host:65536",
                              "29500",
                              " 1",
                              "1 ",
                              "2147483647",
                              "2147483648",
                              "9223372036854775807",
                              "1e3",
                              "0x10",
                              "true",
                              "on",
                              "yes",
                              "True",
                              "",
                              "nan",
                              "inf",
                              "1.5",
                              "-0",
                              "warn",
                              "trace",
                              "a",
                              "cc"};

std::string text(FuzzedDataProvider& in) {
  if (in.ConsumeIntegralInRange<int>(0, 3) != 0) {
    return kTexts[in.ConsumeIntegralInRange<size_t>(0, std::size(kTexts) - 1)];
  }
  return in.ConsumeRandomLengthString(24);
}

void expect(bool ok, const std::string& what) {
  if (!ok) fuzz::fail(what);
}

void set_variable(FuzzedDataProvider& in, const std::string& name) {
  if (in.ConsumeIntegralInRange<int>(0, 2) == 0) {
    setenv(name.c_str(), text(in).c_str(), 1);
  } else {
    unsetenv(name.c_str());
  }
}

// Reads of a parameter give a value inside its range, which reads back the same.
template <typename T>
void check_param(const Param<T>& param, bool in_range(const T&)) {
  try {
    const T value = param.get();
    expect(in_range(value), str(param.name(), " = '", param.current_string(), "' is out of range"));
    const std::string shown = param.current_string();
    setenv(param.name(), shown.c_str(), 1);
    expect(param.get() == value, str(param.name(), ": '", shown, "' reads back differently"));
  } catch (const Error&) {
  }
}

template <typename T>
void check_override(const Param<T>& param, const T& value) {
  try {
    param.override(value);
    expect(param.get() == value, str(param.name(), ": override not kept"));
  } catch (const Error&) {
  }
  param.clear_override();
}

void check_launch() {
  try {
    const LaunchInfo info = detect_launch();
    expect(info.size >= 1 && info.rank >= 0 && info.rank < info.size && info.local_size >= 1 &&
               info.local_size <= info.size && info.local_rank >= 0 &&
               info.local_rank < info.local_size,
           str("detect_launch (", info.source, "): rank ", info.rank, " of ", info.size, ", local ",
               info.local_rank, " of ", info.local_size));
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  try {
    for (const char* name : kLaunchVariables) set_variable(in, name);
    for (const ParamInfo& p : all_params()) set_variable(in, p.name);
    check_launch();
    bool all_valid = true;
    try {
      check_params();
    } catch (const Error&) {
      all_valid = false;
    }
    for (const ParamInfo& p : all_params()) {
      // all_params() marks a value that failed to parse "<invalid: ...>"; a free-text parameter
      // (a file name) shows its raw text, which may itself start so: not a marker then.
      const char* raw = getenv(p.name.c_str());
      const bool marked = p.current_value.rfind("<invalid: ", 0) == 0 &&
                          !(raw != nullptr && p.current_value == raw);
      expect(!all_valid || !marked,
             str("check_params passed but ", p.name, " is ", p.current_value));
    }
    expect(!all_valid || wait_timeout_ms() >= 1, "TESSERA_TIMEOUT_MS below 1 ms accepted");
    check_param<int64_t>(kFuzzInteger, [](const int64_t& v) { return v >= -5 && v <= 1000; });
    check_param<double>(kFuzzNumber, [](const double& v) { return v >= 0.5 && v <= 2.5; });
    check_param<bool>(kFuzzSwitch, [](const bool&) { return true; });
    check_param<std::string>(
        kFuzzWord, [](const std::string& v) { return v == "a" || v == "b" || v == "cc"; });
    check_param<int64_t>(kWaitTimeoutMs, [](const int64_t& v) { return v >= 1 && v <= 86400000; });
    check_override<int64_t>(kFuzzInteger, fuzz::draw(in, -6, 1001));
    check_override<double>(kFuzzNumber, fuzz::draw_double(in));
    check_override<std::string>(kFuzzWord, text(in));
  } catch (const std::exception& e) {
    fuzz::fail(str("a non-tessera exception: ", e.what()));
  }
  return 0;
}
