#pragma once
// A decoder small enough to train in a test in milliseconds, and one fixed batch for it.
#include <lazytrace/lazytrace.h>

inline lt::nn::DecoderConfig tiny_decoder_config() {
  return {.vocab = 16,
          .hidden = 8,
          .intermediate = 12,
          .heads = 2,
          .kv_heads = 1,
          .layers = 2,
          .max_seq = 8};
}

/** Tokens [2, 3] and their next-token targets. */
inline std::pair<lt::Tensor, lt::Tensor> tiny_batch() {
  return {lt::tensor(std::vector<int64_t>{1, 5, 2, 7, 3, 3}, {2, 3}),
          lt::tensor(std::vector<int64_t>{5, 2, 7, 3, 3, 9}, {2, 3})};
}
