// libFuzzer, structured: the input chooses tensors (dtype, shape, bytes) and then edits to
// the file they save to. The valid file loads back exactly; the edited one gives lt::Error
// or tensors that round-trip exactly (as in safetensors_fuzz).
#include <lazytrace/lazytrace.h>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz_file.h"

namespace {

struct Input {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
};

const lt::DType kDtypes[] = {lt::float32, lt::float64, lt::float16, lt::bfloat16,
                             lt::int32,   lt::int64,   lt::bool_};

bool same_bytes(const lt::Tensor& a, const lt::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const size_t bytes = static_cast<size_t>(a.numel()) * lt::itemsize(a.dtype());
  return bytes == 0 || std::memcmp(lt::host_data(a).get(), lt::host_data(b).get(), bytes) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in{data, size};
  lt::nn::ParamMap tensors;
  const int count = in.byte() % 4;
  for (int k = 0; k < count; ++k) {
    const lt::DType dt = kDtypes[in.byte() % 7];
    std::vector<int64_t> dims(in.byte() % 4);
    for (int64_t& d : dims) d = in.byte() % 5;
    const lt::Shape shape(dims);
    std::vector<uint8_t> bytes(static_cast<size_t>(shape.numel()) * lt::itemsize(dt));
    for (uint8_t& b : bytes) b = dt == lt::bool_ ? in.byte() % 2 : in.byte();
    tensors["t" + std::to_string(k)] = lt::from_writer(shape, dt, [&](void* dst, size_t n) {
      if (n > 0) std::memcpy(dst, bytes.data(), n);
    });
  }
  lt::nn::save_file(tensors, fuzz_path());
  const lt::nn::ParamMap back = lt::nn::load_file(fuzz_path());
  if (back.size() != tensors.size()) __builtin_trap();
  for (const auto& [name, t] : tensors)
    if (!same_bytes(t, back.at(name))) __builtin_trap();
  // edits: (position, value) pairs over the file's bytes, then maybe a truncation
  std::ifstream file(fuzz_path(), std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)), {});
  const int edits = in.byte() % 8;
  for (int e = 0; e < edits && !bytes.empty(); ++e) {
    const size_t at = (static_cast<size_t>(in.byte()) << 8 | in.byte()) % bytes.size();
    bytes[at] = in.byte();
  }
  if (in.byte() % 4 == 0 && !bytes.empty()) bytes.resize(in.byte() % bytes.size());
  write_fuzz_file(bytes.data(), bytes.size());
  lt::nn::ParamMap edited;
  try {
    edited = lt::nn::load_file(fuzz_path());
  } catch (const lt::Error&) {
    return 0;
  }
  const std::string again = fuzz_path() + ".again";
  lt::nn::save_file(edited, again);
  const lt::nn::ParamMap reread = lt::nn::load_file(again);
  for (const auto& [name, t] : edited)
    if (!same_bytes(t, reread.at(name))) __builtin_trap();
  std::remove(again.c_str());
  return 0;
}
