// The JSON of a safetensors header: a strict parser of what a header holds, a UTF-8 check
// and string escaping (json.h).
#include "nn/json.h"

#include <cstdio>
#include <cstring>
#include <set>

#include "lazytrace/core/error.h"

namespace lazytrace::nn::json {
namespace {

constexpr const char* kOp = "safetensors";
constexpr int kMaxDepth = 64;  // a valid header nests 3 deep; this bounds the recursion

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

}  // namespace

size_t invalid_utf8_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t cp, min;
    if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1fu, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0fu, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07u, min = 0x10000;
    } else {
      return i;
    }
    if (i + n >= s.size()) return i;
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (d & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += n + 1;
  }
  return std::string_view::npos;
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::Object:
      return "an object";
    case Value::Kind::Array:
      return "an array";
    case Value::Kind::String:
      return "a string";
    case Value::Kind::Number:
      return "a number";
  }
  return "a value";
}

void append_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

void Parser::error(const std::string& what) const {
  fail(kOp, "'", path_, "': the header is not valid JSON: ", what, " (at byte ", i_,
       " of the header); the file is corrupted or not a safetensors file.");
}

std::string Parser::describe_here() const {
  if (i_ >= s_.size()) return "the end of the header";
  const auto c = static_cast<unsigned char>(s_[i_]);
  if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
  return buf;
}

void Parser::begin_entry(const std::string& name) {
  entry_ = name;
  budget_ = kMaxEntryValues;
}

void Parser::skip_ws() {
  while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
    ++i_;
}

void Parser::expect(char c) {
  if (i_ >= s_.size() || s_[i_] != c)
    error(std::string("expected '") + c + "' but found " + describe_here());
  ++i_;
}

Value Parser::parse_value(int depth) {
  if (depth > kMaxDepth) error("values nest more than 64 levels deep");
  if (budget_-- == 0)
    error("one entry holds more than " + std::to_string(kMaxEntryValues) + " values");
  if (i_ >= s_.size()) error("unexpected end of the header");
  const char c = s_[i_];
  if (c == '{') return parse_object(depth);
  if (c == '[') return parse_array(depth);
  if (c == '"') {
    Value v;
    v.kind = Value::Kind::String;
    v.text = parse_string();
    return v;
  }
  if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
  for (const char* word : {"true", "false", "null"})
    if (s_.substr(i_, std::strlen(word)) == word)
      error(std::string("'") + word +
            "' is not allowed (a safetensors header holds only objects, arrays, strings and "
            "non-negative integers)");
  error("expected a value but found " + describe_here());
}

Value Parser::parse_object(int depth) {
  Value v;
  v.kind = Value::Kind::Object;
  expect('{');
  skip_ws();
  if (i_ < s_.size() && s_[i_] == '}') {
    ++i_;
    return v;
  }
  std::set<std::string> seen;
  while (true) {
    skip_ws();
    if (i_ >= s_.size() || s_[i_] != '"')
      error("expected a string key but found " + describe_here());
    std::string key = parse_string();
    if (!seen.insert(key).second)  // valid JSON, but readers disagree on which value wins
      fail(kOp, "'", path_, "': duplicate key '", key, "' in the entry of '", entry_, "' (at byte ",
           i_, " of the header); each key may appear once.");
    skip_ws();
    expect(':');
    skip_ws();
    v.keys.push_back(std::move(key));
    v.items.push_back(parse_value(depth + 1));
    skip_ws();
    if (i_ < s_.size() && s_[i_] == ',') {
      ++i_;
      continue;
    }
    if (i_ < s_.size() && s_[i_] == '}') {
      ++i_;
      return v;
    }
    error("expected ',' or '}' in an object but found " + describe_here());
  }
}

Value Parser::parse_array(int depth) {
  Value v;
  v.kind = Value::Kind::Array;
  expect('[');
  skip_ws();
  if (i_ < s_.size() && s_[i_] == ']') {
    ++i_;
    return v;
  }
  while (true) {
    skip_ws();
    v.items.push_back(parse_value(depth + 1));
    skip_ws();
    if (i_ < s_.size() && s_[i_] == ',') {
      ++i_;
      continue;
    }
    if (i_ < s_.size() && s_[i_] == ']') {
      ++i_;
      return v;
    }
    error("expected ',' or ']' in an array but found " + describe_here());
  }
}

uint32_t Parser::parse_hex4() {
  if (i_ + 4 > s_.size()) error("a \\u escape needs four hex digits");
  uint32_t u = 0;
  for (int k = 0; k < 4; ++k) {
    const char c = s_[i_++];
    u <<= 4;
    if (c >= '0' && c <= '9')
      u |= static_cast<uint32_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      u |= static_cast<uint32_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      u |= static_cast<uint32_t>(c - 'A' + 10);
    else
      error("a \\u escape needs four hex digits");
  }
  return u;
}

// The header was checked to be UTF-8 as a whole, so raw bytes copy through.
std::string Parser::parse_string() {
  expect('"');
  std::string out;
  while (true) {
    if (i_ >= s_.size()) error("a string is not closed");
    const char c = s_[i_];
    if (c == '"') {
      ++i_;
      return out;
    }
    if (static_cast<unsigned char>(c) < 0x20)
      error("a string holds an unescaped control character");
    if (c != '\\') {
      out += c;
      ++i_;
      continue;
    }
    ++i_;
    if (i_ >= s_.size()) error("a string is not closed");
    const char e = s_[i_++];
    switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp = parse_hex4();
        if (cp >= 0xdc00 && cp <= 0xdfff) error("a \\u escape is a lone low surrogate");
        if (cp >= 0xd800 && cp <= 0xdbff) {
          if (s_.substr(i_, 2) != "\\u") error("a \\u high surrogate is not followed by a low one");
          i_ += 2;
          const uint32_t lo = parse_hex4();
          if (lo < 0xdc00 || lo > 0xdfff)
            error("a \\u high surrogate is not followed by a low one");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        append_utf8(out, cp);
        break;
      }
      default:
        --i_;
        error("invalid escape '\\" + std::string(1, e) + "' in a string");
    }
  }
}

// Any JSON number is accepted here so that the checks of shapes and offsets can say
// what is wrong with it ("-3 is negative") instead of a bare syntax error.
Value Parser::parse_number() {
  const size_t start = i_;
  Value v;
  v.kind = Value::Kind::Number;
  bool plain = true;
  if (s_[i_] == '-') {
    plain = false;
    ++i_;
  }
  auto digits = [&] {
    const size_t from = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ - from;
  };
  const size_t int_start = i_;
  const size_t int_digits = digits();
  if (int_digits == 0) error("a number has no digits");
  if (int_digits > 1 && s_[int_start] == '0') error("a number has a leading zero");
  if (i_ < s_.size() && s_[i_] == '.') {
    plain = false;
    ++i_;
    if (digits() == 0) error("a number has no digits after '.'");
  }
  if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
    plain = false;
    ++i_;
    if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
    if (digits() == 0) error("a number has no digits in its exponent");
  }
  v.text = std::string(s_.substr(start, i_ - start));
  if (plain) {
    int64_t n = 0;
    bool fits = true;
    for (size_t k = int_start; k < int_start + int_digits && fits; ++k)
      fits = !__builtin_mul_overflow(n, int64_t{10}, &n) &&
             !__builtin_add_overflow(n, int64_t{s_[k] - '0'}, &n);
    v.is_count = fits;
    v.count = fits ? n : 0;
  }
  return v;
}

}  // namespace lazytrace::nn::json
