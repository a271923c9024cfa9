#pragma once
// The text the training benchmarks read: the GPL-3 that every Debian machine ships.
#include <fstream>
#include <iterator>
#include <string>

inline const std::string& gpl_text() {
  static const std::string t = [] {
    std::ifstream f("/usr/share/common-licenses/GPL-3", std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (s.size() < 1000) s.assign(100000, 'a');  // a machine without the text still runs
    return s;
  }();
  return t;
}
