// RUN: moe-opt %s --moe-fingerprint > %t.a
// RUN: moe-opt %s --moe-fingerprint --moe-fingerprint --mlir-print-debuginfo \
// RUN:   --mlir-elide-elementsattrs-if-larger=2 --mlir-print-local-scope > %t.b
// RUN: moe-opt %s --moe-fingerprint --convert-moe-to-runtime > %t.c
// RUN: cat %t.a %t.b %t.c | FileCheck %s
// RUN: moe-opt %s --moe-fingerprint=dedupe-tp=false > %t.d
// RUN: cat %t.a %t.d | FileCheck %s --check-prefix=OPTIONS
// RUN: sed 's/^module {$/module attributes {moe.fingerprint = 42 : i64} {/' %s \
// RUN:   | moe-opt --convert-moe-to-runtime | FileCheck %s --check-prefix=STORED

// Tests that moe-fingerprint stores one value whatever the printing flags on
// the command line (locations, elided constants) and however often it runs,
// and that convert-moe-to-runtime gives every plan that value and removes
// the attribute.
// CHECK: module attributes {moe.fingerprint = [[FP:-?[1-9][0-9]*]] : i64}
// CHECK: module attributes {moe.fingerprint = [[FP]] : i64}
// CHECK-NOT: moe.fingerprint
// CHECK: arith.constant dense<[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, [[FP]]]> : tensor<12xi64>
// CHECK-NOT: moe.fingerprint

// The pipeline's options that decide the layer after the pass are hashed too.
// OPTIONS: module attributes {moe.fingerprint = [[FP:-?[1-9][0-9]*]] : i64}
// OPTIONS-NOT: [[FP]]

// convert-moe-to-runtime takes a stored value as it is, and removes it.
// STORED-NOT: moe.fingerprint
// STORED: arith.constant dense<[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 42]> : tensor<12xi64>
// STORED-NOT: moe.fingerprint
module {
func.func @layer(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>,
                 %er: tensor<8xi32>) -> tensor<4x64xf32> {
  %table = arith.constant dense<[1, 2, 3, 4, 5, 6, 7, 8]> : tensor<8xi32>
  %er2 = arith.addi %er, %table : tensor<8xi32>
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er2 capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y = moe.ep_combine %r, %h : (tensor<?x64xf32>, i64) -> tensor<4x64xf32>
  return %y : tensor<4x64xf32>
}
}
