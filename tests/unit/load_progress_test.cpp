// The load progress line: silent for quick loads, then "loading" lines and a closing "loaded".
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "strata/io/load_progress.h"

namespace strata {
namespace {

TEST(LoadProgress, QuietForQuickLoadsThenReportsBytesAndRate) {
  ::testing::internal::CaptureStderr();
  LoadProgress quick("/m/quick", 1000, true);
  quick.add(1000);
  quick.finish();
  LoadProgress off("/m/off", 2'000'000'000, false);
  LoadProgress slow("/m/slow", 2'000'000'000, true);
  slow.add(1'000'000'000);  // within the first second: not printed yet
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  off.add(500'000'000);
  off.finish();
  slow.add(500'000'000);
  slow.add(1);  // too soon after the last line (stderr is not a terminal here: 5 s apart)
  slow.finish();
  slow.finish();
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("quick"), std::string::npos) << err;
  EXPECT_EQ(err.find("off"), std::string::npos) << err;
  EXPECT_NE(err.find("loading /m/slow: 1.5 / 2.0 GB, "), std::string::npos) << err;
  EXPECT_NE(err.find("loaded /m/slow: 1.5 GB in 1."), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 2) << err;
  EXPECT_EQ(slow.bytes(), 1'500'000'001u);
}

}  // namespace
}  // namespace strata
