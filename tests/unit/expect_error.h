// A test's check that a call throws strata's Error with a message naming every one of `parts`
// (the file, field, tensor or value a user must be told about).
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "strata/core/error.h"

namespace strata {

template <class Fn>
void expect_error_mentions(Fn fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no Error thrown";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << p << " | " << msg;
  }
}

}  // namespace strata
