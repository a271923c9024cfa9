// safetensors I/O: bit-exact round trips of every dtype, the byte layout checked byte by
// byte, files assembled by hand as Hugging Face's library writes them, strict module
// loading, and every kind of bad file (an lt::Error that names it, never a partial load).
#include <gtest/gtest.h>
#include <unistd.h>

#include <lazytrace/core/half.h>
#include <lazytrace/lazytrace.h>
#include <lazytrace/nn/module.h>
#include <lazytrace/nn/safetensors.h>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "trace/tensor_impl.h"

namespace {

namespace fs = std::filesystem;
using lt::nn::ParamMap;

// Runs f, expects lt::Error, and checks the message mentions every piece.
void expect_error(const std::function<void()>& f, std::initializer_list<std::string> pieces) {
  try {
    f();
  } catch (const lt::Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[safetensors] ", 0), 0u) << msg;
    for (const std::string& p : pieces)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  }
  ADD_FAILURE() << "no lt::Error thrown";
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

uint64_t le_u64(const std::string& bytes) {
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<unsigned char>(bytes[k]);
  return n;
}

// A file as the reference writer lays it out: 8-byte little-endian length, header, data.
std::string st_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int k = 0; k < 8; ++k)
    out[k] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * k));
  return out + header + data;
}

template <typename T>
std::string le_bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

// The tensor's elements as stored (16-bit floats as their bit patterns).
std::string raw(const lt::Tensor& t) {
  const size_t n = static_cast<size_t>(t.numel()) * lt::itemsize(t.dtype());
  if (n == 0) return "";
  const auto& buf = lt::trace::materialize(t);
  return std::string(static_cast<const char*>(buf->data()), n);
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lt_st_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes a hand-made file and returns its path.
  std::string hand_made(const std::string& header, const std::string& data,
                        const std::string& name = "bad.safetensors") const {
    write_bytes(path(name), st_file(header, data));
    return path(name);
  }
  fs::path dir_;
};

// ---- round trips

TEST_F(Safetensors, RoundTripEveryDtypeBitExact) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> f64 = {0.0, -0.0, 1.0 / 3.0, -1e300, 4.9e-324, inf, -inf, std::nan("")};
  const std::vector<float> f32 = {
      0.f, -0.f, 1.f / 3.f, 3.4e38f, 1.4e-45f, -7.25f, std::numeric_limits<float>::quiet_NaN()};
  // 65504 is float16's max, 2^-24 its smallest subnormal; 1e-40 is a bfloat16 subnormal
  const std::vector<float> halves = {1.f, -2.5f, 65504.f, 5.9604645e-8f, 0.f, -0.f, 1e30f};
  const std::vector<float> bhalves = {1.f, -3.5f, 3.0e38f, 1e-40f, 0.f, -0.f, 0.1f};
  ParamMap in;
  in.insert("f64", lt::tensor(f64, {2, 4}));
  in.insert("f32", lt::tensor(f32, {7}));
  in.insert("f16", lt::astype(lt::tensor(halves, {7, 1}), lt::float16));  // pending: save syncs
  in.insert("bf16", lt::astype(lt::tensor(bhalves, {7}), lt::bfloat16));
  in.insert("i64", lt::tensor(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1, 0,
                                                   std::numeric_limits<int64_t>::max()},
                              {2, 2}));
  in.insert("i32", lt::tensor(std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 7,
                                                   std::numeric_limits<int32_t>::max()},
                              {3}));
  in.insert("bool", lt::tensor(std::vector<bool>{true, false, false, true, true, false}, {2, 3}));
  in.insert("scalar0d", lt::scalar(2.75));
  in.insert("empty", lt::zeros({0, 3}));
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"note", "quote \" backslash \\ newline \n tab \t e-acute \xc3\xa9"}};
  const std::string file = path("all.safetensors");
  lt::nn::save_file(in, file, meta);

  const ParamMap out = lt::nn::load_file(file);
  ASSERT_EQ(out.size(), in.size());
  // load_file returns names sorted
  EXPECT_EQ(out.keys(), (std::vector<std::string>{"bf16", "bool", "empty", "f16", "f32", "f64",
                                                  "i32", "i64", "scalar0d"}));
  for (const auto& [name, t] : in) {
    SCOPED_TRACE(name);
    const lt::Tensor& got = out.at(name);
    EXPECT_FALSE(got.is_pending());
    EXPECT_EQ(got.dtype(), t.dtype());
    EXPECT_EQ(got.shape(), t.shape());
    EXPECT_EQ(raw(got), raw(t));
  }
  // values through the public API, not only bytes
  const std::vector<double> f64_back = out.at("f64").to_vector<double>();
  for (size_t i = 0; i + 1 < f64.size(); ++i) {
    EXPECT_EQ(f64_back[i], f64[i]);
    EXPECT_EQ(std::signbit(f64_back[i]), std::signbit(f64[i]));
  }
  EXPECT_TRUE(std::isnan(f64_back.back()));
  const std::vector<float> h = out.at("f16").to_vector<float>();
  for (size_t i = 0; i < h.size(); ++i)
    EXPECT_EQ(h[i], lt::Half::to_float(lt::Half::from_float(halves[i])));
  EXPECT_EQ(h[2], 65504.f);
  EXPECT_TRUE(std::isinf(h.back()));  // 1e30 overflows float16
  const std::vector<float> bf = out.at("bf16").to_vector<float>();
  for (size_t i = 0; i < bf.size(); ++i)
    EXPECT_EQ(bf[i], lt::BFloat16::to_float(lt::BFloat16::from_float(bhalves[i])));
  EXPECT_EQ(out.at("i64").to_vector<int64_t>()[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(out.at("i64").to_vector<int64_t>()[3], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(out.at("i32").to_vector<int32_t>(),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 7,
                                  std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(out.at("bool").to_vector<bool>(),
            (std::vector<bool>{true, false, false, true, true, false}));
  EXPECT_EQ(out.at("scalar0d").ndim(), 0);
  EXPECT_EQ(out.at("scalar0d").item<double>(), 2.75);
  EXPECT_EQ(out.at("empty").shape(), (lt::Shape{0, 3}));
  EXPECT_EQ(out.at("empty").numel(), 0);

  EXPECT_EQ(lt::nn::load_metadata(file), meta);
  // the save went through a temporary file that is gone now
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(Safetensors, SaveOverwritesAndEmptyFile) {
  const std::string file = path("x.safetensors");
  lt::nn::save_file({{"a", lt::tensor({1.f, 2.f})}}, file);
  lt::nn::save_file({}, file);  // no tensors, no metadata: "{}" padded to 8 bytes
  const std::string bytes = read_bytes(file);
  EXPECT_EQ(bytes.size(), 16u);
  EXPECT_EQ(le_u64(bytes), 8u);
  EXPECT_EQ(bytes.substr(8), "{}      ");
  EXPECT_TRUE(lt::nn::load_file(file).empty());
  EXPECT_TRUE(lt::nn::load_metadata(file).empty());
}

// ---- the byte layout, read back without the library

TEST_F(Safetensors, ByteLayoutMatchesTheFormat) {
  const std::vector<float> b = {1.5f, -2.f, 3.25f, 0.f, 1e-3f, -7.f};
  ParamMap in;
  in.insert("weight", lt::tensor(b, {2, 3}));  // inserted first, but sorted after "bias"
  in.insert("bias", lt::tensor(std::vector<int32_t>{-5, 9}, {2}));
  in.insert("h", lt::astype(lt::tensor({1.f, -2.f}), lt::float16));
  in.insert("hb", lt::astype(lt::tensor({1.f, -2.f}), lt::bfloat16));
  const std::string file = path("layout.safetensors");
  lt::nn::save_file(in, file, {{"format", "pt"}});

  const std::string bytes = read_bytes(file);
  ASSERT_GE(bytes.size(), 8u);
  const uint64_t n = le_u64(bytes);
  const uint64_t start = 8 + n;
  EXPECT_EQ(start % 8, 0u);
  ASSERT_EQ(bytes.size(), start + 8 + 4 + 4 + 24);
  const std::string header = bytes.substr(8, n);
  // sorted by name, data laid out in that order
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"},"
                         "\"bias\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                         "\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[8,12]},"
                         "\"hb\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[12,16]},"
                         "\"weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[16,40]}}",
                         0),
            0u)
      << header;
  const size_t close = header.rfind('}');
  EXPECT_EQ(header.substr(close + 1), std::string(n - close - 1, ' '));
  EXPECT_LT(n - close - 1, 8u);

  int32_t ints[2];
  std::memcpy(ints, bytes.data() + start, 8);
  EXPECT_EQ(ints[0], -5);
  EXPECT_EQ(ints[1], 9);
  uint16_t h[2], hb[2];
  std::memcpy(h, bytes.data() + start + 8, 4);
  std::memcpy(hb, bytes.data() + start + 12, 4);
  EXPECT_EQ(h[0], 0x3c00);   // IEEE half 1.0
  EXPECT_EQ(h[1], 0xc000);   // -2.0
  EXPECT_EQ(hb[0], 0x3f80);  // bfloat16 1.0: the top half of float 1.0
  EXPECT_EQ(hb[1], 0xc000);
  float f[6];
  std::memcpy(f, bytes.data() + start + 16, 24);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(f[i], b[static_cast<size_t>(i)]);
}

// ---- files written elsewhere

TEST_F(Safetensors, HandMadeFileLoads) {
  const std::string file = hand_made(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                     le_bytes<float>({1.5f, -2.f}), "a.safetensors");
  const ParamMap m = lt::nn::load_file(file);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m.at("a").dtype(), lt::float32);
  EXPECT_EQ(m.at("a").shape(), (lt::Shape{2}));
  EXPECT_EQ(m.at("a").to_vector<float>(), (std::vector<float>{1.5f, -2.f}));
}

TEST_F(Safetensors, HandMadeFileWithWhitespaceEscapesAndAnyOrder) {
  // Data out of name order, whitespace, escapes (\u00e9 and a surrogate pair), metadata
  // last, 16-bit floats and bool bytes.
  const std::string header =
      "{\n  \"z\": {\"data_offsets\": [0, 4], \"shape\": [2], \"dtype\": \"BF16\"},\n"
      "  \"caf\\u00e9.\\ud83d\\ude00\\t\\\"q\\\"\": {\"dtype\": \"F16\", \"shape\": [1, 2], "
      "\"data_offsets\": [4, 8]},\r\n"
      "  \"flags\": {\"dtype\": \"BOOL\", \"shape\": [3], \"data_offsets\": [8, 11]},\n"
      "  \"__metadata__\": {\"format\": \"pt\", \"k\\/\\\\\": \"\\u0041\"}\n}   ";
  std::string data = le_bytes<uint16_t>({0x3f80, 0xc060});  // bf16 1.0, -3.5
  data += le_bytes<uint16_t>({0x3c00, 0x3800});             // f16 1.0, 0.5
  data += std::string("\x00\x01\x02", 3);                   // any nonzero byte is true
  const std::string file = hand_made(header, data, "b.safetensors");
  const ParamMap m = lt::nn::load_file(file);
  const std::string name = "caf\xc3\xa9.\xf0\x9f\x98\x80\t\"q\"";
  EXPECT_EQ(m.keys(), (std::vector<std::string>{name, "flags", "z"}));
  EXPECT_EQ(m.at("z").dtype(), lt::bfloat16);
  EXPECT_EQ(m.at("z").to_vector<float>(), (std::vector<float>{1.f, -3.5f}));
  EXPECT_EQ(m.at(name).dtype(), lt::float16);
  EXPECT_EQ(m.at(name).shape(), (lt::Shape{1, 2}));
  EXPECT_EQ(m.at(name).to_vector<float>(), (std::vector<float>{1.f, 0.5f}));
  EXPECT_EQ(m.at("flags").to_vector<bool>(), (std::vector<bool>{false, true, true}));
  EXPECT_EQ(m.at("flags").to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 1}));
  EXPECT_EQ(lt::nn::load_metadata(file),
            (std::map<std::string, std::string>{{"format", "pt"}, {"k/\\", "A"}}));
  // and the names survive a save of their own
  lt::nn::save_file(m, path("again.safetensors"));
  EXPECT_EQ(lt::nn::load_file(path("again.safetensors")).at(name).to_vector<float>(),
            (std::vector<float>{1.f, 0.5f}));
}

// ---- modules

struct Tiny2 : lt::nn::Module {
  lt::Tensor v, steps;
  Tiny2() {
    v = lt::randn({2, 2});
    register_parameter("v", v);
    steps = lt::zeros({}, lt::int64);
    register_buffer("steps", steps);
  }
  std::string name() const override { return "Tiny2"; }
};

struct Tiny : lt::nn::Module {
  lt::Tensor w, b, running;
  std::shared_ptr<Tiny2> child;
  Tiny() {
    w = lt::randn({3, 4});
    register_parameter("w", w);
    b = lt::randn({4});
    register_parameter("b", b);
    running = lt::zeros({4});
    register_buffer("running", running);
    child = register_module("child", std::make_shared<Tiny2>());
  }
  std::string name() const override { return "Tiny"; }
};

// Every tensor of the module as doubles, by name.
std::map<std::string, std::vector<double>> snapshot(const lt::nn::Module& m) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& [n, t] : m.named_parameters()) out[n] = t.to_vector<double>();
  for (const auto& [n, t] : m.named_buffers())
    if (t.defined()) out[n] = t.to_vector<double>();
  return out;
}

// A Tiny whose buffers hold values other than their defaults.
std::shared_ptr<Tiny> trained_tiny() {
  auto a = std::make_shared<Tiny>();
  a->running = lt::tensor({0.5f, -1.f, 2.f, 4.f});
  a->child->steps = lt::scalar(int64_t{7}, lt::int64);
  return a;
}

TEST_F(Safetensors, ModuleRoundTrip) {
  auto a = trained_tiny();
  const std::string file = path("tiny.safetensors");
  lt::nn::save(*a, file);
  EXPECT_EQ(lt::nn::load_file(file).keys(),
            (std::vector<std::string>{"b", "child.steps", "child.v", "running", "w"}));

  Tiny b;
  ASSERT_NE(snapshot(b), snapshot(*a));  // fresh random parameters differ
  lt::nn::load(b, file);
  EXPECT_EQ(snapshot(b), snapshot(*a));
  // the module's own members were updated in place
  EXPECT_EQ(b.w.to_vector<float>(), a->w.to_vector<float>());
  EXPECT_EQ(b.child->v.to_vector<float>(), a->child->v.to_vector<float>());
  EXPECT_EQ(b.child->steps.item<int64_t>(), 7);
  EXPECT_EQ(b.child->steps.dtype(), lt::int64);
  for (const auto& [n, t] : b.named_parameters()) {
    EXPECT_TRUE(t.requires_grad()) << n;
    EXPECT_TRUE(t.is_leaf()) << n;
  }
  EXPECT_FALSE(b.running.requires_grad());
  // still trainable: a backward reaches the loaded parameters
  lt::sum(lt::matmul(b.w, lt::reshape(b.b, {4, 1}))).backward();
  EXPECT_TRUE(b.w.grad().defined());
  EXPECT_EQ(b.b.grad().shape(), (lt::Shape{4}));
}

// A tied weight as safetensors.torch.save_model writes it: once, the other name in the
// metadata; it loads under both names (one tensor), and parameters() lists it once.
TEST_F(Safetensors, ModuleLoadOfATiedWeightSavedOnce) {
  struct Tied : lt::nn::Module {
    std::shared_ptr<lt::nn::Embedding> embed;
    std::shared_ptr<lt::nn::Linear> head;
    Tied() {
      embed = register_module("embed", std::make_shared<lt::nn::Embedding>(5, 3));
      head = register_module("head", std::make_shared<lt::nn::Linear>(3, 5, false));
      head->weight = embed->weight;
    }
    std::string name() const override { return "Tied"; }
  };
  Tied t;
  EXPECT_EQ(t.named_parameters().size(), 2u);
  EXPECT_EQ(t.parameters().size(), 1u);
  std::vector<float> w(15);
  for (int i = 0; i < 15; ++i) w[i] = 0.5f * static_cast<float>(i);
  ParamMap f;
  f.insert("embed.weight", lt::tensor(w, {5, 3}));
  const std::string file = path("tied.safetensors");
  lt::nn::save_file(f, file, {{"head.weight", "embed.weight"}, {"format", "pt"}});
  lt::nn::load(t, file);
  EXPECT_EQ(t.head->weight.to_vector<float>(), w);
  EXPECT_EQ(t.embed->weight.impl(), t.head->weight.impl());
  // a name the metadata does not alias is still missing
  lt::nn::save_file(f, file, {{"format", "pt"}});
  expect_error([&] { lt::nn::load(t, file); }, {"missing from the file (1): 'head.weight'"});
}

TEST_F(Safetensors, ModuleLoadConvertsFloatingDtypes) {
  auto a = trained_tiny();
  const std::string file = path("tiny.safetensors");
  lt::nn::save(*a, file);
  Tiny b;
  b.to(lt::float64);
  lt::nn::load(b, file);
  EXPECT_EQ(b.w.dtype(), lt::float64);
  EXPECT_EQ(b.running.dtype(), lt::float64);
  EXPECT_TRUE(b.w.requires_grad());
  EXPECT_EQ(snapshot(b), snapshot(*a));  // float32 -> float64 is exact

  // and a file of another floating dtype loads into float32 slots
  ParamMap state = lt::nn::load_file(file);
  ParamMap halves;
  for (const auto& [n, t] : state)
    halves.insert(n, lt::is_floating(t.dtype()) ? lt::astype(t, lt::bfloat16) : t);
  lt::nn::save_file(halves, path("bf16.safetensors"));
  Tiny c;
  lt::nn::load(c, path("bf16.safetensors"));
  EXPECT_EQ(c.w.dtype(), lt::float32);
  EXPECT_EQ(c.w.to_vector<float>(), lt::astype(a->w, lt::bfloat16).to_vector<float>());
}

// An undefined buffer is like a None buffer in PyTorch: neither saved nor expected.
struct WithUnset : lt::nn::Module {
  lt::Tensor w, unset;
  WithUnset() {
    w = lt::randn({2});
    register_parameter("w", w);
    register_buffer("unset", unset);
  }
  std::string name() const override { return "WithUnset"; }
};

TEST_F(Safetensors, UndefinedBuffersAreSkipped) {
  WithUnset a, b;
  lt::nn::save(a, path("u.safetensors"));
  EXPECT_EQ(lt::nn::load_file(path("u.safetensors")).keys(), std::vector<std::string>{"w"});
  lt::nn::load(b, path("u.safetensors"));
  EXPECT_EQ(b.w.to_vector<float>(), a.w.to_vector<float>());
  EXPECT_FALSE(b.unset.defined());
}

// Saves `state` and expects load() into a fresh Tiny to fail naming `pieces`, leaving the
// module exactly as it was.
void expect_module_load_fails(const std::string& file, const ParamMap& state,
                              std::initializer_list<std::string> pieces) {
  lt::nn::save_file(state, file);
  Tiny m;
  const auto before = snapshot(m);
  expect_error([&] { lt::nn::load(m, file); }, pieces);
  EXPECT_EQ(snapshot(m), before);
  for (const auto& [n, t] : m.named_parameters()) EXPECT_TRUE(t.requires_grad()) << n;
}

TEST_F(Safetensors, ModuleLoadIsStrictAndAllOrNothing) {
  auto a = trained_tiny();
  const ParamMap full = [&] {
    lt::nn::save(*a, path("full.safetensors"));
    return lt::nn::load_file(path("full.safetensors"));
  }();
  auto without = [&](const std::string& name) {
    ParamMap m;
    for (const auto& [n, t] : full)
      if (n != name) m.insert(n, t);
    return m;
  };
  const std::string file = path("st.safetensors");

  expect_module_load_fails(file, without("child.v"), {file, "Tiny", "missing", "'child.v'"});
  ParamMap extra = full;
  extra.insert("child.extra", lt::zeros({1}));
  expect_module_load_fails(file, extra, {"unexpected", "'child.extra'"});
  ParamMap wrong_shape = full;
  wrong_shape["w"] = lt::zeros({4, 3});  // the last tensor in the file: earlier ones are fine
  expect_module_load_fails(file, wrong_shape, {"mismatched", "'w'", "[4, 3]", "[3, 4]"});
  ParamMap wrong_dtype = full;
  wrong_dtype["child.steps"] = lt::scalar(7.0, lt::float32);
  expect_module_load_fails(file, wrong_dtype, {"'child.steps'", "float32", "int64"});
  // every problem at once is listed
  ParamMap all = without("b");
  all.insert("zzz", lt::zeros({2}));
  all["running"] = lt::zeros({5});
  expect_module_load_fails(file, all,
                           {"missing", "'b'", "unexpected", "'zzz'", "'running'", "[5]"});

  // many names: the first few are listed, then a count
  ParamMap many = full;
  for (int i = 0; i < 12; ++i) many.insert("extra" + std::to_string(i), lt::zeros({1}));
  expect_module_load_fails(file, many, {"unexpected in the file (12)", "'extra0'", "4 more"});

  // a corrupt file fails before the module is touched
  std::string bytes = read_bytes(path("full.safetensors"));
  write_bytes(file, bytes.substr(0, bytes.size() - 4));
  Tiny m;
  const auto before = snapshot(m);
  expect_error([&] { lt::nn::load(m, file); }, {"truncated"});
  EXPECT_EQ(snapshot(m), before);
}

// ---- bad files

TEST_F(Safetensors, CannotOpen) {
  const std::string missing = path("nope.safetensors");
  expect_error([&] { lt::nn::load_file(missing); }, {"cannot open", missing});
  expect_error([&] { lt::nn::load_file(dir_.string()); }, {"cannot open", "directory"});
  expect_error([&] { lt::nn::load_metadata(missing); }, {"cannot open", missing});
}

TEST_F(Safetensors, ShortAndTruncatedFiles) {
  write_bytes(path("short"), std::string("\x05\x00\x00", 3));
  expect_error([&] { lt::nn::load_file(path("short")); }, {path("short"), "3 bytes", "shorter"});
  write_bytes(path("zero"), "");
  expect_error([&] { lt::nn::load_file(path("zero")); }, {"0 bytes", "shorter"});

  // the header length runs past the end of the file
  std::string f = st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "");
  write_bytes(path("cut_header"), f.substr(0, 20));
  expect_error([&] { lt::nn::load_file(path("cut_header")); }, {"truncated", "header of 54 bytes"});

  // an absurd header length: no 1 TB allocation, an error
  std::string huge(8, '\0');
  huge[5] = 1;  // 2^40
  write_bytes(path("huge"), huge + "{}");
  expect_error([&] { lt::nn::load_file(path("huge")); }, {"1099511627776", "100 MB"});

  // data cut short: a real file missing its last bytes
  lt::nn::save_file({{"w", lt::tensor({1.f, 2.f, 3.f})}}, path("real"));
  const std::string bytes = read_bytes(path("real"));
  write_bytes(path("cut_data"), bytes.substr(0, bytes.size() - 1));
  expect_error([&] { lt::nn::load_file(path("cut_data")); },
               {path("cut_data"), "tensor 'w'", "[0, 12]", "truncated"});
}

TEST_F(Safetensors, HeaderNotValidJson) {
  const std::string data = le_bytes<float>({1.f, 2.f});
  for (const std::string& header :
       {std::string(R"({"a":)"),
        std::string(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})"),
        std::string(R"({"a" 1})"), std::string("{'a': 1}"),
        std::string(R"({"a":{"dtype":"F32",}})"), std::string(R"({} trailing)"), std::string(""),
        std::string(R"({"a":{"dtype":"F\x32"}})"), std::string("{\"a\":\"tab\there\"}"),
        std::string(R"({"a":"\ud800"})"), std::string(R"({"a":[01]})"),
        std::string(R"({"a":[1.]})"), std::string(std::string(200, '[') + std::string(200, ']'))}) {
    SCOPED_TRACE(header);
    const std::string file = hand_made(header, data);
    expect_error([&] { lt::nn::load_file(file); }, {file, "not valid JSON"});
  }
  expect_error([&] { lt::nn::load_file(hand_made(R"({"a":true})", data)); },
               {"not valid JSON", "'true' is not allowed"});
  expect_error([&] { lt::nn::load_file(hand_made(R"({"a":null})", data)); }, {"'null'"});
  expect_error(
      [&] { lt::nn::load_file(hand_made(std::string(100, '[') + std::string(100, ']'), data)); },
      {"nest"});
  expect_error([&] { lt::nn::load_file(hand_made("{\"a\xff\":1}", data)); }, {"UTF-8"});
  // one entry's values are bounded, so no header costs memory out of proportion to its size
  std::string dims = "[1";
  for (int i = 0; i < 5000; ++i) dims += ",1";
  expect_error(
      [&] {
        lt::nn::load_file(hand_made(
            R"({"a":{"dtype":"F32","shape":)" + dims + R"(],"data_offsets":[0,4]}})", data));
      },
      {"not valid JSON", "more than 4096 values"});
  expect_error([&] { lt::nn::load_file(hand_made(R"([1, 2])", data)); },
               {"must be a JSON object", "an array"});
  expect_error([&] { lt::nn::load_file(hand_made(R"("x")", data)); },
               {"must be a JSON object", "a string"});
}

TEST_F(Safetensors, EntriesWithMissingOrWrongFields) {
  const std::string data = le_bytes<float>({1.f, 2.f});
  auto load = [&](const std::string& header) {
    return [this, header, data] { lt::nn::load_file(hand_made(header, data)); };
  };
  expect_error(load(R"({"a":{"shape":[2],"data_offsets":[0,8]}})"), {"tensor 'a'", "no 'dtype'"});
  expect_error(load(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})"), {"tensor 'a'", "no 'shape'"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[2]}})"), {"tensor 'a'", "no 'data_offsets'"});
  expect_error(load(R"({"a":[1,2]})"), {"tensor 'a'", "must be an object", "an array"});
  expect_error(load(R"({"a":{"dtype":32,"shape":[2],"data_offsets":[0,8]}})"),
               {"'dtype' must be a string", "a number"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})"),
               {"'shape' must be an array", "a string"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})"),
               {"dimension", "an array"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})"),
               {"'data_offsets' must be an array of two"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":{"0":8}}})"),
               {"'data_offsets' must be an array of two"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":["0","8"]}})"),
               {"'data_offsets' begin", "a string"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})"),
               {"tensor 'a'", "unknown key 'extra'"});
  expect_error(
      load(R"({"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
      {"__metadata__", "'k'", "a number"});
  expect_error(load(R"({"__metadata__":[],"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
               {"__metadata__", "an array"});
  expect_error(
      load(
          R"({"__metadata__":{"k":"1","k":"2"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
      {"duplicate key 'k'", "__metadata__"});
  expect_error(
      load(
          R"({"__metadata__":{},"__metadata__":{},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"),
      {"'__metadata__' appears twice"});
}

TEST_F(Safetensors, BadDtypeShapeAndOffsets) {
  const std::string data = le_bytes<float>({1.f, 2.f});
  auto load = [&](const std::string& header, const std::string& bytes) {
    return [this, header, bytes] { lt::nn::load_file(hand_made(header, bytes)); };
  };
  expect_error(load(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", data),
               {"tensor 'a'", "dtype 'F8_E4M3'", "F64, F32, F16, BF16, I64, I32, BOOL"});
  expect_error(load(R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", data),
               {"dtype 'f32'"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data),
               {"tensor 'a'", "-2", "negative"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})", data),
               {"1.5", "not an integer"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[2e0],"data_offsets":[0,8]}})", data),
               {"2e0", "not an integer"});
  expect_error(
      load(R"({"a":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}})", data),
      {"too large"});
  expect_error(
      load(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", data),
      {"64 bits"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-1,8]}})", data),
               {"'data_offsets' begin", "negative"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data),
               {"tensor 'a'", "[8, 0]", "end before"});
  // the offsets reach past the data: truncated
  expect_error(load(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data),
               {"tensor 'a'", "[0, 16]", "8 bytes", "truncated"});
  // the span disagrees with dtype and shape
  expect_error(load(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data),
               {"tensor 'a'", "8 bytes", "needs 12", "lying about offsets"});
  expect_error(load(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", data),
               {"needs 16", "lying"});
  // an absurd span the file cannot hold: an error, not an allocation
  expect_error(
      load(R"({"a":{"dtype":"F32","shape":[1000000000000],"data_offsets":[0,4000000000000]}})",
           data),
      {"truncated"});
}

TEST_F(Safetensors, DuplicatesOverlapsGapsAndTrailingBytes) {
  const std::string data = le_bytes<float>({1.f, 2.f});
  auto load = [&](const std::string& header, const std::string& bytes) {
    return [this, header, bytes] { lt::nn::load_file(hand_made(header, bytes)); };
  };
  expect_error(load(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    data),
               {"duplicate tensor name 'a'"});
  expect_error(
      load(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
      {"duplicate key 'dtype'", "entry of 'a'"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    data),
               {"overlaps", "'a'", "'b'"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data),
               {"4 bytes", "before tensor 'a'", "belong to no tensor"});
  expect_error(load(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", data),
               {"4 bytes after the last tensor"});
}

TEST_F(Safetensors, SaveErrors) {
  expect_error(
      [&] {
        lt::nn::save_file({{"a", lt::Tensor()}}, path("u"));
      },
      {"tensor 'a'", "undefined"});
  expect_error(
      [&] {
        lt::nn::save_file({{"__metadata__", lt::zeros({1})}}, path("m"));
      },
      {"'__metadata__' is reserved"});
  expect_error([&] { lt::nn::save_file({{"bad\xff", lt::zeros({1})}}, path("n")); }, {"UTF-8"});
  const std::string nowhere = path("no_such_dir/x.safetensors");
  expect_error(
      [&] {
        lt::nn::save_file({{"a", lt::zeros({1})}}, nowhere);
      },
      {"cannot write", nowhere});
  // nothing was left behind by the failed saves
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 0);
}

// A save that fails once it has started (a tensor whose value cannot be computed) leaves the
// file it would have replaced as it was, and no temporary file.
TEST_F(Safetensors, AFailedSaveLeavesTheOldFileIntact) {
  const std::string p = path("keep.safetensors");
  lt::nn::save_file({{"a", lt::tensor({1.0f, 2.0f, 3.0f})}}, p);
  const lt::Tensor huge = lt::ones({int64_t{1} << 25, int64_t{1} << 25}) * 2.0f;  // 4 PiB
  expect_error(
      [&] {
        lt::nn::save_file({{"a", lt::zeros({3})}, {"huge", huge}}, p);
      },
      {"cannot allocate"});
  EXPECT_EQ(lt::nn::load_file(p).at("a").to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

}  // namespace
