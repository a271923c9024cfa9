// Module registry, dotted names, and the slot swap behind functional_call.
#include "lazytrace/nn/module.h"

#include <unordered_set>

#include "lazytrace/autograd/autograd.h"
#include "lazytrace/ops/ops.h"

namespace lazytrace::nn {

ParamMap::ParamMap(std::initializer_list<value_type> items) {
  for (const auto& [k, v] : items) insert(k, v);
}

Tensor& ParamMap::operator[](const std::string& name) {
  auto it = index_.find(name);
  if (it != index_.end()) return items_[it->second].second;
  index_.emplace(name, items_.size());
  items_.emplace_back(name, Tensor());
  for (char c : name)
    names_hash_ = (names_hash_ ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  names_hash_ = (names_hash_ ^ 0xff) * 0x9e3779b97f4a7c15ULL;  // the end of a name
  return items_.back().second;
}

const Tensor* ParamMap::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Tensor& ParamMap::at(const std::string& name) const {
  if (const Tensor* t = find(name)) return *t;
  std::string known;
  for (size_t i = 0; i < items_.size() && i < 8; ++i) known += (i ? ", " : "") + items_[i].first;
  if (items_.size() > 8) known += ", ...";
  fail("ParamMap", "no tensor named '", name, "'; the map holds ", items_.size(), " (", known,
       ").");
}

std::vector<std::string> ParamMap::keys() const {
  std::vector<std::string> k;
  for (const auto& item : items_) k.push_back(item.first);
  return k;
}

std::vector<Tensor> ParamMap::values() const {
  std::vector<Tensor> v;
  for (const auto& item : items_) v.push_back(item.second);
  return v;
}

template <typename F>
void Module::for_each_slot(bool buffers, const std::string& prefix, F&& f) const {
  for (const auto& [n, slot] : buffers ? buffers_ : params_) f(prefix + n, *slot);
  for (const auto& [n, child] : children_) child->for_each_slot(buffers, prefix + n + ".", f);
}

ParamMap Module::named_parameters() const {
  ParamMap out;
  for_each_slot(false, "", [&](const std::string& n, const Tensor& t) { out.insert(n, t); });
  return out;
}

ParamMap Module::named_buffers() const {
  ParamMap out;
  for_each_slot(true, "", [&](const std::string& n, const Tensor& t) { out.insert(n, t); });
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  std::unordered_set<const void*> seen;  // a tied tensor once
  for_each_slot(false, "", [&](const std::string&, const Tensor& t) {
    if (seen.insert(t.impl().get()).second) out.push_back(t);
  });
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

void Module::replace_tensors(const ParamMap& params, const ParamMap& buffers) {
  const ParamMap own_p = named_parameters(), own_b = named_buffers();
  for (const auto* given : {&params, &buffers})
    for (const auto& [n, t] : *given) {
      if (!(given == &params ? own_p : own_b).contains(n))
        fail(name(), "has no ", given == &params ? "parameter" : "buffer", " named '", n, "'.");
      if (!t.defined()) fail(name(), "'", n, "' is an undefined tensor.");
    }
  auto put = [](const ParamMap& given, bool param) {
    return [&given, param](const std::string& n, Tensor& slot) {
      const Tensor* t = given.find(n);
      if (!t) return;
      slot = t->detach();
      if (param) slot.requires_grad_();
    };
  };
  for_each_slot(false, "", put(params, true));
  for_each_slot(true, "", put(buffers, false));
}

void Module::zero_grad() {
  for_each_slot(false, "", [](const std::string&, Tensor& t) { t.set_grad(Tensor()); });
}

void Module::train(bool on) {
  *training_ = on;
  for (auto& [n, child] : children_) child->train(on);
}

void Module::to(DType dtype) {
  if (!is_floating(dtype))
    fail("Module.to", "dtype ", dtype_name(dtype), " is not floating; parameters must stay ",
         "floating to be trained.");
  for (const auto& [name, p] : named_parameters())  // before anything is converted
    if (is_floating(p.dtype()) && p.dtype() != dtype && autograd::held_for_updates(p))
      fail("Module.to", "parameter '", name, "' (", p.type_str(),
           ") is held by an optimizer made before this conversion to ", dtype_name(dtype),
           ", which would keep updating the old tensor: convert the module first, then make "
           "the optimizer.");
  NoGradGuard no_grad;
  auto convert = [&](Tensor& t) {
    if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == dtype) return;
    const bool trained = t.requires_grad();
    t = astype(t.detach(), dtype);
    if (trained) t.requires_grad_();
  };
  for (auto& [n, slot] : params_) convert(*slot);
  for (auto& [n, slot] : buffers_) convert(*slot);
  for (auto& [n, child] : children_) child->to(dtype);  // each its own way (DecoderLM)
}

void Module::check_new_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos)
    fail(this->name(), "'", name,
         "' is not a valid member name: names are non-empty and have no '.'.");
  auto taken = [&](const auto& list) {
    for (const auto& item : list)
      if (item.first == name) return true;
    return false;
  };
  if (taken(params_) || taken(buffers_) || taken(children_))
    fail(this->name(), "a member named '", name, "' is already registered.");
}

void Module::register_parameter(const std::string& name, Tensor& slot) {
  check_new_name(name);
  if (!slot.defined())
    fail(this->name(), "parameter '", name, "' is undefined; assign it before registering.");
  slot.requires_grad_();  // throws for integer and bool tensors
  params_.emplace_back(name, &slot);
}

void Module::register_buffer(const std::string& name, Tensor& slot) {
  check_new_name(name);
  buffers_.emplace_back(name, &slot);
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  if (!module) fail(this->name(), "submodule '", name, "' is null.");
  children_.emplace_back(name, std::move(module));
}

SlotSwap::SlotSwap(Module& module, const ParamMap& params, const ParamMap& buffers) {
  const char* op = "functional_call";
  size_t used = 0;
  auto swap_in = [&](const ParamMap& given, const char* kind) {
    return [&, kind](const std::string& n, Tensor& slot) {
      const Tensor* t = given.find(n);
      if (!t) return;
      ++used;
      if (!t->defined()) fail(op, kind, " '", n, "' is an undefined tensor.");
      if (slot.defined() && (t->shape() != slot.shape() || t->dtype() != slot.dtype()))
        fail(op, kind, " '", n, "' is ", t->type_str(), " but the module's is ", slot.type_str(),
             "; pass a tensor of the same shape and dtype.");
      saved_.emplace_back(&slot, slot);
      slot = *t;
    };
  };
  try {
    module.for_each_slot(false, "", swap_in(params, "parameter"));
    module.for_each_slot(true, "", swap_in(buffers, "buffer"));
    if (used != params.size() + buffers.size()) {
      auto check = [&](const ParamMap& given, const ParamMap& own, const char* kind) {
        for (const auto& [n, t] : given)
          if (!own.contains(n))
            fail(op, module.name(), " has no ", kind, " named '", n,
                 "'; names are dotted paths as named_parameters() and named_buffers() give "
                 "them.");
      };
      check(params, module.named_parameters(), "parameter");
      check(buffers, module.named_buffers(), "buffer");
    }
  } catch (...) {
    for (auto& [slot, t] : saved_) *slot = std::move(t);
    throw;
  }
}

SlotSwap::~SlotSwap() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) *it->first = std::move(it->second);
}

}  // namespace lazytrace::nn
