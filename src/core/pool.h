#pragma once
// A per-thread free list of fixed-size blocks, for the objects made on every recorded op
// (nodes, tensor handles). Blocks are reused while the thread lives and returned to the
// system when it exits; a block freed on another thread joins that thread's list.
#include <cstddef>
#include <new>

namespace lazytrace {

/** Blocks of `Size` bytes at multiples of `Align` (a cache line keeps an object's first 64
 * bytes in one line). */
template <size_t Size, size_t Align = __STDCPP_DEFAULT_NEW_ALIGNMENT__>
class BlockPool {
 public:
  static void* allocate() {
    if (!exited()) {
      FreeList& l = list();
      if (Free* f = l.head) {
        l.head = f->next;
        return f;
      }
    }
    return new_block();
  }
  static void deallocate(void* p) {
    if (exited()) return delete_block(p);  // during the thread's own exit
    auto* f = static_cast<Free*>(p);
    FreeList& l = list();
    f->next = l.head;
    l.head = f;
  }

 private:
  struct Free {
    Free* next;
  };
  static constexpr size_t kBytes = Size < sizeof(Free) ? sizeof(Free) : Size;
  static constexpr bool kOverAligned = Align > __STDCPP_DEFAULT_NEW_ALIGNMENT__;
  static void* new_block() {
    if constexpr (kOverAligned) return ::operator new(kBytes, std::align_val_t(Align));
    return ::operator new(kBytes);
  }
  static void delete_block(void* p) {
    if constexpr (kOverAligned) return ::operator delete(p, std::align_val_t(Align));
    ::operator delete(p);
  }
  // The thread's free blocks go back to the system when the thread exits.
  struct FreeList {
    Free* head = nullptr;
    ~FreeList() {
      exited() = true;
      while (head) {
        Free* next = head->next;
        delete_block(head);
        head = next;
      }
    }
  };
  static FreeList& list() {
    static thread_local FreeList l;
    return l;
  }
  static bool& exited() {
    static thread_local bool e = false;  // trivially destructible: valid to the very end
    return e;
  }
};

/** The pool for objects of type T, at T's alignment (at least new's own). */
template <typename T>
using PoolFor = BlockPool<sizeof(T), (alignof(T) > __STDCPP_DEFAULT_NEW_ALIGNMENT__
                                          ? alignof(T)
                                          : __STDCPP_DEFAULT_NEW_ALIGNMENT__)>;

/** A std allocator drawing single objects from BlockPool (for std::allocate_shared). */
template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}
  T* allocate(size_t n) {
    if (n == 1) return static_cast<T*>(PoolFor<T>::allocate());
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n == 1)
      PoolFor<T>::deallocate(p);
    else
      ::operator delete(p);
  }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

}  // namespace lazytrace
