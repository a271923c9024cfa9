#pragma once
// The JSON of a safetensors header (internal to safetensors.cpp): a strict parser of what a
// header holds (objects, arrays, strings, numbers), a UTF-8 check and string escaping for
// the writer. Errors are lt::Errors of "safetensors" naming the file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lazytrace::nn::json {

/** Values in one entry (dtype, shape dims, offsets): bounds the parse's memory per entry. */
constexpr size_t kMaxEntryValues = 4096;

struct Value {
  enum class Kind { Object, Array, String, Number };
  Kind kind = Kind::Object;
  std::string text;               // String: the decoded value; Number: the source text
  bool is_count = false;          // Number: a non-negative integer that fits in int64
  int64_t count = 0;              // its value
  std::vector<Value> items;       // Array elements, or Object values (in source order)
  std::vector<std::string> keys;  // Object keys, parallel to items
};

/** "an object", "an array", ... for messages. */
const char* kind_name(Value::Kind k);

/** Offset of the first byte that does not belong to valid UTF-8 (no overlong forms, no
 * surrogates, nothing past U+10FFFF), or npos. */
size_t invalid_utf8_at(std::string_view s);

/** Appends s to out as a JSON string (quoted, with '"', '\\' and control bytes escaped). */
void append_string(std::string& out, const std::string& s);

/**
 * A parser over a header `text` (checked to be UTF-8 as a whole) of the file `path`. The top
 * level of the header is read member by member (the caller drives it), so only one entry's
 * values exist as Values at a time and each is held to kMaxEntryValues: a header of any
 * content costs memory in proportion to its size, never 50 times more.
 */
class Parser {
 public:
  Parser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  /** Fails: the header is not valid JSON (`what`, at the current byte). */
  [[noreturn]] void error(const std::string& what) const;
  /** The current byte for messages: "'x'", "byte 0x01" or "the end of the header". */
  std::string describe_here() const;

  bool at_end() const { return i_ >= s_.size(); }
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }
  bool consume(char c) {
    if (!at(c)) return false;
    ++i_;
    return true;
  }

  /** Starts a new top-level member: resets the value budget and names it in messages. */
  void begin_entry(const std::string& name);

  void skip_ws();
  void expect(char c);
  Value parse_value(int depth);
  std::string parse_string();

 private:
  Value parse_object(int depth);
  Value parse_array(int depth);
  uint32_t parse_hex4();
  Value parse_number();

  std::string_view s_;
  const std::string& path_;
  size_t i_ = 0;
  std::string entry_;  // the top-level member being read, for messages
  size_t budget_ = kMaxEntryValues;
};

}  // namespace lazytrace::nn::json
