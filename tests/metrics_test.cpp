// Insight: the metrics report, graph printers and graph dumps.
#include <gtest/gtest.h>

#include <lazytrace/lazytrace.h>
#include <cstdlib>
#include <filesystem>

namespace {

TEST(Metrics, ReportListsCountersAndTimers) {
  lt::metrics::reset();
  auto x = lt::tensor({1.0f, 2.0f});
  auto y = lt::exp(x) + 2.5f;
  EXPECT_EQ(lt::metrics::counter("TraceCount"), 2);
  (void)y.to_vector<float>();
  std::string r = lt::metrics::report();
  for (const char* name : {"TraceCount", "CompileCount", "CacheHit", "ExecuteCount", "TraceTime",
                           "CompileTime", "ExecuteTime", "TransferToHostTime"})
    EXPECT_NE(r.find(name), std::string::npos) << name;
  EXPECT_EQ(lt::metrics::counter("ExecuteCount"), 1);
  EXPECT_EQ(lt::metrics::counter("TransferToHostCount"), 1);
  EXPECT_GT(lt::metrics::timer_ns("ExecuteTime"), 0);
  EXPECT_GT(lt::metrics::timer_ns("TraceTime"), 0);
  EXPECT_EQ(lt::metrics::counter("NoSuchCounter"), 0);
  lt::metrics::reset();
  EXPECT_EQ(lt::metrics::counter("ExecuteCount"), 0);
  EXPECT_EQ(lt::metrics::timer_ns("ExecuteTime"), 0);
}

TEST(Debug, TextAndDotShowThePendingGraph) {
  auto x = lt::tensor({1.0f, 2.0f});
  auto y = lt::tanh(x) * 3.0f;
  std::string text = lt::debug::to_text({y});
  EXPECT_NE(text.find("tanh(%0)"), std::string::npos) << text;
  EXPECT_NE(text.find("mul("), std::string::npos);
  EXPECT_NE(text.find("f32[2]"), std::string::npos);
  std::string dot = lt::debug::to_dot({y});
  EXPECT_EQ(dot.rfind("digraph", 0), 0u);
  EXPECT_NE(dot.find("->"), std::string::npos);
  EXPECT_TRUE(y.is_pending());  // printing runs nothing
}

TEST(Debug, SaveGraphsWritesEachNewGraph) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "lazytrace_graphs_test";
  fs::remove_all(dir);
  setenv("LAZYTRACE_SAVE_GRAPHS", dir.c_str(), 1);
  auto x = lt::tensor({1.0f, 2.0f, 3.0f});
  (void)(lt::sin(x) * lt::cos(x) + 4.25f).to_vector<float>();
  (void)(lt::sin(x) * lt::cos(x) + 5.25f).to_vector<float>();  // a cache hit: nothing new
  unsetenv("LAZYTRACE_SAVE_GRAPHS");
  int txt = 0, dot = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    txt += e.path().extension() == ".txt";
    dot += e.path().extension() == ".dot";
  }
  EXPECT_EQ(txt, 1);
  EXPECT_EQ(dot, 1);
  fs::remove_all(dir);
}

}  // namespace
