// RUN: moe-opt %s -split-input-file -verify-diagnostics --convert-moe-to-runtime | FileCheck %s

// Issue 9: a module that already has a symbol named like a runtime entry. A matching
// declaration is reused; anything else is an error at the op that needs the entry
// (before the fix the pass crashed building a call to the wrong function).

// Tests that a matching declaration (same type) is reused, not duplicated, and gets the C interface.
// CHECK-LABEL: module
// CHECK: func.func private @moert_ep_combine_f32(tensor<?x?xf32>, i64) -> tensor<?x?xf32> attributes {llvm.emit_c_interface}
// CHECK-NOT: func.func private @moert_ep_combine_f32
// CHECK-LABEL: func.func @reuse
// CHECK: call @moert_ep_combine_f32
func.func private @moert_ep_combine_f32(tensor<?x?xf32>, i64) -> tensor<?x?xf32>
func.func @reuse(%p: tensor<?x64xf32>, %h: i64) -> tensor<?x64xf32> {
  %y = moe.ep_combine %p, %h : (tensor<?x64xf32>, i64) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// Tests that a declaration of another type is an error at the dispatch, with a note at the declaration.
// expected-note @+1 {{the conflicting symbol}}
func.func private @moert_ep_dispatch_f32(i32) -> i32
func.func @other_type(%x: tensor<4x64xf32>, %ids: tensor<4x2xi32>, %w: tensor<4x2xf32>,
                      %er: tensor<8xi32>) -> i64 {
  // expected-error @+1 {{convert-moe-to-runtime: the runtime entry @moert_ep_dispatch_f32 of type '(tensor<?x?xf32>, tensor<?x?xi32>, tensor<?x?xf32>, tensor<?xi32>, tensor<?xi64>) -> (tensor<?x?xf32>, tensor<?x?xi32>, tensor<?x?xf32>, i64)' is needed, but the symbol @moert_ep_dispatch_f32 is declared with another type}}
  %r, %li, %lw, %h = moe.ep_dispatch %x, %ids, %w, %er capacity = 16
    : (tensor<4x64xf32>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<8xi32>)
      -> (tensor<?x64xf32>, tensor<?x2xi32>, tensor<?x2xf32>, i64)
  return %h : i64
}

// -----

// Tests that a defined function with the entry's name is an error, not a callee.
// expected-note @+1 {{the conflicting symbol}}
func.func @moert_agree_max(%a: i64, %b: i64) -> i64 {
  return %a : i64
}
func.func @defined(%t: index) -> index {
  // expected-error @+1 {{the symbol @moert_agree_max is a defined function, not a declaration}}
  %n = moe.agree_count %t : index
  return %n : index
}

// -----

// Tests that the layer's own function named like a runtime entry is an error.
// expected-note @+1 {{the conflicting symbol}}
func.func @moert_ep_combine_bf16(%p: tensor<?x64xbf16>, %h: i64) -> tensor<?x64xbf16> {
  // expected-error @+1 {{the symbol @moert_ep_combine_bf16 is a defined function, not a declaration}}
  %y = moe.ep_combine %p, %h : (tensor<?x64xbf16>, i64) -> tensor<?x64xbf16>
  return %y : tensor<?x64xbf16>
}

// -----

// Tests that a symbol of another kind (an llvm.func) with the entry's name is an error.
// expected-note @+1 {{the conflicting symbol}}
llvm.func @moert_rank() -> i32
func.func @other_kind(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  // expected-error @+1 {{the symbol @moert_rank is not a func.func}}
  %s = moe.tp_slice %x tp = 2 : (tensor<?x64xf32>) -> tensor<?x64xf32>
  return %s : tensor<?x64xf32>
}

// -----

// Tests that a matching scalar declaration is reused and keeps the plain C convention.
// CHECK-LABEL: module
// CHECK: func.func private @moert_agree_max(i64, i64) -> i64{{$}}
// CHECK-NOT: func.func private @moert_agree_max
// CHECK-LABEL: func.func @scalar_reuse
func.func private @moert_agree_max(i64, i64) -> i64 attributes {llvm.emit_c_interface}
func.func @scalar_reuse(%t: index) -> index {
  %n = moe.agree_count %t : index
  return %n : index
}

// -----

// Tests that a TP slice with a static row count (static T that tp divides) lowers to a slice of
// dynamic rows cast to the stated type.
// CHECK-LABEL: func.func @static_slice
// CHECK: %[[S:.+]] = tensor.extract_slice %{{.+}} : tensor<8x64xf32> to tensor<?x64xf32>
// CHECK: %[[C:.+]] = tensor.cast %[[S]] : tensor<?x64xf32> to tensor<4x64xf32>
// CHECK: return %[[C]]
func.func @static_slice(%x: tensor<8x64xf32>) -> tensor<4x64xf32> {
  %s = moe.tp_slice %x tp = 2 : (tensor<8x64xf32>) -> tensor<4x64xf32>
  return %s : tensor<4x64xf32>
}
