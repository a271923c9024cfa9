#pragma once
// The check every error test makes: f throws lt::Error whose message holds every piece.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <functional>
#include <initializer_list>
#include <string>

inline void expect_error(const std::function<void()>& f,
                         std::initializer_list<const char*> pieces) {
  try {
    f();
  } catch (const lt::Error& e) {
    std::string msg = e.what();
    for (const char* p : pieces)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  }
  ADD_FAILURE() << "no lt::Error thrown";
}

inline void expect_error(const std::function<void()>& f, const std::string& piece) {
  expect_error(f, {piece.c_str()});
}
