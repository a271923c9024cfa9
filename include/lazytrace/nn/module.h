#pragma once
/**
 * nn::Module: parameters, buffers and submodules with dotted names, as in PyTorch, and
 * functional_call, which runs a module with other tensors in place of its own.
 */
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "lazytrace/autograd/autograd.h"
#include "lazytrace/tools/mode_guard.h"
#include "lazytrace/tools/pytree.h"
#include "lazytrace/trace/tensor.h"

namespace lazytrace::nn {

/** Named tensors in insertion order with lookup by name, like a Python dict. */
class ParamMap {
 public:
  using value_type = std::pair<std::string, Tensor>;
  ParamMap() = default;
  ParamMap(std::initializer_list<value_type> items);

  /** The tensor under `name`, inserting an undefined one if there is none. */
  Tensor& operator[](const std::string& name);
  /** The tensor under `name`; lt::Error if there is none. */
  const Tensor& at(const std::string& name) const;
  /** Null if there is no tensor under `name`. */
  const Tensor* find(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  void insert(std::string name, Tensor t) { (*this)[name] = std::move(t); }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  std::vector<Tensor> values() const;
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  /** A hash of the names in order (the map's structure as a pytree), kept up to date. */
  uint64_t names_hash() const { return names_hash_; }

 private:
  std::vector<value_type> items_;
  std::unordered_map<std::string, size_t> index_;
  uint64_t names_hash_ = 0x504d;
};

/**
 * The base of every layer. A module registers the tensor members that hold its
 * parameters and buffers and the submodules it owns; names join with dots
 * ("layers.3.attn.q_proj.weight"). Modules are held by std::shared_ptr and are not
 * copyable (the registry points at their members).
 */
class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /** Every parameter of this module and its submodules, in registration order (a tensor
   * registered under two names, a tied weight, under both). */
  ParamMap named_parameters() const;
  /** Every buffer (state that is not trained, such as running statistics). */
  ParamMap named_buffers() const;
  /** The parameters' tensors, each once (a tied weight once), for an optimizer. */
  std::vector<Tensor> parameters() const;
  /** Direct submodules, in registration order. */
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;

  /** Clears every parameter's gradient (PyTorch's set_to_none default). */
  void zero_grad();
  /** Training mode (the default) or evaluation mode, for this module and its submodules. */
  void train(bool on = true);
  void eval() { train(false); }
  /** The mode; read inside a traced function, it becomes one of its cache's guards. */
  bool is_training() const {
    if (tools::detail::g_mode_recordings) tools::detail::note_mode_read(training_);
    return *training_;
  }
  /** Converts every floating parameter and buffer to `dtype`, in place. */
  virtual void to(DType dtype);
  /**
   * Makes `params` and `buffers` (dotted names, which must exist) this module's own tensors
   * in place of the ones it has, whatever their shapes; parameters become leaves that
   * require grad. stack_layers_into() keeps a layer's weights stacked this way.
   */
  void replace_tensors(const ParamMap& params, const ParamMap& buffers);

  /** The module's type for messages ("Linear"). */
  virtual std::string name() const = 0;

 protected:
  /** Registers a member tensor as a trainable parameter (it is made to require grad). */
  void register_parameter(const std::string& name, Tensor& slot);
  /** Registers a member tensor as a buffer (saved and swapped, never trained). */
  void register_buffer(const std::string& name, Tensor& slot);
  /** Registers a submodule; returns it for member initialization. */
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  friend class SlotSwap;
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void check_new_name(const std::string& name) const;
  // Visits (dotted name, slot) for every parameter (buffers: false) or buffer.
  template <typename F>
  void for_each_slot(bool buffers, const std::string& prefix, F&& f) const;

  std::vector<std::pair<std::string, Tensor*>> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::shared_ptr<bool> training_ = std::make_shared<bool>(true);  // shared with guards
};

/**
 * Puts tensors into a module's parameter and buffer slots for its lifetime and restores
 * the module's own afterwards (also when the call throws). Names must exist and types
 * must match; names not given keep the module's tensors.
 */
class SlotSwap {
 public:
  SlotSwap(Module& module, const ParamMap& params, const ParamMap& buffers);
  ~SlotSwap();
  SlotSwap(const SlotSwap&) = delete;
  SlotSwap& operator=(const SlotSwap&) = delete;

 private:
  std::vector<std::pair<Tensor*, Tensor>> saved_;
};

/**
 * Runs module.forward(args...) with `params` and `buffers` in place of the module's own
 * tensors, like torch.func.functional_call: the module is a pure function of them.
 */
template <typename M, typename... Args>
requires std::is_base_of_v<Module, std::remove_cv_t<M>>
auto functional_call(M& module, const ParamMap& params, const ParamMap& buffers, Args&&... args) {
  SlotSwap swap(module, params, buffers);
  return module.forward(std::forward<Args>(args)...);
}
template <typename M, typename... Args>
auto functional_call(const std::shared_ptr<M>& module, const ParamMap& params,
                     const ParamMap& buffers, Args&&... args) {
  return functional_call(*module, params, buffers, std::forward<Args>(args)...);
}

}  // namespace lazytrace::nn

namespace lazytrace::pytree {
/** A ParamMap is a dict of tensors: its names are structure, its tensors leaves. */
template <>
struct Traits<nn::ParamMap> {
  static void flatten(const nn::ParamMap& m, Flat& f) {
    f.mix(m.names_hash());
    if (f.describing) f.describe("ParamMap of " + std::to_string(m.size()));
    if (!f.describing) {
      if (m.size()) f.add_leaves(&m.begin()->second, m.size(), sizeof(*m.begin()));
      return;
    }
    for (const auto& [name, t] : m)
      at_path(
          f, [&] { return "['" + name + "']"; }, [&] { f.add_leaf(t); });
  }
  static nn::ParamMap rebuild(const nn::ParamMap& like, Cursor& c) {
    nn::ParamMap out;
    for (const auto& [name, t] : like) out.insert(name, c.next());
    return out;
  }
};
}  // namespace lazytrace::pytree
