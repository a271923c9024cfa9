#pragma once
// A per-thread free list of fixed-size blocks, for the objects made on every recorded op
// (nodes, tensor handles). Blocks are reused, never returned to the system; a block freed
// on another thread joins that thread's list.
#include <cstddef>
#include <new>

namespace lazytrace {

template <size_t Size>
class BlockPool {
 public:
  static void* allocate() {
    if (Free* f = head()) {
      head() = f->next;
      return f;
    }
    return ::operator new(Size < sizeof(Free) ? sizeof(Free) : Size);
  }
  static void deallocate(void* p) {
    auto* f = static_cast<Free*>(p);
    f->next = head();
    head() = f;
  }

 private:
  struct Free {
    Free* next;
  };
  static Free*& head() {
    static thread_local Free* h = nullptr;  // trivially destructible: no exit-time work
    return h;
  }
};

/** A std allocator drawing single objects from BlockPool (for std::allocate_shared). */
template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}
  T* allocate(size_t n) {
    if (n == 1) return static_cast<T*>(BlockPool<sizeof(T)>::allocate());
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n == 1)
      BlockPool<sizeof(T)>::deallocate(p);
    else
      ::operator delete(p);
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

}  // namespace lazytrace
