// libFuzzer: any bytes as a safetensors file. Loading either gives lt::Error or tensors; the
// tensors, saved and loaded again, come back with the same names, dtypes, shapes and bytes.
#include <lazytrace/lazytrace.h>
#include <cstring>

#include "fuzz_file.h"

namespace {

bool same(const lt::nn::ParamMap& a, const lt::nn::ParamMap& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    const lt::Tensor* found = b.find(name);
    if (!found) return false;
    const lt::Tensor& u = *found;
    if (u.dtype() != t.dtype() || u.shape() != t.shape()) return false;
    const size_t bytes = static_cast<size_t>(t.numel()) * lt::itemsize(t.dtype());
    if (bytes > 0 && std::memcmp(lt::host_data(t).get(), lt::host_data(u).get(), bytes) != 0)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  write_fuzz_file(data, size);
  lt::nn::ParamMap loaded;
  try {
    loaded = lt::nn::load_file(fuzz_path());
    (void)lt::nn::load_metadata(fuzz_path());
  } catch (const lt::Error&) {
    return 0;  // a bad file is an error, and nothing else
  }
  const std::string again = fuzz_path() + ".again";
  lt::nn::save_file(loaded, again);
  if (!same(loaded, lt::nn::load_file(again))) __builtin_trap();
  std::remove(again.c_str());
  return 0;
}
