// lazytrace: train a byte-level language model, sample from it, and see what tracing once
// buys (compare), from the command line.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "commands.h"
#include "flags.h"
#include "lazytrace/lazytrace.h"

namespace {

const char* kUsage =
    "usage: lazytrace <command> [flags]\n\n"
    "commands:\n"
    "  train      train a byte-level decoder on a text file, save its weights\n"
    "  generate   sample text from saved weights (one loop in the backend)\n"
    "  compare    the same training with layers as a loop, assume_pure and scan: one table\n"
    "  report     a short training, then lt::metrics::report()\n\n"
    "`lazytrace <command> --help` lists a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    std::printf("%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "train") return cli::train(argc - 2, argv + 2);
    if (cmd == "generate") return cli::generate(argc - 2, argv + 2);
    if (cmd == "compare") return cli::compare(argc - 2, argv + 2);
    if (cmd == "report") return cli::report(argc - 2, argv + 2);
    std::fprintf(stderr, "lazytrace: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "lazytrace %s: %s\n(see `lazytrace %s --help`)\n", cmd.c_str(), e.what(),
                 cmd.c_str());
    return 2;
  } catch (const lt::Error& e) {
    std::fprintf(stderr, "lazytrace %s: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "lazytrace %s: out of memory; try a smaller --batch, --seq or model "
                 "(--hidden, --layers)\n",
                 cmd.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lazytrace %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
