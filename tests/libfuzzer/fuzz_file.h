#pragma once
// The file a libFuzzer input is written to: the safetensors reader takes a path.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

// In memory (/dev/shm) where the machine has it: a run of millions of inputs writes and reads
// each one twice.
inline const std::string& fuzz_path() {
  static const std::string path =
      std::string(::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") + "/lazytrace-fuzz-" +
      std::to_string(::getpid()) + ".safetensors";
  return path;
}

inline void write_fuzz_file(const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(fuzz_path().c_str(), "wb");
  if (!f) __builtin_trap();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
}
