#include "flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace cli {

Flags::Flags(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void Flags::add(const std::string& name, const std::string& def, const std::string& help) {
  order_.push_back(name);
  flags_[name] = {def, help, false};
}

void Flags::add_switch(const std::string& name, const std::string& help) {
  order_.push_back(name);
  flags_[name] = {"", help, true};
}

bool Flags::parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", help().c_str());
      return false;
    }
    if (a.rfind("--", 0) != 0)
      throw UsageError(cat("unexpected argument '", a, "' (flags start with --)"));
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) throw UsageError(cat("unknown flag --", name));
    if (it->second.is_switch) {
      if (inline_value) throw UsageError(cat("--", name, " takes no value"));
      values_[name] = std::string(1, '1');
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError(cat("--", name, " needs a value"));
      value = argv[++i];
    }
    values_[name] = value;
  }
  return true;
}

const Flags::Flag& Flags::flag(const std::string& name) const {
  auto it = flags_.find(name);
  if (it == flags_.end()) throw std::logic_error("undeclared flag --" + name);
  return it->second;
}

std::string Flags::str(const std::string& name) const {
  auto it = values_.find(name);
  return it != values_.end() ? it->second : flag(name).def;
}

int64_t Flags::integer(const std::string& name, int64_t min) const {
  const std::string v = str(name);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || errno)
    throw UsageError(cat("--", name, " must be an integer, got '", v, "'"));
  if (x < min)
    throw UsageError(cat("--", name, " must be at least ", std::to_string(min), ", got ", v));
  return x;
}

double Flags::number(const std::string& name) const {
  const std::string v = str(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) throw UsageError(cat("--", name, " must be a number, got '", v, "'"));
  return x;
}

bool Flags::on(const std::string& name) const {
  return flag(name).is_switch && values_.count(name);
}

bool Flags::given(const std::string& name) const {
  return values_.count(name) > 0;
}

std::string Flags::choice(const std::string& name, const std::vector<std::string>& choices) const {
  const std::string v = str(name);
  std::string all;
  for (const std::string& c : choices) {
    if (c == v) return v;
    all += (all.empty() ? "" : ", ") + c;
  }
  throw UsageError(cat("--", name, " must be one of ", all, ", got '", v, "'"));
}

std::string Flags::help() const {
  std::string s = "usage: lazytrace " + command_ + " [flags]\n\n" + summary_ + "\n\nflags:\n";
  for (const std::string& n : order_) {
    const Flag& f = flags_.at(n);
    std::string left = "  --" + n + (f.is_switch ? "" : " VALUE");
    if (left.size() < 26) left.resize(26, ' ');
    s += left + " " + f.help;
    if (!f.is_switch && !f.def.empty()) s += " (default: " + f.def + ")";
    s += "\n";
  }
  s += "  --help                   this help\n";
  return s;
}

}  // namespace cli
