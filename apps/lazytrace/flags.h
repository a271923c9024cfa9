#pragma once
// Command-line flags: --name value or --name=value, typed on read, every flag declared with
// its help so that --help lists them and an unknown or malformed flag is a clear error.
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace cli {

/** Joins strings by appending (g++ 12 warns falsely on long `+` chains under -O3). */
template <typename... A>
std::string cat(const A&... parts) {
  std::string s;
  (s.append(parts), ...);
  return s;
}

/** A user mistake on the command line; main prints it with a pointer to --help. */
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Flags {
 public:
  Flags(std::string command, std::string summary);
  /** Declares --name (a value, default shown in --help) or a switch (no value). */
  void add(const std::string& name, const std::string& def, const std::string& help);
  void add_switch(const std::string& name, const std::string& help);
  /** Parses argv; false if --help was asked (the help is printed). */
  bool parse(int argc, char** argv);

  std::string str(const std::string& name) const;
  int64_t integer(const std::string& name, int64_t min = INT64_MIN) const;
  double number(const std::string& name) const;
  bool on(const std::string& name) const;
  /** Whether the user gave the flag (rather than its default). */
  bool given(const std::string& name) const;
  /** One of `choices`, else a UsageError listing them. */
  std::string choice(const std::string& name, const std::vector<std::string>& choices) const;
  std::string help() const;

 private:
  struct Flag {
    std::string def, help;
    bool is_switch = false;
  };
  const Flag& flag(const std::string& name) const;
  std::string command_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Flag> flags_;
  std::map<std::string, std::string> values_;
};

}  // namespace cli
