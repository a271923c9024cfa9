// safetensors files: the header (its JSON read by nn/json.h), checks of every entry against
// the file before anything is allocated, and strict (all-or-nothing) loading into modules.
#include "lazytrace/nn/safetensors.h"

#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "lazytrace/ops/ops.h"
#include "lazytrace/trace/memory.h"
#include "nn/json.h"

namespace lazytrace::nn {
namespace {

// Tensor data is copied between files and buffers byte for byte.
static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this host is not");

constexpr const char* kOp = "safetensors";
constexpr uint64_t kMaxHeaderBytes = 100000000;  // 100 MB, the reference reader's limit
constexpr const char* kSupported = "F64, F32, F16, BF16, I64, I32, BOOL";

const char* st_dtype_name(DType d) {
  switch (d) {
    case DType::float64:
      return "F64";
    case DType::float32:
      return "F32";
    case DType::float16:
      return "F16";
    case DType::bfloat16:
      return "BF16";
    case DType::int64:
      return "I64";
    case DType::int32:
      return "I32";
    case DType::bool_:
      return "BOOL";
  }
  fail(kOp, "unknown dtype");
}

bool parse_st_dtype(const std::string& s, DType& out) {
  for (DType d : {DType::float64, DType::float32, DType::float16, DType::bfloat16, DType::int64,
                  DType::int32, DType::bool_})
    if (s == st_dtype_name(d)) {
      out = d;
      return true;
    }
  return false;
}

// ---- the header

struct Entry {
  std::string name;
  DType dtype = DType::float32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the start of the data
};

struct Header {
  std::vector<Entry> entries;  // sorted by name
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
  uint64_t data_bytes = 0;  // the file's bytes after the header
};

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// A NUL in a path would end it early at the C call (another file); an error instead.
void check_path(const char* op, const std::string& path) {
  if (path.find('\0') != std::string::npos)
    fail(op, "the path '", path.substr(0, path.find('\0')),
         "\\0...' holds a NUL character; pass a path without one.");
}

FilePtr open_for_reading(const std::string& path) {
  check_path(kOp, path);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail(kOp, "cannot open '", path, "': it is a directory; pass the path of a file.");
  FilePtr f(std::fopen(path.c_str(), "rb"));
  if (!f) fail(kOp, "cannot open '", path, "': ", std::strerror(errno), ".");
  return f;
}

// Fails with the file and tensor named.
template <typename... Args>
[[noreturn]] void entry_error(const std::string& path, const std::string& name, Args&&... what) {
  fail(kOp, "'", path, "': tensor '", name, "': ", std::forward<Args>(what)...);
}

// Checks one tensor's entry (dtype, shape, offsets) against the data's size.
Entry make_entry(const std::string& name, const json::Value& v, const std::string& path,
                 uint64_t data_bytes) {
  if (v.kind != json::Value::Kind::Object)
    entry_error(path, name,
                "the entry must be an object with dtype, shape and data_offsets, but it is ",
                json::kind_name(v.kind), ".");
  const json::Value *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
  for (size_t k = 0; k < v.keys.size(); ++k) {
    if (v.keys[k] == "dtype")
      dtype = &v.items[k];
    else if (v.keys[k] == "shape")
      shape = &v.items[k];
    else if (v.keys[k] == "data_offsets")
      offsets = &v.items[k];
    else
      entry_error(path, name, "unknown key '", v.keys[k],
                  "'; an entry holds only dtype, shape and data_offsets.");
  }
  if (!dtype) entry_error(path, name, "the entry has no 'dtype'.");
  if (!shape) entry_error(path, name, "the entry has no 'shape'.");
  if (!offsets) entry_error(path, name, "the entry has no 'data_offsets'.");

  Entry e;
  e.name = name;
  if (dtype->kind != json::Value::Kind::String)
    entry_error(path, name, "'dtype' must be a string, but it is ", json::kind_name(dtype->kind),
                ".");
  if (!parse_st_dtype(dtype->text, e.dtype))
    entry_error(path, name, "unknown or unsupported dtype '", dtype->text,
                "'; supported dtypes are ", kSupported, ".");

  // A count: a non-negative integer; says why a number is not one.
  auto count = [&](const json::Value& x, const char* what) -> int64_t {
    if (x.kind != json::Value::Kind::Number)
      entry_error(path, name, what, " must be a non-negative integer, but it is ",
                  json::kind_name(x.kind), ".");
    if (x.is_count) return x.count;
    if (x.text[0] == '-') entry_error(path, name, what, " is ", x.text, ", which is negative.");
    if (x.text.find_first_of(".eE") != std::string::npos)
      entry_error(path, name, what, " is ", x.text, ", which is not an integer.");
    entry_error(path, name, what, " is ", x.text, ", which is too large.");
  };
  if (shape->kind != json::Value::Kind::Array)
    entry_error(path, name, "'shape' must be an array of non-negative integers, but it is ",
                json::kind_name(shape->kind), ".");
  std::vector<int64_t> dims;
  for (const json::Value& d : shape->items) dims.push_back(count(d, "a dimension in 'shape'"));
  e.shape = Shape(dims);
  int64_t numel = 1;
  bool zero = false;
  for (int64_t d : dims) {
    if (d == 0)
      zero = true;
    else if (__builtin_mul_overflow(numel, d, &numel))
      entry_error(path, name, "shape ", e.shape.str(), " has more elements than fit in 64 bits.");
  }
  if (zero) numel = 0;
  int64_t nbytes;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(itemsize(e.dtype)), &nbytes))
    entry_error(path, name, "shape ", e.shape.str(), " has more bytes than fit in 64 bits.");

  if (offsets->kind != json::Value::Kind::Array || offsets->items.size() != 2)
    entry_error(path, name,
                "'data_offsets' must be an array of two non-negative integers [begin, end].");
  e.begin = static_cast<uint64_t>(count(offsets->items[0], "'data_offsets' begin"));
  e.end = static_cast<uint64_t>(count(offsets->items[1], "'data_offsets' end"));
  const std::string range = "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.end < e.begin) entry_error(path, name, "data_offsets ", range, " end before they begin.");
  if (e.end - e.begin != static_cast<uint64_t>(nbytes))
    entry_error(path, name, "data_offsets ", range, " span ", e.end - e.begin, " bytes, but ",
                dtype->text, " ", e.shape.str(), " needs ", nbytes,
                "; the header is lying about offsets (the file is corrupted).");
  if (e.end > data_bytes)
    entry_error(path, name, "data_offsets ", range, " reach past the end of the data, which is ",
                data_bytes, " bytes; the file is truncated.");
  return e;
}

// Reads "__metadata__": an object of strings, into `out`.
void read_metadata(json::Parser& p, const std::string& path,
                   std::map<std::string, std::string>& out) {
  p.begin_entry("__metadata__");
  if (!p.at('{'))
    fail(kOp, "'", path, "': '__metadata__' must be an object of strings, but it is ",
         json::kind_name(p.parse_value(1).kind), ".");
  p.expect('{');
  p.skip_ws();
  if (p.consume('}')) return;
  while (true) {
    p.skip_ws();
    if (!p.at('"')) p.error("expected a string key but found " + p.describe_here());
    std::string key = p.parse_string();
    p.skip_ws();
    p.expect(':');
    p.skip_ws();
    if (!p.at('"'))
      fail(kOp, "'", path, "': '__metadata__' must map strings to strings, but '", key, "' holds ",
           json::kind_name(p.parse_value(2).kind), ".");
    std::string value = p.parse_string();
    if (!out.emplace(key, std::move(value)).second)
      fail(kOp, "'", path, "': duplicate key '", key, "' in '__metadata__'.");
    p.skip_ws();
    if (p.consume(',')) continue;
    if (p.consume('}')) return;
    p.error("expected ',' or '}' in an object but found " + p.describe_here());
  }
}

// Reads and checks the header; checks every entry against the file size so that loading
// never allocates more than the file holds.
Header read_header(std::FILE* f, const std::string& path) {
  if (fseeko(f, 0, SEEK_END) != 0)
    fail(kOp, "cannot read '", path, "': it is not a regular file (cannot seek).");
  const off_t size_signed = ftello(f);
  if (size_signed < 0) fail(kOp, "cannot read '", path, "': it is not a regular file (no size).");
  const auto file_size = static_cast<uint64_t>(size_signed);
  if (file_size < 8)
    fail(kOp, "'", path, "' is ", file_size,
         " bytes, shorter than the 8-byte header length every safetensors file starts with; "
         "it is truncated or not a safetensors file.");
  std::rewind(f);
  unsigned char len_bytes[8];
  if (std::fread(len_bytes, 1, 8, f) != 8)
    fail(kOp, "cannot read the first 8 bytes of '", path, "'.");
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | len_bytes[k];
  if (n > kMaxHeaderBytes)
    fail(kOp, "'", path, "' declares a header of ", n, " bytes, more than the 100 MB limit; ",
         "the file is corrupted or not a safetensors file.");
  if (8 + n > file_size)
    fail(kOp, "'", path, "' declares a header of ", n, " bytes but the file has only ",
         file_size - 8, " bytes after the length; the file is truncated.");
  std::string text(static_cast<size_t>(n), '\0');
  if (n > 0 && std::fread(text.data(), 1, text.size(), f) != text.size())
    fail(kOp, "cannot read the header of '", path, "'.");
  if (const size_t bad = json::invalid_utf8_at(text); bad != std::string_view::npos)
    fail(kOp, "'", path, "': the header is not valid UTF-8 (at byte ", bad,
         "); the file is corrupted or not a safetensors file.");

  Header h;
  h.data_start = 8 + n;
  h.data_bytes = file_size - h.data_start;
  json::Parser p(text, path);
  p.skip_ws();
  if (!p.at('{')) {
    p.begin_entry("");
    const json::Value doc = p.parse_value(0);  // a syntax error reports itself
    fail(kOp, "'", path, "': the header must be a JSON object, but it is ",
         json::kind_name(doc.kind), ".");
  }
  p.expect('{');
  p.skip_ws();
  bool has_metadata = false;
  if (!p.consume('}')) {
    while (true) {
      p.skip_ws();
      if (!p.at('"')) p.error("expected a string key but found " + p.describe_here());
      std::string name = p.parse_string();
      p.skip_ws();
      p.expect(':');
      p.skip_ws();
      if (name == "__metadata__") {
        if (has_metadata) fail(kOp, "'", path, "': '__metadata__' appears twice in the header.");
        has_metadata = true;
        read_metadata(p, path, h.metadata);
      } else {
        p.begin_entry(name);
        h.entries.push_back(make_entry(name, p.parse_value(1), path, h.data_bytes));
      }
      p.skip_ws();
      if (p.consume(',')) continue;
      if (p.consume('}')) break;
      p.error("expected ',' or '}' in an object but found " + p.describe_here());
    }
  }
  p.skip_ws();
  if (!p.at_end()) p.error("unexpected text after the top-level object");

  std::sort(h.entries.begin(), h.entries.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  for (size_t i = 1; i < h.entries.size(); ++i)
    if (h.entries[i].name == h.entries[i - 1].name)
      fail(kOp, "'", path, "': duplicate tensor name '", h.entries[i].name,
           "' in the header; each name may appear once.");

  // As the reference reader requires: the entries tile the data exactly, in offset order,
  // with no overlap, no gap and nothing after the last one.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : h.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    if (e->begin < at)
      fail(kOp, "'", path, "': tensor '", e->name, "' (data_offsets [", e->begin, ", ", e->end,
           "]) overlaps tensor '", prev->name, "' (data_offsets [", prev->begin, ", ", prev->end,
           "]); the file is corrupted.");
    if (e->begin > at)
      fail(kOp, "'", path, "': ", e->begin - at, " bytes of data before tensor '", e->name,
           "' (data_offsets [", e->begin, ", ", e->end,
           "]) belong to no tensor; the file is corrupted.");
    at = e->end;
    prev = e;
  }
  if (at != h.data_bytes)
    fail(kOp, "'", path, "': the file has ", h.data_bytes - at,
         " bytes after the last tensor's data that the header does not describe; the file is "
         "corrupted.");
  return h;
}

// ---- writing

void check_utf8(const std::string& s, const char* what, const std::string& path) {
  if (json::invalid_utf8_at(s) != std::string_view::npos)
    fail(kOp, "cannot save '", path, "': ", what,
         " is not valid UTF-8; safetensors headers are UTF-8 JSON.");
}

std::string temp_path_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

void save_file(const ParamMap& tensors, const std::string& path,
               const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, Tensor>> entries(tensors.begin(), tensors.end());
  for (const auto& [name, t] : entries) {
    if (name == "__metadata__")
      fail(kOp, "cannot save '", path, "': '__metadata__' is reserved for the header's ",
           "metadata; rename the tensor.");
    check_utf8(name, ("tensor name '" + name + "'").c_str(), path);
    if (!t.defined()) fail(kOp, "cannot save '", path, "': tensor '", name, "' is undefined.");
  }
  for (const auto& [k, v] : metadata) {
    check_utf8(k, ("metadata key '" + k + "'").c_str(), path);
    check_utf8(v, ("the metadata value of '" + k + "'").c_str(), path);
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });

  // One sync computes every pending tensor in one graph.
  std::vector<Tensor> pending;
  for (const auto& [name, t] : entries)
    if (t.is_pending()) pending.push_back(t);
  try {
    if (!pending.empty()) sync(pending);
  } catch (const Error& e) {
    fail(kOp, "cannot save '", path, "': computing its tensors failed: ", e.what());
  }

  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      first = false;
      json::append_string(header, k);
      header += ':';
      json::append_string(header, v);
    }
    header += '}';
  }
  std::vector<std::pair<std::shared_ptr<const void>, uint64_t>> blocks;
  uint64_t offset = 0;
  for (const auto& [name, t] : entries) {
    const auto nbytes = static_cast<uint64_t>(t.numel()) * itemsize(t.dtype());
    // A tensor's host data is contiguous, row-major, in its own dtype (16-bit floats as their
    // bit patterns): exactly the safetensors layout.
    blocks.emplace_back(nbytes > 0 ? host_data(t) : nullptr, nbytes);
    if (header.size() > 1) header += ',';
    json::append_string(header, name);
    header += ":{\"dtype\":\"";
    header += st_dtype_name(t.dtype());
    header += "\",\"shape\":[";
    for (int d = 0; d < t.ndim(); ++d) {
      if (d) header += ',';
      header += std::to_string(t.shape()[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + nbytes) + "]}";
    offset += nbytes;
  }
  header += '}';
  // Spaces (JSON whitespace) make the data start 8-byte aligned, as the reference writer does.
  header.append((8 - header.size() % 8) % 8, ' ');

  check_path(kOp, path);
  const std::string tmp = temp_path_for(path);
  {
    FilePtr f(std::fopen(tmp.c_str(), "wb"));
    if (!f)
      fail(kOp, "cannot write '", path, "': cannot create '", tmp, "': ", std::strerror(errno),
           ".");
    unsigned char len_bytes[8];
    for (int k = 0; k < 8; ++k) len_bytes[k] = static_cast<unsigned char>(header.size() >> (8 * k));
    bool ok = std::fwrite(len_bytes, 1, 8, f.get()) == 8 &&
              std::fwrite(header.data(), 1, header.size(), f.get()) == header.size();
    for (const auto& [data, nbytes] : blocks)
      if (ok && nbytes > 0) ok = std::fwrite(data.get(), 1, nbytes, f.get()) == nbytes;
    int err = ok ? 0 : errno;
    const bool closed = std::fclose(f.release()) == 0;  // flushes: a full disk may show here
    if (ok && !closed) err = errno;
    if (!ok || !closed) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      fail(kOp, "cannot write '", path, "': writing '", tmp,
           "' failed: ", std::strerror(err ? err : EIO), ".");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    fail(kOp, "cannot write '", path, "': ", ec.message(), ".");
  }
}

ParamMap load_file(const std::string& path) {
  FilePtr f = open_for_reading(path);
  const Header h = read_header(f.get(), path);
  ParamMap out;
  for (const Entry& e : h.entries) {
    // The header checks bound the tensor's bytes (end - begin) by the file's size, so its
    // allocation is honest; the data is read straight into the tensor's memory.
    auto read = [&](void* data, size_t nbytes) {
      if (nbytes == 0) return;
      if (fseeko(f.get(), static_cast<off_t>(h.data_start + e.begin), SEEK_SET) != 0 ||
          std::fread(data, 1, nbytes, f.get()) != nbytes)
        fail(kOp, "'", path, "': cannot read the data of tensor '", e.name,
             "'; the file changed or could not be read.");
      if (e.dtype == DType::bool_) {
        // A bool byte other than 0 or 1 is undefined behaviour in C++: any nonzero is true.
        auto* p = static_cast<unsigned char*>(data);
        for (size_t k = 0; k < nbytes; ++k) p[k] = p[k] != 0;
      }
    };
    out.insert(e.name, from_writer(e.shape, e.dtype, read));
  }
  return out;
}

std::map<std::string, std::string> load_metadata(const std::string& path) {
  FilePtr f = open_for_reading(path);
  return read_header(f.get(), path).metadata;
}

namespace {

// The module's tensors that save() writes and load() expects: parameters, then defined
// buffers.
ParamMap state_of(const Module& module) {
  ParamMap out = module.named_parameters();
  for (const auto& [name, t] : module.named_buffers())
    if (t.defined()) out.insert(name, t);
  return out;
}

// "'a', 'b', 'c'" with at most `limit` names, then how many more.
std::string name_list(const std::vector<std::string>& names, size_t limit = 8) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < limit; ++i) s += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > limit) s += ", and " + std::to_string(names.size() - limit) + " more";
  return s;
}

}  // namespace

void save(const Module& module, const std::string& path) {
  save_file(state_of(module), path);
}

void load(Module& module, const std::string& path) {
  const ParamMap file = load_file(path);
  const ParamMap own = state_of(module);
  // safetensors.torch.save_model writes a tied tensor once and names the others in the
  // metadata: {"head.weight": "embed.weight"}
  const std::map<std::string, std::string> aliases = load_metadata(path);
  auto find = [&](const std::string& name) {
    const Tensor* t = file.find(name);
    auto it = aliases.find(name);
    return t || it == aliases.end() ? t : file.find(it->second);
  };

  std::vector<std::string> missing, unexpected, mismatched;
  std::vector<Tensor> sources;
  {
    NoGradGuard no_grad;
    for (const auto& [name, slot] : own) {
      const Tensor* t = find(name);
      if (!t) {
        missing.push_back(name);
        continue;
      }
      if (t->shape() != slot.shape()) {
        mismatched.push_back(name + "' is " + t->shape().str() + " in the file but " +
                             slot.shape().str() + " in the module");
        continue;
      }
      if (t->dtype() != slot.dtype() && !(is_floating(t->dtype()) && is_floating(slot.dtype()))) {
        mismatched.push_back(name + "' is " + dtype_name(t->dtype()) + " in the file but " +
                             dtype_name(slot.dtype()) +
                             " in the module (only floating dtypes convert)");
        continue;
      }
      // Converted now so that the assignments below cannot fail halfway.
      sources.push_back(t->dtype() == slot.dtype() ? *t : astype(*t, slot.dtype()));
    }
  }
  for (const auto& [name, t] : file)
    if (!own.contains(name)) unexpected.push_back(name);

  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string msg;
    auto add = [&](const std::string& part) { msg += (msg.empty() ? "" : "; ") + part; };
    if (!missing.empty())
      add("missing from the file (" + std::to_string(missing.size()) + "): " + name_list(missing));
    if (!unexpected.empty())
      add("unexpected in the file (" + std::to_string(unexpected.size()) +
          "): " + name_list(unexpected));
    if (!mismatched.empty()) {
      std::string list;
      for (size_t i = 0; i < mismatched.size() && i < 8; ++i)
        list += (i ? ", '" : "'") + mismatched[i];
      if (mismatched.size() > 8) list += ", and " + std::to_string(mismatched.size() - 8) + " more";
      add("mismatched (" + std::to_string(mismatched.size()) + "): " + list);
    }
    fail(kOp, "cannot load '", path, "' into ", module.name(), ": ", msg,
         ". Nothing was loaded; names are dotted paths as named_parameters() and "
         "named_buffers() give them.");
  }

  NoGradGuard no_grad;
  size_t i = 0;
  for (const auto& [name, slot] : own) {
    Tensor target = slot;  // a handle to the module's own tensor: copy_ updates it in place
    target.copy_(sources[i++]);
  }
}

}  // namespace lazytrace::nn
