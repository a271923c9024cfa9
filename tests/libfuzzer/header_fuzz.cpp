// libFuzzer: any bytes as a safetensors header's JSON, through the parser the reader uses
// (nn/json.h): it returns values or throws lt::Error; it never reads past the text, recurses
// without bound or allocates beyond its budget.
#include <string>
#include <string_view>

#include "lazytrace/core/error.h"
#include "nn/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = "fuzz.safetensors";
  try {
    if (lazytrace::nn::json::invalid_utf8_at(text) != std::string_view::npos) return 0;
    lazytrace::nn::json::Parser p(text, path);
    p.skip_ws();
    p.expect('{');
    p.skip_ws();
    while (!p.at('}')) {
      const std::string key = p.parse_string();
      p.begin_entry(key);
      p.skip_ws();
      p.expect(':');
      p.skip_ws();
      (void)p.parse_value(0);
      p.skip_ws();
      if (!p.consume(',')) break;
      p.skip_ws();
    }
    std::string out;
    lazytrace::nn::json::append_string(out, text);
  } catch (const lazytrace::Error&) {
  }
  return 0;
}
