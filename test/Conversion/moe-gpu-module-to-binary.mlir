// RUN: moe-opt %s --moe-gpu-module-to-binary=format=isa | FileCheck %s
// RUN: not moe-opt %s --moe-gpu-module-to-binary=format=elf 2>&1 | FileCheck %s --check-prefix=FORMAT
// RUN: moe-opt %s --moe-gpu-module-to-binary=format=isa --mlir-disable-threading | FileCheck %s

// Each gpu.module becomes a gpu.binary in place, in the modules' order, with
// its kernel's PTX, whichever thread serialized it.
// CHECK-NOT: gpu.module
// CHECK: gpu.binary @first [#gpu.object<#nvvm.target<chip = "sm_90a", features = "+ptx80">, {{.*}}assembly = "{{.*}}.entry first_kernel
// CHECK: gpu.binary @second [#gpu.object<#nvvm.target<chip = "sm_90a", features = "+ptx80">, {{.*}}assembly = "{{.*}}.entry second_kernel
// CHECK: gpu.binary @third
// CHECK: llvm.func @host
// FORMAT: error: moe-gpu-module-to-binary: format 'elf' is not llvm, isa, bin or fatbin
module attributes {gpu.container_module} {
  gpu.module @first [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @first_kernel() attributes {gpu.kernel, nvvm.kernel} {
      llvm.return
    }
  }
  gpu.module @second [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @second_kernel() attributes {gpu.kernel, nvvm.kernel} {
      llvm.return
    }
  }
  gpu.module @third [#nvvm.target<chip = "sm_90a", features = "+ptx80">] {
    llvm.func @third_kernel() attributes {gpu.kernel, nvvm.kernel} {
      llvm.return
    }
  }
  llvm.func @host() {
    llvm.return
  }
}
