// RUN: moe-opt %s -split-input-file --convert-moe-to-runtime | FileCheck %s
// RUN: moe-opt %s -split-input-file --convert-moe-to-runtime=fingerprint=false | FileCheck %s --check-prefix=OFF

// Tests that every plan of a module carries one fingerprint of the module
// (its 12th field), that the same module gets the same one, and that a
// module which differs only where no collective sees it (the scale of the
// expert output here: another intermediate size, routing rule or activation
// in a real layer) gets another.

// CHECK-LABEL: func.func @layer
// CHECK: arith.constant dense<[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, [[FP:-?[1-9][0-9]*]]]> : tensor<12xi64>
// CHECK: arith.constant dense<[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, [[FP]]]> : tensor<12xi64>
// OFF-LABEL: func.func @layer
// OFF: arith.constant dense<[16, 0, 0, 0, 0, 0, 0, 0, 0]> : tensor<9xi64>
func.func @layer(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>,
                 %er: tensor<8xi32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %scale = arith.constant 2.0 : f32
  %c0 = arith.constant 0 : index
  %n = tensor.dim %r, %c0 : tensor<?x64xf32>
  %init = tensor.empty(%n) : tensor<?x64xf32>
  %s = linalg.fill ins(%scale : f32) outs(%init : tensor<?x64xf32>) -> tensor<?x64xf32>
  %p = arith.mulf %r, %s : tensor<?x64xf32>
  %y = moe.ep_combine %p, %h : (tensor<?x64xf32>, i64) -> tensor<4x64xf32>
  %r2, %li2, %lw2, %h2 = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y2 = moe.ep_combine %r2, %h2 : (tensor<?x64xf32>, i64) -> tensor<4x64xf32>
  return %y, %y2 : tensor<4x64xf32>, tensor<4x64xf32>
}

// -----

// The same module again: the same fingerprint.
// CHECK-LABEL: func.func @layer
// CHECK: arith.constant dense<[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, [[FP]]]> : tensor<12xi64>
func.func @layer(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>,
                 %er: tensor<8xi32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %scale = arith.constant 2.0 : f32
  %c0 = arith.constant 0 : index
  %n = tensor.dim %r, %c0 : tensor<?x64xf32>
  %init = tensor.empty(%n) : tensor<?x64xf32>
  %s = linalg.fill ins(%scale : f32) outs(%init : tensor<?x64xf32>) -> tensor<?x64xf32>
  %p = arith.mulf %r, %s : tensor<?x64xf32>
  %y = moe.ep_combine %p, %h : (tensor<?x64xf32>, i64) -> tensor<4x64xf32>
  %r2, %li2, %lw2, %h2 = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y2 = moe.ep_combine %r2, %h2 : (tensor<?x64xf32>, i64) -> tensor<4x64xf32>
  return %y, %y2 : tensor<4x64xf32>, tensor<4x64xf32>
}

// -----

// Another scale: the plans' other fields are the same, the fingerprint is not.
// CHECK-LABEL: func.func @layer
// CHECK-NOT: [[FP]]
// CHECK: arith.constant dense<[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, {{-?[1-9][0-9]*}}]> : tensor<12xi64>
// CHECK-NOT: [[FP]]
func.func @layer(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>,
                 %er: tensor<8xi32>) -> (tensor<4x64xf32>, tensor<4x64xf32>) {
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %scale = arith.constant 3.0 : f32
  %c0 = arith.constant 0 : index
  %n = tensor.dim %r, %c0 : tensor<?x64xf32>
  %init = tensor.empty(%n) : tensor<?x64xf32>
  %s = linalg.fill ins(%scale : f32) outs(%init : tensor<?x64xf32>) -> tensor<?x64xf32>
  %p = arith.mulf %r, %s : tensor<?x64xf32>
  %y = moe.ep_combine %p, %h : (tensor<?x64xf32>, i64) -> tensor<4x64xf32>
  %r2, %li2, %lw2, %h2 = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  %y2 = moe.ep_combine %r2, %h2 : (tensor<?x64xf32>, i64) -> tensor<4x64xf32>
  return %y, %y2 : tensor<4x64xf32>, tensor<4x64xf32>
}
