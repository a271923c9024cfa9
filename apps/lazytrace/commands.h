#pragma once
// The subcommands; each parses its own flags and returns the process exit code.
namespace cli {
int train(int argc, char** argv);
int generate(int argc, char** argv);
int compare(int argc, char** argv);
int report(int argc, char** argv);
}  // namespace cli
