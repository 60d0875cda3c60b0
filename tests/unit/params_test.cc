// Bad values of environment parameters are refused naming the variable, the text and what was
// expected: out of range (TESSERA_TIMEOUT_MS=-1 used to be taken as a zero timeout), not a
// number, overflowing int64, not finite, not one of the allowed words; override() is held to
// the same range; check_params() reports the first bad variable before any work starts.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/core/params.h"

namespace tessera {
namespace {

const Param<double> kTestFraction("TESSERA_TEST_ONLY_FRACTION", 0.5, "a fraction for this test",
                                  0.0, 1.0);

// Sets `name` to `text` for the scope of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* text) : name_(name) { setenv(name, text, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

template <typename Fn>
std::string error_of(const Fn& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a tessera::Error";
  return "";
}

TEST(Params, TimeoutOutsideItsRangeIsRefused) {
  for (const char* text : {"-1", "0", "86400001", "-9223372036854775808"}) {
    ScopedEnv env("TESSERA_TIMEOUT_MS", text);
    const std::string msg = error_of([] { (void)wait_timeout_ms(); });
    EXPECT_NE(
        msg.find(str("TESSERA_TIMEOUT_MS = '", text, "': expected an integer from 1 to 86400000")),
        std::string::npos)
        << msg;
  }
  ScopedEnv env("TESSERA_TIMEOUT_MS", "1");
  EXPECT_EQ(wait_timeout_ms(), 1);
}

TEST(Params, TimeoutThatIsNotAnIntegerIsRefused) {
  for (const char* text : {"", "10s", "1.5", "abc", "99999999999999999999", " 5"}) {
    ScopedEnv env("TESSERA_TIMEOUT_MS", text);
    const std::string msg = error_of([] { (void)wait_timeout_ms(); });
    EXPECT_NE(msg.find(str("TESSERA_TIMEOUT_MS = '", text, "': expected an integer")),
              std::string::npos)
        << msg;
  }
}

TEST(Params, OverrideIsHeldToTheRange) {
  const std::string msg = error_of([] { kWaitTimeoutMs.override(0); });
  EXPECT_NE(msg.find("TESSERA_TIMEOUT_MS = '0': expected an integer from 1 to 86400000"),
            std::string::npos)
      << msg;
  EXPECT_EQ(wait_timeout_ms(), 60000);  // the refused override left nothing behind
}

TEST(Params, NumberMustBeFiniteAndInRange) {
  for (const char* text : {"nan", "inf", "-inf", "1e400", "1.5", "-0.1", "half"}) {
    ScopedEnv env("TESSERA_TEST_ONLY_FRACTION", text);
    const std::string msg = error_of([] { (void)kTestFraction.get(); });
    EXPECT_NE(msg.find(str("TESSERA_TEST_ONLY_FRACTION = '", text, "': expected")),
              std::string::npos)
        << msg;
  }
  ScopedEnv env("TESSERA_TEST_ONLY_FRACTION", "0.25");
  EXPECT_EQ(kTestFraction.get(), 0.25);
}

// The shown text of a number reads back as the same value (fuzz_env_params in CI at e6d58ce:
// a stream's six digits showed 0.7777777 as 0.777778).
TEST(Params, NumberShownReadsBackTheSame) {
  for (const char* text : {"0.7777777", "0.1", "0.30000000000000004", "1e-300", "1"}) {
    ScopedEnv env("TESSERA_TEST_ONLY_FRACTION", text);
    const double value = kTestFraction.get();
    const std::string shown = kTestFraction.current_string();
    ScopedEnv again("TESSERA_TEST_ONLY_FRACTION", shown.c_str());
    EXPECT_EQ(kTestFraction.get(), value) << text << " shown as " << shown;
  }
}

TEST(Params, LogLevelMustBeOneOfItsWords) {
  ScopedEnv env("TESSERA_LOG_LEVEL", "loud");
  const std::string msg = error_of([] { (void)log_level(); });
  EXPECT_NE(msg.find("TESSERA_LOG_LEVEL = 'loud': expected error, warn, info, debug or trace"),
            std::string::npos)
      << msg;
}

TEST(Params, HubPortOffsetRange) {
  ScopedEnv env("TESSERA_HUB_PORT_OFFSET", "70000");
  const std::string msg = error_of([] { check_params(); });
  EXPECT_NE(msg.find("TESSERA_HUB_PORT_OFFSET = '70000': expected an integer from -1 to 65535"),
            std::string::npos)
      << msg;
}

TEST(Params, CheckParamsNamesTheFirstBadVariable) {
  EXPECT_NO_THROW(check_params());
  ScopedEnv timeout("TESSERA_TIMEOUT_MS", "-1");
  ScopedEnv level("TESSERA_LOG_LEVEL", "loud");
  // Sorted by name: the log level comes first.
  const std::string msg = error_of([] { check_params(); });
  EXPECT_NE(msg.find("TESSERA_LOG_LEVEL = 'loud'"), std::string::npos) << msg;
  // `tessera info` still lists every parameter, marking the bad ones.
  for (const ParamInfo& p : all_params()) {
    if (p.name == "TESSERA_TIMEOUT_MS") EXPECT_EQ(p.current_value.rfind("<invalid:", 0), 0u);
  }
}

}  // namespace
}  // namespace tessera
