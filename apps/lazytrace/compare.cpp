// lazytrace compare: the same short training with the layers run three ways, one table of
// what each costs, written as Markdown, JSON and a gnuplot chart.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "run.h"

namespace cli {

namespace {

const char* const kModes[] = {"loop", "assume-pure", "scan"};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

bool have_gnuplot() {
  return std::system("command -v gnuplot >/dev/null 2>&1") == 0;
}

}  // namespace

int compare(int argc, char** argv) {
  Flags f("compare",
          "Runs the same short training with the layers as a plain loop, through assume_pure,\n"
          "and as scan_layers over stacked weights; prints one table (trace time per step,\n"
          "compile time, step time, peak memory, final loss) and writes it to --out-dir as\n"
          "compare.md, compare.json and compare.png (loss curves, trace and compile time).");
  add_model_flags(f, 30, 8, /*layers_mode=*/false);  // it runs every mode
  f.add("out-dir", "lazytrace-report", "where the table, chart and the scan run's weights go");
  if (!f.parse(argc, argv)) return 0;
  const std::filesystem::path dir = f.str("out-dir");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UsageError(cat("cannot create --out-dir '", dir.string(), "': ", ec.message()));
  const int64_t seq = f.integer("seq", 2);
  const std::string text = read_text(f.str("text"), seq);

  std::vector<RunResult> results;
  for (const char* mode : kModes) {
    RunOptions o;
    o.mode = mode;
    o.config = model_config(f, mode);
    o.remat =
        f.choice("remat", {"save", "recompute"}) == "save" ? lt::Remat::save : lt::Remat::recompute;
    o.steps = f.integer("steps", 2);
    o.batch = f.integer("batch", 1);
    o.seq = seq;
    o.lr = f.number("lr");
    o.seed = static_cast<uint64_t>(f.integer("seed", 0));
    std::printf("== %s: %lld steps of %lld x %lld tokens, %lld layers\n", mode,
                static_cast<long long>(o.steps), static_cast<long long>(o.batch),
                static_cast<long long>(o.seq), static_cast<long long>(o.config.layers));
    Progress progress(o.steps, o.batch * o.seq, 10);
    results.push_back(
        train_run(o, text, [&](int64_t s, float l, double sec) { progress.update(s, l, sec); }));
    progress.done();
    if (std::string(mode) == "scan")
      lt::nn::save_file(lt::nn::per_layer_parameters(*results.back().model),
                        (dir / "model.safetensors").string(), config_metadata(o.config));
  }

  std::string md =
      "| layers | trace ms/step | compile ms | first step ms | step ms | tokens/s | peak MB | "
      "final loss |\n|---|---|---|---|---|---|---|---|\n";
  std::string json = "{\n  \"runs\": [\n";
  for (size_t i = 0; i < results.size(); ++i) {
    const RunResult& r = results[i];
    md += std::string("| ") + kModes[i] + " | " + fmt("%.2f", r.trace_ms_per_step) + " | " +
          fmt("%.1f", r.compile_ms) + " | " + fmt("%.1f", r.first_step_ms) + " | " +
          fmt("%.1f", r.step_ms) + " | " + fmt("%.0f", r.tokens_per_s) + " | " +
          fmt("%.0f", r.peak_mb) + " | " + fmt("%.4f", r.losses.back()) + " |\n";
    json += std::string("    {\"layers_mode\": \"") + kModes[i] +
            "\", \"trace_ms_per_step\": " + fmt("%.4f", r.trace_ms_per_step) +
            ", \"compile_ms\": " + fmt("%.3f", r.compile_ms) +
            ", \"first_step_ms\": " + fmt("%.3f", r.first_step_ms) +
            ", \"step_ms\": " + fmt("%.3f", r.step_ms) +
            ", \"tokens_per_s\": " + fmt("%.1f", r.tokens_per_s) +
            ", \"peak_mb\": " + fmt("%.1f", r.peak_mb) + ", \"losses\": [";
    for (size_t k = 0; k < r.losses.size(); ++k) json += (k ? ", " : "") + fmt("%.5f", r.losses[k]);
    json += std::string("]}") + (i + 1 < results.size() ? "," : "") + "\n";
  }
  json += "  ]\n}\n";
  std::printf("\n%s", md.c_str());
  std::ofstream(dir / "compare.md") << md;
  std::ofstream(dir / "compare.json") << json;

  // the chart: loss curves, and trace and compile time per mode
  {
    std::ofstream loss(dir / "loss.dat");
    for (size_t k = 0; k < results[0].losses.size(); ++k) {
      loss << k + 1;
      for (const RunResult& r : results) loss << " " << r.losses[k];
      loss << "\n";
    }
    std::ofstream times(dir / "times.dat");
    for (size_t i = 0; i < results.size(); ++i)
      times << kModes[i] << " " << results[i].trace_ms_per_step << " " << results[i].compile_ms
            << "\n";
    std::ofstream gp(dir / "compare.gp");
    gp << "set terminal pngcairo size 1200,450\nset output 'compare.png'\nset multiplot layout "
          "1,2\n"
          "set title 'loss (the same computation: the curves coincide)'\nset xlabel 'step'\n"
          "plot 'loss.dat' using 1:2 with lines lw 5 title 'loop', '' using 1:3 with lines lw 3 "
          "title 'assume-pure', '' using 1:4 with lines lw 1 title 'scan'\n"
          "set title 'time (ms)'\nset xlabel ''\nset style data histograms\nset style fill solid\n"
          "set logscale y\nplot 'times.dat' using 2:xtic(1) title 'trace per step', '' using 3 "
          "title 'compile'\nunset multiplot\n";
  }
  const std::string where = std::filesystem::absolute(dir).string();
  if (have_gnuplot() &&
      std::system(("cd '" + where + "' && gnuplot compare.gp 2>/dev/null").c_str()) == 0) {
    std::printf(
        "\nwrote %s/compare.md, compare.json, compare.png; weights of the scan run: "
        "%s/model.safetensors\n",
        where.c_str(), where.c_str());
  } else {
    std::printf(
        "\nwrote %s/compare.md, compare.json (no chart: gnuplot with pngcairo is not "
        "installed; scripts/install-deps.sh installs it); weights: %s/model.safetensors\n",
        where.c_str(), where.c_str());
  }
  return 0;
}

}  // namespace cli
