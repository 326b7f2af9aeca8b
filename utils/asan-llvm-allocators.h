// Force-included (-include) into every file of the sanitizer build
// (MOE_ENABLE_SANITIZERS, top-level CMakeLists.txt); see docs/Hardening.md.
//
// Under ASan, LLVM's header-only allocators (BumpPtrAllocator, Recycler,
// ArrayRecycler) poison the slabs they carve and unpoison each allocation.
// Our instrumented code shares these allocators with the uninstrumented
// libMLIR.so/libLLVM.so (the StorageUniquer of an MLIRContext): a slab
// poisoned by our inline copy is then handed out by libMLIR's copy without
// unpoisoning, and the next access from our code is a false
// use-after-poison. Turning the manual poisoning off (ASan's own
// instrumentation of our code stays) keeps the reports to real bugs.
#ifndef MOE_ASAN_LLVM_ALLOCATORS_H
#define MOE_ASAN_LLVM_ALLOCATORS_H
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define __asan_poison_memory_region(p, size) ((void)(p), (void)(size))
#define __asan_unpoison_memory_region(p, size) ((void)(p), (void)(size))
#endif
#endif
#endif // MOE_ASAN_LLVM_ALLOCATORS_H
