#pragma once
/**
 * lazytrace: tensor programs traced lazily and compiled once.
 *
 *   #include <lazytrace/lazytrace.h>
 *   auto y = lt::matmul(x, w) + b;   // recorded, not run
 *   lt::sync();                      // compiled (once per graph structure) and run
 */
#include "lazytrace/autograd/autograd.h"
#include "lazytrace/core/dtype.h"
#include "lazytrace/core/error.h"
#include "lazytrace/core/shape.h"
#include "lazytrace/dist/data_parallel.h"
#include "lazytrace/dist/dist.h"
#include "lazytrace/metrics/metrics.h"
#include "lazytrace/nn/clip_grad.h"
#include "lazytrace/nn/decoder.h"
#include "lazytrace/nn/layers.h"
#include "lazytrace/nn/loss.h"
#include "lazytrace/nn/module.h"
#include "lazytrace/nn/safetensors.h"
#include "lazytrace/nn/scan_layers.h"
#include "lazytrace/ops/autocast.h"
#include "lazytrace/ops/ops.h"
#include "lazytrace/optim/optim.h"
#include "lazytrace/tools/assume_pure.h"
#include "lazytrace/tools/compile.h"
#include "lazytrace/tools/scan.h"
#include "lazytrace/trace/memory.h"
#include "lazytrace/trace/tensor.h"
#include "lazytrace/trace/trace_error.h"
#include "lazytrace/trace/tree.h"

namespace lt = lazytrace;
